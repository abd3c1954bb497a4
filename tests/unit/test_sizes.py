"""docs/architecture.md's size rule, outside tests: a module over 300 lines or a function over
60 says why in one comment line ("Over 300 lines on purpose: ..." at the module's top,
"Over 60 lines on purpose: ..." just above the function or among its decorators)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("gossipgrad", "lab", "scripts")


def sources() -> list[Path]:
    return sorted(
        p for root in ROOTS for p in (REPO / root).rglob("*.py") if "tests" not in p.parts
    )


def unexplained(path: Path, root: Path = REPO) -> list[str]:
    src = path.read_text(encoding="utf-8")
    lines = src.splitlines()
    out = []
    if len(lines) > 300 and "Over 300 lines on purpose" not in src:
        out.append(f"{path.relative_to(root)}: {len(lines)} lines, no why")
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = node.end_lineno - node.lineno + 1
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        above = "\n".join(lines[max(0, first - 4) : node.lineno])
        if length > 60 and "Over 60 lines on purpose" not in above:
            out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return out


def test_the_rule_sees_a_long_function_without_a_why(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    bad = tmp_path / "long.py"
    bad.write_text(f"def f():\n{body}\n", encoding="utf-8")
    assert unexplained(bad, tmp_path) == ["long.py:1 f: 62 lines"]
    bad.write_text(f"# Over 60 lines on purpose: a test.\ndef f():\n{body}\n", encoding="utf-8")
    assert unexplained(bad, tmp_path) == []


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_long_modules_and_functions_say_why(path):
    assert unexplained(path) == []
