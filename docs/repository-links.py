#!/usr/bin/env python3
"""mdBook preprocessor: relative links that leave the book keep working in the HTML.

The guide's pages and the repository's top-level documents link to each other and to source
files by relative paths that work where they are read as Markdown (a checkout, the forge).
In the built book those paths would leave the site. Each chapter's links are resolved against
the file they were written in, then:

| the link resolves to                                       | it becomes                     |
|------------------------------------------------------------|--------------------------------|
| a page of the book (a file under docs/)                    | that page, relative to here    |
| a top-level document the book includes as a chapter        | that chapter                   |
| any other file of the repository (sources, examples, ...)  | its address in the repository  |

A chapter that includes a top-level document is a page holding nothing but
`{{#include ../NAME.md}}`; its links were written relative to that document.
The repository's address is `output.html.git-repository-url` in book.toml.

Python 3.11 standard library only. mdBook runs it as `python3 repository-links.py`.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from pathlib import Path

SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# [text](target ...) and ![alt](target ...); reference definitions [name]: target.
INLINE_LINK = re.compile(r"(!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*)(<[^>]*>|[^\s)]+)")
REFERENCE_DEFINITION = re.compile(r"^( {0,3}\[[^\]]+\]:\s*)(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+).+?\1")
SOLE_INCLUDE = re.compile(r"^\s*\{\{#include\s+(\S+)\s*\}\}\s*$")


def rewrite_target(target: str, written_in: str, chapter: str, chapters: dict[str, str],
                   repository: str) -> str:
    """The target as the chapter at `chapter` (a path under docs/) must write it; `written_in`
    is the repository path of the file the link was written in."""
    bracketed = target.startswith("<") and target.endswith(">")
    bare = target[1:-1] if bracketed else target
    if not bare or bare.startswith("#") or bare.startswith("/") or SCHEME.match(bare):
        return target
    path, hash_, anchor = bare.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(written_in), path))
    if resolved.startswith("../"):
        return target  # outside the repository: .ci/check-links.py refuses such links
    here = posixpath.dirname("docs/" + chapter)
    if resolved in chapters:
        resolved = "docs/" + chapters[resolved]
    if resolved == "docs" or resolved.startswith("docs/"):
        new = posixpath.relpath(resolved, here) + hash_ + anchor
    else:
        new = f"{repository.rstrip('/')}/blob/main/{resolved}" + hash_ + anchor
    return f"<{new}>" if bracketed else new


def rewrite(content: str, written_in: str, chapter: str, chapters: dict[str, str],
            repository: str) -> str:
    def fix(match: re.Match[str]) -> str:
        return match.group(1) + rewrite_target(match.group(2), written_in, chapter, chapters,
                                               repository)

    out = []
    fence = None
    for line in content.split("\n"):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None:
            stripped = line.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = None
        else:
            # A link may hold code spans in its text, but a link inside a code span is none.
            spans = [span.span() for span in CODE_SPAN.finditer(line)]

            def fix_outside_code(match: re.Match[str]) -> str:
                if any(start <= match.start() < end for start, end in spans):
                    return match.group(0)
                return fix(match)

            line = INLINE_LINK.sub(fix_outside_code, line)
            line = REFERENCE_DEFINITION.sub(fix, line)
        out.append(line)
    return "\n".join(out)


def chapters_of(items: list) -> list[dict]:
    found = []
    for item in items:
        if isinstance(item, dict) and "Chapter" in item:
            chapter = item["Chapter"]
            found.append(chapter)
            found.extend(chapters_of(chapter.get("sub_items", [])))
    return found


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "supports":
        sys.exit(0)  # every renderer
    context, book = json.load(sys.stdin)
    root = Path(context["root"])  # the book's directory: docs/
    source = root / context["config"]["book"].get("src", ".")
    repository = (context["config"].get("output", {}).get("html", {})
                  .get("git-repository-url", ""))
    items = book.get("items", book.get("sections", []))
    chapters = chapters_of(items)

    # A top-level document included whole by a chapter: its repository path -> the chapter.
    included: dict[str, str] = {}
    written_in: dict[str, str] = {}
    for chapter in chapters:
        path = chapter.get("source_path") or chapter.get("path")
        if not path:
            continue
        text = (source / path).read_text(encoding="utf-8")
        match = SOLE_INCLUDE.match(text)
        origin = "docs/" + path
        if match:
            origin = posixpath.normpath(posixpath.join(posixpath.dirname(origin),
                                                       match.group(1)))
            included[origin] = path
        written_in[path] = origin

    for chapter in chapters:
        path = chapter.get("path")
        if path and path in written_in:
            chapter["content"] = rewrite(chapter["content"], written_in[path], path, included,
                                         repository)
    json.dump(book, sys.stdout)


if __name__ == "__main__":
    main()
