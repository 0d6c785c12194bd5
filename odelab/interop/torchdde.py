"""torchdde interop: an odelab delay system as a vector field for ``torchdde.integrate`` (torchdde 0.1.3).

    field = torchdde_system(odelab.systems.ENSO())
    ys = torchdde.integrate(field, torchdde.RK4(), ts[0], ts[-1], ts, lambda t: field.pack(y0), None,
                            dt0=dt, delays=field.delays.to(ts.dtype), discretize_then_optimize=True)

The field is a plain callable (not an ``nn.Module``), so torchdde differentiates through its steps with
autograd instead of its own DDE adjoint . torchdde needs a 2-D state: the system's
blocks are concatenated along the features (``pack``/``unpack``).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..solvers.history import delay_values
from ..systems.base import State, System


class TorchDDEField:
    """``f(t, y, func_args, history)`` for torchdde: y ``(batch, Σ block sizes)``, ``history[i]`` = y(t − τ_i)
    in the same layout; ``func_args`` is None or a callable u(t) → ``(batch, input_size)`` (raw input,
    encoded here). ``delays``: the system's delays as a float64 tensor (cast it to the dtype of ``ts``)."""

    def __init__(self, system: System):
        if not isinstance(system, System):
            raise TypeError(f"system: expected an odelab System, got {type(system).__name__}")
        if not system.is_delay:
            raise ValueError(f"system: {type(system).__name__} declares no delays; use an ODE solver")
        self.system = system
        self.sizes = list(system.block_sizes())
        self.delays = torch.tensor([value for value, _ in delay_values(system)], dtype=torch.float64)

    def pack(self, state: State) -> Tensor:
        return torch.cat(tuple(state), dim=-1)

    def unpack(self, y: Tensor) -> State:
        return tuple(y.split(self.sizes, dim=-1))

    def __call__(self, t: Tensor, y: Tensor, func_args: Callable[[Tensor], Tensor] | None, history) -> Tensor:
        inp = None if func_args is None else self.system.encode(func_args(t))
        delayed = tuple(self.unpack(past) for past in history)
        return self.pack(self.system.derivative(t, self.unpack(y), inp, *delayed))


def torchdde_system(system: System) -> TorchDDEField:
    """Wrap a delay system for ``torchdde.integrate`` (see the module docstring)."""
    return TorchDDEField(system)
