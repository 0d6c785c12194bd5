"""Liquid cells (004): LTC and STC + semi-implicit Euler ("imex-implicit", ``unfolds`` sub-steps), LRCU-A/S =
LRC + Euler, fused on CPU.

The input synapses Σ_{input j} g σ(a x + b) (and k, and the leak g_l, and LRC's O_x^T x + p) are computed for
the whole sequence in torch before the loop (autograd differentiates them); the C++ loop adds the hidden
synapses (B × m × m sigmoids per step, as the generic einsum) and the update, storing the states and, in the
encoding buffer, the conductances f, u (and w). The backward in C++ recomputes the sigmoids, sums the gradients
of the hidden synapse parameters over the batch in registers (float32 or float64, as the tensors) and over the
steps in double, and writes dL/d(f, u, w) of every step for the input part. Both loops run the synapses in
chunks of one vector register of postsynaptic neurons (see the source's liquid section).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from .common import contiguous, every_sample, previous
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


class LiquidFunction(torch.autograd.Function):
    """(A, h0, G, Aa, Bb, K, e_l, O_h, k_shift, δ, kind) -> (H, A); A (B·T, 2m or 3m) is overwritten by the
    conductances (f, u[, w])."""

    @staticmethod
    def forward(ctx, A, h0, G, Aa, Bb, K, el, Oh, ksh, h, kind):
        h0, G, Aa, Bb, K, el, Oh, ksh = contiguous(h0, G, Aa, Bb, K, el, Oh, ksh)
        B, m = h0.shape
        T = A.shape[0] // B
        H = A.new_empty(B, T, m)
        call("liquid_forward", [A, h0, G, Aa, Bb, K, el, Oh, ksh, H], (kind, B, T, m), (h,))
        ctx.mark_dirty(A)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, h0, G, Aa, Bb, K, el, Oh, ksh, H)
        ctx.args = (h, kind)
        return H, A

    @staticmethod
    def backward(ctx, dH, _dA):
        A, h0, G, Aa, Bb, K, el, Oh, ksh, H = ctx.saved_tensors
        h, kind = ctx.args
        B, m = h0.shape
        T = A.shape[0] // B
        gh = A.new_zeros(B, m)
        dH = dH.contiguous() if dH is not None else None
        dA = A.new_empty(A.shape)
        dG, dAa, dBb, dK = (A.new_empty(m, m) for _ in range(4))
        del_, dksh = A.new_empty(m), A.new_empty(m)
        call("liquid_backward", [A, h0, G, Aa, Bb, K, el, Oh.t().contiguous(), ksh, H, dH, gh, dA, dG, dAa, dBb, dK,
                                 del_, dksh], (kind, B, T, m), (h,))
        dOh = previous(H, h0).t() @ dA[:, 2 * m:] if kind >= 2 and ctx.needs_input_grad[7] else None
        return dA, gh, dG, dAa, dBb, dK, del_, dOh, dksh if kind == 3 else None, None, None


def _run(system, x: Tensor, state, dt: float, unfolds: int, kind: int):
    (h0,) = state
    m, n = system.hidden_size, system.input_size
    if unfolds > 1:
        x = x.repeat_interleave(unfolds, dim=1)
    enc = system.encode(x.reshape(-1, x.shape[-1]))  # LTC/STC: x itself; LRC: [x, O_x^T x + p]
    f_in, u_in = system.input_conductances(enc[:, :n])
    parts = [f_in, u_in] + ([enc[:, n:]] if kind >= 2 else [])
    A = torch.cat(parts, dim=1)
    Oh = system.o_hidden if kind >= 2 else h0.new_zeros(1)
    ksh = F.softplus(system.raw_k_shift) if kind == 3 else h0.new_zeros(1)
    H, _ = LiquidFunction.apply(A, h0, F.softplus(system.raw_g[:m]), system.a[:m], system.b[:m], system.k[:m],
                                system.e_leak, Oh, ksh, dt / unfolds, kind)
    return every_sample(H, unfolds), (H[:, -1],)


def run_ltc(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """LTC + semi-implicit Euler over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 0)


def run_stc(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """STC + semi-implicit Euler over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 1)


def run_lrc(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=()):
    """LRCU-A / LRCU-S (LRC + Euler) over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 2 if system.raw_k_shift is None else 3)

