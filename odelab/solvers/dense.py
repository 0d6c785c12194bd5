"""Dense output: the state of a solve at any time between its first and last, one polynomial per step and sample.

A piece covers one step [s, s + h] of one sample (S pieces per sample, in time order):

    y(s + θ h) = y_s + θ (C_1 + θ (C_2 + … + θ C_m)),   θ ∈ [0, 1]

- adaptive methods: the method's own continuous extension, C_p = Σ_i P_ip h k_i (Dormand–Prince's 4th-order one,
  Tsitouras', the cubic Hermite of Bogacki–Shampine; HNW I §II.6) -- the polynomial that gives their outputs;
- fixed-step methods: the cubic Hermite interpolant of the step's end states and derivatives, f evaluated inside
  the step (the right limit f(s⁺) at its start, the left limit f((s + h)⁻) at its end, so a hold input's jump at
  a node is not smeared into its neighbours), O(h⁴) accurate:

      C_1 = h f_a,   C_2 = 3 (y_b − y_a) − h (2 f_a + f_b),   C_3 = 2 (y_a − y_b) + h (f_a + f_b).

Times are those of the solver (s = −t for a solve backwards in time); :meth:`DenseOutput.evaluate` takes the
user's. A step a sample never took (it failed before) gives NaN, as its outputs do.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .tableau import horner


class StepCopies:
    """The pieces a fused adaptive loop (C++ or Triton) keeps for a dense output: after every attempt, each sample's
    last accepted step (start, length, state, coefficients (B dim, m)) and its current time, copied into rows of
    buffers that double when full (no allocation per attempt; on CUDA no host read). A rejected attempt repeats the
    step before, which ends where the sample stands: a piece of the same end, which no lookup selects first."""

    def __init__(self, last_t: Tensor, last_h: Tensor, last_y: Tensor, last_coef: Tensor, capacity: int = 64):
        self.count = 0
        self.buffers = [x.new_empty(capacity, *x.shape) for x in (last_t, last_h, last_y, last_coef, last_t)]

    def append(self, *step: Tensor) -> None:
        """Copy (last_t, last_h, last_y, last_coef, t) into the next row."""
        if self.count == self.buffers[0].shape[0]:
            self.buffers = [torch.cat([x, torch.empty_like(x)]) for x in self.buffers]
        for buffer, value in zip(self.buffers, step):
            buffer[self.count].copy_(value)
        self.count += 1

    def pieces(self, sizes: list[int]) -> "DenseOutput":
        start, length, y, coef, end = (x[:self.count] for x in self.buffers)
        count, batch, dim = y.shape
        return DenseOutput(start, length, end, y.reshape(count * batch, dim), coef.reshape(count * batch, -1), sizes)


class DenseOutput:
    """Pieces of a solve, stacked: ``start``, ``length``, ``end`` (S, B) float64 solver times (``end`` is
    non-decreasing along S for every sample; a rejected attempt ends where it started, so a lookup selects it only at
    that time, where θ = 0 gives its starting state); ``y`` (S B, dim) and ``coef`` (S B, dim m), piece k of sample
    b in row k B + b. ``sizes``: the state blocks' widths, in order. Set by ``odelab.solve`` once solved: ``span``,
    the user's first and last time; ``backwards``, s = −t; ``kinks`` (the user's times), where the solution's
    derivatives may jump, and ``sample_kinks``, those a state-dependent delay put at each sample's own times."""

    def __init__(self, start: Tensor, length: Tensor, end: Tensor, y: Tensor, coef: Tensor, sizes: list[int]):
        self.start, self.length, self.end, self.y, self.coef = start, length, end, y, coef
        self.count, self.batch = start.shape
        self.dim = y.shape[-1]
        self.m = coef.shape[-1] // self.dim
        self.sizes, self.backwards = list(sizes), False
        self.span: tuple[float, float] | None = None
        self.kinks: tuple[tuple[float, int], ...] = ()  # (time, m): y^(m) may jump there (see .breakpoints)
        # each sample's own kinks, found by tracking a state-dependent delay (.tracking): (times (B, K), m (B, K)),
        # inf / a huge m in a sample's empty slots
        self.sample_kinks: tuple[Tensor, Tensor] | None = None
        self.end_rows, self.start_rows, self.length_rows = (x.T.contiguous() for x in (end, start, length))

    @classmethod
    def hermite(cls, times: list[float], y_a: list[Tensor], y_b: list[Tensor], f_a: list[Tensor], f_b: list[Tensor],
                sizes: list[int]) -> "DenseOutput":
        """Cubic Hermite pieces of a fixed-step solve on the grid ``times`` (N + 1 nodes): per step, the flat
        states (B, dim) ``y_a`` at its start and ``y_b`` at its end, and the derivatives ``f_a``, ``f_b`` there."""
        y_a, y_b, f_a, f_b = (torch.stack(x) for x in (y_a, y_b, f_a, f_b))  # (N, B, dim)
        node = torch.tensor(times, dtype=torch.float64, device=y_a.device)
        h = (node[1:] - node[:-1]).to(y_a.dtype).view(-1, 1, 1)
        rise = y_b - y_a
        c1 = h * f_a
        c2 = 3 * rise - h * (2 * f_a + f_b)
        c3 = h * (f_a + f_b) - 2 * rise
        steps, batch, dim = y_a.shape
        coef = torch.stack([c1, c2, c3], -1).reshape(steps * batch, dim * 3)
        grid = lambda x: x.unsqueeze(1).expand(-1, batch)
        return cls(grid(node[:-1]), grid(node[1:] - node[:-1]), grid(node[1:]), y_a.reshape(steps * batch, dim),
                   coef, sizes)

    @property
    def requires_grad(self) -> bool:
        return self.y.requires_grad or self.coef.requires_grad

    def at(self, times: Tensor, unreached: bool = True) -> Tensor:
        """The flat state at solver times ``times`` (B, J) float64 (they may carry a gradient, which θ keeps) as
        (B, J, dim): the piece containing each time is the first whose end is not before it. ``unreached``: look
        for times past a failed sample's last step and give NaN there (one host read; False when every sample
        finished)."""
        batch, dim, m = self.batch, self.dim, self.m
        rows = torch.arange(batch, device=self.y.device).unsqueeze(1)
        chunk = max(1, 65536 // max(1, batch))  # times per pass: the temporaries stay cache-sized
        pieces = []
        for first in range(0, times.shape[1], chunk):
            tau = times[:, first:first + chunk]
            step = torch.searchsorted(self.end_rows, tau.detach().contiguous())
            reached = step < self.count
            step.clamp_max_(self.count - 1)
            length = self.length_rows.gather(1, step)
            if unreached:  # past a failed sample's last piece (a rejected attempt's, maybe of length 0): a finite θ
                length = torch.where(reached, length, 1.0)  # there, so that its NaN passes back no 0 · inf
            theta = ((tau - self.start_rows.gather(1, step)) / length).to(self.y.dtype)
            flat = (step * batch + rows).flatten()
            base = self.y.index_select(0, flat)  # (B J, dim)
            parts = self.coef.index_select(0, flat).view(flat.numel(), dim, m).unbind(-1)
            theta = theta.reshape(flat.numel(), 1).expand(-1, dim).contiguous()  # same-shape products are the fast ones
            piece = horner(base, parts, theta).view(*tau.shape, dim)
            if unreached and not bool(reached.all()):
                piece = torch.where(reached.unsqueeze(-1), piece, math.nan)
            pieces.append(piece)
        return torch.cat(pieces, 1) if len(pieces) > 1 else pieces[0]

    def evaluate(self, t) -> tuple[Tensor, ...]:
        """The state at the user's time(s) ``t``, one tensor per block: a number or 0-d tensor gives blocks
        (batch, size); a 1-D sequence or tensor of J times, (batch, J, size); a (batch, J) tensor, each sample at
        its own times, (batch, J, size). ``t`` must lie in the solve's span (ValueError naming ``t``); a tensor
        ``t`` that requires grad passes its gradient on (through θ, dy/dt of the polynomial)."""
        given = t
        if not isinstance(t, Tensor):
            try:
                t = torch.as_tensor(t, dtype=torch.float64)
            except (TypeError, ValueError) as err:
                raise TypeError(f"t: expected a number, a 1-D sequence of times or a (batch, J) tensor, "
                                f"got {type(given).__name__}") from err
        if t.is_complex() or not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
            raise TypeError(f"t: expected real times, got a tensor of {t.dtype}")
        if t.dim() > 2 or (t.dim() == 2 and t.shape[0] != self.batch):
            raise ValueError(f"t: expected a number, J times or a (batch, J) = ({self.batch}, J) tensor, got shape "
                             f"{tuple(t.shape)}")
        t = t.to(device=self.y.device, dtype=torch.float64)
        self.check_span(t.detach())
        return self.read(t)

    def read(self, t: Tensor, unreached: bool = True) -> tuple[Tensor, ...]:
        """:meth:`evaluate` for float64 times ``t`` of the checked shapes and span, without host reads (but the one
        of ``unreached``, see :meth:`at`)."""
        s = -t if self.backwards else t
        times = s.reshape(1, -1).expand(self.batch, -1) if t.dim() < 2 else s
        flat = self.at(times, unreached)
        if t.dim() == 0:
            flat = flat.squeeze(1)
        return tuple(flat.split(self.sizes, -1)) if len(self.sizes) > 1 else (flat,)

    def check_span(self, t: Tensor, name: str = "t", whose: str = "the solve's span") -> None:
        """ValueError naming ``name`` unless every time lies in the span (a few ulps of slack for round-off)."""
        low, high = sorted(self.span)
        slack = 8 * math.ulp(max(abs(low), abs(high), 1.0))
        if t.numel() == 0:
            return
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name}: contains NaN or Inf")
        first, last = float(t.min()), float(t.max())
        if first < low - slack or last > high + slack:
            bad = first if first < low - slack else last
            raise ValueError(f"{name}: {bad!r} lies outside {whose} [{low!r}, {high!r}]; the dense output "
                             f"covers its first to its last time")
