"""A sequence model = a system + a scheme + a step: ``Recurrent(system, scheme, dt)``.

Sample x_n of the input sequence drives the step(s) from t_{n−1} to t_n = n·dt (the hold convention); the
model emits the system's observable block after every sample, like ``torch.nn.RNN`` with
``batch_first=True``. ``unfolds`` = L runs L sub-steps of dt/L per sample (the LTC fused solver).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .solvers.field import Field
from .solvers.schemes import Scheme
from .solvers.solve import resolve_scheme
from .systems.base import FunctionSystem, State, System, check_state


class Recurrent(nn.Module):
    """``forward(x, state=None) -> (outputs, final_state)``; x ``(batch, time, input)`` (batch first),
    ``system`` an odelab System or a callable ``f(t, y, u)`` (e.g. an nn.Module) with ``hidden_size`` given;
    outputs ``(batch, time, hidden)`` = the observable block at every step, final_state a tuple of blocks.
    Delay systems keep their delayed states in a ring buffer (see ``odelab.solvers.delay``)."""

    def __init__(self, system: System | Callable, scheme: str | Scheme = "imex", dt: float = 1.0, unfolds: int = 1,
                 hidden_size: int | None = None):
        super().__init__()
        if not isinstance(system, System):
            if not callable(system) or hidden_size is None:
                raise TypeError("system: expected an odelab System, or a callable f(t, y, u) together with hidden_size, "
                                f"got {type(system).__name__}")
            system = FunctionSystem(system, hidden_size, takes_input=True)  # a Module's parameters stay registered
        self.scheme = resolve_scheme(scheme)
        self.scheme.check(system)
        if not (isinstance(dt, (int, float)) and dt > 0):
            raise ValueError(f"dt: expected a positive number, got {dt!r}")
        if not (isinstance(unfolds, int) and unfolds >= 1):
            raise ValueError(f"unfolds: expected a positive integer, got {unfolds!r}")
        self.system, self.dt, self.unfolds = system, float(dt), unfolds
        self.output_index = system.block_index(system.observable)

    @property
    def hidden_size(self) -> int:
        return self.system.block_sizes()[self.output_index]

    def extra_repr(self) -> str:
        return f"scheme={self.scheme.name!r}, dt={self.dt}, unfolds={self.unfolds}"

    def _check_input(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"x: expected a tensor (batch, time, input), got {type(x).__name__}")
        if x.dim() != 3:
            raise ValueError(f"x: expected shape (batch, time, input), got {tuple(x.shape)}")
        if self.system.input_size and x.shape[-1] != self.system.input_size:
            raise ValueError(f"x: expected {self.system.input_size} input features, got {x.shape[-1]}")

    def forward(self, x: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        self._check_input(x)
        system = self.system
        if state is None:
            state = system.initial_state(x.shape[0], dtype=x.dtype, device=x.device)
        else:
            state = check_state(system, state, "state")
        if system.is_delay:
            from .solvers.delay import run_delay_recurrence

            return run_delay_recurrence(self, x, state)
        inputs = system.encode(x).unbind(1)  # one matmul for the whole sequence, unbound once
        field = Field(system)
        step, h, obs = self.scheme.step, self.dt / self.unfolds, self.output_index
        outputs = []
        t = 0.0
        for u_n in inputs:
            field.inp = lambda _t, u_n=u_n: u_n
            for _ in range(self.unfolds):
                state = step(field, t, state, h)
                t += h
            outputs.append(state[obs])
        return torch.stack(outputs, dim=1), state
