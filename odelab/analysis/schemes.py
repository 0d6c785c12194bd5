"""Same model, other discretization: a trained model's vector field stepped by every applicable scheme.

A Recurrent-based model is (system, scheme, dt, unfolds); its weights define the vector field alone. Here the
scheme and the number of sub-steps per sample are swapped (the weights untouched) to measure

* the trajectory error of the observable trajectory against a fine-step solution of the same field
  (rk4 with many sub-steps), for sub-step lengths h = dt / (unfolds · f);
* the empirical order: the least-squares slope of log error against log h (1 for euler / imex / symplectic
  Euler, 2 for midpoint / heun, 4 for rk4 in the asymptotic regime);
* the test error of the model's predictions under that scheme and h;
* and, retraining from the same initialisation under each scheme, test error against training wall time.

Hold inputs change only at sample times, which are sub-step boundaries for every f, so the field is smooth
within each sub-step and every scheme keeps its classical order.
"""
from __future__ import annotations

import copy
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn

from ..models import Recurrent, UnICORNNStack
from ..solvers.schemes import FIXED_SCHEMES
from ..training import NonFiniteLoss, fit

REFERENCE_SCHEME = "rk4"


def recurrent_layers(model: nn.Module) -> list[Recurrent]:
    """Every :class:`Recurrent` inside ``model`` (one for a cell, one per layer of a UnICORNN stack).

    TypeError when there is none (torch.nn LSTM/GRU have no vector field to re-discretize); ValueError for a
    reversible UnICORNN stack, whose fused forward does not go through the scheme."""
    layers = [m for m in model.modules() if isinstance(m, Recurrent)]
    if not layers:
        raise TypeError(f"model: {type(model).__name__} contains no odelab Recurrent (no vector field to re-discretize)")
    if any(isinstance(m, UnICORNNStack) and m.reversible for m in model.modules()):
        raise ValueError("model: a reversible UnICORNN stack runs its own fused symplectic step; build it with "
                         "reversible=False to compare schemes")
    return layers


def applicable_schemes(model: nn.Module) -> list[str]:
    """Names of the fixed-step schemes whose ``check`` passes on every layer's system, in registry order."""
    names = []
    for name, scheme in FIXED_SCHEMES.items():
        try:
            for layer in recurrent_layers(model):
                scheme.check(layer.system)
        except ValueError:
            continue
        names.append(name)
    return names


@contextmanager
def discretized(model: nn.Module, scheme: str, factor: Fraction | int = 1) -> Iterator[nn.Module]:
    """Temporarily step every layer with ``scheme`` and ``unfolds × factor`` sub-steps per sample."""
    layers = recurrent_layers(model)
    saved = [(layer.scheme, layer.unfolds) for layer in layers]
    try:
        for layer, (_, unfolds) in zip(layers, saved):
            count = Fraction(unfolds) * Fraction(factor)
            if count.denominator != 1:
                raise ValueError(f"factor: {factor} × unfolds {unfolds} is not a whole number of sub-steps")
            new = FIXED_SCHEMES[scheme]
            new.check(layer.system)
            layer.scheme, layer.unfolds = new, int(count)
        yield model
    finally:
        for layer, (old_scheme, unfolds) in zip(layers, saved):
            layer.scheme, layer.unfolds = old_scheme, unfolds


def step_factors(model: nn.Module, finest: int = 8) -> list[Fraction]:
    """Sub-step multipliers: the trained step × {1, 1/2, ..., 1/finest}, and coarser ones (1/f of the
    sub-steps) where every layer's ``unfolds`` is divisible by f -- never coarser than one step per sample."""
    unfolds = [layer.unfolds for layer in recurrent_layers(model)]
    coarser = [Fraction(1, d) for d in range(max(unfolds), 1, -1) if all(u % d == 0 for u in unfolds)]
    finer = [Fraction(2 ** k) for k in range(int(math.log2(finest)) + 1)]
    return coarser + finer


def empirical_order(steps: Sequence[float], errors: Sequence[float]) -> float:
    """Least-squares slope of log(error) against log(step) over the finite positive errors (NaN if < 2)."""
    pairs = [(math.log(h), math.log(e)) for h, e in zip(steps, errors) if e is not None and math.isfinite(e) and e > 0]
    if len(pairs) < 2:
        return math.nan
    xs, ys = zip(*pairs)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else math.nan


@dataclass
class SchemeRow:
    scheme: str
    factor: str  # sub-step multiplier as a fraction "1/2", "4"
    step: float  # sub-step length h
    trajectory_error: float  # max |observable − reference| over batch, time, units
    trajectory_rmse: float
    test_rmse: float | None  # RMSE of the model's predictions, when a readout and targets are given
    seconds: float  # wall time of the evaluation forward pass


@torch.no_grad()
def scheme_errors(model: nn.Module, x: Tensor, schemes: Sequence[str], factors: Sequence[Fraction],
                  reference_factor: int = 64, readout: nn.Module | None = None,
                  targets: Tensor | None = None) -> tuple[list[SchemeRow], Tensor]:
    """Observable trajectories of ``model`` (a Recurrent-based body returning ``(outputs, state)``) on ``x`` for
    every scheme × factor against rk4 with ``reference_factor`` × the trained sub-steps per sample.

    With ``readout`` and ``targets``, also the RMSE of ``readout(outputs)`` against ``targets``.
    Returns the rows and the reference trajectory."""
    layers = recurrent_layers(model)
    with discretized(model, REFERENCE_SCHEME, reference_factor):
        reference = model(x)[0]
    base_step = layers[-1].dt / layers[-1].unfolds
    rows = []
    for scheme in schemes:
        for factor in factors:
            with discretized(model, scheme, factor):
                tic = time.perf_counter()
                outputs = model(x)[0]
                seconds = time.perf_counter() - tic
            diff = outputs - reference
            error = float(diff.abs().max()) if torch.isfinite(diff).all() else math.inf
            rms = float(diff.pow(2).mean().sqrt()) if math.isfinite(error) else math.inf
            test = None
            if readout is not None and targets is not None:
                test = float((readout(outputs) - targets).pow(2).mean().sqrt())
            rows.append(SchemeRow(scheme, str(Fraction(factor)), base_step / float(factor), error, rms, test, seconds))
    return rows, reference


