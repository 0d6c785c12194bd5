"""The vector field as a scheme sees it over one step: a system with its input (and delays) bound."""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..systems.base import FunctionSystem, State, System


def describe(system: System) -> str:
    """How an error names the vector field: the user's callable or ``Type.derivative``."""
    system = getattr(system, "inner", system)
    return "system: the callable f(t, y)" if isinstance(system, FunctionSystem) else f"{type(system).__name__}.derivative"


def check_derivative(system: System, state: State, out, block: int | None = None) -> None:
    """The derivative a system returned has one tensor per block, each of its block's shape (ValueError naming
    the block otherwise: a wrong shape would broadcast silently). ``block``: ``out`` is that block's only."""
    who = describe(system)
    if block is None:
        if not isinstance(out, (tuple, list)) or len(out) != len(state):
            got = f"{len(out)} blocks" if isinstance(out, (tuple, list)) else type(out).__name__
            raise ValueError(f"{who}: returned {got}; expected one derivative per block {list(system.blocks)}")
        pairs = zip(system.blocks, out, state)
    else:
        pairs = [(system.blocks[block], out, state[block])]
    for name, d, y in pairs:
        if not isinstance(d, Tensor):
            raise TypeError(f"{who}: the derivative of block {name!r} must be a tensor, got {type(d).__name__}")
        if d.shape != y.shape:
            raise ValueError(f"{who}: the derivative of block {name!r} has shape {tuple(d.shape)}; expected "
                             f"{tuple(y.shape)}, the shape of the state block")


def tensor_time(system: System) -> bool:
    """Whether ``system`` takes ``t`` as a tensor (plain callables: torchdiffeq's convention)."""
    return isinstance(getattr(system, "inner", system), FunctionSystem)


class Field:
    """``system`` with ``inp`` (a callable of t giving the encoded input, or None) and, for delay systems,
    ``delayed`` (a callable of t giving one state tuple per delay) bound, so schemes call f(t, y) only.
    Drivers mutate ``inp``/``delayed``/``edges`` between steps instead of building a new object.

    ``edges`` = (ta, tb, start_is_jump, end_is_jump) of the current step, or None: a stage time on an edge
    that is a jump of f reaches the system one ulp inside the step (in the dtype the system sees it), so
    that f(t, y) branching on t gives the limit from inside the step. The first derivative returned is
    checked against the state's block shapes (see :func:`check_derivative`)."""

    __slots__ = ("system", "inp", "delayed", "evaluations", "edges", "checked", "tensor_time", "inp_tensor_time",
                 "_plans")

    def __init__(self, system: System, inp: Callable[[float], Tensor] | None = None,
                 delayed: Callable[[float], tuple[State, ...]] | None = None):
        self.system, self.inp, self.delayed = system, inp, delayed
        self.evaluations = 0
        self.edges = None
        self.checked: set = set()
        self.tensor_time = tensor_time(system)
        self.inp_tensor_time = False  # a callable input u(t): it gets t as the system would, as a tensor
        self._plans: dict = {}

    def split_plan(self, whole: bool = False) -> tuple[bool, ...]:
        """Per block, whether a partitioned scheme steps it through its forcing/decay split (``system.has_split``;
        ``whole=True``: never, every block by its full derivative). Worked out once per field, not per step."""
        plan = self._plans.get(whole)
        if plan is None:
            system = self.system
            plan = self._plans[whole] = tuple(not whole and system.has_split(i) for i in range(len(system.blocks)))
        return plan

    def input(self, t: float, like: Tensor) -> Tensor | None:
        if self.inp is None:
            return None
        return self.inp(self.time(t, like, tensor=True) if self.inp_tensor_time else t)

    def _args(self, t: float, like: Tensor) -> tuple:
        inp = self.inp
        u = None if inp is None else inp(self.time(t, like, tensor=True) if self.inp_tensor_time else t)
        return (u,) if self.delayed is None else (u, *self.delayed(t))

    def time(self, t: float, like: Tensor, tensor: bool | None = None):
        """The time the system sees at the solver's time t (float64): t, or one ulp inside the step at a
        jump edge; a 0-dim tensor of ``like``'s dtype and device for plain callables."""
        as_tensor = self.tensor_time if tensor is None else tensor
        if self.edges is None and not as_tensor:  # the common case (every recurrent step): t itself
            return t
        side = 0
        if self.edges is not None:
            ta, tb, start_jump, end_jump = self.edges
            tol = 1e-9 * (tb - ta)
            if start_jump and abs(t - ta) <= tol:
                t, side = ta, 1
            elif end_jump and abs(t - tb) <= tol:
                t, side = tb, -1
        if not as_tensor:
            return math.nextafter(t, side * math.inf) if side else t
        dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
        value = torch.full((), t, dtype=dtype, device=like.device)
        return torch.nextafter(value, torch.full_like(value, side * math.inf)) if side else value

    def _plain(self) -> bool:
        """No jump edge, no delays, no tensor time: the system sees t itself and the input at t (every recurrent
        step), so the calls below skip :meth:`time` and :meth:`_args` (a subclass changing those overrides this)."""
        return self.edges is None and self.delayed is None and not (self.tensor_time or self.inp_tensor_time)

    def __call__(self, t: float, state: State) -> State:
        self.evaluations += 1
        if self._plain():
            inp = self.inp
            out = self.system.derivative(t, state, None if inp is None else inp(t))
        else:
            out = self.system.derivative(self.time(t, state[0]), state, *self._args(t, state[0]))
        if None not in self.checked:
            check_derivative(self.system, state, out)
            self.checked.add(None)
        return out

    def block(self, i: int, t: float, state: State) -> Tensor:
        if self._plain():
            inp = self.inp
            out = self.system.block_derivative(i, t, state, None if inp is None else inp(t))
        else:
            out = self.system.block_derivative(i, self.time(t, state[0]), state, *self._args(t, state[0]))
        if i not in self.checked:
            check_derivative(self.system, state, out, block=i)
            self.checked.add(i)
        return out

    def split(self, i: int, t: float, state: State) -> tuple[Tensor, Tensor]:
        if self._plain():
            inp = self.inp
            return self.system.split(i, t, state, None if inp is None else inp(t))
        return self.system.split(i, self.time(t, state[0]), state, *self._args(t, state[0]))
