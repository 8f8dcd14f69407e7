#!/usr/bin/env python3
"""Checks the built guide: every relative link and image of every HTML page resolves.

    python3 .ci/check-book.py BOOK_DIR      # the output of `mdbook build docs --dest-dir BOOK_DIR`

A relative href or src must name a file of the built book (a directory means its
index.html), and an #anchor must be an id in the target page. Addresses with a scheme
(https:, mailto:) are not checked. Exit 1 with one line per broken link.

Python 3.11 standard library only.
"""

from __future__ import annotations

import posixpath
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            elif (tag, name) in (("a", "href"), ("img", "src"), ("link", "href"),
                                 ("script", "src")):
                self.links.append((self.getpos()[0], value))


def parse(path: Path, cache: dict[Path, Page]) -> Page:
    if path not in cache:
        page = Page()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = page
    return cache[path]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    book = Path(sys.argv[1]).resolve()
    cache: dict[Path, Page] = {}
    broken = []
    pages = sorted(book.rglob("*.html"))
    for path in pages:
        for line, link in parse(path, cache).links:
            if not link or SCHEME.match(link) or link.startswith("//"):
                continue
            parts = urlsplit(link)
            if parts.path.startswith("/"):
                broken.append(f"{path.relative_to(book)}:{line}: {link}: absolute path")
                continue
            if parts.path:
                target = Path(posixpath.normpath(
                    posixpath.join(str(path.parent), unquote(parts.path))))
            else:
                target = path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or book not in target.parents:
                broken.append(f"{path.relative_to(book)}:{line}: {link}: no such file")
                continue
            anchor = unquote(parts.fragment)
            if anchor and target.suffix == ".html" and anchor not in parse(target, cache).ids:
                broken.append(f"{path.relative_to(book)}:{line}: {link}: no such anchor")
    for finding in broken:
        print(finding)
    print(f"{len(pages)} pages checked, {len(broken)} broken links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
