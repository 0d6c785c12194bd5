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

The paper's reading (``reading="official"``, the authors' code ``run_ode.py``, ../papers/model_repos.md §5.3): one
trajectory per task from the code's parameters, trained on and tested on,

* spiral:   (x, y)' = (x, y) A,  A = [[−0.1, 3], [−3, −0.1]],  y0 = (0.5, 0.01)
* duffing:  x' = y,  y' = x − x³  (undamped double well),        y0 = (−1, 1)

train: 1024 windows at random starts of it; valid: 256 other windows of it, of 16 samples or ``valid_window``
(the code selects nothing; ours selects the epoch on them, never on the test rollout; windows of 250 samples are
open-loop rollouts long enough to see the phase drift that decides the 1000-step test, which 16-sample windows
miss); test: its rollout from y0 (999 steps), read with the code's L1 (mean absolute error,
``meta["metric"] = "MAE"``). Training stays MSE.
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
OFFICIAL_SPIRAL_MATRIX = ((-0.1, 3.0), (-3.0, -0.1))
OFFICIAL_Y0 = {"spiral": (0.5, 0.01), "duffing": (-1.0, 1.0)}
VALID_WINDOWS = 256


def spiral_field(t, y: torch.Tensor) -> torch.Tensor:
    """(x, y)' = (x, y) A (row-vector convention)."""
    return y @ torch.tensor(SPIRAL_MATRIX, dtype=y.dtype, device=y.device)


def duffing_field(t, y: torch.Tensor) -> torch.Tensor:
    """x' = y, y' = −δ y − α x − β x³."""
    x, v = y.unbind(-1)
    return torch.stack([v, -DUFFING["delta"] * v - DUFFING["alpha"] * x - DUFFING["beta"] * x**3], -1)


def official_spiral_field(t, y: torch.Tensor) -> torch.Tensor:
    """(x, y)' = (x, y) A with the authors' A = [[−0.1, 3], [−3, −0.1]]."""
    return y @ torch.tensor(OFFICIAL_SPIRAL_MATRIX, dtype=y.dtype, device=y.device)


def official_duffing_field(t, y: torch.Tensor) -> torch.Tensor:
    """x' = y, y' = x − x³ (the authors' Duffing oscillator)."""
    x, v = y.unbind(-1)
    return torch.stack([v, x - x**3], -1)


FIELDS = {"spiral": spiral_field, "duffing": duffing_field}
OFFICIAL_FIELDS = {"spiral": official_spiral_field, "duffing": official_duffing_field}
READINGS = ("ours", "official")


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


def trajectories(name: str, y0: torch.Tensor, samples: int = SAMPLES, fields: dict = FIELDS) -> torch.Tensor:
    """``(len(y0), samples, 2)`` float64 at t = linspace(0, 25, samples) (RK4, 4 steps per sample)."""
    t = torch.linspace(0.0, T_END, samples, dtype=torch.float64)
    return solve(fields[name], y0, t, method="rk4", dt=float(t[1] - t[0]) / 4).y


