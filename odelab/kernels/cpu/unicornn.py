"""One UnICORNN layer (002 eq. 3.6) = UnICORNN field + symplectic Euler with step Δt σ̂(c), fused on CPU.

The recurrence is diagonal (w ⊙ y), so the C++ loop is elementwise over batch × hidden with no matrix
product; the backward accumulates the gradients of w and of the time scale k = σ̂(c) over batch and steps
(in double) and writes the pre-activation gradients, which autograd takes through ``encode`` (V, b, u) and
through σ̂ to c.

The reversible variant (:class:`ReversibleUnICORNNFunction`, eq. 3.7) stores no per-step state: its forward
writes the outputs and the final state only, its backward recomputes V u + b (one GEMM) and rebuilds the states
backwards with the exact inverse step while it runs the adjoint recursion. With no backward to come, either
variant's forward runs in chunks of steps (``forward_in_chunks``).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..chunks import held_encoding
from ..derivatives import kernel_backward
from .common import contiguous, encode_flat, every_sample, forward_in_chunks, last_states, needs_backward
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


def _forward(A, z0, y0, w, k, h, alpha):
    """The time loop over A (B·T, d) from (z0, y0) (all contiguous): (Z, Y) (B, T, d)."""
    B, d = z0.shape
    T = A.shape[0] // B
    Z, Y = A.new_empty(B, T, d), A.new_empty(B, T, d)
    call("unicornn_forward", [A, z0, y0, w, k, Z, Y], (B, T, d), (h, alpha))
    return Z, Y


class UnICORNNFunction(torch.autograd.Function):
    """(A, z0, y0, w, k, h, α) -> (Y, z_T): A (B·T, d) = V u + b, k = σ̂(c)."""

    @staticmethod
    def forward(ctx, A, z0, y0, w, k, h, alpha):
        A, z0, y0, w, k = contiguous(A, z0, y0, w, k)
        Z, Y = _forward(A, z0, y0, w, k, h, alpha)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, z0, y0, w, k, Z, Y)
        ctx.args = (h, alpha)
        return Y, Z[:, -1].clone()

    @staticmethod
    @kernel_backward("cpu")
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
    if not needs_backward(system, x, state):
        w, k = contiguous(system.w, torch.sigmoid(system.c))

        def step(A, state):
            Z, Y = _forward(A, *state, w, k, dt / unfolds, system.alpha)
            return Y, last_states(Z, Y)

        return forward_in_chunks(system, x, unfolds, system.hidden_size, contiguous(z0, y0), step)
    A = encode_flat(system, x, unfolds)
    Y, zT = UnICORNNFunction.apply(A, z0, y0, system.w, torch.sigmoid(system.c), dt / unfolds, system.alpha)
    return every_sample(Y, unfolds), (zT, Y[:, -1])


class ReversibleUnICORNNFunction(torch.autograd.Function):
    """``apply(u, V, b, w, c, z0, y0, h, α, L) -> (ys, z_T, y_T)``, as :class:`odelab.models.unicornn.ReversibleUnICORNN`
    (the Python loop it replaces): saves u, the parameters and the final state, nothing per step. Each sample of u
    drives L sub-steps of length h (ys: (B, T·L, d)); it is encoded once and its encoding held over them, and its
    gradient is the sum of theirs, taken before the products with V and u."""

    @staticmethod
    def forward(ctx, u, V, b, w, c, z0, y0, h, alpha, unfolds):
        B, T, m = u.shape
        d = w.shape[0]
        A = held_encoding(u, V, b, unfolds).view(-1, d)  # x_n = V u_n + b, rows (b, t, q), freed after the loop
        z, y = z0.contiguous().clone(), y0.contiguous().clone()  # initial state in, final state out
        ys = A.new_empty(B, T * unfolds, d)
        call("unicornn_reversible_forward", [A, w.contiguous(), torch.sigmoid(c), z, y, ys], (*ys.shape,),
             (h, alpha))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(u, V, b, w, c, z, y)
        ctx.args, ctx.unfolds = (h, alpha), unfolds
        return ys, z, y

    @staticmethod
    @kernel_backward("cpu")
    def backward(ctx, grad_ys, grad_z, grad_y):
        u, V, b, w, c, z, y = ctx.saved_tensors
        B, T, m = u.shape
        d, L = w.shape[0], ctx.unfolds
        grad_a = held_encoding(u, V, b, L).view(-1, d)  # recomputed x_n, overwritten with dL/da_n
        k = torch.sigmoid(c)
        gz = grad_z.contiguous().clone() if grad_z is not None else u.new_zeros(B, d)
        gy = grad_y.contiguous().clone() if grad_y is not None else u.new_zeros(B, d)
        grad_ys = grad_ys.contiguous() if grad_ys is not None else None
        dw, dk = u.new_empty(d), u.new_empty(d)
        call("unicornn_reversible_backward", [grad_a, w.contiguous(), k, z.clone(), y.clone(), grad_ys, gz, gy, dw, dk],
             (B, T * L, d), ctx.args)
        if L != 1:  # a sample's gradient: the sum over the sub-steps it drives
            grad_a = grad_a.view(B * T, L, d).sum(1)
        u_flat = u.reshape(B * T, m)
        grad_u = (grad_a @ V).view(B, T, m) if ctx.needs_input_grad[0] else None
        grad_V = grad_a.T @ u_flat if ctx.needs_input_grad[1] else None
        grad_b = grad_a.sum(0) if ctx.needs_input_grad[2] else None
        return grad_u, grad_V, grad_b, dw, dk * k * (1.0 - k), gz, gy, None, None, None


def run_reversible(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """The UnICORNN layer over x with the reversible backward (3.7): (outputs (B, T, d), (z_T, y_T))."""
    if not needs_backward(system, x, state):  # the same forward, in chunks; z, y carried in place
        w, k = contiguous(system.w, torch.sigmoid(system.c))

        def step(A, state):
            ys = A.new_empty(x.shape[0], A.shape[0] // x.shape[0], system.hidden_size)
            call("unicornn_reversible_forward", [A, w, k, *state, ys], (*ys.shape,), (dt / unfolds, system.alpha))
            return ys, state

        start = tuple(s.contiguous().clone() for s in state)
        return forward_in_chunks(system, x, unfolds, system.hidden_size, start, step)
    ys, z, y = ReversibleUnICORNNFunction.apply(x, system.weight_input, system.bias, system.w, system.c, state[0],
                                                state[1], dt / unfolds, system.alpha, unfolds)
    return every_sample(ys, unfolds), (z, y)
