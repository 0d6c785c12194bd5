"""The systems contract: a vector field whose state is a tuple of named ``(batch, hidden)`` blocks.

A scheme may ask a system for

* ``derivative(t, state, inp)`` -- the full derivative, one tensor per block;
* ``block_derivative(i, t, state, inp)`` -- the derivative of block ``i`` given the current values of
  the others (partitioned schemes update blocks in ``blocks`` order, each seeing the ones already updated);
* ``split(i, t, state, inp)`` -- ``(forcing, decay)`` with ``d block_i/dt = forcing - decay * block_i`` and
  ``decay >= 0``, for the blocks listed in ``split_blocks`` (IMEX / semi-implicit schemes);
* ``encode(u)`` -- an affine input encoding applied to whole sequences at once; ``inp`` above is always the
  *encoded* input (``None`` for an autonomous system).

Delay systems declare ``delays`` (constant lags, or :class:`StateDelay` lags τ(t, y(t))) and receive the delayed
states as a fourth argument ``delayed``: one state tuple per delay, in ``delays`` order.
"""
from __future__ import annotations

import inspect
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

State = tuple[Tensor, ...]


class StateDelay:
    """A state-dependent delay: y(t − τ(t, y(t))) with τ = ``function(t, state)`` (t as the solvers pass it, the
    state as the system gets it; ``(batch,)`` or ``(batch, 1)``), held to ``[lower, upper]`` (0 < lower ≤ upper).
    ``lower`` caps the adaptive steps, so that every delayed time lies in the accepted past; ``upper`` sizes the
    history. Solved by the adaptive explicit pairs, which step onto the kinks the delay carries into the solution
    (``odelab.solvers.tracking``), and by the fixed-step explicit Runge–Kutta schemes (dt ≤ lower; first order where
    f jumps between nodes); a τ outside the bounds is clamped onto them, with a RuntimeWarning after the solve."""

    def __init__(self, function: Callable, lower: float, upper: float):
        if not callable(function):
            raise TypeError(f"StateDelay: expected a callable function(t, state), got {type(function).__name__}")
        for name, value in (("lower", lower), ("upper", upper)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise ValueError(f"StateDelay: {name} must be a positive finite number, got {value!r}")
        if lower > upper:
            raise ValueError(f"StateDelay: lower ({lower}) exceeds upper ({upper})")
        self.function, self.lower, self.upper = function, float(lower), float(upper)

    def __call__(self, t, state: State) -> Tensor:
        return self.function(t, state)

    def evaluate(self, t, state: State, batch: int) -> Tensor:
        """τ(t, state) as a (batch,) float64 tensor, not yet clamped (a ValueError names any other shape)."""
        tau = self.function(t, state)
        if not isinstance(tau, Tensor) or tau.shape not in ((batch,), (batch, 1)):
            raise ValueError(f"delays: a StateDelay's function must return (batch,) or (batch, 1) = ({batch},) or "
                             f"({batch}, 1), got {tuple(tau.shape) if isinstance(tau, Tensor) else type(tau)}")
        return tau.reshape(batch).to(torch.float64)

    def outside(self, tau: Tensor) -> Tensor:
        """Where ``tau`` lies outside [lower, upper] (where the solvers clamp it), as a bool tensor."""
        return (tau < self.lower) | (tau > self.upper)

    def __repr__(self) -> str:
        return f"StateDelay({getattr(self.function, '__name__', 'τ')}, lower={self.lower}, upper={self.upper})"


class System(nn.Module):
    """Base class of every vector field in odelab.

    Subclasses set ``blocks`` (state block names in update order), ``observable`` (the block a sequence
    model emits), ``hidden_size`` and ``input_size`` (0 for an autonomous system), and implement
    ``derivative``. Second-order systems set ``velocity_position = ("z", "y")`` so that symplectic Euler
    applies; systems with a decay split list the blocks in ``split_blocks`` and implement ``split``.
    """

    blocks: tuple[str, ...] = ("y",)
    observable: str = "y"
    split_blocks: tuple[str, ...] = ()
    velocity_position: tuple[str, str] | None = None
    delays: tuple[float, ...] = ()
    input_size: int = 0
    hidden_size: int = 1

    # -- the contract -------------------------------------------------------------------------------
    def derivative(self, t: float, state: State, inp: Tensor | None, *delayed: State) -> State:
        raise NotImplementedError

    def block_derivative(self, i: int, t: float, state: State, inp: Tensor | None, *delayed: State) -> Tensor:
        """d(block i)/dt: forcing − decay · block for a split block, else the full derivative's block i
        (override when cheaper)."""
        if self.has_split(i):
            forcing, decay = self.split(i, t, state, inp, *delayed)
            return forcing - decay * state[i]
        return self.derivative(t, state, inp, *delayed)[i]

    def split(self, i: int, t: float, state: State, inp: Tensor | None, *delayed: State) -> tuple[Tensor, Tensor]:
        """``(forcing, decay)`` of block ``i``: d block/dt = forcing - decay * block, decay >= 0."""
        raise NotImplementedError(f"{type(self).__name__} has no forcing/decay split for block {self.blocks[i]!r}")

    def encoding(self) -> tuple[Tensor, Tensor | None] | None:
        """``(V, b)`` when the input encoding is the affine map ``u ↦ V u + b`` (b may be None), else None. The
        systems with an affine encoding declare it here rather than overriding :meth:`encode`, so that a fused
        kernel can compute the map itself."""
        return None

    def encode(self, u: Tensor) -> Tensor:
        """The input encoding, applied to a whole sequence ``(..., input_size)`` at once: ``V u + b`` by
        :meth:`encoding`, the identity without one."""
        affine = self.encoding()
        return u if affine is None else F.linear(u, *affine)

    def symbols(self) -> dict[str, Tensor]:
        """Parameters under the paper's names (views, so edits write through)."""
        return dict(self.named_parameters())

    def kernel_blocker(self) -> str | None:
        """Why the fused kernels registered for this class do not compute this instance (an option they do not
        implement), or None: then ``Recurrent`` runs the generic loop."""
        return None

    # -- conveniences -------------------------------------------------------------------------------
    def set_sizes(self, input_size: int, hidden_size: int) -> None:
        """Validate and store the sizes (ValueError naming the argument)."""
        if not (isinstance(input_size, int) and input_size >= 0):
            raise ValueError(f"input_size: expected an integer >= 0, got {input_size!r}")
        if not (isinstance(hidden_size, int) and hidden_size >= 1):
            raise ValueError(f"hidden_size: expected an integer >= 1, got {hidden_size!r}")
        self.input_size, self.hidden_size = input_size, hidden_size

    @property
    def is_delay(self) -> bool:
        return len(self.delays) > 0

    @torch.no_grad()
    def init_uniform_(self, bound: float, params=None) -> None:
        """Draw ``params`` (default: every parameter) from U(−bound, bound)."""
        for p in self.parameters() if params is None else params:
            p.uniform_(-bound, bound)

    def block_index(self, name: str) -> int:
        return self.blocks.index(name)

    def has_split(self, i: int) -> bool:
        return self.blocks[i] in self.split_blocks

    def block_sizes(self) -> tuple[int, ...]:
        return (self.hidden_size,) * len(self.blocks)

    def initial_state(self, batch: int, dtype: torch.dtype | None = None, device=None) -> State:
        """The zero state ``(batch, size)`` per block (the papers' y0 = z0 = 0)."""
        ref = next(self.parameters(), None)
        dtype = dtype or (ref.dtype if ref is not None else torch.get_default_dtype())
        device = device or (ref.device if ref is not None else None)
        return tuple(torch.zeros(batch, n, dtype=dtype, device=device) for n in self.block_sizes())


class FunctionSystem(System):
    """Wraps a plain callable ``f(t, y)`` or ``f(t, y, u)`` with a tensor state as a one-block system.

    The callable gets ``t`` as a tensor of y's dtype and device (torchdiffeq's convention, so that
    ``torch.cos(t) * y`` works): the solvers pass a 0-dim tensor when the batch shares the time (fixed-step
    methods) and a ``(batch, 1)`` tensor when each sample has its own (adaptive methods); a float given
    here is turned into a 0-dim tensor."""

    def __init__(self, func: Callable, size: int, takes_input: bool):
        super().__init__()
        self.func = func
        self.hidden_size = size
        self.takes_input = takes_input

    def derivative(self, t, state, inp, *delayed):
        y = state[0]
        if not isinstance(t, Tensor):
            t = torch.full((), t, dtype=y.dtype if y.is_floating_point() else torch.get_default_dtype(),
                           device=y.device)
        return (self.func(t, y, inp) if self.takes_input else self.func(t, y),)


def _positional_arity(func: Callable) -> int | None:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    return sum(1 for p in params if p.kind in kinds)


def as_system(func_or_system, y0, *, has_input: bool) -> tuple[System, bool]:
    """Return ``(system, is_function)``; a callable is wrapped in a :class:`FunctionSystem`."""
    if isinstance(func_or_system, System):
        return func_or_system, False
    if not callable(func_or_system):
        raise TypeError(f"system: expected an odelab System or a callable f(t, y[, u]), got {type(func_or_system).__name__}")
    if not isinstance(y0, Tensor):
        raise TypeError(f"y0: a plain callable needs a tensor state, got {type(y0).__name__}")
    arity = _positional_arity(func_or_system)
    if arity is not None and arity not in (2, 3):
        raise TypeError(f"system: a callable must take (t, y) or (t, y, u), got {arity} positional parameters")
    takes_input = arity == 3 if arity is not None else has_input
    if has_input and not takes_input:
        raise TypeError("u: an input was given but the callable takes only (t, y); use f(t, y, u)")
    size = y0.shape[-1] if y0.dim() else 1
    return FunctionSystem(func_or_system, size, takes_input), True


def check_state(system: System, state: Sequence[Tensor], name: str = "y0") -> State:
    """Validate a state tuple against a system's blocks."""
    if isinstance(state, Tensor):
        state = (state,)
    if isinstance(state, dict):
        missing = [b for b in system.blocks if b not in state]
        if missing:
            raise ValueError(f"{name}: missing blocks {missing}; expected {list(system.blocks)}")
        state = tuple(state[b] for b in system.blocks)
    state = tuple(state)
    if len(state) != len(system.blocks):
        raise ValueError(f"{name}: expected {len(system.blocks)} blocks {list(system.blocks)}, got {len(state)}")
    for block, x in zip(system.blocks, state):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}[{block!r}]: expected a tensor, got {type(x).__name__}")
        if x.dim() != 2:
            raise ValueError(f"{name}[{block!r}]: expected shape (batch, hidden), got {tuple(x.shape)}")
        if x.shape[0] != state[0].shape[0]:
            raise ValueError(f"{name}: blocks disagree on the batch size ({x.shape[0]} vs {state[0].shape[0]})")
    return state
