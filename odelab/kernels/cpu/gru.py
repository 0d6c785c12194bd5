"""GRU-ODE (004 eq. 54) + explicit Euler (= the GRU for Δt = 1, eq. 53), fused on CPU, torch's reset-after
convention (``reset_after=True``, the default; the reset-before variant runs the generic loop).

Forward in C++ per step: [W_r; W_f] h added into the encoding buffer in place, c = W_u h + b_hu stored, and
one fused gate loop; backward in C++ writes the pre-activation gradients and dL/dc of every step, and adds each
step's terms of the recurrent weight gradients while they are in cache (``weights.cpp``). No backward to come: the
forward runs in chunks of steps (``forward_in_chunks``).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..derivatives import kernel_backward
from ..gaps import is_per_sample, per_step_lengths
from .common import contiguous, encode_flat, every_sample, forward_in_chunks, generic, last_states, needs_backward
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


def _forward(A, h0, Wrft, Wut, bhu, h, hs=None):
    """The time loop over A (B·T, 3d) from h0 (contiguous): (H (B, T, d), C (B·T, d) the candidates'
    pre-activations); A ends as the pre-activations. ``hs`` (B, T): each (sub-)step's own length instead of h."""
    B, d = h0.shape
    T = A.shape[0] // B
    H, C = A.new_empty(B, T, d), A.new_empty(B * T, d)
    call("gru_forward", [A, C, h0, Wrft, Wut, bhu, H, hs], (B, T, d), (h,))
    return H, C


class GRUFunction(torch.autograd.Function):
    """(A, h0, W_rf, W_u, b_hu, Δ, Δs) -> (H, A): A (B·T, 3d) is overwritten by the pre-activations; Δs (B, T) or
    None: per-step lengths, with their gradient where they require one."""

    @staticmethod
    def forward(ctx, A, h0, Wrf, Wu, bhu, h, hs):
        h0, Wrf, Wu, bhu = contiguous(h0, Wrf, Wu, bhu)
        H, C = _forward(A, h0, Wrf.t().contiguous(), Wu.t().contiguous(), bhu, h, hs)
        ctx.mark_dirty(A)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, C, h0, Wrf, Wu, H)
        ctx.h, ctx.hs = h, hs
        return H, A

    @staticmethod
    @kernel_backward("cpu")
    def backward(ctx, dH, _dA):
        A, C, h0, Wrf, Wu, H = ctx.saved_tensors
        B, d = h0.shape
        T = A.shape[0] // B
        gh = A.new_zeros(B, d)
        dH = dH.contiguous() if dH is not None else None
        dA, dC = A.new_empty(B * T, 3 * d), A.new_empty(B * T, d)
        dhs = A.new_empty(B, T) if ctx.needs_input_grad[6] else None
        dWrf = A.new_zeros(2 * d, d) if ctx.needs_input_grad[2] else None  # added step by step in the kernel
        dWu = A.new_zeros(d, d) if ctx.needs_input_grad[3] else None
        call("gru_backward", [A, C, h0, Wrf, Wu, H, dH, gh, dA, dC, ctx.hs, dhs, dWrf, dWu], (B, T, d), (ctx.h,))
        dbhu = dC.sum(0) if ctx.needs_input_grad[4] else None
        return dA, gh, dWrf, dWu, dbhu, None, dhs


def run(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """The GRU-ODE Euler cell over the sequence x: (outputs (B, T, d), (h_T,)), as the generic loop."""
    if not system.reset_after:
        return generic(system, "euler", x, state, dt, unfolds)
    (h0,) = state
    d = system.hidden_size
    Wrf, Wu, bhu = system.weight_hidden[:2 * d], system.weight_hidden[2 * d:], system.bias_hidden_candidate
    if is_per_sample(dt):  # per-sample steps: the sub-steps' lengths, the whole sequence
        hs, _ = per_step_lengths(dt, unfolds, x.dtype, keep_grad=True)
        H, _ = GRUFunction.apply(encode_flat(system, x, unfolds), h0, Wrf, Wu, bhu, 0.0, hs)
        return every_sample(H, unfolds), (H[:, -1],)
    if not needs_backward(system, x, state):
        Wrft, Wut, bhu = Wrf.t().contiguous(), Wu.t().contiguous(), bhu.contiguous()

        def step(A, state):
            H, _ = _forward(A, *state, Wrft, Wut, bhu, dt / unfolds)
            return H, last_states(H)

        return forward_in_chunks(system, x, unfolds, 3 * d, contiguous(h0), step)
    A = encode_flat(system, x, unfolds)
    H, _ = GRUFunction.apply(A, h0, Wrf, Wu, bhu, dt / unfolds, None)
    return every_sample(H, unfolds), (H[:, -1],)
