"""Input signals u(t) for a solve.

* :class:`Hold` -- samples ``(batch, time, features)`` on a time grid; sample u_n acts on (t_{n−1}, t_n]
  (the recurrent cells' convention: u_n drives the step that ends at t_n). Before t_0 the first sample
  holds, after the last sample the last one.
* :class:`Linear` -- piecewise-linear interpolation between the samples (constant outside).
* :class:`FunctionInput` -- any callable ``u(t) -> (batch, features)`` (t a tensor, see the class).

Every path is built from the system's affine encoding, applied to all samples at once; interpolation
commutes with an affine map, so encoding first is exact for both Hold and Linear. A solver asks a path for
``segment(ta, tb)``: the input as a function of time on one step [ta, tb]. For Hold it is the constant
sample whose interval contains the step's midpoint (steps that land on sample times never straddle one).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Callable, Sequence

import torch
from torch import Tensor


class InputPath:
    """An encoded input signal; ``segment(ta, tb)`` returns a callable of the stage time."""

    breakpoints: tuple[float, ...] = ()

    def segment(self, ta: float, tb: float) -> Callable[[float], Tensor]:
        raise NotImplementedError


class _SampledInput(InputPath):
    def __init__(self, encoded: Tensor, times: Sequence[float]):
        self.values = encoded.unbind(1)  # unbind once: per-step indexing stays O(1) in the backward
        self.encoded = encoded  # (batch, time, features): per-sample gathers for adaptive solvers
        self.times = list(times)
        self.breakpoints = tuple(self.times)

    def time_tensor(self) -> Tensor:
        """The sample times as a float64 tensor on the input's device."""
        return torch.tensor(self.times, dtype=torch.float64, device=self.encoded.device)


class Hold(_SampledInput):
    """Sample-and-hold: u(t) = u_n for t in (t_{n−1}, t_n]."""

    def index(self, t: float) -> int:
        return min(bisect_left(self.times, t), len(self.times) - 1)

    def segment(self, ta, tb):
        value = self.values[self.index(0.5 * (ta + tb))]
        return lambda t: value

    def at_indices(self, index: Tensor) -> Tensor:
        """Per-sample sample: row b of the result is u_{index[b]} of sample b (index: (batch,) int64)."""
        features = self.encoded.shape[-1]
        return self.encoded.gather(1, index.view(-1, 1, 1).expand(-1, 1, features)).squeeze(1)


class Linear(_SampledInput):
    """Piecewise-linear interpolation between samples, constant outside the sampled range."""

    def at(self, t: float) -> Tensor:
        times, n = self.times, len(self.times)
        k = bisect_right(times, t)
        if k == 0:
            return self.values[0]
        if k >= n:
            return self.values[-1]
        w = (t - times[k - 1]) / (times[k] - times[k - 1])
        return torch.lerp(self.values[k - 1], self.values[k], w)

    def segment(self, ta, tb):
        return self.at

    def at_times(self, t: Tensor, times: Tensor) -> Tensor:
        """Per-sample interpolation: row b at time t[b] (t: (batch,) float64; times: :meth:`time_tensor`)."""
        if len(self.times) == 1:
            return self.encoded[:, 0]
        upper = torch.searchsorted(times, t.unsqueeze(1)).clamp_(1, len(self.times) - 1)
        lower = upper - 1
        weight = ((t.unsqueeze(1) - times[lower]) / (times[upper] - times[lower])).clamp_(0.0, 1.0)
        features = self.encoded.shape[-1]
        pick = lambda i: self.encoded.gather(1, i.view(-1, 1, 1).expand(-1, 1, features)).squeeze(1)
        return torch.lerp(pick(lower), pick(upper), weight.to(self.encoded.dtype))


class FunctionInput(InputPath):
    """A user callable u(t) -> (batch, features), encoded at each evaluation. The solvers pass ``t`` as they
    pass it to a plain callable f(t, y): a 0-dim tensor of the state's dtype (fixed-step methods) or a
    ``(batch, 1)`` one (adaptive methods)."""

    def __init__(self, func: Callable[[float], Tensor], encode: Callable[[Tensor], Tensor]):
        self.func, self.encode = func, encode

    def at(self, t: float) -> Tensor:
        return self.encode(self.func(t))

    def segment(self, ta, tb):
        return self.at


INTERPOLATIONS = {"hold": Hold, "linear": Linear}


def make_input(u, times: Sequence[float], system, batch: int, interpolation: str = "hold") -> InputPath | None:
    """Build the encoded input path of a solve; validates shapes and values (errors name ``u``)."""
    if u is None:
        return None
    if isinstance(u, InputPath):
        return u
    if isinstance(u, Tensor):
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation: expected one of {sorted(INTERPOLATIONS)}, got {interpolation!r}")
        if u.dim() != 3:
            raise ValueError(f"u: expected samples of shape (batch, time, features), got {tuple(u.shape)}")
        if u.shape[0] != batch:
            raise ValueError(f"u: batch size {u.shape[0]} does not match y0's {batch}")
        if u.shape[1] != len(times):
            raise ValueError(f"u: {u.shape[1]} samples but {len(times)} sample times (u_times)")
        if system.input_size and u.shape[2] != system.input_size:
            raise ValueError(f"u: expected {system.input_size} features, got {u.shape[2]}")
        if not bool(torch.isfinite(u).all()):
            raise ValueError("u: contains NaN or Inf")
        return INTERPOLATIONS[interpolation](system.encode(u), times)
    if callable(u):
        return FunctionInput(u, system.encode)
    raise TypeError(f"u: expected a tensor of samples, an InputPath or a callable u(t), got {type(u).__name__}")
