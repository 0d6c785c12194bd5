"""Fixed-step explicit Runge--Kutta steps with the stage sums in C++: the CPU path of fixed-step ODE and DDE solves
that record no gradient.

:meth:`FusedExplicitRK.step` is :meth:`.schemes.ExplicitRK.step` with each stage's sum y + Σ_j (h a_ij) k_j and the
update y + Σ_i (h b_i) k_i as one call of the kernel ``rk_combine`` (:mod:`.fused_step`'s library) over every state
block, into buffers carved a chunk of steps at a time, where the torch path spends an op and an allocation per
nonzero coefficient and block (rk4: seven a step). The kernel adds the terms in the torch path's order with fused
multiply-adds, as ``torch.add(x, k, alpha=h a)`` does on a CPU: the values are the same bits. A field output of
another dtype or memory layout is converted to the state's (the torch path would promote the state instead).

Whether a solve records a gradient is decided before it (:func:`usable`: the state and the system's parameters)
and checked on every field output: a step whose derivative requires grad (through an input, or a tensor a plain
callable closes over) is finished by the torch path, and so is every later step.
"""
from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from ..systems.base import State, System
from .fused_step import LIBRARY, PARALLEL_ELEMENTS, records_state_gradient
from .schemes import ExplicitRK, Scheme

_CHUNK = 64  # stage buffers allocated at a time (views of one allocation per block)


def usable(scheme: Scheme, system: System, state: State) -> bool:
    """Whether :class:`FusedExplicitRK` can take this solve's steps: an explicit RK scheme, CPU float32 or float64
    state blocks of one dtype, and no gradient to record (grad mode off, or neither the state nor the system's
    parameters require one)."""
    if type(scheme) is not ExplicitRK:  # a subclass may step differently
        return False
    dtype = state[0].dtype
    if dtype not in (torch.float32, torch.float64) or any(x.device.type != "cpu" or x.dtype != dtype for x in state):
        return False
    if records_state_gradient(system, state):
        return False
    return LIBRARY.available()


class _Sum:
    """out = y + Σ_j (h w_j) k_j over every state block: one ``rk_combine`` call, its argument arrays built once."""

    __slots__ = ("terms", "weights", "h", "sizes", "pointers", "f64", "kernel")

    def __init__(self, terms: list[tuple[int, float]], state: State, threads: int, kernel, f64: ctypes.c_int):
        self.terms, self.kernel, self.f64, self.h = terms, kernel, f64, None
        self.weights = (ctypes.c_double * len(terms))()
        self.sizes = (ctypes.c_int64 * (3 + len(state)))(len(state), len(terms), threads, *[x.numel() for x in state])
        self.pointers = (ctypes.c_void_p * (len(state) * (2 + len(terms))))()

    def __call__(self, h: float, y: State, out: State, ks: list[State]) -> None:
        if h != self.h:
            for n, (_, w) in enumerate(self.terms):
                self.weights[n] = h * w  # as the torch path's alpha, dt * a
            self.h = h
        p, i = self.pointers, 0
        for b in range(len(y)):
            p[i], p[i + 1] = y[b].data_ptr(), out[b].data_ptr()
            i += 2
            for j, _ in self.terms:
                p[i] = ks[j][b].data_ptr()
                i += 1
        self.kernel(self.f64, self.sizes, p, self.weights)


class FusedExplicitRK:
    """``scheme``'s steps (:meth:`.schemes.ExplicitRK.step`) with the sums in ``rk_combine``, for states shaped
    like ``state``. ``step(..., out=...)`` writes the new state into given buffers (a solve's output rows);
    otherwise into buffers of its own, which stay valid as long as they are referenced (a delay solve's past).
    ``reuse_stages``: every step writes its stage states into the same buffers (nothing may keep them: an ODE
    solve's field, not a delay solve's past)."""

    def __init__(self, scheme: ExplicitRK, state: State, reuse_stages: bool = False):
        tab, library = scheme.tableau, LIBRARY.library()
        self.scheme, self.dtype = scheme, state[0].dtype
        self.shapes = [x.shape for x in state]
        elements = sum(x.numel() for x in state)
        threads = torch.get_num_threads() if elements >= PARALLEL_ELEMENTS else 1
        f64 = ctypes.c_int(self.dtype == torch.float64)
        terms = lambda row: [(j, a) for j, a in enumerate(row) if a != 0.0]
        self.stages = [(c, _Sum(terms(row), state, threads, library.rk_combine, f64) if terms(row) else None)
                       for c, row in zip(tab.c, tab.a)]
        self.update = _Sum(terms(tab.b), state, threads, library.rk_combine, f64)
        self.free: list[State] = []
        self.torch_path = False  # set once a field output required grad
        # the stage states' buffers, the same every step where nothing keeps them (None: fresh ones per step)
        self.stage_buffers = [self.buffers() for _ in self.stages] if reuse_stages else None

    def buffers(self) -> State:
        """A state's worth of fresh buffers (views of a chunk allocated at once)."""
        if not self.free:
            chunks = [torch.empty((_CHUNK, *shape), dtype=self.dtype).unbind(0) for shape in self.shapes]
            self.free = list(zip(*chunks))
            self.free.reverse()
        return self.free.pop()

    def step(self, field, t: float, state: State, dt: float, out: State | None = None) -> State:
        if self.torch_path:
            return self.scheme.step(field, t, state, dt)
        for x in state:
            if not x.is_contiguous():
                state = tuple(x.contiguous() for x in state)
                break
        grad, ks, dtype = torch.is_grad_enabled(), [], self.dtype
        for c, stage_sum in self.stages:
            if stage_sum is None:
                stage = state
            else:
                stage = self.stage_buffers[len(ks)] if self.stage_buffers else self.buffers()
                stage_sum(dt, state, stage, ks)
            k = field(t + c * dt, stage)
            if grad and any(x.requires_grad for x in k):
                self.torch_path = True
                return self.scheme.finish_step(field, t, state, dt, ks + [k])
            for x in k:
                if x.dtype is not dtype or not x.is_contiguous():
                    k = tuple(x.to(dtype).contiguous() for x in k)
                    break
            ks.append(k)
        new = self.buffers() if out is None else out
        self.update(dt, state, new, ks)
        return new


def stepper(scheme: Scheme, system: System, state: State, reuse_stages: bool = False) -> FusedExplicitRK | None:
    """A :class:`FusedExplicitRK` for this solve, or None where the torch path takes it (:func:`usable`)."""
    return FusedExplicitRK(scheme, state, reuse_stages) if usable(scheme, system, state) else None


class Outputs:
    """The recorded states of a fixed-step solve (y0 and the nodes in ``record`` of its ``steps``), written in place:
    one (count, *block shape) tensor per block whose rows are the steps' output buffers; :meth:`stacked` gives them
    batch first, as :func:`.solution.finish` would."""

    def __init__(self, state: State, steps: int, record: set[int]):
        count = 1 + sum(1 for k in range(1, steps + 1) if k in record)  # y0, then the recorded nodes
        self.rows = [torch.empty((count, *x.shape), dtype=x.dtype) for x in state]
        self.views = list(zip(*[rows.unbind(0) for rows in self.rows]))
        for x, row in zip(state, self.views[0]):
            row.copy_(x)
        self.next = 1

    def take(self) -> State:
        row = self.views[self.next]
        self.next += 1
        return row

    def stacked(self) -> tuple[Tensor, ...]:
        return tuple(rows.transpose(0, 1).contiguous() for rows in self.rows)
