"""Helpers shared by the CPU kernels: the encoded input buffer, sub-step unfolding, the weight gradients over the
states, the generic fallback."""
from __future__ import annotations

import torch
from torch import Tensor

from ...systems.base import System
from ..chunks import needs_backward  # noqa: F401 -- the CPU kernels import it from here
from .extension import call

# inputs of at most this many channels are encoded by :class:`AffineEncoding` (one pass over the encoding each way),
# wider ones by torch's linear (at 16 channels its forward is faster than the pass, its backward as fast)
AFFINE_CHANNELS = 8


class AffineEncoding(torch.autograd.Function):
    """(X (R, n), V (w, n), b (w) or None) -> X Vᵀ + b (R, w), a fresh contiguous tensor, in one pass; backward:
    dV and db in one pass over the gradient (torch's linear runs a product and a sum over it, and its product
    Xᵀ dA for 2-8 channels takes 30x longer than the pass), dX = dA V by torch."""

    @staticmethod
    def forward(ctx, X, V, b):
        X, b = X.contiguous(), None if b is None else b.contiguous()
        A = X.new_empty(X.shape[0], V.shape[0])
        call("affine_forward", [X, V.t().contiguous(), b, A], (X.shape[0], X.shape[1], V.shape[0]))
        ctx.save_for_backward(X, V)
        ctx.bias = b is not None
        return A

    @staticmethod
    def backward(ctx, dA):
        X, V = ctx.saved_tensors
        dA = dA.contiguous()
        dX = dA @ V if ctx.needs_input_grad[0] else None
        dV = db = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            dVt = dA.new_empty(V.shape[1], V.shape[0])
            db = dA.new_empty(V.shape[0]) if ctx.bias else None
            call("affine_backward", [dA, X, dVt, db], (X.shape[0], X.shape[1], V.shape[0]))
            dV = dVt.t()
        return dX, dV, db


def encode(system, u: Tensor) -> Tensor:
    """``system.encode(u)`` of rows ``u`` (R, n): by :class:`AffineEncoding` where the encoding is the system's
    declared affine map (:meth:`~odelab.systems.base.System.encoding`, not an overridden ``encode``) of few
    channels, else by the system."""
    affine = system.encoding() if getattr(system.encode, "__func__", None) is System.encode else None
    if affine is None or u.shape[-1] > AFFINE_CHANNELS or u.dtype not in (torch.float32, torch.float64):
        return system.encode(u)
    return AffineEncoding.apply(u, *affine)


def encode_flat(system, x: Tensor, unfolds: int = 1) -> Tensor:
    """The encoded input of every (sub-)step as a fresh contiguous ``(B·T·L, k)`` tensor that is not a view (a
    kernel overwrites it in place with its pre-activations): sample n drives ``unfolds`` sub-steps (the hold), its
    encoding computed once and copied to each (the encoding is row-wise, so L copies of x would only cost L GEMMs)."""
    A = encode(system, x.reshape(-1, x.shape[-1]))
    if unfolds > 1:
        A = A.repeat_interleave(unfolds, dim=0)  # rows (b, t) -> (b, t, q)
    if A._base is not None or not A.is_contiguous():
        A = A.contiguous() if A._base is None else A.clone()
    return A


# the encoding of one chunk of samples in :func:`forward_in_chunks`: a few MB, so that its pages are reused from chunk
# to chunk and the Python work per chunk stays negligible
CHUNK_BYTES = 1 << 22


def chunk_samples(x: Tensor, unfolds: int, width: int) -> int:
    """Samples of x (B, T, n) per chunk of a forward without a backward: about :data:`CHUNK_BYTES` of encoding,
    ``width`` values a sub-step."""
    return max(1, CHUNK_BYTES // (max(x.shape[0] * unfolds * width, 1) * x.element_size()))


def forward_in_chunks(system, x: Tensor, unfolds: int, width: int, state, step):
    """A kernel's forward with no backward to come, chunk by chunk over the samples: each chunk's encoding (about
    :data:`CHUNK_BYTES`, ``width`` values a sub-step) is computed, run by ``step(A, state) -> (outputs of every
    sub-step (B, steps, d), final state)`` and dropped. The whole sequence's ``(B·T·L, width)`` buffer, which the
    training forward keeps as pre-activations, is never allocated: its pages (a fault each on first touch) cost more
    than the recurrence at small sizes. Returns (outputs at the samples (B, T, d), final state)."""
    B, T = x.shape[:2]
    chunk = chunk_samples(x, unfolds, width)
    if chunk >= T:
        Y, state = step(encode_flat(system, x, unfolds), state)
        return every_sample(Y, unfolds), state
    out = None
    for t0 in range(0, T, chunk):
        Y, state = step(encode_flat(system, x[:, t0:t0 + chunk], unfolds), state)
        if out is None:
            out = Y.new_empty(B, T, Y.shape[-1])
        out[:, t0:t0 + chunk] = Y[:, unfolds - 1::unfolds]
    return out, state


def last_states(*sequences: Tensor) -> tuple[Tensor, ...]:
    """The last step of each ``(B, T, k)`` sequence, contiguous: a chunk's final state, the next chunk's first."""
    return tuple(seq[:, -1].contiguous() for seq in sequences)


def every_sample(seq: Tensor, unfolds: int) -> Tensor:
    """The sub-step sequence ``(B, T·L, k)`` at the sample times (every L-th sub-step), contiguous as the
    generic loop's outputs."""
    return seq if unfolds == 1 else seq[:, unfolds - 1::unfolds].contiguous()


def state_products(dA: Tensor, columns: tuple[int, int], H: Tensor, h0: Tensor, factors: Tensor, lag: int = 0,
                   which: int = 0) -> Tensor:
    """The gradient of a weight W in the products ``W state_{n−lag}`` of every step n under state dropout: Σ over the
    batch and the steps n ≥ lag of ``dA[b, n, c0:c1]ᵀ (factors[b, n, which] ⊙ state_{n−lag}[b])``, ``(c1 − c0, d)``,
    the states as step n read them, for dA ``(B·T, w)``, the states ``state_0 = h0`` ``(B, d)``, ``state_k =
    H[:, k−1]`` ``(B, T, d)`` (zero before 0) and the dropout factors ``(B, T, 2, d)``. lag 0: the state before each
    step; τ-GRU's lag m: the delayed state. (Without dropout the kernels add these terms step by step.)"""
    B, T, d = H.shape
    c0, c1 = columns
    out = dA.new_empty(c1 - c0, d)
    call("state_products", [dA, H.contiguous(), h0.contiguous(), out, factors],
         (B, T, dA.shape[1], c0, c1 - c0, d, lag, which))
    return out


def contiguous(*tensors: Tensor) -> tuple[Tensor, ...]:
    return tuple(t.contiguous() for t in tensors)


def generic(system, scheme: str, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """The generic loop (the definition), for the configurations a kernel does not cover."""
    from ...solvers.recurrence import run_sequence
    from ...solvers.schemes import resolve_scheme

    return run_sequence(system, resolve_scheme(scheme), x, state, dt, unfolds, lags)
