"""Liquid cells (004): LTC and STC with the fused semi-implicit step ("imex-implicit", ``unfolds`` sub-steps
of δ = Δ/L, the input held), LRC (LRCU-A / LRCU-S) with explicit Euler, one Triton launch forward and one
backward over all sub-steps. With y = [h, x] and per synapse o_ji = σ(a_ji y_j + b_ji):

    f_i = Σ_j g_ji o_ji + g_l,   u_i = Σ_j k_ji o_ji + g_l                                    (1)
    LTC:  h ← (h + δ u e_l) / (1 + δ f)          STC:  h ← (h + δ tanh(u) e_l) / (1 + δ σ(f))
    LRC:  h ← h + δ ε(w) (tanh(u) e_l − σ(f) h),  w = O_hᵀ h + (O_xᵀ x + p),  ε = σ(w) or σ(w+k) − σ(w−k)

The synapses are not a matrix product (σ acts on every (batch, j, i)): a step computes (BB, BJ, BH) blocks of
openings and reduces over j. The backward recomputes them from the stored states; their parameter gradients
(g, k, a, b: one (P, H) matrix each) are accumulated per program in the kernel and summed over the programs
in torch; g_l, e_l, the elastance shift per element; the O_h gradient is one GEMM over the stored ∂L/∂w.
Parameters enter through their constrained values (softplus in torch, differentiated by autograd).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from ._common import available, block_sizes, dot_precision, mv, sigmoid, tanh, warps  # noqa: F401

LTC, STC, LRC_ASYMMETRIC, LRC_SYMMETRIC = 0, 1, 2, 3


def block_j(block_h: int) -> int:
    """Presynaptic rows per (BB, BJ, BH) block: 8 with 16-wide tiles, 4 with 32 (8 spills there on sm_90);
    16 under Triton's interpreter (no registers to spill; fewer interpreted steps)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return 16
    return 8 if block_h <= 16 else 4


@triton.jit
def _presynaptic(hp, sS, X, sX, xoff, rows, rmask, js, H, P, NX):
    """y[:, js] = [h, x][:, js] of a (BB, BJ) block (h for j < H, the input for H ≤ j < P)."""
    yv = tl.load(hp + rows[:, None] * sS + js[None, :], mask=rmask[:, None] & (js < H)[None, :], other=0.0)
    xj = js - H
    yv += tl.load(X + xoff + rows[:, None] * sX + xj[None, :],
                  mask=rmask[:, None] & ((js >= H) & (js < P))[None, :], other=0.0)
    return yv


@triton.jit
def _conductances(hp, sS, X, sX, xoff, rows, rmask, cols, GS, AS, BS, KS, GL, H, P, NX,
                  BB: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr):
    cmask = cols < H
    gl = tl.load(GL + cols, mask=cmask, other=0.0)
    f = tl.zeros((BB, BH), dtype=gl.dtype) + gl[None, :]
    u = tl.zeros((BB, BH), dtype=gl.dtype) + gl[None, :]
    for j0 in range(0, P, BJ):
        js = j0 + tl.arange(0, BJ)
        yv = _presynaptic(hp, sS, X, sX, xoff, rows, rmask, js, H, P, NX)
        pm = (js < P)[:, None] & cmask[None, :]
        off = js[:, None] * H + cols[None, :]
        a = tl.load(AS + off, mask=pm, other=0.0)
        b = tl.load(BS + off, mask=pm, other=0.0)
        g = tl.load(GS + off, mask=pm, other=0.0)
        k = tl.load(KS + off, mask=pm, other=0.0)
        o = sigmoid(a[None, :, :] * yv[:, :, None] + b[None, :, :])
        f += tl.sum(o * g[None, :, :], axis=1)
        u += tl.sum(o * k[None, :, :], axis=1)
    return f, u


@triton.jit
def _elastance(w, shift, SYMMETRIC: tl.constexpr):
    """(ε(w), ε'(w), ∂ε/∂shift)."""
    if SYMMETRIC:
        sp = sigmoid(w + shift)
        sm = sigmoid(w - shift)
        return sp - sm, sp * (1.0 - sp) - sm * (1.0 - sm), sp * (1.0 - sp) + sm * (1.0 - sm)
    else:
        s = sigmoid(w)
        return s, s * (1.0 - s), s * 0.0


