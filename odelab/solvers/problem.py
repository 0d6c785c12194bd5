"""The boundary of a solve: arguments checked and normalised once, for ``solve`` and ``solve_with_adjoint``.

A plain callable becomes a ``FunctionSystem``; ``y0`` is checked against the system's blocks; times, input
samples, ``tstops`` and ``jump_times`` are read; decreasing ``t`` (integration backwards, ODEs only) becomes an
increasing problem in s = −t (``reverse.py``), with the system and the input seen through the reversal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..systems.base import State, System, as_system, check_state
from .breakpoints import user_times
from .grid import as_times
from .inputs import InputPath, make_input
from .reverse import Reversed, reverse_input


@dataclass
class Problem:
    """A checked problem, in increasing time: ``times``, ``stops`` and ``jumps`` are floats (negated when
    ``backwards``); ``t_tensor`` is the user's ``t``."""

    system: System
    state: State
    t_tensor: Tensor
    times: list[float]
    path: InputPath | None
    stops: list[float]
    jumps: list[float]
    backwards: bool


def prepare(system: System | Callable, y0, t, u=None, u_times=None, interpolation: str = "hold",
            tstops: Sequence[float] | Tensor | None = None,
            jump_times: Sequence[float] | Tensor | None = None) -> Problem:
    """Check the arguments of a solve (ValueError/TypeError naming the argument) and return the problem."""
    is_callable = not isinstance(system, System)
    system, is_function = as_system(system, y0, has_input=u is not None)
    if is_function and isinstance(y0, Tensor) and y0.dim() != 2:
        raise ValueError(f"y0: expected shape (batch, d), got {tuple(y0.shape)}")
    state = check_state(system, y0)
    if under_vmap(state):
        raise ValueError("y0: odelab.solve does not run under torch.func.vmap (its step control and checks branch on "
                         "values); it takes a batch itself: stack the initial states along y0's first dimension")
    if not all(bool(torch.isfinite(x).all()) for x in state):
        raise ValueError("y0: contains NaN or Inf")
    t_tensor, times = as_times(t, allow_decreasing=True)
    backwards = len(times) > 1 and times[1] < times[0]
    if u is not None and u_times is None and isinstance(u, Tensor):
        sample_times = times
    else:
        sample_times = as_times(u_times, "u_times", allow_decreasing=True)[1] if u_times is not None else times
    if isinstance(u, Tensor) and len(sample_times) > 1 and sample_times[1] < sample_times[0]:
        u, sample_times = u.flip(1) if u.dim() == 3 else u, sample_times[::-1]  # samples in increasing time
    path = make_input(u, sample_times, system, state[0].shape[0], interpolation)
    if system.input_size and path is None and not is_callable:
        raise ValueError(f"u: {type(system).__name__} takes an input of size {system.input_size}; none was given")
    stops, jumps = user_times(tstops, "tstops"), user_times(jump_times, "jump_times")
    if backwards:
        if system.is_delay:
            raise ValueError(f"t: decreasing times (integration backwards) are supported for ODEs only; "
                             f"{type(system).__name__} is a delay system")
        system, path = Reversed(system), reverse_input(path)
        times, stops, jumps = [-s for s in times], [-s for s in stops], [-s for s in jumps]
    return Problem(system, state, t_tensor, times, path, stops, jumps, backwards)


def under_vmap(state) -> bool:
    """Whether a state block is a ``torch.func.vmap`` batched tensor."""
    batched = getattr(torch._C._functorch, "is_batchedtensor", None)
    return batched is not None and torch._C._are_functorch_transforms_active() and any(batched(x) for x in state)
