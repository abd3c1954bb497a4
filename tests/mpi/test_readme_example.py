"""The README's library example runs as written, on one rank and under mpiexec."""

from __future__ import annotations

import re
import sys

import pytest

from launch import REPO, mpiexec, run


def _example(tmp_path) -> str:
    text = open(f"{REPO}/README.md", encoding="utf-8").read()
    code = re.search(r"## Library API.*?```python\n(.*?)```", text, re.S).group(1)
    path = tmp_path / "example.py"
    path.write_text(code)
    return str(path)


@pytest.mark.timeout(120)
def test_readme_example_single_rank(tmp_path):
    out = run([sys.executable, _example(tmp_path)], timeout=100)
    assert out.returncode == 0, out.stderr
    assert "0 drift 0.0" in out.stdout


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_readme_example_under_mpiexec(tmp_path):
    # one stdout file per rank, so the ranks' lines cannot interleave
    pattern = str(tmp_path / "out.%r")
    out = run(
        [mpiexec(), "-outfile-pattern", pattern, "-n", "4", sys.executable, _example(tmp_path)],
        timeout=100,
    )
    assert out.returncode == 0, out.stderr
    drifts = []
    for rank in range(4):
        text = (tmp_path / f"out.{rank}").read_text()
        drifts += [float(d) for d in re.findall(rf"^{rank} drift (\S+)$", text, re.M)]
    assert len(drifts) == 4 and all(0 < d < 1 for d in drifts), drifts
