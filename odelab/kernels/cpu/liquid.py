"""Liquid cells (004): LTC and STC + semi-implicit Euler ("imex-implicit", ``unfolds`` sub-steps), LRCU-A/S =
LRC + Euler, fused on CPU.

The C++ loop runs the ``unfolds`` sub-steps of each sample: every synapse, from the neurons and from the inputs
(B × (m + n) × m sigmoids per sub-step, the inputs' once a sample, as the generic einsum over y = [h, x]), the
leak and the update, storing the sample states and every sub-step's conductances f, u (and LRC's w, whose input
part O_x^T x + p is one product in torch). The backward in C++ recomputes a sample's other sub-step states from
its first state and those conductances (elementwise, the forward's update code) and the sigmoids, sums the
gradients of the synapse parameters over the batch in registers (float32 or float64, as the tensors) and over the
sub-steps in double, and writes dL/dx (and LRC's dL/dO_h = Σ h^T dL/dw and dL/dw_in). Both loops run the synapses
in chunks of one vector register of postsynaptic neurons (see csrc/liquid.cpp). Without a backward
(no gradient enabled or wanted) the forward stores no conductances.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from ..derivatives import kernel_backward
from ..gaps import is_per_sample, sample_lengths
from .common import contiguous, needs_backward
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


def _forward(x, h0, G, Aa, Bb, K, gl, el, Oh, ksh, w_in, h, hs, kind, unfolds, store):
    """The C++ forward: (sample states (B, T, m), every sub-step's conductances C or None unless ``store``, for the
    backward, which recomputes a sample's other sub-step states from its first state and C). ``hs`` (B, T) or None:
    each sample's own sub-step instead of h (irregular sampling)."""
    (B, T, n), m = x.shape, h0.shape[1]
    sizes = (kind, B, T, m, n, unfolds, torch.get_num_threads())  # the synapse loops split between torch's threads
    Y = h0.new_empty(B, T, m)
    C = h0.new_empty(B * T * unfolds, 3 * m if kind >= 2 else 2 * m) if store else None  # [f | u | w]
    call("liquid_forward", [x, h0, G, Aa, Bb, K, gl, el, Oh, ksh, w_in, C, Y, hs], sizes, (h,))
    return Y, C


class LiquidFunction(torch.autograd.Function):
    """(x, h0, G, Aa, Bb, K, g_l, e_l, O_h, k_shift, w_in, δ, δs, kind, L) -> the sample states (B, T, m); δs (B, T)
    or None: per-sample sub-steps, with their gradient where they require one.

    x (B, T, n); G, Aa, Bb, K: the (m + n, m) synapse matrices g, a, b, k (the neurons' rows, then the inputs');
    w_in (B·T, m): LRC's input part O_x^T x + p of w (None for LTC, STC); all contiguous."""

    @staticmethod
    def forward(ctx, x, h0, G, Aa, Bb, K, gl, el, Oh, ksh, w_in, h, hs, kind, unfolds):
        Y, C = _forward(x, h0, G, Aa, Bb, K, gl, el, Oh, ksh, w_in, h, hs, kind, unfolds, store=True)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, C, h0, G, Aa, Bb, K, el, Oh, ksh, Y)
        ctx.args = (h, hs, kind, unfolds)
        return Y

    @staticmethod
    @kernel_backward("cpu")
    def backward(ctx, dY):
        x, C, h0, G, Aa, Bb, K, el, Oh, ksh, Y = ctx.saved_tensors
        h, hs, kind, unfolds = ctx.args
        (B, T, n), m = x.shape, h0.shape[1]
        dY = dY.contiguous() if dY is not None else None
        gh, dx = h0.new_zeros(B, m), x.new_zeros(B, T, n)
        dG, dAa, dBb, dK = (G.new_empty(m + n, m) for _ in range(4))
        dgl, del_, dksh = (h0.new_empty(m) for _ in range(3))
        dOh = h0.new_zeros(m, m) if kind >= 2 and ctx.needs_input_grad[8] else None
        dw_in = h0.new_zeros(B * T, m) if kind >= 2 else None
        dhs = h0.new_zeros(B, T) if ctx.needs_input_grad[12] else None
        sizes = (kind, B, T, m, n, unfolds, torch.get_num_threads())
        call("liquid_backward", [x, C, h0, G, Aa, Bb, K, el, Oh.t().contiguous(), ksh, Y, dY, gh, dx, dG, dAa, dBb, dK,
                                 dgl, del_, dksh, dOh, dw_in, hs, dhs], sizes, (h,))
        return dx, gh, dG, dAa, dBb, dK, dgl, del_, dOh, dksh if kind == 3 else None, dw_in, None, dhs, None, None


def _run(system, x: Tensor, state, dt: float | Tensor, unfolds: int, kind: int):
    (h0,) = state
    n = system.input_size
    w_in = system.input_drive(x.reshape(x.shape[0] * x.shape[1], n)) if kind >= 2 else None
    Oh = system.o_hidden if kind >= 2 else h0.new_zeros(1)
    ksh = F.softplus(system.raw_k_shift) if kind == 3 else h0.new_zeros(1)
    tensors = contiguous(x, h0, F.softplus(system.raw_g), system.a, system.b, system.k,
                         F.softplus(system.raw_g_leak), system.e_leak, Oh, ksh)
    tensors += (w_in,)
    if is_per_sample(dt):  # per-sample steps (B, T), each sample's L sub-steps of dt / L
        args = (*tensors, 0.0, sample_lengths(dt, unfolds, h0.dtype, keep_grad=True), kind, unfolds)
    else:
        args = (*tensors, dt / unfolds, None, kind, unfolds)
    if needs_backward(system, x, state):
        Y = LiquidFunction.apply(*args)
    else:  # no backward (e.g. under torch.no_grad()): the sample states only
        Y = _forward(*args, store=False)[0]
    return Y, (Y[:, -1],)


def run_ltc(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """LTC + semi-implicit Euler over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 0)


def run_stc(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """STC + semi-implicit Euler over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 1)


def run_lrc(system, x: Tensor, state, dt: float | Tensor, unfolds: int = 1, lags=()):
    """LRCU-A / LRCU-S (LRC + Euler) over x: (outputs (B, T, m), (h_T,)), as the generic loop."""
    return _run(system, x, state, dt, unfolds, 2 if system.raw_k_shift is None else 3)

