"""The GRU as an ODE (004 eq. 54) with explicit Euler: h_n = h_{n−1} + Δt (σ(f) ⊙ tanh(c) − σ(f) ⊙ h_{n−1}),

    r = W_r h + a_r,  f = W_f h + a_f                     ([a_r, a_f, a_u] = ``encode(x)``)
    c = a_u + σ(r) ⊙ (W_u h + b_hu)     (reset_after, torch's convention; the default)
    c = a_u + W_u (σ(r) ⊙ h)            (reset before the matmul, eq. 53)

one Triton launch forward and one backward. The backward recomputes the gates from the stored states and
writes per step the pre-activation gradients [g_r, g_f, g_c, g_m] (g_m: of W_u h + b_hu, or of σ(r) ⊙ h's
matmul input); the weight gradients are GEMMs over all steps in torch.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from ._common import (  # noqa: F401
    available, block_sizes, dot, dot_precision, mv, resident, sigmoid, tanh, tile, warps, weights)


@triton.jit
def _forward(E, WH, BHU, C, S, R, B, T, H, RESET_AFTER: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
             PRECISION: tl.constexpr):
    """S (B, T+1, H) states; R (B, H) scratch for σ(r) ⊙ h (reset before the matmul)."""
    pid = tl.program_id(0)
    rows = (pid * BB + tl.arange(0, BB)).to(tl.int64)  # 64-bit offsets: B·T·H may pass 2³¹
    rmask = rows < B
    dt = tl.load(C)
    sE = T * 3 * H
    sS = (T + 1) * H
    for n in range(1, T + 1):
        e = E + (n - 1) * 3 * H
        hp = S + (n - 1) * H
        if not RESET_AFTER:
            for c0 in range(0, H, BH):
                cols = c0 + tl.arange(0, BH)
                m = rmask[:, None] & (cols < H)[None, :]
                r = tl.load(e + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
                r = mv(r, hp, sS, rows, rmask, WH, H, c0, H, H, False, BH, PRECISION)
                h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
                tl.store(R + rows[:, None] * H + cols[None, :], sigmoid(r) * h, mask=m)
            tl.debug_barrier()
        for c0 in range(0, H, BH):
            cols = c0 + tl.arange(0, BH)
            m = rmask[:, None] & (cols < H)[None, :]
            zero = tl.zeros((BB, BH), dtype=S.dtype.element_ty)
            f = tl.load(e + H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
            f = mv(f, hp, sS, rows, rmask, WH + H * H, H, c0, H, H, False, BH, PRECISION)
            c = tl.load(e + 2 * H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
            if RESET_AFTER:
                r = tl.load(e + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
                r = mv(r, hp, sS, rows, rmask, WH, H, c0, H, H, False, BH, PRECISION)
                mu = mv(zero, hp, sS, rows, rmask, WH + 2 * H * H, H, c0, H, H, False, BH, PRECISION)
                mu += tl.load(BHU + cols, mask=cols < H, other=0.0)[None, :]
                c += sigmoid(r) * mu
            else:
                c = mv(c, R, H, rows, rmask, WH + 2 * H * H, H, c0, H, H, False, BH, PRECISION)
            h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
            sf = sigmoid(f)
            h = h + dt * (sf * tanh(c) - sf * h)
            tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)
        tl.debug_barrier()


@triton.jit
def _backward(E, WH, BHU, C, S, GO, G, RS, L, B, T, H, RESET_AFTER: tl.constexpr, BB: tl.constexpr,
              BH: tl.constexpr, PRECISION: tl.constexpr):
    """G (B, T, 4H) = [g_r, g_f, g_c, g_m]; RS (B, T, H) = σ(r) ⊙ h_{n−1} per step (reset before); L (2, B, H)."""
    pid = tl.program_id(0)
    rows = (pid * BB + tl.arange(0, BB)).to(tl.int64)  # 64-bit offsets: B·T·H may pass 2³¹
    rmask = rows < B
    dt = tl.load(C)
    sE = T * 3 * H
    sG = T * 4 * H
    sS = (T + 1) * H
    sR = T * H
    for i in range(0, T):
        n = T - i
        cur = n % 2
        l_cur = L + cur * B * H
        l_nxt = L + (1 - cur) * B * H
        e = E + (n - 1) * 3 * H
        g = G + (n - 1) * 4 * H
        rs = RS + (n - 1) * H
        hp = S + (n - 1) * H
        if not RESET_AFTER:
            for c0 in range(0, H, BH):
                cols = c0 + tl.arange(0, BH)
                m = rmask[:, None] & (cols < H)[None, :]
                r = tl.load(e + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
                r = mv(r, hp, sS, rows, rmask, WH, H, c0, H, H, False, BH, PRECISION)
                h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
                tl.store(rs + rows[:, None] * sR + cols[None, :], sigmoid(r) * h, mask=m)
            tl.debug_barrier()
        for c0 in range(0, H, BH):
            cols = c0 + tl.arange(0, BH)
            m = rmask[:, None] & (cols < H)[None, :]
            zero = tl.zeros((BB, BH), dtype=S.dtype.element_ty)
            f = tl.load(e + H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
            f = mv(f, hp, sS, rows, rmask, WH + H * H, H, c0, H, H, False, BH, PRECISION)
            c = tl.load(e + 2 * H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
            r = tl.load(e + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
            r = mv(r, hp, sS, rows, rmask, WH, H, c0, H, H, False, BH, PRECISION)
            sr = sigmoid(r)
            if RESET_AFTER:
                mu = mv(zero, hp, sS, rows, rmask, WH + 2 * H * H, H, c0, H, H, False, BH, PRECISION)
                mu += tl.load(BHU + cols, mask=cols < H, other=0.0)[None, :]
                c += sr * mu
            else:
                c = mv(c, rs, sR, rows, rmask, WH + 2 * H * H, H, c0, H, H, False, BH, PRECISION)
            h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
            lam = tl.load(l_cur + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
            sf = sigmoid(f)
            tc = tanh(c)
            gc = lam * dt * sf * (1.0 - tc * tc)
            tl.store(g + H + rows[:, None] * sG + cols[None, :], lam * dt * (tc - h) * sf * (1.0 - sf), mask=m)
            tl.store(g + 2 * H + rows[:, None] * sG + cols[None, :], gc, mask=m)
            if RESET_AFTER:
                tl.store(g + rows[:, None] * sG + cols[None, :], gc * mu * sr * (1.0 - sr), mask=m)
                tl.store(g + 3 * H + rows[:, None] * sG + cols[None, :], gc * sr, mask=m)
            tl.store(l_nxt + rows[:, None] * H + cols[None, :], lam * (1.0 - dt * sf), mask=m)
        tl.debug_barrier()
        if not RESET_AFTER:  # g_ρ = g_c W_u (full row of g_c needed), g_r = g_ρ ⊙ h ⊙ σ'(r)
            for c0 in range(0, H, BH):
                cols = c0 + tl.arange(0, BH)
                m = rmask[:, None] & (cols < H)[None, :]
                zero = tl.zeros((BB, BH), dtype=S.dtype.element_ty)
                grho = mv(zero, g + 2 * H, sG, rows, rmask, WH + 2 * H * H, H, c0, H, H, True, BH, PRECISION)
                r = tl.load(e + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
                r = mv(r, hp, sS, rows, rmask, WH, H, c0, H, H, False, BH, PRECISION)
                sr = sigmoid(r)
                h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
                tl.store(g + rows[:, None] * sG + cols[None, :], grho * h * sr * (1.0 - sr), mask=m)
                lam = tl.load(l_nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
                tl.store(l_nxt + rows[:, None] * H + cols[None, :], lam + grho * sr, mask=m)
            tl.debug_barrier()
        for c0 in range(0, H, BH):  # λ_{n−1} += [g_r, g_f] [W_r; W_f] (+ g_m W_u) + dL/dh_{n−1}
            cols = c0 + tl.arange(0, BH)
            m = rmask[:, None] & (cols < H)[None, :]
            lam = tl.load(l_nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
            lam = mv(lam, g, sG, rows, rmask, WH, H, c0, 2 * H, H, True, BH, PRECISION)
            if RESET_AFTER:
                lam = mv(lam, g + 3 * H, sG, rows, rmask, WH + 2 * H * H, H, c0, H, H, True, BH, PRECISION)
            lam += tl.load(GO + (n - 2) * H + rows[:, None] * sR + cols[None, :],
                           mask=m & (cols * 0 + n >= 2)[None, :], other=0.0)
            tl.store(l_nxt + rows[:, None] * H + cols[None, :], lam, mask=m)
        tl.debug_barrier()


@triton.jit
def _forward_resident(E, WH, BHU, C, S, B, T, H, BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr):
    """reset_after and hidden ≤ BH: W_r, W_f, W_u and the state in registers for the whole sequence."""
    pid = tl.program_id(0)
    rows = (pid * BB + tl.arange(0, BB)).to(tl.int64)  # 64-bit offsets: B·T·H may pass 2³¹
    rmask = rows < B
    cols = tl.arange(0, BH)
    cmask = cols < H
    m = rmask[:, None] & cmask[None, :]
    dt = tl.load(C)
    sE = T * 3 * H
    sS = (T + 1) * H
    _, wrt = weights(WH, H, H, BH)
    _, wft = weights(WH + H * H, H, H, BH)
    _, wut = weights(WH + 2 * H * H, H, H, BH)
    bhu = tl.load(BHU + cols, mask=cmask, other=0.0)[None, :]
    h = tile(S, sS, rows, rmask, cols, cmask)
    for n in range(1, T + 1):
        e = E + (n - 1) * 3 * H
        r = dot(h, wrt, tile(e, sE, rows, rmask, cols, cmask), PRECISION)
        f = dot(h, wft, tile(e + H, sE, rows, rmask, cols, cmask), PRECISION)
        mu = dot(h, wut, tl.zeros((BB, BH), dtype=h.dtype) + bhu, PRECISION)
        c = tile(e + 2 * H, sE, rows, rmask, cols, cmask) + sigmoid(r) * mu
        sf = sigmoid(f)
        h = h + dt * (sf * tanh(c) - sf * h)
        tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)


@triton.jit
def _backward_resident(E, WH, BHU, C, S, GO, G, L, B, T, H, BB: tl.constexpr, BH: tl.constexpr,
                       PRECISION: tl.constexpr):
    """reset_after and hidden ≤ BH: weights and adjoint in registers; L (B, H): final-state adjoint in,
    initial-state adjoint out."""
    pid = tl.program_id(0)
    rows = (pid * BB + tl.arange(0, BB)).to(tl.int64)  # 64-bit offsets: B·T·H may pass 2³¹
    rmask = rows < B
    cols = tl.arange(0, BH)
    cmask = cols < H
    m = rmask[:, None] & cmask[None, :]
    dt = tl.load(C)
    sE = T * 3 * H
    sG = T * 4 * H
    sS = (T + 1) * H
    sO = T * H
    wr, wrt = weights(WH, H, H, BH)
    wf, wft = weights(WH + H * H, H, H, BH)
    wu, wut = weights(WH + 2 * H * H, H, H, BH)
    bhu = tl.load(BHU + cols, mask=cmask, other=0.0)[None, :]
    lam = tile(L, H, rows, rmask, cols, cmask)
    for i in range(0, T):
        n = T - i
        e = E + (n - 1) * 3 * H
        g = G + (n - 1) * 4 * H
        hp = tile(S + (n - 1) * H, sS, rows, rmask, cols, cmask)
        r = dot(hp, wrt, tile(e, sE, rows, rmask, cols, cmask), PRECISION)
        f = dot(hp, wft, tile(e + H, sE, rows, rmask, cols, cmask), PRECISION)
        mu = dot(hp, wut, tl.zeros((BB, BH), dtype=hp.dtype) + bhu, PRECISION)
        sr = sigmoid(r)
        sf = sigmoid(f)
        tc = tanh(tile(e + 2 * H, sE, rows, rmask, cols, cmask) + sr * mu)
        gc = lam * dt * sf * (1.0 - tc * tc)
        gf = lam * dt * (tc - hp) * sf * (1.0 - sf)
        gr = gc * mu * sr * (1.0 - sr)
        gm = gc * sr
        tl.store(g + rows[:, None] * sG + cols[None, :], gr, mask=m)
        tl.store(g + H + rows[:, None] * sG + cols[None, :], gf, mask=m)
        tl.store(g + 2 * H + rows[:, None] * sG + cols[None, :], gc, mask=m)
        tl.store(g + 3 * H + rows[:, None] * sG + cols[None, :], gm, mask=m)
        lam = lam * (1.0 - dt * sf)
        lam = dot(gr, wr, lam, PRECISION)
        lam = dot(gf, wf, lam, PRECISION)
        lam = dot(gm, wu, lam, PRECISION)
        lam += tl.load(GO + (n - 2) * H + rows[:, None] * sO + cols[None, :], mask=m & (cols * 0 + n >= 2)[None, :],
                       other=0.0)
    tl.store(L + rows[:, None] * H + cols[None, :], lam, mask=m)


class GRUSequence(torch.autograd.Function):
    """``apply(enc, weight_hidden, b_hu, h0, dt, reset_after, block_h) -> (hs, h_T)``."""

    @staticmethod
    def forward(ctx, enc, weight_hidden, b_hu, h0, dt, reset_after, block_h):
        ctx.precision = dot_precision(enc.dtype)  # fixed at the forward: the backward recomputes with it
        B, T, _ = enc.shape
        H = h0.shape[1]
        enc, weight_hidden = enc.contiguous(), weight_hidden.contiguous()
        b_hu = enc.new_zeros(H) if b_hu is None else b_hu.contiguous()
        S = enc.new_empty(B, T + 1, H)
        S[:, 0] = h0
        R = enc.new_empty(B, H)
        consts = torch.tensor([dt], dtype=enc.dtype, device=enc.device)
        BB, BH = block_sizes(B, H, block_h)
        if reset_after and resident(H, block_h):
            _forward_resident[(triton.cdiv(B, BB),)](enc, weight_hidden, b_hu, consts, S, B, T, H, BB=BB, BH=BH,
                                                     PRECISION=ctx.precision, num_warps=warps(BH))
        else:
            _forward[(triton.cdiv(B, BB),)](enc, weight_hidden, b_hu, consts, S, R, B, T, H, RESET_AFTER=reset_after,
                                            BB=BB, BH=BH, PRECISION=ctx.precision, num_warps=warps(BH))
        ctx.save_for_backward(enc, weight_hidden, b_hu, consts, S)
        ctx.reset_after, ctx.block_h = reset_after, block_h
        return S[:, 1:], S[:, T].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_h):
        enc, weight_hidden, b_hu, consts, S = ctx.saved_tensors
        B, T, _ = enc.shape
        H = S.shape[2]
        reset_after = ctx.reset_after
        grad_hs = grad_hs.contiguous()
        G = enc.new_empty(B, T, 4 * H)
        RS = enc.new_empty(B, T, H) if not reset_after else enc.new_empty(1)
        L = enc.new_empty(2, B, H)
        L[T % 2] = grad_h + grad_hs[:, T - 1]
        BB, BH = block_sizes(B, H, ctx.block_h)
        if reset_after and resident(H, ctx.block_h):  # one buffer: final-state adjoint in, initial out
            L[0] = L[T % 2]
            _backward_resident[(triton.cdiv(B, BB),)](enc, weight_hidden, b_hu, consts, S, grad_hs, G, L[0], B, T, H,
                                                      BB=BB, BH=BH, PRECISION=ctx.precision, num_warps=warps(BH))
        else:
            _backward[(triton.cdiv(B, BB),)](enc, weight_hidden, b_hu, consts, S, grad_hs, G, RS, L, B, T, H,
                                             RESET_AFTER=reset_after, BB=BB, BH=BH,
                                             PRECISION=ctx.precision, num_warps=warps(BH))
        h_prev = S[:, :-1]
        d_rf = torch.einsum("btk,bth->kh", G[..., : 2 * H], h_prev)
        if reset_after:
            d_u = torch.einsum("btk,bth->kh", G[..., 3 * H:], h_prev)
            d_b_hu = G[..., 3 * H:].sum((0, 1))
        else:
            d_u = torch.einsum("btk,bth->kh", G[..., 2 * H: 3 * H], RS)
            d_b_hu = None
        return G[..., : 3 * H], torch.cat((d_rf, d_u)), d_b_hu, L[0].clone(), None, None, None


def run(system, x, state, dt, unfolds=1, lags=(), *, block_h=None):
    """The GRU field with explicit Euler ("euler") over ``x`` from ``state`` = (h0,)."""
    h = float(dt) / unfolds
    if unfolds != 1:
        x = x.repeat_interleave(unfolds, dim=1)
    b_hu = system.bias_hidden_candidate if system.reset_after else None
    hs, hT = GRUSequence.apply(system.encode(x), system.weight_hidden, b_hu, state[0], h, system.reset_after, block_h)
    if unfolds != 1:
        hs = hs[:, unfolds - 1::unfolds]
    return hs, (hT,)