def orders(rows: Sequence[SchemeRow]) -> dict[str, float]:
    """Empirical order per scheme over the rows at or below the trained step (factor ≥ 1)."""
    result = {}
    for scheme in dict.fromkeys(r.scheme for r in rows):
        mine = [r for r in rows if r.scheme == scheme and Fraction(r.factor) >= 1]
        result[scheme] = empirical_order([r.step for r in mine], [r.trajectory_error for r in mine])
    return result


def evaluate_trained(regressor: nn.Module, x: Tensor, y: Tensor, schemes: Sequence[str] | None = None,
                     finest: int = 8, reference_factor: int | None = None,
                     dtype: torch.dtype = torch.float64) -> dict:
    """Part (a): a trained ``SequenceRegressor`` (``body`` + ``readout``) under every applicable scheme and
    step; evaluated on a copy in ``dtype`` (float64: the errors are not floored by round-off)."""
    model = copy.deepcopy(regressor).to(dtype).eval()
    schemes = list(schemes) if schemes is not None else applicable_schemes(model.body)
    factors = step_factors(model.body, finest)
    reference_factor = reference_factor or 8 * finest
    rows, _ = scheme_errors(model.body, x.to(dtype), schemes, factors, reference_factor,
                            readout=model.readout, targets=y.to(dtype))
    trained = recurrent_layers(model.body)[0].scheme.name
    return {"trained_scheme": trained, "schemes": schemes, "reference": f"{REFERENCE_SCHEME} × {reference_factor}",
            "rows": [r.__dict__ for r in rows], "orders": orders(rows)}


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value


def json_ready(result: dict) -> dict:
    """``result`` with NaN/Inf replaced by null (strict JSON)."""
    return _finite_or_none(result)


def format_table(evaluation: dict, training: list[dict] | None = None) -> str:
    """Terminal tables of part (a) (one line per scheme × step) and part (b) (one line per scheme)."""
    lines = [f"(a) trained under {evaluation['trained_scheme']!r}; reference {evaluation['reference']}",
             f"{'scheme':18s}{'factor':>8s}{'h':>11s}{'traj max err':>14s}{'traj RMSE':>12s}{'test RMSE':>12s}"
             f"{'seconds':>9s}"]
    for r in evaluation["rows"]:
        test = f"{r['test_rmse']:12.3e}" if r["test_rmse"] is not None else f"{'-':>12s}"
        lines.append(f"{r['scheme']:18s}{r['factor']:>8s}{r['step']:11.4g}{r['trajectory_error']:14.3e}"
                     f"{r['trajectory_rmse']:12.3e}{test}{r['seconds']:9.3f}")
    lines.append("empirical order (slope of log error vs log h, h ≤ trained step): "
                 + ", ".join(f"{k} {v:.2f}" for k, v in evaluation["orders"].items()))
    if training:
        lines.append("")
        lines.append(f"(b) trained under each scheme\n{'scheme':18s}{'test RMSE':>12s}{'valid RMSE':>12s}"
                     f"{'train s':>10s}{'status':>10s}")
        for r in training:
            test = f"{r['test_rmse']:12.3e}" if r.get("test_rmse") is not None else f"{'-':>12s}"
            valid = f"{r['valid_rmse']:12.3e}" if r.get("valid_rmse") is not None else f"{'-':>12s}"
            lines.append(f"{r['scheme']:18s}{test}{valid}{r['train_seconds']:10.1f}{r['status']:>10s}")
    return "\n".join(lines)


def train_under_schemes(build, data: dict, config, schemes: Sequence[str]) -> list[dict]:
    """Part (b): ``build()`` (a fresh ``SequenceRegressor``, same seed each time) trained with
    :func:`odelab.train.fit` under each scheme; test/valid RMSE, wall time, and ``status`` "ok" or
    "diverged" (a non-finite loss stopped the run)."""

    results = []
    for scheme in schemes:
        torch.manual_seed(config.seed)
        model = build()
        for layer in recurrent_layers(model.body):
            FIXED_SCHEMES[scheme].check(layer.system)
            layer.scheme = FIXED_SCHEMES[scheme]
        tic = time.perf_counter()
        try:
            fitted = fit(model, data, config, progress=False)
            row = {"test_rmse": fitted["test_rmse"], "valid_rmse": fitted["valid_rmse"], "status": "ok"}
        except NonFiniteLoss:
            row = {"test_rmse": None, "valid_rmse": None, "status": "diverged"}
        results.append({"scheme": scheme, "train_seconds": time.perf_counter() - tic, **row})
        done = results[-1]
        print(f"  trained under {scheme}: " + (f"test RMSE {done['test_rmse']:.3e}" if done["status"] == "ok"
                                                else "diverged") + f", {done['train_seconds']:.0f} s", flush=True)
    return results
