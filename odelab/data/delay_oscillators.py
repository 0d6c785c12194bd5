"""ENSO and Mackey--Glass prediction (Erichson et al. 2025, §5 and App. F.3; recipes in docs/references.md§3.1--3.2), one step
ahead at the integration step by default, generated with odelab's fixed-step DDE solver and cached on disk.

ENSO (Erichson et al. 2025, eq. 20, c = 0.93, γ = 0.49, δ = 4.8): classical RK4 with dt = 0.1 on [0, 400] from a constant
history T(s) = T(0) on [−δ, 0], T(0) ~ U(0, 1) per sequence (the paper's "frozen delayed term on [0, δ]").
The transient [0, 200) is dropped; the samples are the RK4 nodes t = 200, 200.1, …, 400 (2001 points,
spacing 0.1 = the integration step). Mackey--Glass (Erichson et al. 2025, eq. 89, a = 0.2, b = 0.1, n = 10, δ = 17): the same
with dt = 0.25 on [0, 1000], x(0) ~ U(0, 1), kept on [500, 1000] (2001 points, spacing 0.25).

Where the paper is silent , our choices:

* target: one-step-ahead, sequence to sequence -- input s(t_0..t_1999), target s(t_1..t_2000), shape
  (N, 2000, 1), so the paper's "length 2000" counts input/target pairs of the 2001 kept nodes; no normalisation;
* other readings (the paper states neither the horizon nor the spacing): ``stride`` k keeps every k-th node
  (spacing k·dt, ⌈samples/k⌉ nodes t_0..t_{M−1}) and ``horizon`` H predicts H kept nodes ahead,
  s(t_{n+H}) from s(t_0..t_n): input s(t_0..t_{M−H−1}), target s(t_H..t_{M−1}), shape (N, M − H, 1). The
  defaults H = k = 1 are the reading above; other values are sliced from the same cached trajectories (the
  solve does not depend on them) and are not cached separately. benchmarks/enso_horizon.py compares the
  readings' persistence and trained-model MSEs with Erichson et al. 2025, Tables 4 and 8;
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


def check_reading(samples: int, horizon: int, stride: int) -> int:
    """Validate ``horizon`` and ``stride`` for ``samples`` nodes; return the number M of kept nodes."""
    for key, value in (("horizon", horizon), ("stride", stride), ("samples", samples)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{key}: expected an integer >= 1, got {value!r}")
    kept = -(-samples // stride)  # nodes 0, stride, 2 stride, ... below samples
    if kept - horizon < 1:
        raise ValueError(f"horizon {horizon} with stride {stride}: nothing left to predict (samples {samples} "
                         f"keeps {kept} nodes; need more than {horizon})")
    return kept


def reading(series: torch.Tensor, horizon: int = 1, stride: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of ``series`` (N, samples, ...) at spacing ``stride`` nodes, ``horizon`` kept nodes ahead:
    inputs s(t_0..t_{M−H−1}), targets s(t_H..t_{M−1}) with t_j the node j·stride."""
    check_reading(series.shape[1], horizon, stride)
    kept = series[:, ::stride]
    return kept[:, :-horizon].contiguous(), kept[:, horizon:].contiguous()


def delay_task(name: str, seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True,
               horizon: int = 1, stride: int = 1) -> dict:
    """``{split: (inputs, targets)}`` float32 tensors of shape (N, M − horizon, 1) for ``name`` in RECIPES, with
    M = ⌈samples/stride⌉ kept nodes (see the module docstring); the defaults give (N, samples − 1, 1)."""
    if name not in RECIPES:
        raise ValueError(f"name: expected one of {sorted(RECIPES)}, got {name!r}")
    check_reading(samples, horizon, stride)
    if (horizon, stride) != (1, 1):  # a slice of the one-step data set (its cache entry and key unchanged)
        base = delay_task(name, seed, sizes, samples, cache)
        return {split: reading(torch.cat([x, y[:, -1:]], dim=1), horizon, stride) for split, (x, y) in base.items()}

    def build():
        x0 = initial_values(seed, sizes)
        series = delay_trajectories(name, np.concatenate(list(x0.values())), samples).float().unsqueeze(-1)
        out = {}
        for split, part in zip(x0, series.split([len(v) for v in x0.values()])):  # one batched solve for all
            out[split] = reading(part)
        return out

    if not cache:
        return build()
    return cached(name, dict(seed=seed, sizes=list(sizes), samples=samples, version=1), build)


def enso(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True, horizon: int = 1,
         stride: int = 1) -> dict:
    """ENSO delay oscillator (Erichson et al. 2025, eq. 20), ``horizon`` kept nodes ahead at spacing 0.1·``stride``
    (default one step at 0.1); see the module docstring."""
    return delay_task("enso", seed, sizes, samples, cache, horizon, stride)


def mackey_glass(seed: int = 1234, sizes=SPLITS, samples: int = SAMPLES, cache: bool = True, horizon: int = 1,
                 stride: int = 1) -> dict:
    """Mackey--Glass (Erichson et al. 2025, eq. 89), ``horizon`` kept nodes ahead at spacing 0.25·``stride``
    (default one step at 0.25); see the module docstring."""
    return delay_task("mackey-glass", seed, sizes, samples, cache, horizon, stride)
