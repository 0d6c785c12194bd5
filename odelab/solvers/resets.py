"""Events that reset the state (hybrid systems): at each sample's crossing of g(t, y) = 0 the state jumps to
y⁺ = r(t*, y⁻) and the integration goes on from t*, inside the adaptive loops (the explicit pairs' torch loop and
the Rosenbrock loop; a bouncing ball in one solve).

After every accepted step, g is evaluated at its interior points and its end (the rule of :mod:`.events`); where it
crossed, the first crossing is located on the step's interpolant as for a terminal event (Illinois, the implicit
function theorem's gradient for t*), the step is cut at t* (its piece of the dense output ends there), the state
is reset and f re-evaluated there (a restart: no FSAL across the jump). The reset state usually sits on g = 0 (a
ball back on the floor): the next crossing is judged from g a little way along the new path, at t* + √eps (1 + |t*|)
on the line y⁺ + δ f, so that a step that leaves the surface and comes back to it still shows a sign change.

Gradient across a reset: the continuation from (t*, y⁺) depends on t* as well as on y⁺. The flow property gives
∂y(T)/∂t* = −Φ(T, t*) f(t*, y⁺), which the continuation receives through its start state

    y⁺_eff = y⁺ − (t* − t̂*) f(t*, y⁺),                                        (t̂*: t*'s value, no gradient)

equal to y⁺ in value (the saltation term of a hybrid system's sensitivity, exact to first order, as
``t* = t̂ − (G − Ĝ)/Ġ`` is for the event time). A sample stops at its ``max_events``-th event (its outputs after
it NaN, and a failure after it forgiven), as at a terminal event, so that a Zeno sequence of ever shorter
flights ends.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .dense import DenseOutput
from .events import Event, _at_event, _Condition, _crossed, _root, thetas
from .tableau import horner

_PROBE = 2.0 ** -26  # √eps (float64): the time after a reset at which g's side is read


class Resets:
    """The events and resets of one solve: ``event`` g(t, y), ``direction``, ``reset`` r(t, y) (the state as f
    gets it; it returns one in the same form), at most ``max_events`` per sample, g read at ``points`` interior
    points of every step as well as its end."""

    def __init__(self, event: Callable, direction: int, reset: Callable, max_events: int, function: bool,
                 points: int):
        if not callable(reset):
            raise TypeError(f"reset: expected a callable r(t, y), got {type(reset).__name__}")
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
            raise ValueError(f"max_events: expected a positive integer, got {max_events!r}")
        self.event, self.direction, self.reset, self.max_events, self.function = (event, direction, reset,
                                                                                  max_events, function)
        self.points = points
        self.log: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []  # per reset step: (mask, t*, which, y⁻)

    def begin(self, t: Tensor, y: Tensor, sizes: list[int]) -> None:
        """g at the start (t (B,) float64, the flat state y)."""
        self.sizes, self.batch, self.dtype = sizes, y.shape[0], y.dtype
        self.g = _Condition(self.event, sizes, self.function, False, self.batch)
        with torch.no_grad():
            self.before = self.g(t, y.detach())
        self.count = torch.zeros(self.batch, dtype=torch.int64, device=y.device)
        self.halted = torch.zeros(self.batch, dtype=torch.bool, device=y.device)

    def _state(self, y: Tensor):
        return y if self.function else tuple(y.split(self.sizes, -1))

    def after(self, integ, step: tuple[Tensor, ...], y: Tensor, k1: Tensor, accept: Tensor, landing_before: Tensor,
              landing: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """After an attempt (``step``: its record (start, h, y_start, coef, end)): the crossing samples cut at t*,
        reset and restarted. Returns (y, k1, the samples' times, landing, the record's end); one host read."""
        start, length, y_start, coef, end = step
        live = (accept & ~self.halted).unsqueeze(1)
        with torch.no_grad():
            # g along the step from its start (its last accepted end): the interior points, then the end; per sample
            # and component, the first crossed interval's θ bracket and g at its ends
            parts = tuple(c.detach() for c in coef.reshape(*y_start.shape, -1).unbind(-1))
            previous, low = self.before, 0.0
            crossed = torch.zeros_like(previous, dtype=torch.bool)
            before, after = previous.double(), previous.double()
            bracket_low, bracket_high = torch.zeros_like(before), torch.ones_like(before)
            for theta in thetas(self.points):
                at = end if theta == 1.0 else start + theta * length
                state = y.detach() if theta == 1.0 else horner(
                    y_start.detach(), parts, torch.tensor(theta, dtype=y.dtype, device=y.device))
                value = self.g(at, state)
                new = live & ~crossed & _crossed(previous, value, self.direction)
                before, after = torch.where(new, previous.double(), before), torch.where(new, value.double(), after)
                bracket_low = torch.where(new, low, bracket_low)
                bracket_high = torch.where(new, theta, bracket_high)
                crossed = crossed | new
                previous, low = value, theta
            self.before = torch.where(accept.unsqueeze(1), value, self.before)
        hit = crossed.any(1)
        if not bool(hit.any()):
            return y, k1, end, landing, end
        piece = DenseOutput(start.unsqueeze(0), length.unsqueeze(0), end.unsqueeze(0), y_start,
                            coef.reshape(self.batch, -1), self.sizes)
        rows = torch.arange(self.batch, device=y.device)
        first = torch.zeros(self.batch, dtype=torch.int64, device=y.device)
        with torch.no_grad():
            times = torch.full(crossed.shape, torch.inf, dtype=torch.float64, device=y.device)
            for j in range(crossed.shape[1]):
                if bool(crossed[:, j].any()):
                    times[:, j] = _root(piece, self.g, first, before[:, j], after[:, j], crossed[:, j], j,
                                        self.direction, rows, (bracket_low[:, j], bracket_high[:, j]))
            s_star, which = torch.where(crossed, times, torch.inf).min(1)
            s_hat = torch.where(hit, s_star, start)
        blocks, t_star = _at_event(piece, self.g, s_hat, which)
        y_minus = blocks[0] if len(blocks) == 1 else torch.cat(blocks, -1)
        self.count = self.count + hit
        last = hit & (self.count >= self.max_events)
        self.log.append((hit, t_star, torch.where(hit, which, -1), y_minus))
        jumped = self._flat(self.reset(t_star.to(y.dtype).unsqueeze(1), self._state(y_minus)), y_minus)
        inp = integ.held_input(landing_before)
        t_col = s_hat.to(y.dtype).unsqueeze(1)
        with torch.no_grad():
            slope = integ.field(s_hat, t_col, jumped.detach(), inp)
        effective = jumped - (t_star - t_star.detach()).to(y.dtype).unsqueeze(1) * slope
        k1_new = integ.field(s_hat, t_col, effective, inp)
        # the max_events-th event halts its sample: no reset, no cut (its outputs after t* become NaN, see solve)
        go = hit & ~last
        y = torch.where(go.unsqueeze(1), effective, y)
        k1 = torch.where(go.unsqueeze(1), k1_new, k1)
        self.halted = self.halted | last
        with torch.no_grad():  # on the surface after a reset: g a little way along the new path (its leaving side)
            delta = _PROBE * (1 + s_hat.abs())
            probe = self.g(s_hat + delta, jumped.detach() + delta.to(y.dtype).unsqueeze(1) * slope)
            self.before = torch.where(go.unsqueeze(1), probe, self.before)
        s_new = torch.where(go, s_hat, end)
        return y, k1, s_new, torch.where(go, landing_before, landing), s_new

    def _flat(self, jumped, like: Tensor) -> Tensor:
        state = jumped
        if not self.function:
            if not isinstance(jumped, (tuple, list)) or len(jumped) != len(self.sizes):
                raise ValueError(f"reset: r(t, y) must return the state's {len(self.sizes)} blocks, got "
                                 f"{type(jumped).__name__}")
            state = torch.cat(list(jumped), -1) if len(jumped) > 1 else jumped[0]
        if not isinstance(state, Tensor) or state.shape != like.shape:
            raise ValueError(f"reset: r(t, y) must return a state of shape {tuple(like.shape)}, got "
                             f"{tuple(state.shape) if isinstance(state, Tensor) else type(state).__name__}")
        return state.to(like.dtype)

    def events(self, blocks: tuple[str, ...], device) -> Event:
        """Every sample's events in order: t (B, n), ys per block (B, n, size), happened (B, n), which (B, n);
        n the most events of a sample (NaN, False, −1 past a sample's own)."""
        batch = self.batch
        n = int(self.count.max()) if self.log else 0
        t = torch.full((batch, n), float("nan"), dtype=torch.float64, device=device)
        which = torch.full((batch, n), -1, dtype=torch.int64, device=device)
        dim = sum(self.sizes)
        if not self.log:
            ys = torch.full((batch, 0, dim), float("nan"), dtype=self.dtype, device=device)
            return Event(t, tuple(ys.split(self.sizes, -1)), torch.zeros(batch, 0, dtype=torch.bool, device=device),
                         which, blocks)
        slot = torch.zeros(batch, dtype=torch.int64, device=device)
        times, states = [], []
        for hit, t_star, kind, y_minus in self.log:  # the k-th reset of a sample goes to its column k
            onehot = torch.nn.functional.one_hot(slot.clamp_max(n - 1), n).bool() & hit.unsqueeze(1)  # (B, n)
            times.append(torch.where(onehot, t_star.unsqueeze(1), 0.0))
            states.append(torch.where(onehot.unsqueeze(-1), y_minus.unsqueeze(1), 0.0))
            which = torch.where(onehot, kind.unsqueeze(1), which)
            slot = slot + hit
        happened = torch.arange(n, device=device).unsqueeze(0) < self.count.unsqueeze(1)
        t = torch.where(happened, torch.stack(times).sum(0), float("nan"))
        ys = torch.where(happened.unsqueeze(-1), torch.stack(states).sum(0), float("nan"))
        return Event(t, tuple(ys.split(self.sizes, -1)), happened, which, blocks)
