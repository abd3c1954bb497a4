#!/usr/bin/env python3
"""Rewrite the environment-variable table in docs/architecture.md from gossipgrad.settings
(the table tests/unit/test_options.py checks the document against).

    python scripts/settings_table.py
"""

from pathlib import Path

from gossipgrad.settings import table_markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def main() -> None:
    lines = DOC.read_text(encoding="utf-8").split("\n")
    start = lines.index("| variable | default | meaning |")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    lines[start:end] = table_markdown().split("\n")
    DOC.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
