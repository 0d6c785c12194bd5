"""ENSO and Mackey--Glass one-step-ahead prediction (Erichson et al. 2025, §5 and App. F.3; recipes in docs/references.md§3.1--3.2), generated with odelab's fixed-step DDE solver and cached on disk.

ENSO (Erichson et al. 2025, eq. 20, c = 0.93, γ = 0.49, δ = 4.8): classical RK4 with dt = 0.1 on [0, 400] from a constant
history T(s) = T(0) on [−δ, 0], T(0) ~ U(0, 1) per sequence (the paper's "frozen delayed term on [0, δ]").
The transient [0, 200) is dropped; the samples are the RK4 nodes t = 200, 200.1, …, 400 (2001 points,
spacing 0.1 = the integration step). Mackey--Glass (Erichson et al. 2025, eq. 89, a = 0.2, b = 0.1, n = 10, δ = 17): the same
with dt = 0.25 on [0, 1000], x(0) ~ U(0, 1), kept on [500, 1000] (2001 points, spacing 0.25).

Where the paper is silent , our choices:

* target: one-step-ahead, sequence to sequence -- input s(t_0..t_1999), target s(t_1..t_2000), shape
  (N, 2000, 1), so the paper's "length 2000" counts input/target pairs of the 2001 kept nodes; no normalisation;
* sizes: 128 train (stated for Mackey--Glass in App. H) / 128 validation / 1024 test, as FitzHugh--Nagumo;
  initial values drawn in that order from one ``np.random.RandomState(seed)`` stream, one ``rand()`` each;
* the delayed value at RK4's half-step stage (t_k + dt/2 − δ, between nodes) is the matching stage of the
  step δ earlier (δ is a multiple of dt in both recipes: RK4 applied to the method-of-steps system, no
  interpolation; see ``odelab.solvers.delay``).
"""
from __future__ import annotations

import numpy as np
import torch

from ..solvers import solve
from ..systems import ENSO, MackeyGlass
from .cache import cached

SPLITS = (("train", 128), ("valid", 128), ("test", 1024))
SAMPLES = 2001  # kept nodes: 2000 input/target pairs

# name -> (system class, RK4 step, end time, start of the kept window)
RECIPES = {
    "enso": (ENSO, 0.1, 400.0, 200.0),
    "mackey-glass": (MackeyGlass, 0.25, 1000.0, 500.0),
}


def initial_values(seed: int, sizes=SPLITS) -> dict[str, np.ndarray]:
    """x(0) ~ U(0, 1) per sequence, splits drawn in order from one numpy stream."""
    rng = np.random.RandomState(seed)
    return {name: np.array([rng.rand() for _ in range(n)]) for name, n in sizes}


def delay_trajectories(name: str, x0: np.ndarray, samples: int = SAMPLES) -> torch.Tensor:
    """RK4 solution of the recipe ``name`` from constant histories x0, at the kept nodes: ``(len(x0), samples)``
    float64. ``samples`` < 2001 keeps the first nodes of the window (tests use short windows)."""
    system, dt, t_end, keep_from = RECIPES[name]
    kept = keep_from + dt * torch.arange(samples, dtype=torch.float64)
    t = torch.cat([torch.zeros(1, dtype=torch.float64), kept])
    y0 = torch.tensor(x0, dtype=torch.float64).reshape(-1, 1)
    return solve(system(), y0, t, method="rk4", dt=dt).y[:, 1:, 0]  # history defaults to the constant y0


def delay_task(name: str, seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True) -> dict:
    """``{split: (inputs, targets)}`` float32 tensors of shape (N, samples − 1, 1) for ``name`` in RECIPES."""
    if name not in RECIPES:
        raise ValueError(f"name: expected one of {sorted(RECIPES)}, got {name!r}")

    def build():
        x0 = initial_values(seed, sizes)
        series = delay_trajectories(name, np.concatenate(list(x0.values())), samples).float().unsqueeze(-1)
        out = {}
        for split, part in zip(x0, series.split([len(v) for v in x0.values()])):  # one batched solve for all
            out[split] = (part[:, :-1].contiguous(), part[:, 1:].contiguous())
        return out

    if not cache:
        return build()
    return cached(name, dict(seed=seed, sizes=list(sizes), samples=samples, version=1), build)


def enso(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True) -> dict:
    """ENSO delay oscillator (Erichson et al. 2025, eq. 20), one-step-ahead; see the module docstring."""
    return delay_task("enso", seed, sizes, samples, cache)


def mackey_glass(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True) -> dict:
    """Mackey--Glass (Erichson et al. 2025, eq. 89), one-step-ahead; see the module docstring."""
    return delay_task("mackey-glass", seed, sizes, samples, cache)
