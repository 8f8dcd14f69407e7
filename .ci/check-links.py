#!/usr/bin/env python3
"""Checks that the documentation's links resolve and that nothing refers outside the repository.

    python3 .ci/check-links.py          # from anywhere in the repository; exit 1 on a finding

1. Relative links. In README.md, ARCHITECTURE.md, BENCHMARKS.md, RELIABILITY.md, CHANGELOG.md
   and docs/**/*.md, every relative Markdown link and image ([text](path), [text]: path) must
   name a file or directory of the repository, and its #anchor must be a heading of the target
   (GitHub's slugs) or an HTML id in it. Links inside code blocks and code spans are not links.
   URLs with a scheme (https:, mailto:) are not checked.
2. Outside references. No tracked text file may point outside the repository: `../shared`,
   an upper-case DESIGN.md (the contract is docs/design.md), "issue #N" or "issue N" (an
   outside tracker), or an absolute path under /work/. The few lines allowed are listed in
   ALLOWED below, each with its reason.

Python 3.11 standard library only.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

ROOT = Path(
    subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=Path(__file__).resolve().parent,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
)

TOP_DOCUMENTS = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "RELIABILITY.md", "CHANGELOG.md"]

# --- 1. Relative links ------------------------------------------------------------------------

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ID = re.compile(r"""<[a-zA-Z][^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""")
# [text](target) and ![alt](target); the target may be <...> or a bare path, then a title.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+[^)]*)?\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str):
    """Yields (line number, line, line with code spans blanked) for lines outside fenced code
    blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and set(line.strip()) == {fence[0]}:
                fence = None
            continue
        yield number, line, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def heading_text_to_slug(text: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower-cased, punctuation dropped,
    spaces to hyphens."""
    parts = re.split(r"(`+[^`]*`+)", text)
    for index, part in enumerate(parts):
        if index % 2:  # a code span: its text as it is
            parts[index] = part.strip("`")
            continue
        part = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part)  # links keep their text
        part = re.sub(r"<[^>]+>", "", part)  # inline HTML
        part = re.sub(r"(\*\*|\*)(\S(?:.*?\S)?)\1", r"\2", part)  # emphasis
        part = re.sub(r"(?<!\w)(__|_)(\S(?:.*?\S)?)\1(?!\w)", r"\2", part)  # not intraword
        parts[index] = part
    text = "".join(parts).strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in "-_" or category[0] in "LN" or category == "Mn":
            kept.append(char)
        elif char == " ":
            kept.append("-")
    return "".join(kept)


def anchors_of(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    """Every anchor a Markdown file offers: heading slugs (with GitHub's -1, -2 suffixes for
    repeats) and HTML ids."""
    if path in cache:
        return cache[path]
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    previous = ""
    for _, line, _ in prose_lines(path.read_text(encoding="utf-8")):
        heading = None
        match = ATX_HEADING.match(line)
        if match:
            heading = match.group(2)
        elif SETEXT_UNDERLINE.match(line) and previous.strip() and not previous.lstrip().startswith(("|", "-", "*", ">")):
            heading = previous.strip()
        if heading is not None:
            slug = heading_text_to_slug(heading)
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
        anchors.update(HTML_ID.findall(line))
        previous = line
    cache[path] = anchors
    return anchors


def documents() -> list[Path]:
    found = [ROOT / name for name in TOP_DOCUMENTS if (ROOT / name).exists()]
    found += sorted((ROOT / "docs").rglob("*.md"))
    return found


def check_links() -> list[str]:
    problems = []
    cache: dict[Path, set[str]] = {}
    for document in documents():
        text = document.read_text(encoding="utf-8")
        for number, _, line in prose_lines(text):
            targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
            definition = REFERENCE_DEFINITION.match(line)
            if definition:
                targets.append(definition.group(1))
            for target in targets:
                problem = check_target(document, target.strip("<>"), cache)
                if problem:
                    where = document.relative_to(ROOT)
                    problems.append(f"{where}:{number}: broken link `{target}`: {problem}")
    return problems


def check_target(document: Path, target: str, cache: dict[Path, set[str]]) -> str | None:
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = path_part.split("?", 1)[0]
    if path_part:
        resolved = (document.parent / path_part).resolve()
        try:
            resolved.relative_to(ROOT)
        except ValueError:
            return "it points outside the repository"
        if not resolved.exists():
            return "no such file or directory"
    else:
        resolved = document
    if anchor:
        if resolved.is_dir():
            return "an anchor on a directory"
        if resolved.suffix.lower() != ".md":
            return None  # a line of a source file (#L10) and the like: not checked
        if anchor not in anchors_of(resolved, cache):
            return f"no heading or id `{anchor}` in {resolved.relative_to(ROOT)}"
    return None


# --- 2. Outside references --------------------------------------------------------------------

OUTSIDE = [
    (re.compile(r"\.\./shared\b"), "a path to ../shared, outside the repository"),
    (re.compile(r"\bDESIGN\.md"), "DESIGN.md: the contract is docs/design.md"),
    (re.compile(r"(?i)\bissues?\s+#?[0-9]+"), "an issue number of an outside tracker"),
    (re.compile(r"(?<![\w.~-])/work/"), "an absolute path under /work/"),
]

# (path, the whole line, stripped): the only lines allowed to match, and why.
ALLOWED = {
    (
        "crates/store-postgres/migrations/0001_initial.sql",
        "-- Limit policies (DESIGN.md section 4, Limits) and their GCRA state.",
    ): "a released migration is kept byte for byte: databases store its checksum",
    (
        "bench/compare.sh",
        "PEER_SRC=${PEER_SRC:-$REPO/../shared/bench}",
    ): "the default of the PEER_SRC setting: the peers' benchmark scripts are not part of this "
    "repository, and a checkout beside them finds them without setting it",
}


def tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    return [name for name in listed.decode("utf-8").split("\0") if name]


def check_outside_references() -> list[str]:
    problems = []
    this_file = Path(__file__).resolve().relative_to(ROOT).as_posix()
    for name in tracked_files():
        if name == this_file:
            continue  # it names the patterns it looks for
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree, or a submodule
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            for pattern, what in OUTSIDE:
                if pattern.search(line) and (name, line.strip()) not in ALLOWED:
                    problems.append(f"{name}:{number}: {what}: {line.strip()[:160]}")
    return problems


def main() -> int:
    link_problems = check_links()
    reference_problems = check_outside_references()
    for problem in link_problems + reference_problems:
        print(problem, file=sys.stderr)
    if link_problems:
        print(f"FAIL: {len(link_problems)} broken relative link(s) in the documentation", file=sys.stderr)
    if reference_problems:
        print(
            f"FAIL: {len(reference_problems)} reference(s) outside the repository "
            "(say it in the project's own terms; see ALLOWED in .ci/check-links.py)",
            file=sys.stderr,
        )
    if link_problems or reference_problems:
        return 1
    print(f"links: {len(documents())} documents checked; no reference outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
