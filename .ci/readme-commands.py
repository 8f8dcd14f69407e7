#!/usr/bin/env python3
"""Prints the shell commands the README shows under a heading, one per line, as written.

    python3 .ci/readme-commands.py "Try it (two commands)"

The commands are the lines of the ```bash blocks between that `## ` heading and the next
one, with continuation lines (a trailing backslash) joined and blank lines and whole-line
comments left out; a trailing comment stays (the shell ignores it). .ci/run runs them, so
the front page cannot drift from what works. Exit 1 when the heading or its commands are
missing.

Python 3.11 standard library only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(
    subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=Path(__file__).resolve().parent,
                   check=True, capture_output=True, text=True).stdout.strip()
)


def commands(heading: str) -> list[str]:
    found, in_section, in_block, pending = [], False, False, ""
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## ") and not in_block:
            in_section = line[3:].strip() == heading
            continue
        if not in_section:
            continue
        if line.startswith("```"):
            in_block = not in_block and line.strip() in ("```bash", "```sh", "```shell")
            continue
        if not in_block:
            continue
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        found.append(pending + stripped)
        pending = ""
    return found


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = commands(sys.argv[1])
    if not found:
        print(f"README.md has no commands under '## {sys.argv[1]}'", file=sys.stderr)
        return 1
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
