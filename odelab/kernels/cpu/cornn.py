"""coRNN (002 eq. 2.3) = CoRNN field (eq. 2.2) + partitioned Euler, z then y, damping explicit ("imex") or
implicit ("imex-implicit"), fused on CPU. As :mod:`.lem`: the encoding in one GEMM, the time loop in C++ adding
𝒲 z + W y into the encoding buffer in place (it ends up holding the pre-activations), BPTT in C++ writing the
pre-activation gradients and adding each step's terms of the recurrent weight gradients while they are in cache
(``weights.cpp``); no backward to come: the forward in chunks of steps.

Learned γ, ε (``learn_coefficients=True``) run the generic loop (their gradients are not derived here).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..derivatives import kernel_backward
from ..gaps import is_per_sample, per_step_lengths
from .common import contiguous, encode_flat, every_sample, forward_in_chunks, generic, last_states, needs_backward
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


def _forward(A, z0, y0, Wct, Wyt, h, gamma, epsilon, implicit, hs=None):
    """The time loop over A (B·T, d) from (z0, y0) (contiguous): (Z, Y) (B, T, d); A ends as s. ``hs`` (B, T)
    contiguous: each (sub-)step's own length instead of h (irregular sampling)."""
    B, d = z0.shape
    T = A.shape[0] // B
    Z, Y = A.new_empty(B, T, d), A.new_empty(B, T, d)
    call("cornn_forward", [A, z0, y0, Wct, Wyt, Z, Y, hs], (B, T, d, int(implicit)), (h, gamma, epsilon))
    return Z, Y


class CoRNNFunction(torch.autograd.Function):
    """(A, z0, y0, 𝒲, W, h, γ, ε, implicit, hs) -> (Y, z_T, A); A (B·T, d) is overwritten by s = 𝒲 z + W y + a;
    ``hs`` (B, T) or None: per-step lengths, with their gradient where they require one."""

    @staticmethod
    def forward(ctx, A, z0, y0, Wc, Wy, h, gamma, epsilon, implicit, hs):
        z0, y0, Wc, Wy = contiguous(z0, y0, Wc, Wy)
        Z, Y = _forward(A, z0, y0, Wc.t().contiguous(), Wy.t().contiguous(), h, gamma, epsilon, implicit, hs)
        ctx.mark_dirty(A)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, z0, y0, Wc, Wy, Z, Y)
        ctx.args, ctx.hs = (h, gamma, epsilon, int(implicit)), hs
        return Y, Z[:, -1].clone(), A

    @staticmethod
    @kernel_backward("cpu")
    def backward(ctx, dY, dzT, _dA):
        A, z0, y0, Wc, Wy, Z, Y = ctx.saved_tensors
        h, gamma, epsilon, implicit = ctx.args
        B, d = z0.shape
        T = A.shape[0] // B
        gz = dzT.contiguous().clone() if dzT is not None else A.new_zeros(B, d)
        gy = A.new_zeros(B, d)
        dY = dY.contiguous() if dY is not None else None
        dA = A.new_empty(B * T, d)
        dhs = A.new_empty(B, T) if ctx.needs_input_grad[9] else None
        dWc = A.new_zeros(d, d) if ctx.needs_input_grad[3] else None  # added step by step in the kernel
        dWy = A.new_zeros(d, d) if ctx.needs_input_grad[4] else None
        call("cornn_backward", [A, Wc, Wy, dY, gz, gy, dA, ctx.hs, z0, y0, Z, Y, dhs, dWc, dWy],
             (B, T, d, implicit), (h, gamma, epsilon))
        return dA, gz, gy, dWc, dWy, None, None, None, None, dhs


def _run(system, x: Tensor, state, dt: float | Tensor, unfolds: int, implicit: bool):
    if system.learn_coefficients:
        return generic(system, "imex-implicit" if implicit else "imex", x, state, dt, unfolds)
    z0, y0 = state
    m, d = system.input_size, system.hidden_size
    gamma, epsilon = (float(v) for v in system.coefficients.tolist())
    Wc, Wy = system.weight[:, m:m + d], system.weight[:, m + d:]
    if is_per_sample(dt):  # per-sample steps: the sub-steps' lengths, the whole sequence
        hs, _ = per_step_lengths(dt, unfolds, x.dtype, keep_grad=True)
        A = encode_flat(system, x, unfolds)
        Y, zT, _ = CoRNNFunction.apply(A, z0, y0, Wc, Wy, 0.0, gamma, epsilon, implicit, hs)
        return every_sample(Y, unfolds), (zT, Y[:, -1])
    if not needs_backward(system, x, state):
        Wct, Wyt = Wc.t().contiguous(), Wy.t().contiguous()

        def step(A, state):
            Z, Y = _forward(A, *state, Wct, Wyt, dt / unfolds, gamma, epsilon, implicit)
            return Y, last_states(Z, Y)

        return forward_in_chunks(system, x, unfolds, d, contiguous(z0, y0), step)
    A = encode_flat(system, x, unfolds)
    Y, zT, _ = CoRNNFunction.apply(A, z0, y0, Wc, Wy, dt / unfolds, gamma, epsilon, implicit, None)
    return every_sample(Y, unfolds), (zT, Y[:, -1])


def run_explicit(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """coRNN with explicit damping ("imex", the official code)."""
    return _run(system, x, state, dt, unfolds, False)


def run_implicit(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """coRNN with implicit damping ("imex-implicit")."""
    return _run(system, x, state, dt, unfolds, True)
