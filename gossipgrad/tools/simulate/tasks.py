"""Built-in tasks and models for ``gossipgrad simulate`` (the library takes any).

``templates``: the runtime's generated 10-class task (:mod:`gossipgrad.data.templates`:
shifted, scaled and noised 16 x 16 class templates) drawn at any number of samples, so
that every rank holds real data at 1024 ranks (``templates:100000``: 97,952 training
samples, 95 a rank); the first ``TEST`` samples are the test split. ``digits``:
scikit-learn's 1,797 digits (``gossipgrad train``'s default).

    >>> t = templates(samples=3000)
    >>> tuple(t.train_x.shape), tuple(t.test_x.shape)
    ((1000, 1, 16, 16), (2000, 1, 16, 16))
"""

from __future__ import annotations

import torch

from gossipgrad.data import templates as generated
from gossipgrad.data.tensors import digits as digits_data
from gossipgrad.models import build_model
from gossipgrad.tools.simulate.data import Task

TEST = generated.TEST


def templates(samples: int = generated.SAMPLES, seed: int = generated.SEED) -> Task:
    """``samples`` generated samples (at least ``TEST + 1``): ``TEST`` to test, the rest
    to train."""
    if samples <= TEST:
        raise ValueError(
            f"templates needs more than {TEST} samples (the test split), got {samples}"
        )
    x, y = generated.generate(samples, seed)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    return Task(x[TEST:], y[TEST:], x[:TEST], y[:TEST])


def digits() -> Task:
    d = digits_data()
    return Task(d.train_x, d.train_y, d.test_x, d.test_y)


def task_named(spec: str) -> Task:
    """``templates``, ``templates:SAMPLES`` or ``digits``."""
    name, _, arg = spec.partition(":")
    if name == "templates":
        try:
            return templates(int(arg)) if arg else templates()
        except ValueError as exc:
            if arg and not arg.isdigit():
                raise ValueError(
                    f"--task templates:{arg}: SAMPLES must be a whole number"
                ) from None
            raise exc
    if name == "digits" and not arg:
        return digits()
    raise ValueError(f"--task {spec!r} is not known; use templates[:SAMPLES] or digits")


def mlp(task: Task, hidden: int = 128) -> torch.nn.Module:
    """The runtime's two-hidden-layer perceptron for ``task``'s inputs and classes."""
    return build_model("mlp", tuple(task.train_x.shape[1:]), task.classes, hidden)
