"""The multiscale steps of a gated cell: how far each unit moves per step, h · decay (Rusch et al. 2022, App. B.2).

A split block evolves as d block/dt = forcing − decay ⊙ block; a partitioned Euler step of length h moves it by
h · decay towards forcing / decay. For LEM, h · decay is the paper's Δt_n = Δt σ̂(W1 y + V1 u + b1) (z) and
Δt̄_n = Δt σ̂(W2 y + V2 u + b2) (y), whose histograms over every step and unit are Figs. 4, 5 and 7: learned
scales that span orders of magnitude, with a power-law rather than an exponential tail.

* :func:`effective_steps` -- h · decay of every block, step and unit along sequences, as the cell computes it;
* :func:`log_histogram` -- the density of those values on log-spaced bins;
* :func:`tail_fit` -- least-squares fits of that density's upper tail as a power law (log p against log s) and as
  an exponential (log p against s), with their R²;
* :func:`step_summary` -- quantiles, the decades spanned and the tail fits per block, for results files.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..models import Recurrent
from ..solvers.schemes import PartitionedEuler, Scheme
from ..systems.base import System


class _RecordingField:
    """A field whose ``split`` also records h · decay (broadcast to the block) per block; the rest delegates."""

    def __init__(self, field, h: float, records: dict[int, list[Tensor]]):
        self._field, self._h, self._records = field, h, records

    def __getattr__(self, name):
        return getattr(self._field, name)

    @property
    def evaluations(self) -> int:
        return self._field.evaluations

    @evaluations.setter
    def evaluations(self, value: int) -> None:
        self._field.evaluations = value

    def split(self, i, t, state):
        forcing, decay = self._field.split(i, t, state)
        self._records.setdefault(i, []).append((self._h * decay.detach()).expand_as(state[i]))
        return forcing, decay


class _RecordingScheme(Scheme):
    """Wraps a partitioned scheme; every step runs on a :class:`_RecordingField`."""

    def __init__(self, inner: PartitionedEuler):
        self.inner, self.records = inner, {}
        self.name, self.order, self.stages = inner.name, inner.order, inner.stages

    def check(self, system: System) -> None:
        self.inner.check(system)

    def step(self, field, t, state, dt):
        return self.inner.step(_RecordingField(field, dt, self.records), t, state, dt)


@torch.no_grad()
def effective_steps(layer: Recurrent, x: Tensor, state=None, dt: Tensor | None = None) -> dict[str, Tensor]:
    """``{block: (batch, T · unfolds, size)}``: h · decay of every split block at every sub-step (h = Δt / unfolds,
    or each sample's gap ``dt`` / unfolds, see ``Recurrent.forward``) of ``layer`` along ``x`` -- for LEM
    ``{"z": Δt_n, "y": Δt̄_n}``. The generic loop steps, with the decays the
    step itself uses (a block's decay is read where the scheme reads it, after the blocks updated before it).
    ValueError for a scheme that is not a partitioned Euler step or a system without a decay split."""
    if not isinstance(layer, Recurrent):
        raise TypeError(f"layer: expected an odelab Recurrent, got {type(layer).__name__}")
    if not isinstance(layer.scheme, PartitionedEuler) or layer.scheme.symplectic or not layer.system.split_blocks:
        raise ValueError(f"layer: its steps have no decay to read: {type(layer.system).__name__} with "
                         f"{layer.scheme.name!r} (needs a forcing/decay split and 'imex', 'imex-implicit' or "
                         "'imex-reversed')")
    hook = _RecordingScheme(layer.scheme)
    saved, layer.scheme = (layer.scheme, layer.engine), hook
    layer.engine = "generic"  # the hook is a scheme: only the generic loop steps through it
    try:
        layer(x, state, dt=dt)
    finally:
        layer.scheme, layer.engine = saved
    blocks = layer.system.blocks
    return {blocks[i]: torch.stack(values, dim=1) for i, values in sorted(hook.records.items())}


def log_histogram(values: Tensor, bins: int = 40) -> tuple[Tensor, Tensor]:
    """``(edges (bins + 1,), density (bins,))`` of the positive ``values`` on log-spaced bins from their minimum
    to their maximum: density = count / (total · bin width), so it integrates to 1 like a probability density.
    ValueError when no value is positive (a log axis cannot hold them)."""
    v = values.detach().double().flatten()
    v = v[v > 0]
    if v.numel() == 0:
        raise ValueError("values: none is positive")
    low, high = float(v.min()), float(v.max())
    if high <= low * (1 + 1e-12):  # one value: a bin around it
        low, high = low / 1.01, high * 1.01
    edges = torch.logspace(math.log10(low), math.log10(high), bins + 1, dtype=torch.float64)
    counts = torch.histogram(v, edges).hist
    return edges, counts / (v.numel() * edges.diff())


def _r2(x: Tensor, y: Tensor) -> tuple[float, float]:
    """(slope, R²) of the least-squares line y ≈ a + b x."""
    xm, ym = x - x.mean(), y - y.mean()
    slope = float((xm * ym).sum() / (xm * xm).sum())
    residual = ym - slope * xm
    total = float((ym * ym).sum())
    return slope, 1.0 - float((residual * residual).sum()) / total if total > 0 else 1.0


def tail_fit(values: Tensor, bins: int = 40) -> dict | None:
    """Fits of the density's tail, the bins from its highest one up to the largest value with counts:
    power law p ∝ s^(−k) (log p linear in log s) and exponential p ∝ e^(−λ s) (log p linear in s); R² of each, and
    the better one. None when the tail has fewer than 4 non-empty bins (too few values to tell them apart)."""
    edges, density = log_histogram(values, bins)
    centres = (edges[:-1] * edges[1:]).sqrt()
    start = int(density.argmax())
    keep = density[start:] > 0
    s, p = centres[start:][keep], density[start:][keep]
    if s.numel() < 4:
        return None
    slope_power, r2_power = _r2(s.log(), p.log())
    slope_exp, r2_exp = _r2(s, p.log())
    return {"bins": int(s.numel()), "power_law": {"exponent": -slope_power, "r2": r2_power},
            "exponential": {"rate": -slope_exp, "r2": r2_exp},
            "better": "power law" if r2_power >= r2_exp else "exponential"}


QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)
QUANTILE_LIMIT = 16_000_000  # torch.quantile's largest input; above it, a random sample of that many values


def step_summary(steps: dict[str, Tensor]) -> dict[str, dict]:
    """Per block: min, max, mean, the :data:`QUANTILES` (of a random sample of :data:`QUANTILE_LIMIT` values
    beyond it), the decades between the 1 % and 99 % quantiles, and :func:`tail_fit`."""
    out = {}
    for block, values in steps.items():
        v = values.detach().double().flatten()
        sample = v if v.numel() <= QUANTILE_LIMIT else v[torch.randperm(v.numel())[:QUANTILE_LIMIT]]
        q = torch.quantile(sample, torch.tensor(QUANTILES, dtype=torch.float64))
        low, high = float(q[0]), float(q[-1])
        out[block] = {"values": int(v.numel()), "min": float(v.min()), "max": float(v.max()), "mean": float(v.mean()),
                      "quantiles": {f"{p:g}": float(x) for p, x in zip(QUANTILES, q)},
                      "decades_1_99": math.log10(high / low) if low > 0 else math.inf,
                      "tail": tail_fit(v)}
    return out
