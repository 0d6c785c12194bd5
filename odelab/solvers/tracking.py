"""Discontinuity tracking for state-dependent delays: where the deviating argument α(t) = t − τ(t, y(t)) of a delay
crosses a point ξ at which y^(m) jumps, y(α(t)) carries that jump into f, and y^(m+1) jumps (the method of steps
for state-dependent lags, Neves & Feldstein 1976). Such points depend on the solution, so they are found as the
solve goes (the adaptive explicit pairs' torch loop and the Rosenbrock loop step onto each instead of straddling it).

Sources ξ, each with the order m of the derivative that jumps there: the solve's kinks (t0 with m = 0, input sample
times, ``jump_times``, the constant lags' propagations; :mod:`.breakpoints`), read through the state-dependent
delays, and every point found here, read through every delay. A crossing found at t* is a kink of order m + 1;
as the constant lags propagate t0, points are tracked while m + 1 ≤ p, the method's order.

After every attempt, α_i at the end of its step is compared with each ξ. Where α_i − ξ changed sides in an
accepted step, the crossing is located on the step's interpolant (the Illinois method of :mod:`.events` on
g = α_i(t, P(t)) − ξ), the step is undone (a rejected attempt in the statistics) and the sample's next attempts are
clipped to end at t*; landing there makes t* a source. A crossing in a rejected trial step is only a tentative
target, where the straight line between α_i's values at the step's ends crosses ξ (the trial's interpolant is
poor): the step that reaches it finds the crossing again, or lands on it.

Where ξ = t0 (m = 0: φ(t0) may differ from y0) f itself jumps at t*, and a step straddling it has a poor
interpolant too. So from the first sign of the crossing, α_i is held on t0's near side (φ(t0) is read, the left
limit; its gradient kept), the crossing is located on a step taken so (one taken without the hold gives a tentative
target, as a rejected trial does), and after landing the first stage is
re-evaluated on the far side (y0 read as y(α), the right limit). t* moves with the solution there, and the state
after it is y + (f⁻ − f⁺)(t* − t̂) with t* carrying the implicit function theorem's dt*/dp (switching later by δ
follows f⁻ for δ longer). Elsewhere t* carries no gradient: it places a step boundary, across which f is continuous.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from .dense import DenseOutput
from .events import _root

_EMPTY_ORDER = 1 << 30  # an empty slot: an infinite time that never crosses, and never a source


class Tracker:
    """The tracked discontinuities of one solve (see the module docstring): per sample, the sources ξ (B, K) with
    their orders, the side of each ξ every α_i stood on at the last accepted step, and the crossing the sample
    steps towards (``target``, inf where none)."""

    def __init__(self, integ, kinks: tuple[tuple[float, int], ...], depth: int, tol: float,
                 history_kinks: tuple[Tensor, Tensor] | None = None, lazy_restart: bool = False):
        """``kinks``: the solve's (time, m), shared by the batch; ``history_kinks``: a continued solve's own per
        sample (times (B, K), m (B, K)), which every delay reads (none of them was propagated ahead).
        ``lazy_restart``: the loop carries no last stage (the Rosenbrock loop evaluates f afresh at every step's
        start), so at a crossing of t0 f⁻ is evaluated here, and the hold on the far side lasts until the sample's
        next accepted step, whose stages read it."""
        self.integ, self.depth, self.tol, self.lazy = integ, depth, tol, lazy_restart
        batch, device, delays = integ.batch, integ.device, len(integ.delays)
        seeds = sorted({(s, m) for s, m in kinks if m < depth})
        time = dict(dtype=torch.float64, device=device)
        self.xi = torch.tensor([s for s, _ in seeds], **time).expand(batch, -1).contiguous()  # (B, K)
        self.order = torch.tensor([m for _, m in seeds], dtype=torch.int64, device=device).expand(batch, -1)
        # the shared seeds are read through the state-dependent delays (the constant lags propagate them ahead)
        dependent = torch.tensor([tau is not None for tau in integ.state_delays], device=device)
        self.eligible = dependent.unsqueeze(1).expand(delays, len(seeds))  # (D, K)
        if history_kinks is not None:
            times, orders = (x.to(device) for x in history_kinks)
            early = (times <= integ.t0 - max(integ.delays)) | (times >= integ.t0) | (orders >= depth)
            self.xi = torch.cat([self.xi, torch.where(early, math.inf, times.double())], 1)
            self.order = torch.cat([self.order, torch.where(early, _EMPTY_ORDER, orders)], 1)
            self.eligible = torch.cat([self.eligible, self.eligible.new_ones(delays, times.shape[1])], 1)
        self.seeds = self.xi.shape[1]  # the columns before the points found here
        self.past = torch.zeros(batch, delays, self.seeds, dtype=torch.bool, device=device)  # α_i > ξ_k
        self.count = torch.zeros(batch, dtype=torch.int64, device=device)  # crossings landed on, per sample
        self.stored = torch.zeros(batch, dtype=torch.int64, device=device)  # of them kept as sources
        self.target = torch.full((batch,), math.inf, **time)
        self.source = torch.zeros(batch, dtype=torch.int64, device=device)  # the target's crossing, flat i K + k
        self.rising = torch.zeros(batch, dtype=torch.bool, device=device)  # α_i > ξ past it
        self.tentative = torch.zeros(batch, dtype=torch.bool, device=device)  # the target from a rejected trial
        # a crossing of t0 (m = 0, where y may jump): α_i is held on t0's near side towards it, and on its far side
        # in the first stage after it
        self.low = torch.full((batch, delays), -math.inf, **time)
        self.high = torch.full((batch, delays), math.inf, **time)
        self.held = False
        self.pending = torch.zeros(batch, dtype=torch.bool, device=device)  # far holds kept for the next step

    def begin(self, t: Tensor, y: Tensor) -> None:
        """The sides at the start (t (B,), the flat y0): a history's kinks within a delay before t0 may lie behind
        some α_i already."""
        with torch.no_grad():
            self.past = self.alphas(t, y.detach()).unsqueeze(2) > self.xi.unsqueeze(1)

    def found(self) -> tuple[Tensor, Tensor]:
        """The points found and kept as sources: times (B, K) and orders (B, K), inf and a huge order in empty
        slots (a dense output's ``sample_kinks``, for a solve that continues this one)."""
        return self.xi[:, self.seeds:], self.order[:, self.seeds:]

    def alphas(self, s: Tensor, y: Tensor, accept: Tensor | None = None) -> Tensor:
        """α_i = s − τ_i(s, y) per sample and delay (B, D) float64, a StateDelay clamped to its bounds; with
        ``accept`` (the samples whose step ends at (s, y)), those whose τ was clamped are noted for the warning."""
        integ = self.integ
        blocks, s_col = integ._blocks(y), s.to(integ.dtype).unsqueeze(1)
        columns = []
        for i, (value, delay) in enumerate(zip(integ.delays, integ.state_delays)):
            if delay is None:
                columns.append(s - value)
                continue
            tau = delay.evaluate(s_col, blocks, integ.batch)
            if accept is not None:
                integ.outside[i] = integ.outside[i] | (accept & delay.outside(tau))
            columns.append(s - tau.clamp(delay.lower, delay.upper))
        return torch.stack(columns, 1)

    def bound(self, i: int, s: Tensor) -> Tensor:
        """Delay i's delayed times s (B,), held on one side of t0 near a crossing of it: the value moved, the
        gradient of s kept (the branch's own slope at t0, as the continuation past t* needs it)."""
        if not self.held:
            return s
        return s + (torch.minimum(torch.maximum(s, self.low[:, i]), self.high[:, i]) - s).detach()

    def clip(self, t: Tensor, h: Tensor) -> Tensor:
        """The proposed steps, cut to end at each sample's pending crossing."""
        return torch.minimum(h, (self.target - t).clamp_min(0.0))

    def after(self, record: tuple[Tensor, ...], y: Tensor, k1: Tensor, accept: Tensor, before: tuple) -> tuple:
        """After an attempt (``record``: start, h, y_start, coefficients, end; ``before``: the loop's state before
        it, (y, k1, t, h, prev, landing, steps, code, active, …)). A crossing inside an accepted step undoes it and
        becomes the sample's target; one inside a rejected trial step, or where f jumps and the step did not hold
        the delayed time, a tentative target (the interpolant is poor there: the crossing is located again from the
        step that reaches it); landing on a target makes it a source. Returns (y, k1, t, undone, accepted, f's
        evaluations for restarts), the undone samples back where they started (t is also the record's end); one host
        read unless something crossed."""
        start, length, y_start, coef, end = record
        y_before, k1_before = before[:2]
        tried = before[8]
        shape = (-1, 1, 1)
        if self.lazy and self.held:  # the far holds of the last landings, read by the stages of the step after them
            self._hold(self.pending & accept, None)
            self.pending = self.pending & ~accept
        with torch.no_grad():
            trial_end = start + length  # a rejected attempt's record ends at its start
            trial_y = y_start.detach() + coef.detach().reshape(*y_start.shape, -1).sum(-1)  # its interpolant at θ = 1
            alpha = self.alphas(trial_end, trial_y, accept)  # (B, D)
            past = alpha.unsqueeze(2) > self.xi.unsqueeze(1)  # (B, D, K)
            reached = accept & (end >= self.target - self.tol)
            # a tentative target is landed on where α_i sits on its ξ; elsewhere the step's own check finds it again
            i, k = self._pair(self.source)
            on = (alpha.gather(1, i.unsqueeze(1)) - self.xi.gather(1, k.unsqueeze(1))).squeeze(1).abs() <= self.tol
            landed = reached & (~self.tentative | on)
            # missed: the crossing lies ahead (or never comes); a hold on t0's near side stays, for the step that
            # reaches it to locate it on a smooth interpolant
            self.target = torch.where(reached & ~landed, math.inf, self.target)
            # on an accurately located target: its crossing's far side, whatever round-off gives
            forced = landed.view(shape) & self._one_hot(self.source)
            past = torch.where(forced, self.rising.view(shape), past)
            changed = (tried.view(shape) & self.eligible.unsqueeze(0) & (past != self.past) & ~forced)
            hit = changed.flatten(1).any(1)
            flags = torch.stack([hit.any(), landed.any()]).tolist()
            undo = torch.zeros_like(accept)
            at = end
            if flags[0]:
                piece = (start, length, y_start.detach(), coef.detach(), trial_end)
                which, line, level, ends = self._choose(piece, changed)
                # located accurately: on an accepted step's interpolant, smooth across the crossing unless f jumps
                # there (a crossing of t0) and the step ran without the hold; elsewhere the straight line between
                # the step's ends is guess enough
                delay, column = self._pair(which)
                held = (torch.isfinite(self.low) | torch.isfinite(self.high)).gather(1, delay.unsqueeze(1)).squeeze(1)
                accurate = hit & accept & ((self.order.gather(1, column.unsqueeze(1)).squeeze(1) > 0) | held)
                t_star = self._root(piece, accurate, level, ends, line) if bool(accurate.any()) else line
                inside = hit & (t_star > start + self.tol) & (t_star < trial_end - self.tol)
                undo = inside & accept
                edge = hit & accept & ~inside  # a crossing on an accepted step's start or end: landed on as it is
                far = past.flatten(1).gather(1, which.unsqueeze(1)).squeeze(1)
                aimed = undo | (inside & ~accept & (t_star < self.target))  # a rejected trial's crossing, if nearer
                self.target = torch.where(aimed, t_star, torch.where(edge, math.inf, self.target))
                self.tentative = torch.where(aimed, ~accurate, self.tentative)
                self.source = torch.where(aimed | edge, which, self.source)
                self.rising = torch.where(aimed | edge, far, self.rising)
                past = torch.where(edge.view(shape) & self._one_hot(which), far.view(shape), past)
                landed = (landed & ~undo) | edge
                at = torch.where(edge & (t_star <= start + self.tol), start, end)
                self._hold(aimed, "near")
                flags[1] = bool(landed.any())
            kept = accept & ~undo
            self.past = torch.where(kept.view(shape), past, self.past)
        undo_col = undo.unsqueeze(1)
        y = torch.where(undo_col, y_before, y)
        k1 = None if k1 is None else torch.where(undo_col, k1_before, k1)
        t = torch.where(undo, start, end)
        restarted = torch.zeros_like(accept, dtype=torch.int64)
        if flags[1]:
            y, k1, restarted = self._land(landed, at, y, k1, t, before[5])
        return y, k1, t, undo, kept, restarted

    def _one_hot(self, which: Tensor) -> Tensor:
        """(B, D, K): the flat index ``which`` (B,) of each sample's (delay, source) pair."""
        return torch.nn.functional.one_hot(which, self.past[0].numel()).view_as(self.past).bool()

    def _pair(self, which: Tensor) -> tuple[Tensor, Tensor]:
        columns = self.xi.shape[1]
        return torch.div(which, columns, rounding_mode="floor"), which % columns

    def _hold(self, mask: Tensor, side: str | None) -> None:
        """Release the holds of the samples in ``mask``; with ``side`` ("near": towards the crossing, "far": past
        it), hold α_i on that side of t0 for those of them whose target crosses t0 (m = 0)."""
        free = mask.unsqueeze(1)
        low = torch.where(free, -math.inf, self.low)
        high = torch.where(free, math.inf, self.high)
        if side is not None:
            i, k = self._pair(self.source)
            zero = mask & (self.order.gather(1, k.unsqueeze(1)).squeeze(1) == 0)
            xi = self.xi.gather(1, k.unsqueeze(1))  # (B, 1)
            column = torch.nn.functional.one_hot(i, self.low.shape[1]).bool() & zero.unsqueeze(1)  # (B, D)
            above = (self.rising == (side == "far")).unsqueeze(1)  # hold above t0 (a lower bound) or below it
            # two of the history's round-off margins past t0, so that a read there takes the held side's limit
            # whichever limit it asks for (a stage at a step's start asks for the right one, y0)
            margin = 2 * self.integ.history.eps
            low = torch.where(column & above, xi + margin, low)
            high = torch.where(column & ~above, xi - margin, high)
        self.low, self.high = low, high
        self.held = bool(torch.isfinite(low).any() | torch.isfinite(high).any())

    def _land(self, landed: Tensor, at: Tensor, y: Tensor, k1: Tensor, t: Tensor, landing: Tensor) -> tuple:
        """The landed samples: their crossing a source (while its order is below the method's), f re-evaluated
        with the far side's delayed state after a crossing of t0. Returns (y, k1, the evaluations of f per sample
        that this took)."""
        with torch.no_grad():
            i, k = self._pair(self.source)
            order = self.order.gather(1, k.unsqueeze(1)).squeeze(1) + 1
            self.count = self.count + landed
            self.target = torch.where(landed, math.inf, self.target)
            keep = landed & (order < self.depth)
            slot = self.seeds + self.stored
            extra = int((slot + keep).max()) - self.xi.shape[1]
            if extra > 0:  # new columns: empty slots, read through every delay
                batch, delays = self.xi.shape[0], self.past.shape[1]
                self.xi = torch.cat([self.xi, self.xi.new_full((batch, extra), math.inf)], 1)
                self.order = torch.cat([self.order, self.order.new_full((batch, extra), _EMPTY_ORDER)], 1)
                self.eligible = torch.cat([self.eligible, self.eligible.new_ones(delays, extra)], 1)
                self.past = torch.cat([self.past, self.past.new_zeros(batch, delays, extra)], 2)
            put = torch.nn.functional.one_hot(slot.clamp_max(self.xi.shape[1] - 1), self.xi.shape[1]).bool()
            put = put & keep.unsqueeze(1)
            self.xi = torch.where(put, at.unsqueeze(1), self.xi)
            self.order = torch.where(put, order.unsqueeze(1), self.order)
            self.stored = self.stored + keep
            restart = landed & (order == 1)  # the crossing of t0: f jumps there
        evaluations = restart.long()
        if bool(restart.any()):
            if k1 is None:  # f⁻, the delayed time still held on the near side
                k1 = self.integ.slope(y, t, landing)
                evaluations = evaluations * 2
            self._hold(restart, "far")
            y_jumped, k1_jumped = self.integ.restart(y, k1, t, landing, restart)
            if torch.is_grad_enabled():  # f jumps at t*, and t* moves with the solution: its saltation term
                shift = self._shift(y, k1, t, restart).to(y.dtype).unsqueeze(1)
                y_jumped = y + (k1 - k1_jumped) * shift
                y_jumped, k1_jumped = self.integ.restart(y_jumped, k1, t, landing, restart)
                evaluations = evaluations + restart.long()
            y, k1 = y_jumped, k1_jumped
        if self.held:
            kept = restart if self.lazy else torch.zeros_like(restart)
            self._hold(landed & ~kept, None)
            self.pending = self.pending | kept
        return y, k1, evaluations

    def _shift(self, y: Tensor, k1: Tensor, t: Tensor, mask: Tensor) -> Tensor:
        """t* − t̂ per sample (zero in value) carrying dt*/dp of the crossing α_i(t*, y(t*)) = t0 the samples in
        ``mask`` landed on (the implicit function theorem, as for events: G = α_i − t0 with the solve's graph, Ġ its
        time derivative along the step that reached it). y⁻ + (f⁻ − f⁺)(t* − t̂) is then the state after the jump
        of f: switching later by δ follows f⁻ for δ longer."""
        i, k = self._pair(self.source)
        pick = lambda alpha: alpha.gather(1, i.unsqueeze(1)).squeeze(1)
        level = pick(self.alphas(t, y)) - self.xi.gather(1, k.unsqueeze(1)).squeeze(1)
        if not level.requires_grad:
            return torch.zeros_like(t)
        probe = torch.zeros_like(t, requires_grad=True)
        moved = pick(self.alphas(t + probe, y.detach() + probe.to(y.dtype).unsqueeze(1) * k1.detach()))
        slope = torch.autograd.grad(moved.sum(), probe, allow_unused=True)[0]
        if slope is None:
            return torch.zeros_like(t)
        usable = mask & (slope != 0) & torch.isfinite(slope)
        return torch.where(usable, -(level - level.detach()) / torch.where(usable, slope, 1.0), 0.0)

    def _choose(self, piece: tuple, changed: Tensor) -> tuple[Tensor, Tensor, Callable, tuple[Tensor, Tensor]]:
        """Per crossing sample, the (delay, source) pair that changed sides (flat index) which a straight line
        between the step's ends puts first (a later step finds the others), that line's crossing time, its level
        function α_i(s, y) − ξ ((B, D) → (B,)) and the level at the step's two ends."""
        start, length, y_start, coef, end = piece
        integ = self.integ
        alpha_start = self.alphas(start, y_start)
        alpha_end = self.alphas(end, y_start + coef.reshape(integ.batch, integ.dim, -1).sum(-1))
        rise = (alpha_end - alpha_start).unsqueeze(2)
        fraction = ((self.xi.unsqueeze(1) - alpha_start.unsqueeze(2)) / rise).nan_to_num(0.0, 0.0, 0.0)
        fraction, which = torch.where(changed, fraction.clamp(0.0, 1.0), math.inf).flatten(1).min(1)
        delay, column = self._pair(which)
        xi = self.xi.gather(1, column.unsqueeze(1)).squeeze(1)
        level = lambda alpha: alpha.gather(1, delay.unsqueeze(1)).squeeze(1) - xi
        line = torch.where(torch.isfinite(fraction), start + fraction * length, math.inf)
        return which, line, level, (level(alpha_start), level(alpha_end))

    def _root(self, piece: tuple, found: Tensor, level: Callable, ends: tuple[Tensor, Tensor], line: Tensor) -> Tensor:
        """The crossing on each ``found`` sample's step interpolant (one root search for the batch; ``line`` for
        the others)."""
        start, length, y_start, coef, end = piece
        integ = self.integ
        dense = DenseOutput(start.unsqueeze(0), length.unsqueeze(0), end.unsqueeze(0), y_start,
                            coef.reshape(integ.batch, -1), integ.sizes)
        g = lambda s, y: level(self.alphas(s, y)).unsqueeze(1)
        rows = torch.arange(integ.batch, device=start.device)
        root = _root(dense, g, torch.zeros_like(rows), *ends, found, 0, 0, rows)
        return torch.where(found, root, line)
