"""One-step-ahead prediction of a sampled ODE trajectory, for any autonomous system: the FitzHugh--Nagumo task of
Rusch et al. 2022 (§5.5, docs/references.md) carried over to other systems, as the student report on LEM did for
Lorenz-63 and Lorenz-96 without details (shared/papers/lem.md §5, §7). The recipe, where it is ours:

* :func:`one_step_dataset` integrates every sequence of every split in ONE batched solve with odelab's dopri5
  (per-sample adaptive steps, float64, rtol 1e-9 / atol 1e-11 as the FHN task) from the given initial states,
  discards the burn-in [0, ``transient``) so that the sequences start on the attractor, and keeps ``samples``
  equally spaced states t_0 = transient, …, t_T = ``t_end`` (T = samples − 1, spacing Δ = (t_end − transient)/T).
  Inputs are the ``observed`` components (indices into the state, default all, in that order) at t_0..t_{T−1},
  targets the same components at t_1..t_T: float32 tensors (N, T, k). For a chaotic system the global error of
  any solver grows like e^{λt}, but each input/target pair is a state and its image under the flow over Δ to the
  tolerance: exactly what a one-step predictor is trained on.
* ``standardise``: ``"component"``: each observed component becomes (x − mean) / std with the mean and std of
  the TRAINING split's sequences (all their samples; std 0 -> 1), applied to every split; ``"pooled"``: one mean
  and std over all observed components (for components that are statistically alike, such as Lorenz-96's, which
  its cyclic symmetry makes identical in law); ``None``: the raw states. RMSEs (the training loss, the
  baselines, ``test_rmse``) are in the standardised units. ``meta`` always holds ``offset`` and ``scale`` (data =
  (state − offset) / scale; 0 and 1 without standardisation), so that :func:`rmse_by_component` reports test
  RMSEs in the system's own units (results.json ``test_rmse_original_units``, ``test_rmse_by_component``).

The tasks (``odelab fit lorenz63`` / ``lorenz96``) keep the FHN task's structure: splits drawn in the order
train → validation → test from one ``np.random.RandomState(seed)`` stream (one ``uniform`` draw of the split's
(N, dim) initial states each), cached on disk, standardised by the training split, every component observed:

* :func:`lorenz63`: σ = 10, ρ = 28, β = 8/3 (largest Lyapunov exponent λ ≈ 0.906, Lyapunov time 1/λ ≈ 1.10;
  ours: 0.903 ± 0.002 from 16 tangent-linear RK4 runs of 400 time units). Initial states uniform in the box
  [−20, 20] × [−20, 20] × [0, 50] around the attractor; burn-in 10 time units (≈ 9 Lyapunov times; transverse
  contraction e^{−14.6 t}); Δ = 0.02 = 0.018 Lyapunov times, ≈ 40 samples per loop around a wing (≈ 0.78 time
  units); 501 samples: 500 pairs over 10 time units ≈ 9 Lyapunov times, a few wing switches per sequence.
  128 / 128 / 1024 sequences (train / validation / test), the FHN task's sizes; ``"component"`` standardisation
  (z has mean ≈ 23.7).
* :func:`lorenz96`: N = 40, F = 8, as in Lorenz & Emanuel 1998 and the data-assimilation literature (λ ≈ 1.68,
  Lyapunov time ≈ 0.60; ours: 1.69 ± 0.01 as above). Initial states uniform in [−5, 10]^40 (the attractor's
  mean ≈ 2.3 ± 3.6 per component); burn-in 10 time units (≈ 17 Lyapunov times); Δ = 0.05 (Lorenz's "6 hours")
  = 0.084 Lyapunov times; 101 samples: 100 pairs over 5 time units ≈ 8.4 Lyapunov times. 128 / 128 / 256
  sequences: with 40 components per sequence the test set scores 256 × 100 × 40 ≈ 1.0 M values, as FHN's
  1024 × 1000 (1024 test sequences would make the cached file 41 MB instead of 16 MB, for no better estimate).
  ``"pooled"`` standardisation: per-component statistics of the 128 training sequences differ by up to 0.5
  (0.13 std) by sampling noise alone and would break the cyclic symmetry.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from ..solvers import solve
from ..systems import Lorenz63, Lorenz96, System
from .cache import cached

TOLERANCE = dict(rtol=1e-9, atol=1e-11)  # as the FHN task: local errors far below float32's resolution
MAX_STEPS = 1_000_000  # per sequence; a guard against a runaway solve, not a limit of the recipe
STANDARDISATIONS = (None, "component", "pooled")

LORENZ63 = dict(splits=(("train", 128), ("valid", 128), ("test", 1024)), samples=501, spacing=0.02, transient=10.0,
                low=(-20.0, -20.0, 0.0), high=(20.0, 20.0, 50.0), names=("x", "y", "z"), standardise="component")
LORENZ96 = dict(splits=(("train", 128), ("valid", 128), ("test", 256)), samples=101, spacing=0.05, transient=10.0,
                low=-5.0, high=10.0, dimension=40, forcing=8.0, standardise="pooled")


def uniform_initial_states(seed: int, sizes, low, high, dim: int) -> dict[str, np.ndarray]:
    """``{split: (N, dim)}`` uniform in [low, high) per component, splits drawn in order from one numpy stream."""
    rng = np.random.RandomState(seed)
    return {name: rng.uniform(low, high, size=(n, dim)) for name, n in sizes}


def _check_arguments(initial: dict[str, Tensor], t_end, samples, observed, transient, standardise) -> tuple[int, ...]:
    """The observed indices as a tuple; ValueError naming the argument for anything else."""
    if not initial:
        raise ValueError("initial_states: expected at least one split {name: (N, dim) array}")
    dims = set()
    for name, x in initial.items():
        if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
            raise ValueError(f"initial_states[{name!r}]: expected an (N, dim) array with N, dim >= 1, got shape "
                             f"{tuple(x.shape)}")
        if not torch.isfinite(x).all():
            raise ValueError(f"initial_states[{name!r}]: not all finite")
        dims.add(x.shape[1])
    if len(dims) > 1:
        raise ValueError(f"initial_states: every split needs the same state dimension, got {sorted(dims)}")
    dim = dims.pop()
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise ValueError(f"samples: expected an integer >= 2 (one input/target pair), got {samples!r}")
    if not (np.isfinite(transient) and transient >= 0):
        raise ValueError(f"transient: expected a finite number >= 0, got {transient!r}")
    if not (np.isfinite(t_end) and t_end > transient):
        raise ValueError(f"t_end: expected a finite time after the transient ({transient}), got {t_end!r}")
    if standardise not in STANDARDISATIONS:
        raise ValueError(f"standardise: expected one of {list(STANDARDISATIONS)}, got {standardise!r}")
    observed = tuple(range(dim)) if observed is None else tuple(observed)
    bad = [i for i in observed if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < dim]
    if not observed or bad or len(set(observed)) != len(observed):
        raise ValueError(f"observed: expected distinct state indices in 0 … {dim - 1}, got {list(observed)}")
    return tuple(int(i) for i in observed)


def one_step_dataset(system: System | Callable, initial_states: Mapping[str, np.ndarray | Tensor], t_end: float,
                     samples: int, observed: Sequence[int] | None = None, transient: float = 0.0,
                     standardise: str | None = None, names: Sequence[str] | None = None,
                     rtol: float = TOLERANCE["rtol"], atol: float = TOLERANCE["atol"]) -> dict:
    """``{split: (inputs, targets), "meta": {...}}`` of the module docstring: float32 ``(N, samples − 1, k)``.

    ``system``: an autonomous odelab System (a multi-block state is the blocks concatenated in ``blocks`` order) or
    a callable f(t, y) on ``(batch, dim)``; ``names``: one per observed component (default ``x[i]``)."""
    initial = {name: torch.as_tensor(x, dtype=torch.float64) for name, x in initial_states.items()}
    observed = _check_arguments(initial, t_end, samples, observed, transient, standardise)
    names = [f"x[{i}]" for i in observed] if names is None else list(names)
    if len(names) != len(observed):
        raise ValueError(f"names: expected one per observed component ({len(observed)}), got {len(names)}")
    y0 = torch.cat(list(initial.values()))
    if isinstance(system, System):
        if system.input_size or system.is_delay:
            raise ValueError(f"system: expected an autonomous ODE, {type(system).__name__} takes an input or delays")
        if sum(system.block_sizes()) != y0.shape[1]:
            raise ValueError(f"initial_states: {type(system).__name__} has a state of {sum(system.block_sizes())} "
                             f"components, got {y0.shape[1]}")
        y0 = tuple(y0.split(list(system.block_sizes()), dim=1))
    kept = torch.linspace(transient, t_end, samples, dtype=torch.float64)
    t = torch.cat([torch.zeros(1, dtype=torch.float64), kept]) if transient > 0 else kept
    solution = solve(system, y0, t, method="dopri5", rtol=rtol, atol=atol, max_steps=MAX_STEPS)
    states = torch.cat(solution.ys, dim=-1)[:, -samples:, list(observed)]  # (all sequences, samples, k)
    parts = dict(zip(initial, states.split([len(x) for x in initial.values()])))
    offset, scale = torch.zeros(len(observed), dtype=torch.float64), torch.ones(len(observed), dtype=torch.float64)
    if standardise is not None:
        train = parts.get("train")
        if train is None:
            raise ValueError("standardise: needs a 'train' split to take the mean and std from")
        dims = (0, 1) if standardise == "component" else (0, 1, 2)
        offset, scale = train.mean(dims).expand(len(observed)), train.std(dims).expand(len(observed))
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    out = {}
    for name, x in parts.items():
        x = ((x - offset) / scale).float()
        out[name] = (x[:, :-1].contiguous(), x[:, 1:].contiguous())
    out["meta"] = {"components": names, "observed": list(observed), "sample_dt": float(kept[1] - kept[0]),
                   "transient": float(transient), "t_end": float(t_end), "standardise": standardise,
                   "offset": offset.tolist(), "scale": scale.tolist()}
    if standardise is not None:
        out["meta"]["notes"] = [f"standardised by the training split's mean and std ({standardise}): RMSEs are in "
                                "these units; results.json also gives test_rmse_original_units"]
    return out


def rmse_by_component(prediction: Tensor, data: dict) -> dict:
    """Test RMSEs in the system's own units (the data's error × ``meta["scale"]``): overall and per observed
    component, for the model and for persistence."""
    x, y = data["test"]
    meta = data["meta"]
    scale = torch.tensor(meta["scale"], dtype=torch.float64)

    def per_component(error: Tensor) -> Tensor:
        return (error.double() * scale).pow(2).mean((0, 1))

    model, persistence = per_component(prediction - y), per_component(x - y)
    return {"test_rmse_original_units": float(model.mean().sqrt()),
            "test_rmse_by_component": {name: {"model": float(m.sqrt()), "persistence": float(p.sqrt())}
                                       for name, m, p in zip(meta["components"], model, persistence)}}


def _loader(name: str, system: System, recipe: dict, seed: int, sizes, samples: int, standardise: bool,
            cache: bool) -> dict:
    def build():
        initial = uniform_initial_states(seed, sizes, recipe["low"], recipe["high"], system.dim)
        t_end = recipe["transient"] + recipe["spacing"] * (samples - 1)
        mode = recipe["standardise"] if standardise else None
        return one_step_dataset(system, initial, t_end, samples, transient=recipe["transient"], standardise=mode,
                                names=recipe.get("names"))

    if not cache:
        return build()
    return cached(name, dict(seed=seed, sizes=[list(s) for s in sizes], samples=samples, standardise=standardise,
                             recipe=recipe, version=1), build)


def lorenz63(seed: int = 1234, sizes=LORENZ63["splits"], samples: int = LORENZ63["samples"],
             standardise: bool = True, cache: bool = True) -> dict:
    """Lorenz-63 one step ahead (module docstring): ``{split: (inputs, targets)}`` (N, 500, 3) and ``meta``.
    ``samples`` < 501 keeps the first samples (a shorter window, same spacing)."""
    return _loader("lorenz63", Lorenz63(), LORENZ63, seed, sizes, samples, standardise, cache)


def lorenz96(seed: int = 1234, sizes=LORENZ96["splits"], samples: int = LORENZ96["samples"],
             standardise: bool = True, cache: bool = True) -> dict:
    """Lorenz-96 (N = 40, F = 8) one step ahead (module docstring): ``{split: (inputs, targets)}`` (N, 100, 40)
    and ``meta``. ``samples`` sets the window's length at the same spacing."""
    system = Lorenz96(LORENZ96["dimension"], LORENZ96["forcing"])
    return _loader("lorenz96", system, LORENZ96, seed, sizes, samples, standardise, cache)
