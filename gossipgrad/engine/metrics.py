"""Metrics: JSON-lines records (rank 0 writes) and the rank-0 progress bar."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


class MetricsWriter:
    """Appends one JSON object per line to ``path`` (rank 0 only; others write nothing)."""

    def __init__(self, path: str | None, rank: int) -> None:
        self._file = None
        if path and rank == 0:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Progress:
    """A tqdm bar on rank 0 when enabled; silent elsewhere."""

    def __init__(self, total: int, rank: int, enabled: bool, desc: str = "train") -> None:
        self.bar = None
        self.rank = rank
        if enabled and rank == 0:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="step", file=sys.stderr,
                            dynamic_ncols=True, mininterval=0.5)

    def update(self, n: int = 1, **postfix: Any) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)

    def write(self, message: str) -> None:
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        elif self.rank == 0:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
