#!/usr/bin/env python3
"""Write docs/options.md from the option table (gossipgrad.options) and the runtime variables
(gossipgrad.settings); tests/unit/test_options.py checks the page against them.

    python scripts/options_table.py
"""

from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "options.md"


def page() -> str:
    """The page's text, made from the tables."""
    import gossipgrad  # noqa: F401 - registers the built-in strategies, timings, topologies
    from gossipgrad.cli.options import train_table
    from gossipgrad.options import markdown
    from gossipgrad.settings import table_markdown

    return "\n".join(
        [
            "# Options of `gossipgrad train`",
            "",
            "Generated from the option table by `python scripts/options_table.py`; do not edit.",
            "Every option is a flag, a `GOSSIPGRAD_*` variable, a key of a `--config` file",
            "(TOML or YAML, the flag's name without dashes) and a keyword of",
            "`gossipgrad.ExchangeOptions` or `TrainConfig` (its field name). Precedence: flag >",
            "variable > file > default; from the library, a keyword > its variable > the default.",
            "",
            markdown(o for o in train_table() if o.group != "extras"),  # not plugins' own
            "",
            "## Runtime settings (environment only)",
            "",
            table_markdown(),
            "",
        ]
    )


def main() -> None:
    DOC.write_text(page(), encoding="utf-8")


if __name__ == "__main__":
    main()
