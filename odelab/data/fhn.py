"""FitzHugh--Nagumo one-step-ahead prediction (Rusch et al. 2022, §5.5; the recipe is documented in docs/references.md).

v' = v − v³/3 − w + 0.5, w' = 0.02 (v + 0.7 − 0.8 w) from (c, 0), c ~ U[−1, 1], on [0, 400] sampled at 1001
points. Input v(t_0..t_999), target v(t_1..t_1000), shape (N, 1000, 1); w is never observed.
128 train / 128 validation / 1024 test, initial values drawn in that order from one numpy stream
(``np.random.seed(seed)``, one ``rand()`` per sequence), as the official generator.

:func:`fitzhugh_nagumo_irregular` (ours; no paper): the same sequences observed at irregular times, each gap drawn
from U[0.04, 0.76] (a tenth to 1.9 times the regular spacing 0.4; mean 0.4), from
``np.random.default_rng([seed, 1])`` in the splits' order. Input (v(t_n), t_{n+1} − t_n), target v(t_{n+1}),
n = 0 … 999: the second feature is the time the prediction reaches ahead, the sample's duration for a model that
steps by it (``Task.time_gaps``). One batched dopri5 solve with dense output gives every sequence at its own times.

``solver="odelab"`` (default) integrates all sequences in one batch with odelab's own solver at a tolerance far
tighter than scipy's defaults; ``solver="paper-exact"`` reproduces the official generator (scipy RK45 with its
default rtol 1e-3 / atol 1e-6, one trajectory at a time), whose loose tolerance shifts the phase by up to 0.38.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.integrate import solve_ivp

from ..solvers import solve
from ..systems import FitzHughNagumo
from .cache import cached

SPLITS = (("train", 128), ("valid", 128), ("test", 1024))
T_END, SAMPLES = 400.0, 1001
TOLERANCE = dict(rtol=1e-9, atol=1e-11)  # dopri5, per-sample steps: max error ~1e-7 vs DOP853 at 1e-12 (scipy's default rtol: 1e-3)


def initial_values(seed: int, sizes=SPLITS) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    return {name: np.array([2.0 * rng.rand() - 1.0 for _ in range(n)]) for name, n in sizes}


def _trajectories_odelab(c: np.ndarray) -> np.ndarray:
    y0 = torch.tensor(np.stack([c, np.zeros_like(c)], 1), dtype=torch.float64)
    t = torch.linspace(0.0, T_END, SAMPLES, dtype=torch.float64)
    return solve(FitzHughNagumo(), y0, t, method="dopri5", **TOLERANCE).y[:, :, 0].numpy()


def _trajectories_scipy(c: np.ndarray) -> np.ndarray:
    system = FitzHughNagumo()
    rhs = lambda t, x: [x[0] - x[0] ** 3 / 3 - x[1] + system.current, system.tau * (x[0] + system.a - system.b * x[1])]
    t = np.linspace(0.0, T_END, SAMPLES)
    return np.stack([solve_ivp(rhs, [0.0, T_END], [ci, 0.0], t_eval=t).y[0] for ci in c])


def fitzhugh_nagumo(seed: int = 1234, solver: str = "odelab", sizes=SPLITS, cache: bool = True) -> dict:
    """``{split: (inputs, targets)}`` float32 tensors of shape (N, 1000, 1)."""
    if solver not in ("odelab", "paper-exact"):
        raise ValueError(f"solver: expected 'odelab' or 'paper-exact', got {solver!r}")

    def build():
        generate = _trajectories_odelab if solver == "odelab" else _trajectories_scipy
        c = initial_values(seed, sizes)
        v = torch.tensor(generate(np.concatenate(list(c.values()))), dtype=torch.float32).unsqueeze(-1)
        out = {}
        for name, part in zip(c, v.split([len(x) for x in c.values()])):  # one batched solve for all splits
            out[name] = (part[:, :-1].contiguous(), part[:, 1:].contiguous())
        return out

    if not cache:
        return build()
    return cached("fhn", dict(seed=seed, solver=solver, sizes=list(sizes), version=2), build)


GAP_RANGE = (0.04, 0.76)  # irregular sampling: a tenth to 1.9 times the regular spacing T_END / (SAMPLES − 1) = 0.4


def fitzhugh_nagumo_irregular(seed: int = 1234, sizes=SPLITS, cache: bool = True) -> dict:
    """``{split: (inputs (N, 1000, 2) = [v(t_n), t_{n+1} − t_n], targets (N, 1000, 1) = v(t_{n+1}))}`` float32, each
    sequence observed at its own irregular times (module docstring)."""
    def build():
        c = initial_values(seed, sizes)
        c_all = np.concatenate(list(c.values()))
        gaps = np.random.default_rng([seed, 1]).uniform(*GAP_RANGE, size=(len(c_all), SAMPLES - 1))
        times = torch.tensor(np.concatenate([np.zeros((len(c_all), 1)), gaps.cumsum(1)], 1), dtype=torch.float64)
        y0 = torch.tensor(np.stack([c_all, np.zeros_like(c_all)], 1), dtype=torch.float64)
        span = torch.tensor([0.0, float(times.max())], dtype=torch.float64)
        solution = solve(FitzHughNagumo(), y0, span, method="dopri5", dense=True, **TOLERANCE)
        v = solution.evaluate(times)[0][..., :1].float()  # (N, 1001, 1)
        gaps = torch.tensor(gaps, dtype=torch.float32).unsqueeze(-1)
        out = {}
        for name, (vs, gs) in zip(c, zip(v.split([len(x) for x in c.values()]), gaps.split([len(x) for x in c.values()]))):
            out[name] = (torch.cat([vs[:, :-1], gs], -1).contiguous(), vs[:, 1:].contiguous())
        return out

    if not cache:
        return build()
    return cached("fhn-irregular", dict(seed=seed, sizes=list(sizes), gaps=list(GAP_RANGE), version=1), build)


def irregular_persistence_rmse(x, y) -> float:
    """RMSE of predicting v(t_{n+1}) = v(t_n)."""
    return float(((x[..., :1] - y) ** 2).mean().sqrt())


def irregular_extrapolation_rmse(x, y) -> float:
    """RMSE of v(t_{n+1}) ≈ v(t_n) + (t_{n+1} − t_n)(v(t_n) − v(t_{n−1}))/(t_n − t_{n−1}) wherever v(t_{n−1}) exists."""
    v, ahead = x[..., :1], x[..., 1:]
    slope = (v[:, 1:] - v[:, :-1]) / ahead[:, :-1]
    return float(((v[:, 1:] + ahead[:, 1:] * slope - y[:, 1:]) ** 2).mean().sqrt())
