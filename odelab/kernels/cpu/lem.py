"""LEM (000 eq. 3) = LEM field (eq. 2) + "imex" (z first, then y; decays explicit), fused on CPU.

Forward: the input encoding for all steps in one GEMM (``system.encode``), then the time loop in C++
(``lem_forward``: two matrix products and one fused gate loop per update, per step), which adds the recurrent
products into the encoding buffer in place, so that it ends up holding the gates' pre-activations; it stores
the states z, y. Backward: ``lem_backward`` runs BPTT in C++ from the stored states and pre-activations
(gates recomputed elementwise, no matrix product recomputed) and writes the pre-activation gradients ``dA`` of
every step; it adds each step's terms of the recurrent weight gradients (dA_nᵀ y_{n-1}, dA_nᵀ z'_n, a product over
the batch) while that step's dA is still in cache (``weights.cpp``). Autograd takes ``dA`` through ``encode`` (V, b,
x). With no backward to come (``torch.no_grad()``, or nothing requiring
grad) the forward runs in chunks of steps (``forward_in_chunks``): no encoding buffer of the whole sequence.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..derivatives import kernel_backward
from ..gaps import is_per_sample, per_step_lengths
from .common import contiguous, encode_flat, every_sample, forward_in_chunks, last_states, needs_backward
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


def _forward(A, z0, y0, Wgt, Wyt, h, hs=None):
    """The time loop over A (B·T, 4d) from (z0, y0) (contiguous): (Z, Y) (B, T, d); A ends as the pre-activations.
    ``hs`` (B, T) contiguous: each (sub-)step's own length instead of h (irregular sampling)."""
    B, d = z0.shape
    T = A.shape[0] // B
    Z, Y = A.new_empty(B, T, d), A.new_empty(B, T, d)
    call("lem_forward", [A, z0, y0, Wgt, Wyt, Z, Y, hs], (B, T, d), (h,))
    return Z, Y


class LEMFunction(torch.autograd.Function):
    """(A, z0, y0, Wg = [W1; Wz; W2], Wy, h, hs) -> (Y, z_T, A): Y (B, T, d) all y, z_T the last z; the encoded
    input A (B·T, 4d) is overwritten by the pre-activations (marked dirty); ``hs`` (B, T) or None: per-step lengths,
    with their gradient where they require one."""

    @staticmethod
    def forward(ctx, A, z0, y0, Wg, Wy, h, hs):
        z0, y0, Wg, Wy = contiguous(z0, y0, Wg, Wy)
        Z, Y = _forward(A, z0, y0, Wg.t().contiguous(), Wy.t().contiguous(), h, hs)
        ctx.mark_dirty(A)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, z0, y0, Wg, Wy, Z, Y)
        ctx.h, ctx.hs = h, hs
        return Y, Z[:, -1].clone(), A

    @staticmethod
    @kernel_backward("cpu")
    def backward(ctx, dY, dzT, _dA):
        A, z0, y0, Wg, Wy, Z, Y = ctx.saved_tensors
        B, d = z0.shape
        T = A.shape[0] // B
        gz = dzT.contiguous().clone() if dzT is not None else A.new_zeros(B, d)
        gy = A.new_zeros(B, d)
        dY = dY.contiguous() if dY is not None else None
        dA = A.new_empty(B * T, 4 * d)
        dhs = A.new_empty(B, T) if ctx.needs_input_grad[6] else None
        dWg = A.new_zeros(3 * d, d) if ctx.needs_input_grad[3] else None  # added step by step in the kernel
        dWy = A.new_zeros(d, d) if ctx.needs_input_grad[4] else None
        call("lem_backward", [A, z0, y0, Wg, Wy, Z, Y, dY, gz, gy, dA, ctx.hs, dhs, dWg, dWy], (B, T, d), (ctx.h,))
        return dA, gz, gy, dWg, dWy, None, dhs


def run(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """The LEM cell over the sequence x: (outputs (B, T, d), (z_T, y_T)), as the generic loop; ``dt`` a (B, T)
    tensor: each sample's own step (``Recurrent.forward(x, dt=gaps)``), its gradient too."""
    z0, y0 = state
    Wg = torch.cat((system.weight_y, system.W2), dim=0)
    if is_per_sample(dt):  # per-sample steps: the sub-steps' lengths, the whole sequence
        hs, _ = per_step_lengths(dt, unfolds, x.dtype, keep_grad=True)
        A = encode_flat(system, x, unfolds)
        Y, zT, _ = LEMFunction.apply(A, z0, y0, Wg, system.Wy, 0.0, hs)
        return every_sample(Y, unfolds), (zT, Y[:, -1])
    if not needs_backward(system, x, state):
        Wgt, Wyt = Wg.t().contiguous(), system.Wy.t().contiguous()

        def step(A, state):
            Z, Y = _forward(A, *state, Wgt, Wyt, dt / unfolds)
            return Y, last_states(Z, Y)

        return forward_in_chunks(system, x, unfolds, 4 * system.hidden_size, contiguous(z0, y0), step)
    A = encode_flat(system, x, unfolds)
    Y, zT, _ = LEMFunction.apply(A, z0, y0, Wg, system.Wy, dt / unfolds, None)
    return every_sample(Y, unfolds), (zT, Y[:, -1])
