"""The Neural-ODE tasks of the LRC paper (Farsang et al. 2024, §4.2): a linear spiral towards
the origin and a nonlinear (Duffing) oscillator, state (x, y). Train on short windows of 16 points, test on
the whole 1000-point trajectory given only its initial state (open-loop rollout).

The paper gives no equations or parameters; ours, after torchdiffeq's ``examples/ode_demo.py`` (which the
paper's setup mirrors: 1000 points on [0, 25], y0 = (2, 0), windows, batch 16):

* spiral:   (x, y)' = (x, y) A,  A = [[−0.1, 2], [−2, −0.1]]            (the demo's matrix, linear field)
* duffing:  x' = y,  y' = −δ y − α x − β x³,  δ = 0.1, α = −1, β = 1      (damped double well)

Sequences. A sequence model reads the initial state as its first input sample and zeros after it, so that
it runs autonomously from there (the paper's "given only the initial state"; an input held at y0 throughout
trained worse in a short comparison), and emits the trajectory after every sample: input (y0, 0, …, 0),
target (y(t_1), …, y(t_n)).

* train: 1024 windows y[s], …, y[s+15] (input (y[s], 0, …, 0) of 15 steps, target y[s+1..s+15]) at random
  starts s of the ``train`` trajectories;
* valid / test: full rollouts (input (y0, 0, …, 0) of 999 steps, target y(t_1..t_999)) of their own
  trajectories.

Trajectories start at (2, 0) (the paper's / demo's, first of ``train`` and of ``test``, so the first test
sequence is the paper's test) or at r (cos θ, sin θ), r ~ U(1.5, 2.5), θ ~ U(0, 2π): 8 train, 8 validation,
32 test trajectories. All drawn from one ``torch.Generator`` seeded with ``seed``; solved with odelab's RK4
at a quarter of the sample spacing (float64, stored float32). The loss is MSE (the demo used L1).
"""
from __future__ import annotations

import math

import torch

from ..solvers import solve
from .cache import cached

T_END, SAMPLES, WINDOW, TRAIN_WINDOWS = 25.0, 1000, 16, 1024
SPLITS = (("train", 8), ("valid", 8), ("test", 32))
SPIRAL_MATRIX = ((-0.1, 2.0), (-2.0, -0.1))
DUFFING = dict(delta=0.1, alpha=-1.0, beta=1.0)


def spiral_field(t, y: torch.Tensor) -> torch.Tensor:
    """(x, y)' = (x, y) A (row-vector convention)."""
    return y @ torch.tensor(SPIRAL_MATRIX, dtype=y.dtype, device=y.device)


def duffing_field(t, y: torch.Tensor) -> torch.Tensor:
    """x' = y, y' = −δ y − α x − β x³."""
    x, v = y.unbind(-1)
    return torch.stack([v, -DUFFING["delta"] * v - DUFFING["alpha"] * x - DUFFING["beta"] * x**3], -1)


FIELDS = {"spiral": spiral_field, "duffing": duffing_field}


def initial_states(seed: int, sizes=SPLITS) -> dict[str, torch.Tensor]:
    """(n, 2) float64 per split; train[0] and test[0] are (2, 0)."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, n in sizes:
        r = 1.5 + torch.rand(n, generator=generator, dtype=torch.float64)
        theta = 2 * math.pi * torch.rand(n, generator=generator, dtype=torch.float64)
        y0 = torch.stack([r * theta.cos(), r * theta.sin()], 1)
        if name in ("train", "test") and n > 0:
            y0[0] = torch.tensor([2.0, 0.0], dtype=torch.float64)
        out[name] = y0
    return out


def trajectories(name: str, y0: torch.Tensor, samples: int = SAMPLES) -> torch.Tensor:
    """``(len(y0), samples, 2)`` float64 at t = linspace(0, 25, samples) (RK4, 4 steps per sample)."""
    t = torch.linspace(0.0, T_END, samples, dtype=torch.float64)
    return solve(FIELDS[name], y0, t, method="rk4", dt=float(t[1] - t[0]) / 4).y


def _initial_state_input(path: torch.Tensor) -> torch.Tensor:
    """(y0, 0, …, 0) with one sample per target step of ``path`` (n, steps + 1, 2)."""
    inputs = torch.zeros_like(path[:, 1:])
    inputs[:, 0] = path[:, 0]
    return inputs


def initial_state_rmse(x: torch.Tensor, y: torch.Tensor) -> float:
    """RMSE of predicting the initial state (the first input sample) at every step: persistence."""
    return float(((x[:, :1] - y) ** 2).mean().sqrt())


def neural_ode_task(name: str, seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES,
                    train_windows: int = TRAIN_WINDOWS, cache: bool = True) -> dict:
    """``{split: (inputs, targets)}`` float32, inputs = the held initial state; see the module docstring."""
    if name not in FIELDS:
        raise ValueError(f"name: expected one of {sorted(FIELDS)}, got {name!r}")

    def build():
        y0 = initial_states(seed, sizes)
        paths = dict(zip(y0, trajectories(name, torch.cat(list(y0.values())), samples).float()
                         .split([len(v) for v in y0.values()])))
        generator = torch.Generator().manual_seed(seed + 1)
        which = torch.randint(0, len(paths["train"]), (train_windows,), generator=generator)
        start = torch.randint(0, samples - WINDOW + 1, (train_windows,), generator=generator)
        windows = paths["train"][which.unsqueeze(1), start.unsqueeze(1) + torch.arange(WINDOW)]  # (n, 16, 2)
        out = {"train": (_initial_state_input(windows), windows[:, 1:].contiguous())}
        for split in ("valid", "test"):
            out[split] = (_initial_state_input(paths[split]), paths[split][:, 1:].contiguous())
        return out

    if not cache:
        return build()
    return cached(name, dict(seed=seed, sizes=list(sizes), samples=samples, train_windows=train_windows, version=2),
                  build)


def spiral(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True) -> dict:
    return neural_ode_task("spiral", seed, sizes, samples, cache=cache)


def duffing(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True) -> dict:
    return neural_ode_task("duffing", seed, sizes, samples, cache=cache)
