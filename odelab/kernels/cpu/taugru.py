"""τ-GRU (eq. 14) and Delay GRU (eq. 12) + Euler with the delayed state h_{n−m}, m = ⌊τ/h⌋, zero history,
fused on CPU. The C++ loop reads h_{n−m} straight from the stored states (the ring buffer of the generic loop
is the state sequence itself); the backward keeps a buffer of the gradients that later steps send back to
h_{n−m} through W2 (a ring of m + 2 steps). The kernel adds the weight gradients step by step (W2's against the
delayed states; csrc/weights.cpp), except with state dropout: then products over the steps afterwards
(``state_products``, against the dropped states).

τ-GRU: the published cell (α, β any nonzero constants, weighting and gating on), and its ablations without a
branch (``alpha=0``, ``beta=0``, ``weighting=False``, ``gating=False``; kind 2, the branches' blocks by
:func:`_layout`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ...solvers.recurrence import DelayedState, carried_history, incoming_history
from ..chunks import add_history, delay_factors
from ..derivatives import kernel_backward
from .common import chunk_samples, contiguous, encode_flat, every_sample, needs_backward, state_products
from .extension import available, call  # noqa: F401 -- available(): Recurrent asks the kernel module


# the layout of kinds 0 and 1 (their blocks are fixed): unused
FIXED = (0,) * 9


def _layout(system) -> tuple[int, ...]:
    """The ablated τ-GRU's blocks (csrc/delay.cpp: TauLayout): (blocks a step, maps of h, the encoding block of u, z, g, a,
    the weight_h block of u, g, a), −1 where a branch is off."""
    enc = {b: i for i, b in enumerate(system.branches)}
    maps = {b: i for i, b in enumerate(system.h_branches)}
    return (len(system.branches), len(system.h_branches), *(enc.get(b, -1) for b in "uzga"),
            *(maps.get(b, -1) for b in "uga"))


def _transposed(W):
    return None if W is None else W.t().contiguous()


class GatedDelayFunction(torch.autograd.Function):
    """(A, h0, weight_h, W2, Δ, m, kind, α, β, K, layout) -> (H, A); kind 0 = Delay GRU, 1 = τ-GRU, 2 = τ-GRU
    without some branches (``layout``: :func:`_layout`; W2 None without the delay branch); A is overwritten by the
    pre-activations; K: the state-dropout factors (B, T, 2, d) or None."""

    @staticmethod
    def forward(ctx, A, h0, Wh, W2, h, m, kind, alpha, beta, K, layout=FIXED):
        h0, Wh = contiguous(h0, Wh)
        W2 = None if W2 is None else W2.contiguous()
        B, d = h0.shape
        T = A.shape[0] // B
        H = A.new_empty(B, T, d)
        call("gdelay_forward", [A, h0, Wh.t().contiguous(), _transposed(W2), H, K],
             (kind, B, T, d, m, 0, T, *layout), (h, alpha, beta))
        ctx.mark_dirty(A)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(A, h0, Wh, W2, H)
        ctx.args = (h, m, kind, alpha, beta, K, layout)
        return H, A

    @staticmethod
    @kernel_backward("cpu")
    def backward(ctx, dH, _dA):
        A, h0, Wh, W2, H = ctx.saved_tensors
        h, m, kind, alpha, beta, K, layout = ctx.args
        B, d = h0.shape
        T = A.shape[0] // B
        gh = A.new_zeros(B, d)
        dH = dH.contiguous() if dH is not None else None
        dA = A.new_empty(A.shape)
        pending = A.new_zeros(min(m + 2, T + 1), B, d)  # a ring (csrc/delay.cpp: pending_slots)
        # without state dropout the kernel adds the weights' gradients step by step; with it, the products below
        dWh = Wh.new_zeros(Wh.shape) if K is None and ctx.needs_input_grad[2] else None
        dW2 = W2.new_zeros(W2.shape) if K is None and ctx.needs_input_grad[3] else None
        call("gdelay_backward", [A, h0, Wh, W2, H, dH, gh, dA, pending, K, dWh, dW2], (kind, B, T, d, m, *layout),
             (h, alpha, beta))
        if K is not None:
            wanted = ctx.needs_input_grad[2:4]
            dWh, dW2 = _dropped_state_products(dA, H, h0, K, kind, layout, m, wanted)
        return dA, gh, dWh, dW2, None, None, None, None, None, None, None


def _dropped_state_products(dA, H, h0, K, kind, layout, m, wanted):
    """(dL/d weight_h, dL/d W2), None where not ``wanted``, with state dropout: products over the steps of dA
    against the states as the steps read them (the dropout factors K times the states), after the loop."""
    d = h0.shape[1]
    # the encoding blocks of weight_h's maps, in its order, and of W2's (against the states the steps read)
    maps, delayed = {0: ((0, 1),), 1: ((0,), (2, 3))}.get(kind), kind
    if kind == 2:
        block_of = dict(zip(layout[6:], (layout[2], layout[4], layout[5])))  # weight_h block -> encoding block
        maps, delayed = tuple((block_of[w],) for w in range(layout[1])), layout[3]
    dWh = dW2 = None
    if wanted[0]:
        dWh = torch.cat([state_products(dA, (run[0] * d, (run[-1] + 1) * d), H, h0, factors=K) for run in maps])
    if wanted[1]:
        dW2 = state_products(dA, (delayed * d, (delayed + 1) * d), H, h0, lag=m, factors=K, which=1)
    return dWh, dW2


def _run(system, x, state, dt, unfolds, lags, kind, alpha=1.0, beta=1.0, drop=None):
    """The sequence from ``state``; a :class:`DelayedState`'s history enters through the encoding of the first m
    steps (``chunks.add_history``), and the final state carries the history on. ``drop``: the state-dropout factors
    ``(B, T·L, 2, d)`` (``kernels.registry.register``) or None."""
    (h0,) = state
    m = int(lags[0]) if lags else 0
    before = incoming_history(state, m)
    before = None if before is None else before[0]
    B, T, d, L = x.shape[0], x.shape[1], system.hidden_size, unfolds
    drop = delay_factors(drop, x, L, d, lags)
    layout = _layout(system) if kind == 2 else FIXED
    column = (layout[3] if kind == 2 else kind) * d  # the W2 h_{n−m} part of the pre-activations
    if not needs_backward(system, x, state):  # chunks of samples (the delayed reads reach back into H)
        (h0,) = contiguous(h0)
        H = h0.new_empty(B, T * L, d)
        weights = (system.weight_h.t().contiguous(), _transposed(system.W2))
        chunk = chunk_samples(x, L, {0: 2, 1: 4, 2: layout[0]}[kind] * d)
        for t0 in range(0, T, chunk):
            A = encode_flat(system, x[:, t0:t0 + chunk], L)
            add_history(A.view(B, -1, A.shape[1]), before, m, system.W2, column, t0 * L, drop)
            call("gdelay_forward", [A, h0, *weights, H, drop],
                 (kind, B, T * L, d, m, t0 * L, A.shape[0] // B, *layout), (dt / L, alpha, beta))
    else:
        A = encode_flat(system, x, unfolds)  # fresh: the history's sum is added in place (autograd records it)
        add_history(A.view(B, -1, A.shape[1]), before, m, system.W2, column, keep=drop)
        H, _ = GatedDelayFunction.apply(A, h0, system.weight_h, system.W2, dt / unfolds, m, kind, alpha, beta, drop,
                                        layout)
    if not lags:  # τ = 0: no delay system, a plain state as the generic loop returns
        return every_sample(H, L), (H[:, -1],)
    return every_sample(H, L), DelayedState((H[:, -1],), (carried_history(before, h0, H, m),))


def run_delay_gru(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=(), *, drop=None):
    """Delay GRU (eq. 12) over the sequence x: (outputs (B, T, d), (h_T,)), as the generic loop; ``drop``: the
    state-dropout factors or None."""
    return _run(system, x, state, dt, unfolds, lags, 0, drop=drop)


def run_tau_gru(system, x: Tensor, state, dt: float, unfolds: int = 1, lags=(), *, drop=None):
    """τ-GRU (eq. 14) over the sequence x: (outputs (B, T, d), (h_T,)), as the generic loop; ``drop`` as
    :func:`run_delay_gru`."""
    kind = 1 if system.branches == ("u", "z", "g", "a") else 2
    return _run(system, x, state, dt, unfolds, lags, kind, system.alpha, system.beta, drop)
