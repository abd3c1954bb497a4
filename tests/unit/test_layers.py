"""The layering of docs/architecture.md, checked on the source: imports point down only.

    tools > cli > torch > runtime, startup > strategies > engine > data, shuffle, comm,
    inject > options, choices, registry, settings, models, gpt

The tools (``gossipgrad/tools/``: planner, benchmarks, measurement, the stand-in device and
their commands) import the runtime; the runtime never imports a tool, and ``import
gossipgrad`` loads none. Inside the tools: cli > bench > measure > devices > plan.

``inject`` (the testing corner: fault, straggler and latency injection) sits at comm's layer
so that the engine may call it, and imports only ``comm.base`` and the bottom layer; comm
never imports it (``comm/mpi.py`` takes its delay poster from its caller).
``lab/`` (the validation studies, not installed) may import gossipgrad; gossipgrad never
imports lab.

Every ``import``/``from ... import`` of a gossipgrad module counts, at module level or
inside a function (a lazy import is still a dependency). A module may import its own
package, and packages of its own or a lower layer. Pure: parses the files, imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "gossipgrad"

#: Layer of each top-level part of gossipgrad (package or module); higher may import lower.
LAYERS = {
    "tools": 9,  # the tools' wing: imports the runtime, never imported by it
    "cli": 8,
    "torch": 6,  # Horovod's face (gossipgrad.torch): above strategies and runtime
    "runtime": 5,  # the launch layer: MPI or a one-rank world, logging, abort
    "startup": 5,  # the launch layer: MPI start-up under a deadline, the start-up agreement
    "strategies": 4,  # one spec module per strategy: they build the engine's optimizers
    "shapes": 4,  # one module per exchange shape: its transport, bytes, time and memory
    "engine": 3,
    "data": 2,
    "shuffle": 2,
    "comm": 2,
    "inject": 2,  # the testing corner: imports only comm.base and layer 1 (test below)
    "options": 1,
    "choices": 1,
    "specs": 1,  # the seams' interfaces (strategy, device)
    "registry": 1,  # the seams' name -> object maps: lower layers find what higher ones registered
    "settings": 1,
    "models": 1,
    "gpt": 1,  # the GPT of the model registry (models.py imports it)
}
#: The package's entry points, above every layer.
ENTRY = {"__init__", "__main__"}
#: What the testing corner may import: the Communicator protocol and the bottom layer.
INJECT_MAY_IMPORT = {"gossipgrad.comm.base"} | {
    f"gossipgrad.{p}" for p, n in LAYERS.items() if n == 1
}


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


@pytest.mark.parametrize("lower", ["comm", "engine", "data", "shuffle"])
def test_lower_layers_import_no_launch_or_cli(lower: str):
    found = [
        (p, t)
        for p in sorted((ROOT / lower).rglob("*.py"))
        for _, t in imported_parts(p)
        if t in {"runtime", "cli", "tools"}
    ]
    assert found == []


#: The tools' own layering, highest first: a tool imports only its own part and lower ones.
TOOL_LAYERS = {
    "cli": 5,
    "bench": 4,
    "simulate": 4,
    "measure": 3,
    "devices": 2,
    "plan": 1,
    "plugin": 6,
}


def test_the_runtime_imports_no_tool():
    found = [
        f"{p.relative_to(ROOT)}:{line}: {m}"
        for p in sorted(ROOT.rglob("*.py"))
        if _part(p) != "tools"
        for line, m in imported_modules(p)
        if m == "gossipgrad.tools" or m.startswith("gossipgrad.tools.")
    ]
    assert found == []


def test_the_tools_point_down_among_themselves():
    bad = []
    for path in sorted((ROOT / "tools").rglob("*.py")):
        rel = path.relative_to(ROOT / "tools")
        part = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if part == "__init__":
            continue
        for line, m in imported_modules(path):
            if not m.startswith("gossipgrad.tools."):
                continue
            target = m.split(".")[2]
            if target != part and TOOL_LAYERS[target] > TOOL_LAYERS[part]:
                bad.append(f"tools/{rel}:{line}: {part} imports {target}")
    assert bad == []


def test_import_gossipgrad_loads_no_tool():
    import subprocess
    import sys

    code = (
        "import sys, gossipgrad, gossipgrad.torch; "
        "print(sorted(m for m in sys.modules if m.startswith('gossipgrad.tools')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_check_sees_lazy_imports(tmp_path: Path):
    """An import inside a function counts (as comm/netfit.py's of runtime once did)."""
    (tmp_path / "comm").mkdir()
    (tmp_path / "comm" / "x.py").write_text("def f():\n    from gossipgrad.runtime import init\n")
    assert upward_imports(tmp_path) == ["comm/x.py:2: comm (2) imports runtime (5)"]


def imported_modules(path: Path, top_level_only: bool = False) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path`` (``from a.b import c`` gives ``a.b``,
    or ``a.b.c`` when that is a module of the package); with ``top_level_only``, only the
    imports that run when the module is imported (not those inside a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((node.lineno, sub if _module_path(sub) else node.module))
    return out


def _module_path(module: str) -> Path | None:
    """The file of gossipgrad module ``module`` (a package's ``__init__.py``), else None."""
    if not module.startswith("gossipgrad"):
        return None
    base = ROOT.parent.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def test_the_package_never_imports_lab():
    found = [
        f"{p.relative_to(ROOT)}:{line}: {m}"
        for p in sorted(ROOT.rglob("*.py"))
        for line, m in imported_modules(p)
        if m == "lab" or m.startswith("lab.")
    ]
    assert found == []


def test_inject_imports_only_comm_base_settings_and_the_bottom_layer():
    found = [
        f"{p.relative_to(ROOT)}:{line}: {m}"
        for p in sorted((ROOT / "inject").rglob("*.py"))
        for line, m in imported_modules(p)
        if m.startswith("gossipgrad")
        and not any(m == ok or m.startswith(ok + ".") for ok in INJECT_MAY_IMPORT)
    ]
    assert found == []


def test_comm_never_imports_the_testing_corner():
    found = [
        f"{p.relative_to(ROOT)}:{line}: {m}"
        for p in sorted((ROOT / "comm").rglob("*.py"))
        for line, m in imported_modules(p)
        if m == "gossipgrad.inject" or m.startswith("gossipgrad.inject.")
    ]
    assert found == []


def test_no_import_circle_through_inject_at_module_level():
    """What an inject module imports when it loads never loads inject again (engine/run/loop.py
    imports it at module level)."""
    for start in sorted((ROOT / "inject").glob("*.py")):
        if start.name == "__init__.py":
            continue
        seen: set[Path] = set()
        todo = [_module_path(m) for _, m in imported_modules(start, top_level_only=True)]
        while todo:
            path = todo.pop()
            if path is None or path in seen:
                continue
            seen.add(path)
            assert _part(path) != "inject", f"{start.name} loads {path} at import: a circle"
            todo += [_module_path(m) for _, m in imported_modules(path, top_level_only=True)]
        assert seen, f"{start.name} imports nothing of gossipgrad?"


def test_the_check_sees_an_import_of_lab(tmp_path: Path):
    (tmp_path / "x.py").write_text("def f():\n    from lab.bench import stragglers\n")
    assert imported_modules(tmp_path / "x.py") == [(2, "lab.bench")]


#: The built-in exchange shapes' names (gossipgrad/shapes/): only their registry keys.
SHAPE_NAMES = {"peer", "ring", "server", "node", "none"}


def shape_switches(root: Path = ROOT) -> list[str]:
    """``file:line: expression`` of every comparison of a value with a built-in shape's
    name (``x == "ring"``, ``p in ("peer", "node")``): a switch on an exchange shape, which
    the shape's own attributes and methods replace."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            strings = set()
            for side in (node.left, *node.comparators):
                items = side.elts if isinstance(side, ast.Tuple | ast.Set | ast.List) else [side]
                strings |= {i.value for i in items if isinstance(i, ast.Constant)}
            if SHAPE_NAMES & strings:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_switches_on_an_exchange_shape():
    assert shape_switches() == []


def test_the_shape_check_sees_a_switch(tmp_path: Path):
    (tmp_path / "x.py").write_text("def f(p):\n    return p in ('peer', 'node')\n")
    assert shape_switches(tmp_path) == ["x.py:2: p in ('peer', 'node')"]