@triton.jit
def _forward(X, WIN, GS, AS, BS, KS, GL, EL, OH, KSH, C, S, B, T, H, P, NX,
             MODE: tl.constexpr, BB: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    rows = (pid * BB + tl.arange(0, BB)).to(tl.int64)  # 64-bit offsets: B·T·H may pass 2³¹
    rmask = rows < B
    dt = tl.load(C)
    sS = (T + 1) * H
    sX = T * NX
    for n in range(1, T + 1):
        hp = S + (n - 1) * H
        xoff = (n - 1) * NX
        for c0 in range(0, H, BH):
            cols = c0 + tl.arange(0, BH)
            cmask = cols < H
            m = rmask[:, None] & cmask[None, :]
            f, u = _conductances(hp, sS, X, sX, xoff, rows, rmask, cols, GS, AS, BS, KS, GL, H, P, NX, BB, BJ, BH)
            el = tl.load(EL + cols, mask=cmask, other=0.0)[None, :]
            h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
            if MODE == 0:
                h = (h + dt * (u * el)) / (1.0 + dt * f)
            elif MODE == 1:
                h = (h + dt * (tanh(u) * el)) / (1.0 + dt * sigmoid(f))
            else:
                w = tl.load(WIN + (n - 1) * H + rows[:, None] * T * H + cols[None, :], mask=m, other=0.0)
                w = mv(w, hp, sS, rows, rmask, OH, H, c0, H, H, True, BH, PRECISION)
                shift = tl.load(KSH + cols, mask=cmask, other=0.0)[None, :]
                eps, deps, dshift = _elastance(w, shift, MODE == 3)
                h = h + dt * (eps * tanh(u) * el - eps * sigmoid(f) * h)
            tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)
        tl.debug_barrier()


