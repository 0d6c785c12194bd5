"""Tasks of the ``odelab fit`` command: data, sizes, presets of hyperparameters, trivial baselines."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .data import fitzhugh_nagumo


@dataclass
class Task:
    name: str
    load: Callable[..., dict]  # (seed, **options) -> {split: (inputs, targets)}
    input_size: int
    output_size: int
    presets: dict[str, dict]  # name -> TrainConfig fields + hidden_size
    hidden: dict[str, int] = field(default_factory=dict)  # per-model hidden size where the paper's table differs
    sample_dt: float = 1.0  # time between samples, for plots


def linear_extrapolation_rmse(x: torch.Tensor, y: torch.Tensor) -> float:
    """RMSE of predicting y_n = 2 x_n − x_{n−1} wherever x_{n−1} exists: the bar a model must beat."""
    return float(((2 * x[:, 1:] - x[:, :-1] - y[:, 1:]) ** 2).mean().sqrt())


TASKS = {
    "fhn": Task(
        "fhn",
        load=lambda seed, solver="odelab": fitzhugh_nagumo(seed=seed, solver=solver),
        input_size=1,
        output_size=1,
        presets={
            # the paper's protocol (000 Table 8 / official FitzHughNagumo_task.py)
            "paper": dict(hidden_size=16, epochs=400, lr=9.04e-3, batch_size=32),
            # ~3 minutes on 2 CPU cores
            "quick": dict(hidden_size=16, epochs=60, lr=9.04e-3, batch_size=32),
        },
        hidden={"cornn": 24},  # 000 Table 4: coRNN with 24 units
        sample_dt=0.4,
    ),
}
