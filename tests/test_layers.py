"""The layering of docs/architecture.md, checked on the source: imports point down only.

    cli > bench > measure > runtime > engine > data, shuffle, comm > plan, options,
    choices, settings, models

Every ``import``/``from ... import`` of a gossipgrad module counts, at module level or
inside a function (a lazy import is still a dependency). A module may import its own
package, and packages of its own or a lower layer. Pure: parses the files, imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gossipgrad"

#: Layer of each top-level part of gossipgrad (package or module); higher may import lower.
LAYERS = {
    "cli": 7,
    "bench": 6,
    "measure": 5,
    "runtime": 4,  # the launch layer: MPI or a one-rank world, logging, abort
    "startup": 4,  # the launch layer: MPI start-up under a deadline, the start-up agreement
    "engine": 3,
    "data": 2,
    "shuffle": 2,
    "comm": 2,
    "plan": 1,
    "options": 1,
    "choices": 1,
    "settings": 1,
    "models": 1,
}
#: The package's entry points, above every layer.
ENTRY = {"__init__", "__main__"}


def _part(path: Path, root: Path = ROOT) -> str:
    """The top-level part of gossipgrad that ``path`` belongs to: ``comm`` for
    ``gossipgrad/comm/mpi.py``, ``runtime`` for ``gossipgrad/runtime.py``."""
    rel = path.relative_to(root)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_parts(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level part)`` of every gossipgrad import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "gossipgrad":  # from gossipgrad import runtime
                names = [f"gossipgrad.{a.name}" for a in node.names]
        else:
            continue
        out += [
            (node.lineno, n.split(".")[1])
            for n in names
            if n.startswith("gossipgrad.") and n.count(".") >= 1
        ]
    return out


def upward_imports(root: Path = ROOT) -> list[str]:
    """``file:line: part (layer) imports part (layer)`` for each import that points up."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        part = _part(path, root)
        if part in ENTRY:
            continue
        assert part in LAYERS, f"{path}: {part!r} has no layer; add it to LAYERS"
        for line, target in imported_parts(path):
            assert target in LAYERS, f"{path}:{line}: imports unknown part {target!r}"
            if target != part and LAYERS[target] > LAYERS[part]:
                bad.append(
                    f"{path.relative_to(root)}:{line}: {part} "
                    f"({LAYERS[part]}) imports {target} ({LAYERS[target]})"
                )
    return bad


def test_imports_point_down_only():
    assert upward_imports() == []


@pytest.mark.parametrize("lower", ["comm", "engine", "data", "shuffle", "plan"])
def test_lower_layers_import_no_launch_measure_bench_or_cli(lower: str):
    found = [
        (p, t)
        for p in sorted((ROOT / lower).rglob("*.py"))
        for _, t in imported_parts(p)
        if t in {"runtime", "measure", "bench", "cli"}
    ]
    assert found == []


def test_the_check_sees_lazy_imports(tmp_path: Path):
    """An import inside a function counts (as comm/netfit.py's of runtime once did)."""
    (tmp_path / "comm").mkdir()
    (tmp_path / "comm" / "x.py").write_text("def f():\n    from gossipgrad.runtime import init\n")
    assert upward_imports(tmp_path) == ["comm/x.py:2: comm (2) imports runtime (4)"]
