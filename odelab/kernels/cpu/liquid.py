"""Liquid cells (004): LTC and STC + semi-implicit Euler ("imex-implicit", ``unfolds`` sub-steps), LRCU-A/S =
LRC + Euler, fused on CPU.

The input synapses Σ_{input j} g σ(a x + b) (and k, and the leak g_l, and LRC's O_x^T x + p) are computed in
torch once a sample, before the loop (autograd differentiates them); the C++ loop runs the ``unfolds`` sub-steps
of each sample, adding the hidden synapses (B × m × m sigmoids per sub-step, as the generic einsum) to the
sample's input part, and stores every sub-step's state and conductances f, u (and w). The backward in C++
recomputes the sigmoids, sums the gradients of the hidden synapse parameters over the batch in registers
(float32 or float64, as the tensors) and over the sub-steps in double, and sums dL/d(f, u, w) over each
sample's sub-steps for the input part (and LRC's dL/dO_h = Σ h^T dL/dw). Both loops run the synapses in chunks
of one vector register of postsynaptic neurons (see the source's liquid section).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from .common import contiguous, every_sample
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


class LiquidFunction(torch.autograd.Function):
    """(A, h0, G, Aa, Bb, K, e_l, O_h, k_shift, δ, kind, L) -> the sample states (B, T, m); A (B·T, 2m or 3m):
    the input part of the conductances (f, u[, w]) of each sample, shared by its L sub-steps."""

    @staticmethod
    def forward(ctx, A, h0, G, Aa, Bb, K, el, Oh, ksh, h, kind, unfolds):
        A, h0, G, Aa, Bb, K, el, Oh, ksh = contiguous(A, h0, G, Aa, Bb, K, el, Oh, ksh)
        B, m = h0.shape
        T = A.shape[0] // B
        C = A.new_empty(B * T * unfolds, A.shape[1])  # every sub-step's conductances, for the backward
        H = A.new_empty(B, T * unfolds, m)
        call("liquid_forward", [A, h0, G, Aa, Bb, K, el, Oh, ksh, C, H], (kind, B, T, m, unfolds), (h,))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(C, h0, G, Aa, Bb, K, el, Oh, ksh, H)
        ctx.args = (h, kind, unfolds, T)
        return every_sample(H, unfolds)

    @staticmethod
    def backward(ctx, dY):
        C, h0, G, Aa, Bb, K, el, Oh, ksh, H = ctx.saved_tensors
        h, kind, unfolds, T = ctx.args
        B, m = h0.shape
        gh = C.new_zeros(B, m)
        dY = dY.contiguous() if dY is not None else None
        dA = C.new_zeros(B * T, C.shape[1])
        dG, dAa, dBb, dK = (C.new_empty(m, m) for _ in range(4))
        del_, dksh = C.new_empty(m), C.new_empty(m)
        dOh = C.new_zeros(m, m) if kind >= 2 and ctx.needs_input_grad[7] else None
        call("liquid_backward", [C, h0, G, Aa, Bb, K, el, Oh.t().contiguous(), ksh, H, dY, gh, dA, dG, dAa, dBb, dK,
                                 del_, dksh, dOh], (kind, B, T, m, unfolds), (h,))
        return dA, gh, dG, dAa, dBb, dK, del_, dOh, dksh if kind == 3 else None, None, None, None


def _run(system, x: Tensor, state, dt: float, unfolds: int, kind: int):
    (h0,) = state
    m, n = system.hidden_size, system.input_size
    enc = system.encode(x.reshape(-1, x.shape[-1]))  # LTC/STC: x itself; LRC: [x, O_x^T x + p]
    f_in, u_in = system.input_conductances(enc[:, :n])
    parts = [f_in, u_in] + ([enc[:, n:]] if kind >= 2 else [])
    A = torch.cat(parts, dim=1)
    Oh = system.o_hidden if kind >= 2 else h0.new_zeros(1)
    ksh = F.softplus(system.raw_k_shift) if kind == 3 else h0.new_zeros(1)
    Y = LiquidFunction.apply(A, h0, F.softplus(system.raw_g[:m]), system.a[:m], system.b[:m], system.k[:m],
                             system.e_leak, Oh, ksh, dt / unfolds, kind, unfolds)
    return Y, (Y[:, -1],)


def run_ltc(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """LTC + semi-implicit Euler over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 0)


def run_stc(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """STC + semi-implicit Euler over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 1)


def run_lrc(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """LRCU-A / LRCU-S (LRC + Euler) over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 2 if system.raw_k_shift is None else 3)

