"""Integration backwards in time: a solve over decreasing times t_0 > t_1 > … is the forward solve of the
time-reversed problem in s = −t,

    dy/ds = −f(−s, y, u(−s)),

so every driver runs unchanged on :class:`Reversed` (the system) and :func:`reverse_input` (the input path);
the user's f, u(t) and any t-dependent code still see the original time t = −s. Delay systems are refused:
reversing a delay equation turns its delays into advances."""
from __future__ import annotations

import torch
from torch import Tensor

from ..systems.base import State, System
from .inputs import FunctionInput, Hold, InputPath, Linear


class Reversed(System):
    """``inner`` with time reversed: derivative(s, ·) = −inner.derivative(−s, ·) (and so for blocks and the
    forcing/decay split, which stays a split with both parts negated)."""

    def __init__(self, inner: System):
        super().__init__()
        self.inner = inner
        self.blocks, self.observable = inner.blocks, inner.observable
        self.split_blocks, self.velocity_position = inner.split_blocks, inner.velocity_position
        self.input_size, self.hidden_size = inner.input_size, inner.hidden_size

    def block_sizes(self):
        return self.inner.block_sizes()

    def derivative(self, t, state: State, inp, *delayed) -> State:
        return tuple(-d for d in self.inner.derivative(-t, state, inp, *delayed))

    def block_derivative(self, i, t, state, inp, *delayed) -> Tensor:
        return -self.inner.block_derivative(i, -t, state, inp, *delayed)

    def split(self, i, t, state, inp, *delayed):
        forcing, decay = self.inner.split(i, -t, state, inp, *delayed)
        return -forcing, -decay


def reverse_input(path: InputPath | None) -> InputPath | None:
    """The same signal as a function of s = −t. A hold sample u_n acting on (t_{n−1}, t_n] acts on
    [−t_n, −t_{n−1}) in s (which end of an interval is closed does not change an integral)."""
    if path is None:
        return None
    if isinstance(path, Hold):
        # samples u_0 … u_N at t_0 < … < t_N; in s the points are s_k = −t_{N−k} and the sample acting on
        # (s_{k−1}, s_k] is u_{N−k+1} (u_N before s_0); one more point past s_N carries u_0, which holds for t < t_0
        flipped = path.encoded.flip(1)
        encoded = torch.cat([flipped[:, :1], flipped], 1)
        times = [-s for s in reversed(path.times)]
        return Hold(encoded, times + [times[-1] + max(1.0, times[-1] - times[0])])
    if isinstance(path, Linear):
        return Linear(path.encoded.flip(1), [-s for s in reversed(path.times)])
    if isinstance(path, FunctionInput):
        return FunctionInput(lambda s, func=path.func: func(-s), path.encode)
    raise TypeError(f"u: integrating backwards takes hold, linear or callable inputs, got {type(path).__name__}")

