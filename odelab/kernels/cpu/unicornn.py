"""One UnICORNN layer (002 eq. 3.6) = UnICORNN field + symplectic Euler with step Δt σ̂(c), fused on CPU.

The recurrence is diagonal (w ⊙ y), so the C++ loop is elementwise over batch × hidden with no matrix
product; the backward accumulates the gradients of w and of the time scale k = σ̂(c) over batch and steps
(in double) and writes the pre-activation gradients, which autograd takes through ``encode`` (V, b, u) and
through σ̂ to c.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .common import contiguous, encode_flat, every_sample
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


class UnICORNNFunction(torch.autograd.Function):
    """(A, z0, y0, w, k, h, α) -> (Y, z_T): A (B·T, d) = V u + b, k = σ̂(c)."""

    @staticmethod
    def forward(ctx, A, z0, y0, w, k, h, alpha):
        A, z0, y0, w, k = contiguous(A, z0, y0, w, k)
        B, d = z0.shape
        T = A.shape[0] // B
        Z, Y = A.new_empty(B, T, d), A.new_empty(B, T, d)
        call("unicornn_forward", [A, z0, y0, w, k, Z, Y], (B, T, d), (h, alpha))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, z0, y0, w, k, Z, Y)
        ctx.args = (h, alpha)
        return Y, Z[:, -1].clone()

    @staticmethod
    def backward(ctx, dY, dzT):
        A, z0, y0, w, k, Z, Y = ctx.saved_tensors
        B, d = z0.shape
        T = A.shape[0] // B
        gz = dzT.contiguous().clone() if dzT is not None else A.new_zeros(B, d)
        gy = A.new_zeros(B, d)
        dY = dY.contiguous() if dY is not None else None
        dA, dw, dk = A.new_empty(B * T, d), A.new_empty(d), A.new_empty(d)
        call("unicornn_backward", [A, y0, w, k, Z, Y, dY, gz, gy, dA, dw, dk], (B, T, d), ctx.args)
        return dA, gz, gy, dw, dk, None, None


def run(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """The UnICORNN layer over the sequence x: (outputs (B, T, d), (z_T, y_T)), as the generic loop."""
    z0, y0 = state
    A = encode_flat(system, x, unfolds)
    Y, zT = UnICORNNFunction.apply(A, z0, y0, system.w, torch.sigmoid(system.c), dt / unfolds, system.alpha)
    return every_sample(Y, unfolds), (zT, Y[:, -1])
