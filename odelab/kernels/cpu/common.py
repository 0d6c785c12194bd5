"""Helpers shared by the CPU kernels: the encoded input buffer, sub-step unfolding, the generic fallback."""
from __future__ import annotations

import torch
from torch import Tensor


def encode_flat(system, x: Tensor, unfolds: int = 1) -> Tensor:
    """The encoded input of every (sub-)step as a fresh contiguous ``(B·T·L, k)`` tensor that is not a view (a
    kernel overwrites it in place with its pre-activations): sample n drives ``unfolds`` sub-steps (the hold)."""
    if unfolds > 1:
        x = x.repeat_interleave(unfolds, dim=1)
    A = system.encode(x.reshape(-1, x.shape[-1]))
    if A._base is not None or not A.is_contiguous():
        A = A.contiguous() if A._base is None else A.clone()
    return A


def every_sample(seq: Tensor, unfolds: int) -> Tensor:
    """The sub-step sequence ``(B, T·L, k)`` at the sample times (every L-th sub-step), contiguous as the
    generic loop's outputs."""
    return seq if unfolds == 1 else seq[:, unfolds - 1::unfolds].contiguous()


def previous(seq: Tensor, first: Tensor) -> Tensor:
    """``(B, T, k)``: the state before each step, ``[first, seq[:, :-1]]``, flattened to ``(B·T, k)``."""
    return torch.cat((first.unsqueeze(1), seq[:, :-1]), dim=1).reshape(-1, seq.shape[-1])


def contiguous(*tensors: Tensor) -> tuple[Tensor, ...]:
    return tuple(t.contiguous() for t in tensors)


def generic(system, scheme: str, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """The generic loop (the definition), for the configurations a kernel does not cover."""
    from ...solvers.recurrence import run_sequence
    from ...solvers.schemes import resolve_scheme

    return run_sequence(system, resolve_scheme(scheme), x, state, dt, unfolds, lags)