def _windows(paths: torch.Tensor, count: int, generator: torch.Generator,
             length: int = WINDOW) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` windows of ``length`` samples at random (trajectory, start) of ``paths``, as (inputs, targets)."""
    which = torch.randint(0, len(paths), (count,), generator=generator)
    start = torch.randint(0, paths.shape[1] - length + 1, (count,), generator=generator)
    windows = paths[which.unsqueeze(1), start.unsqueeze(1) + torch.arange(length)]  # (count, length, 2)
    return _initial_state_input(windows), windows[:, 1:].contiguous()


def _initial_state_input(path: torch.Tensor) -> torch.Tensor:
    """(y0, 0, …, 0) with one sample per target step of ``path`` (n, steps + 1, 2)."""
    inputs = torch.zeros_like(path[:, 1:])
    inputs[:, 0] = path[:, 0]
    return inputs


def initial_state_rmse(x: torch.Tensor, y: torch.Tensor) -> float:
    """RMSE of predicting the initial state (the first input sample) at every step: persistence."""
    return float(((x[:, :1] - y) ** 2).mean().sqrt())


def initial_state_mae(x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean absolute error of predicting the initial state at every step (persistence, the paper's L1)."""
    return float((x[:, :1] - y).abs().mean())


def neural_ode_task(name: str, seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES,
                    train_windows: int = TRAIN_WINDOWS, cache: bool = True) -> dict:
    """``{split: (inputs, targets)}`` float32, inputs = the held initial state; see the module docstring."""
    if name not in FIELDS:
        raise ValueError(f"name: expected one of {sorted(FIELDS)}, got {name!r}")

    def build():
        y0 = initial_states(seed, sizes)
        paths = dict(zip(y0, trajectories(name, torch.cat(list(y0.values())), samples).float()
                         .split([len(v) for v in y0.values()])))
        out = {"train": _windows(paths["train"], train_windows, torch.Generator().manual_seed(seed + 1))}
        for split in ("valid", "test"):
            out[split] = (_initial_state_input(paths[split]), paths[split][:, 1:].contiguous())
        return out

    if not cache:
        return build()
    return cached(name, dict(seed=seed, sizes=list(sizes), samples=samples, train_windows=train_windows, version=2),
                  build)


def official_task(name: str, seed: int = 1234, samples: int = SAMPLES, train_windows: int = TRAIN_WINDOWS,
                  cache: bool = True, valid_window: int = WINDOW) -> dict:
    """The paper's reading (module docstring): windows of the authors' one trajectory, its rollout as the test,
    ``meta["metric"] = "MAE"``; the seed draws the windows, ``valid_window`` samples each validation window."""
    if name not in OFFICIAL_FIELDS:
        raise ValueError(f"name: expected one of {sorted(OFFICIAL_FIELDS)}, got {name!r}")
    if not isinstance(valid_window, int) or isinstance(valid_window, bool) or not 2 <= valid_window <= samples:
        raise ValueError(f"valid_window: expected an integer from 2 to {samples} (the trajectory's samples), "
                         f"got {valid_window!r}")

    def build():
        y0 = torch.tensor([OFFICIAL_Y0[name]], dtype=torch.float64)
        path = trajectories(name, y0, samples, OFFICIAL_FIELDS).float()
        generator = torch.Generator().manual_seed(seed + 1)
        return {"train": _windows(path, train_windows, generator),
                "valid": _windows(path, VALID_WINDOWS, generator, valid_window),
                "test": (_initial_state_input(path), path[:, 1:].contiguous())}

    key = dict(seed=seed, samples=samples, train_windows=train_windows, version=1)
    notes = ["the paper's reading: the authors' trajectory, test read with L1 (MAE)"]
    if valid_window != WINDOW:  # the default's cache key and notes stay those of the runs before this option
        key["valid_window"] = valid_window
        notes.append(f"validation: {VALID_WINDOWS} open-loop rollouts of {valid_window} samples of the trajectory "
                     f"(the epoch is selected on them, never on the test rollout)")
    data = build() if not cache else cached(f"{name}-official", key, build)
    return {**data, "meta": {"reading": "official", "metric": "MAE", "notes": notes}}


def _reading(name: str, reading: str, seed: int, sizes, samples: int, cache: bool, valid_window: int) -> dict:
    if reading not in READINGS:
        raise ValueError(f"reading: expected one of {', '.join(READINGS)}, got {reading!r}")
    if reading == "official":
        return official_task(name, seed, samples, cache=cache, valid_window=valid_window)
    if valid_window != WINDOW:
        raise ValueError("valid_window: only under reading=official (reading ours validates on whole rollouts of "
                         "held-out trajectories)")
    return neural_ode_task(name, seed, sizes, samples, cache=cache)


def spiral(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True, reading: str = "ours",
           valid_window: int = WINDOW) -> dict:
    return _reading("spiral", reading, seed, sizes, samples, cache, valid_window)


def duffing(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True, reading: str = "ours",
            valid_window: int = WINDOW) -> dict:
    return _reading("duffing", reading, seed, sizes, samples, cache, valid_window)
