"""Neural oscillator (002 eq. 4.1) + symplectic Euler (z' = z + h tanh(W y + V u + b), y' = y + h z'), fused on
CPU: one product per step in C++ (added into the encoding buffer in place), BPTT in C++ adding each step's term of
dW while it is in cache (``weights.cpp``); no backward to come: the forward in chunks of steps. Per-sample steps h (irregular
sampling, a (B, T) dt) replace the shared one row by row."""
from __future__ import annotations

import torch
from torch import Tensor

from ..derivatives import kernel_backward
from ..gaps import is_per_sample, per_step_lengths
from .common import contiguous, encode_flat, every_sample, forward_in_chunks, last_states, needs_backward
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


def _forward(A, z0, y0, Wt, h, hs=None):
    """The time loop over A (B·T, d) from (z0, y0) (contiguous): (Z, Y) (B, T, d); A ends as s. ``hs`` (B, T)
    contiguous: each (sub-)step's own length instead of h (irregular sampling)."""
    B, d = z0.shape
    T = A.shape[0] // B
    Z, Y = A.new_empty(B, T, d), A.new_empty(B, T, d)
    call("osc_forward", [A, z0, y0, Wt, Z, Y, hs], (B, T, d), (h,))
    return Z, Y


class OscillatorFunction(torch.autograd.Function):
    """(A, z0, y0, W, h, hs) -> (Y, z_T, A); A (B·T, d) is overwritten by s = W y + a; ``hs`` (B, T) or None:
    per-step lengths, with their gradient where they require one (the backward then reads the z' too)."""

    @staticmethod
    def forward(ctx, A, z0, y0, W, h, hs):
        z0, y0, W = contiguous(z0, y0, W)
        Z, Y = _forward(A, z0, y0, W.t().contiguous(), h, hs)
        ctx.mark_dirty(A)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, y0, W, Y, Z if hs is not None and hs.requires_grad else None)
        ctx.h, ctx.hs = h, hs
        return Y, Z[:, -1].clone(), A

    @staticmethod
    @kernel_backward("cpu")
    def backward(ctx, dY, dzT, _dA):
        A, y0, W, Y, Z = ctx.saved_tensors
        B, d = y0.shape
        T = A.shape[0] // B
        gz = dzT.contiguous().clone() if dzT is not None else A.new_zeros(B, d)
        gy = A.new_zeros(B, d)
        dY = dY.contiguous() if dY is not None else None
        dA = A.new_empty(B * T, d)
        dhs = A.new_empty(B, T) if ctx.needs_input_grad[5] else None
        dW = A.new_zeros(d, d) if ctx.needs_input_grad[3] else None  # added step by step in the kernel
        call("osc_backward", [A, W, dY, gz, gy, dA, ctx.hs, Z, dhs, y0, Y, dW], (B, T, d), (ctx.h,))
        return dA, gz, gy, dW, None, dhs


def run(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """The neural oscillator over the sequence x: (outputs (B, T, d), (z_T, y_T)), as the generic loop; ``dt`` a
    (B, T) tensor: each sample's own step (``Recurrent.forward(x, dt=gaps)``), its gradient too."""
    z0, y0 = state
    W = system.weight[:, system.input_size:]
    if is_per_sample(dt):  # per-sample steps: the sub-steps' lengths, the whole sequence
        hs, _ = per_step_lengths(dt, unfolds, x.dtype, keep_grad=True)
        Y, zT, _ = OscillatorFunction.apply(encode_flat(system, x, unfolds), z0, y0, W, 0.0, hs)
        return every_sample(Y, unfolds), (zT, Y[:, -1])
    if not needs_backward(system, x, state):
        Wt = W.t().contiguous()

        def step(A, state):
            Z, Y = _forward(A, *state, Wt, dt / unfolds)
            return Y, last_states(Z, Y)

        return forward_in_chunks(system, x, unfolds, system.hidden_size, contiguous(z0, y0), step)
    A = encode_flat(system, x, unfolds)
    Y, zT, _ = OscillatorFunction.apply(A, z0, y0, W, dt / unfolds, None)
    return every_sample(Y, unfolds), (zT, Y[:, -1])