@triton.jit
def _backward(X, WIN, GS, AS, BS, KS, GL, EL, OH, KSH, C, S, GO, GX, GW, L, FU, AE, ACC, B, T, H, P, NX,
              MODE: tl.constexpr, BB: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr):
    """GX (B, T, NX) ∂L/∂x per step; GW (B, T, H) ∂L/∂w (LRC); L (2, B, H) adjoints; FU (2, B, H) ∂L/∂f, ∂L/∂u of
    the current step; AE (3, B, H) per-element sums for e_l, g_l, the shift; ACC (programs, 4, P, H) the
    per-program sums for g, k, a, b."""
    pid = tl.program_id(0)
    rows = (pid * BB + tl.arange(0, BB)).to(tl.int64)  # 64-bit offsets: B·T·H may pass 2³¹
    rmask = rows < B
    dt = tl.load(C)
    sS = (T + 1) * H
    sX = T * NX
    acc = ACC + pid * 4 * P * H
    for i in range(0, T):
        n = T - i
        cur = n % 2
        l_cur = L + cur * B * H
        l_nxt = L + (1 - cur) * B * H
        hp = S + (n - 1) * H
        xoff = (n - 1) * NX
        for c0 in range(0, H, BH):  # ∂L/∂f, ∂L/∂u, the direct part of λ_{n−1}, per-element parameter sums
            cols = c0 + tl.arange(0, BH)
            cmask = cols < H
            m = rmask[:, None] & cmask[None, :]
            ij = rows[:, None] * H + cols[None, :]
            f, u = _conductances(hp, sS, X, sX, xoff, rows, rmask, cols, GS, AS, BS, KS, GL, H, P, NX, BB, BJ, BH)
            el = tl.load(EL + cols, mask=cmask, other=0.0)[None, :]
            h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
            hn = tl.load(S + n * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
            lam = tl.load(l_cur + ij, mask=m, other=0.0)
            a_el = tl.load(AE + ij, mask=m, other=0.0)
            if MODE == 0:
                d = 1.0 + dt * f
                lf = -lam * hn * dt / d
                lu = lam / d * dt * el
                a_el += lam / d * dt * u
                part = lam / d
            elif MODE == 1:
                sf = sigmoid(f)
                tu = tanh(u)
                d = 1.0 + dt * sf
                lf = -lam * hn * dt / d * sf * (1.0 - sf)
                lu = lam / d * dt * el * (1.0 - tu * tu)
                a_el += lam / d * dt * tu
                part = lam / d
            else:
                w = tl.load(WIN + (n - 1) * H + rows[:, None] * T * H + cols[None, :], mask=m, other=0.0)
                w = mv(w, hp, sS, rows, rmask, OH, H, c0, H, H, True, BH, PRECISION)
                shift = tl.load(KSH + cols, mask=cmask, other=0.0)[None, :]
                eps, deps, dshift = _elastance(w, shift, MODE == 3)
                sf = sigmoid(f)
                tu = tanh(u)
                lk = lam * dt
                leps = lk * (tu * el - sf * h)
                lu = lk * eps * el * (1.0 - tu * tu)
                lf = -lk * eps * h * sf * (1.0 - sf)
                a_el += lk * eps * tu
                part = lam * (1.0 - dt * eps * sf)
                tl.store(GW + (n - 1) * H + rows[:, None] * T * H + cols[None, :], leps * deps, mask=m)
                a_sh = tl.load(AE + 2 * B * H + ij, mask=m, other=0.0)
                tl.store(AE + 2 * B * H + ij, a_sh + leps * dshift, mask=m)
            tl.store(AE + ij, a_el, mask=m)
            a_gl = tl.load(AE + B * H + ij, mask=m, other=0.0)
            tl.store(AE + B * H + ij, a_gl + lf + lu, mask=m)
            tl.store(FU + ij, lf, mask=m)
            tl.store(FU + B * H + ij, lu, mask=m)
            tl.store(l_nxt + ij, part, mask=m)
        tl.debug_barrier()
        for j0 in range(0, P, BJ):  # the synapses: ∂L/∂y_j and the (P, H) parameter sums
            js = j0 + tl.arange(0, BJ)
            jmask = js < P
            yv = _presynaptic(hp, sS, X, sX, xoff, rows, rmask, js, H, P, NX)
            ly = tl.zeros((BB, BJ), dtype=yv.dtype)
            for c0 in range(0, H, BH):
                cols = c0 + tl.arange(0, BH)
                cmask = cols < H
                m = rmask[:, None] & cmask[None, :]
                ij = rows[:, None] * H + cols[None, :]
                lf = tl.load(FU + ij, mask=m, other=0.0)
                lu = tl.load(FU + B * H + ij, mask=m, other=0.0)
                pm = jmask[:, None] & cmask[None, :]
                off = js[:, None] * H + cols[None, :]
                a = tl.load(AS + off, mask=pm, other=0.0)
                b = tl.load(BS + off, mask=pm, other=0.0)
                g = tl.load(GS + off, mask=pm, other=0.0)
                k = tl.load(KS + off, mask=pm, other=0.0)
                o = sigmoid(a[None, :, :] * yv[:, :, None] + b[None, :, :])
                ds = (lf[:, None, :] * g[None, :, :] + lu[:, None, :] * k[None, :, :]) * o * (1.0 - o)
                ly += tl.sum(ds * a[None, :, :], axis=2)
                tl.store(acc + off, tl.load(acc + off, mask=pm, other=0.0) + tl.sum(lf[:, None, :] * o, axis=0),
                         mask=pm)
                tl.store(acc + P * H + off,
                         tl.load(acc + P * H + off, mask=pm, other=0.0) + tl.sum(lu[:, None, :] * o, axis=0), mask=pm)
                tl.store(acc + 2 * P * H + off,
                         tl.load(acc + 2 * P * H + off, mask=pm, other=0.0) + tl.sum(ds * yv[:, :, None], axis=0),
                         mask=pm)
                tl.store(acc + 3 * P * H + off,
                         tl.load(acc + 3 * P * H + off, mask=pm, other=0.0) + tl.sum(ds, axis=0), mask=pm)
            hm = rmask[:, None] & (js < H)[None, :]
            lh = tl.load(l_nxt + rows[:, None] * H + js[None, :], mask=hm, other=0.0)
            tl.store(l_nxt + rows[:, None] * H + js[None, :], lh + ly, mask=hm)
            tl.store(GX + xoff + rows[:, None] * sX + (js - H)[None, :], ly,
                     mask=rmask[:, None] & ((js >= H) & jmask)[None, :])
        tl.debug_barrier()
        for c0 in range(0, H, BH):  # + ∂L/∂w O_hᵀ (LRC) + dL/dh_{n−1}
            cols = c0 + tl.arange(0, BH)
            m = rmask[:, None] & (cols < H)[None, :]
            lam = tl.load(l_nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
            if MODE >= 2:
                lam = mv(lam, GW + (n - 1) * H, T * H, rows, rmask, OH, H, c0, H, H, False, BH, PRECISION)
            lam += tl.load(GO + (n - 2) * H + rows[:, None] * T * H + cols[None, :],
                           mask=m & (cols * 0 + n >= 2)[None, :], other=0.0)
            tl.store(l_nxt + rows[:, None] * H + cols[None, :], lam, mask=m)
        tl.debug_barrier()


class LiquidSequence(torch.autograd.Function):
    """``apply(x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, h0, dt, mode, block_h) -> (hs, h_T)``;
    x (B, T, NX) the presynaptic inputs, w_in (B, T, H) the input part of w (LRC; None otherwise)."""

    @staticmethod
    def forward(ctx, x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, h0, dt, mode, block_h):
        ctx.precision = dot_precision(x.dtype)  # fixed at the forward: the backward recomputes with it
        B, T, NX = x.shape
        H = h0.shape[1]
        P = H + NX
        like = h0
        x, g, a, b, k, g_leak, e_leak = (t.contiguous() for t in (x, g, a, b, k, g_leak, e_leak))
        w_in = like.new_zeros(1) if w_in is None else w_in.contiguous()
        o_hidden = like.new_zeros(1) if o_hidden is None else o_hidden.contiguous()
        shift = like.new_zeros(H) if shift is None else shift.contiguous()
        S = like.new_empty(B, T + 1, H)
        S[:, 0] = h0
        consts = torch.tensor([dt], dtype=like.dtype, device=like.device)
        BB, BH = block_sizes(B, H, block_h)
        _forward[(triton.cdiv(B, BB),)](x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, consts, S, B, T, H, P,
                                        NX, MODE=mode, BB=BB, BJ=block_j(BH), BH=BH,
                                        PRECISION=ctx.precision, num_warps=warps(BH))
        ctx.save_for_backward(x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, consts, S)
        ctx.mode, ctx.block_h = mode, block_h
        return S[:, 1:], S[:, T].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_h):
        x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, consts, S = ctx.saved_tensors
        B, T, NX = x.shape
        H = S.shape[2]
        P = H + NX
        mode = ctx.mode
        BB, BH = block_sizes(B, H, ctx.block_h)
        programs = triton.cdiv(B, BB)
        grad_hs = grad_hs.contiguous()
        GX = torch.zeros_like(x)
        GW = S.new_zeros(B, T, H) if mode >= LRC_ASYMMETRIC else S.new_zeros(1)
        L = S.new_empty(2, B, H)
        L[T % 2] = grad_h + grad_hs[:, T - 1]
        FU = S.new_empty(2, B, H)
        AE = S.new_zeros(3, B, H)
        ACC = S.new_zeros(programs, 4, P, H)
        _backward[(programs,)](x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, consts, S, grad_hs, GX, GW, L,
                               FU, AE, ACC, B, T, H, P, NX, MODE=mode, BB=BB, BJ=block_j(BH), BH=BH,
                               PRECISION=ctx.precision, num_warps=warps(BH))
        d_g, d_k, d_a, d_b = ACC.sum(0).unbind(0)
        d_e_leak, d_g_leak, d_shift = AE.sum(1).unbind(0)
        lrc = mode >= LRC_ASYMMETRIC
        d_w_in = GW if lrc else None
        d_o_hidden = torch.einsum("bti,btj->ji", GW, S[:, :-1]) if lrc else None
        d_shift = d_shift if mode == LRC_SYMMETRIC else None
        return (GX, d_w_in, d_g, d_a, d_b, d_k, d_g_leak, d_e_leak, d_o_hidden, d_shift, L[0].clone(),
                None, None, None)


def _run(system, x, state, dt, unfolds, mode, block_h):
    if unfolds != 1:  # L sub-steps of δ = Δ/L with the input held
        x = x.repeat_interleave(unfolds, dim=1)
    inp = system.encode(x)
    m = system.input_size
    xs = inp[..., :m]
    w_in = o_hidden = shift = None
    if mode >= LRC_ASYMMETRIC:
        w_in, o_hidden = inp[..., m:], system.o_hidden
        if mode == LRC_SYMMETRIC:
            shift = F.softplus(system.raw_k_shift)
    hs, hT = LiquidSequence.apply(xs, w_in, F.softplus(system.raw_g), system.a, system.b, system.k,
                                  F.softplus(system.raw_g_leak), system.e_leak, o_hidden, shift, state[0],
                                  float(dt) / unfolds, mode, block_h)
    if unfolds != 1:
        hs = hs[:, unfolds - 1::unfolds]
    return hs, (hT,)


def run_ltc(system, x, state, dt, unfolds=1, lags=(), *, block_h=None):
    """LTC, "imex-implicit" (the ncps fused solver), ``unfolds`` sub-steps per sample."""
    return _run(system, x, state, dt, unfolds, LTC, block_h)


def run_stc(system, x, state, dt, unfolds=1, lags=(), *, block_h=None):
    """STC, "imex-implicit", ``unfolds`` sub-steps per sample."""
    return _run(system, x, state, dt, unfolds, STC, block_h)


def run_lrc(system, x, state, dt, unfolds=1, lags=(), *, block_h=None):
    """LRC (LRCU-A / LRCU-S), "euler"."""
    mode = LRC_SYMMETRIC if system.raw_k_shift is not None else LRC_ASYMMETRIC
    return _run(system, x, state, dt, unfolds, mode, block_h)
