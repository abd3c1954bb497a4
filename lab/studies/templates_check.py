"""Is a built-in dataset learnable by an MLP and not linearly trivial? One process, JSON out.

    python -m lab templates-check                       # templates, 20 MLP epochs
    python -m lab templates-check --dataset digits --epochs 5

Trains, on the dataset's training split, (1) a logistic regression to convergence
(full-batch L-BFGS: the best a linear model reaches there, not one stopped early) and
(2) the ``mlp`` of ``gossipgrad train`` with its defaults on one rank (SGD, lr 0.1, momentum
0.9, batch 32, cosine decay), and prints both test accuracies with chance (1 / classes).
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from gossipgrad.data.tensors import TensorData, load_tensor_data
from gossipgrad.models import mlp


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def linear_accuracy(data: TensorData, iterations: int = 300, l2: float = 1e-4) -> float:
    """Test accuracy of a multinomial logistic regression fitted by L-BFGS."""
    torch.manual_seed(0)
    x = data.train_x.reshape(len(data.train_y), -1)
    model = torch.nn.Linear(x.shape[1], data.classes)
    opt = torch.optim.LBFGS(
        model.parameters(), max_iter=iterations, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), data.train_y)
        loss = loss + l2 * model.weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    return accuracy(model, data.test_x.reshape(len(data.test_y), -1), data.test_y)


def mlp_accuracy(data: TensorData, epochs: int, lr: float = 0.1, batch: int = 32) -> float:
    """Test accuracy of ``gossipgrad train``'s MLP trained on one rank."""
    torch.manual_seed(0)
    model = mlp(data.in_shape, data.classes)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    n = len(data.train_y)
    steps, step = epochs * (n // batch), 0
    gen = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for i in range(0, n - batch + 1, batch):
            for g in opt.param_groups:
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
            idx = order[i : i + batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
            loss.backward()
            opt.step()
            step += 1
    return accuracy(model, data.test_x, data.test_y)


def check(dataset: str, epochs: int) -> dict[str, float | str | int]:
    data = load_tensor_data(dataset)
    return {
        "dataset": dataset,
        "chance": 1.0 / data.classes,
        "epochs": epochs,
        "linear_test_accuracy": round(linear_accuracy(data), 4),
        "mlp_test_accuracy": round(mlp_accuracy(data, epochs), 4),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m lab templates-check", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--dataset", default="templates")
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(json.dumps(check(args.dataset, args.epochs), sort_keys=True))


if __name__ == "__main__":
    main()
