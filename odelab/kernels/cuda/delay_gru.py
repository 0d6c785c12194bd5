"""τ-GRU (001 eq. 14, with the §5 ablation switches) and Delay GRU (001 eq. 12) with Euler and the papers'
ring buffer (zero history), one Triton launch forward and one backward over the sequence (or, for the tiled
sizes, the stepwise schedule of ``stepwise.py``). Step n reads the delayed state h_{n−1−m}, m = ⌊τ/h⌋ (``lags``;
zero before the first state, the current state when m = 0):

    τ-GRU:      h_n = h + Δt (g ⊙ (β tanh(W1 h + e_u) + α σ̂(W4 h + e_a) ⊙ tanh(W2 h_{n−1−m} + e_z)) − g ⊙ h)
    Delay GRU:  h_n = h + Δt (g ⊙ tanh(W1 h + W2 h_{n−1−m} + e_c) − g ⊙ h)
    g = σ̂(W3 h + e_g) (1 without gating),  h = h_{n−1},  [e_·] = ``encode(x)``

The ring buffer is the state buffer itself: every state is kept (it is what the backward needs), so the
delayed read is an offset. The backward writes the pre-activation gradients per step; the adjoint of the
delayed read, g_delayed W2, is stored at index n−1−m of a (batch, T + 1, hidden) buffer and added when the
backward sweep reaches that state. Weight gradients: GEMMs over all steps in torch. With no backward to come the
forward runs in chunks of steps (:func:`_run`).

State dropout (``drop=``, a constexpr DROP in every schedule; False compiles to the code without it): step n runs from
h̃ = K0 ⊙ h_{n−1} and q̃ = K1 ⊙ h_{n−1−m} (K = drop[:, n − 1]) in place of h and h_{n−1−m}; the backward then sends
K0 ⊙ (λ_n (1 − Δt g) + Σ_b g_b W_b) and K1 ⊙ g_delayed W2 back, the output gradient unmultiplied.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...solvers.recurrence import DelayedState, carried_history, incoming_history
from .. import chunks
from ..derivatives import kernel_backward
from . import grid
from ._common import (  # noqa: F401
    address, available, batch_rows, block_sizes, dot, dot_precision, mv, on_device, outer_sum, resident, resident_block,
    sigmoid, step_launches, tanh, tile, tile_at, warps, weights)
from .stepwise import launch_steps


@triton.jit
def _factors(D, n, rows, rmask, cols, cmask, T, H):
    """Step n's dropout factors (K0, K1) = (D[:, n − 1, 0], D[:, n − 1, 1]) of the (B, T, 2, H) factors on the columns
    ``cols``, zero outside 1 ≤ n ≤ T (so that a register-resident kernel may load them a step ahead or behind)."""
    sD = T * 2 * H
    return (tile_at(D - 2 * H, n, 2 * H, sD, rows, rmask, cols, cmask, 1, T),
            tile_at(D - H, n, 2 * H, sD, rows, rmask, cols, cmask, 1, T))


@triton.jit
def _mv_kept(acc, s_ptr, s_stride, k_ptr, k_stride, rows, rmask, w_ptr, c0, H, BH: tl.constexpr,
             PRECISION: tl.constexpr, DROP: tl.constexpr):
    """acc + s @ Wᵀ[:, c0 : c0 + BH] (:func:`mv`) for an H × H map W, given as Wᵀ at w_ptr (:func:`transposed`),
    and the state rows s at s_ptr; with DROP, s multiplied by the factors at k_ptr (row stride k_stride) first: a
    branch's product with h̃ or q̃."""
    if DROP:
        cols = c0 + tl.arange(0, BH)
        cmask = cols < H
        for k0 in range(0, H, BH):
            ks = k0 + tl.arange(0, BH)
            kmask = ks < H
            m = rmask[:, None] & kmask[None, :]
            s = tl.load(s_ptr + rows[:, None] * s_stride + ks[None, :], mask=m, other=0.0)
            s = s * tl.load(k_ptr + rows[:, None] * k_stride + ks[None, :], mask=m, other=0.0)
            w = tl.load(w_ptr + ks[:, None] * H + cols[None, :], mask=kmask[:, None] & cmask[None, :], other=0.0)
            acc = dot(s, w, acc, PRECISION)
    else:
        acc = mv(acc, s_ptr, s_stride, rows, rmask, w_ptr, H, c0, H, H, True, BH, PRECISION)
    return acc


@triton.jit
def _branches(E, WHT, W2T, S, D, alpha, beta, n, c0, rows, rmask, T, H, M, NE: tl.constexpr,
              HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
              U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
              WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
              PRECISION: tl.constexpr, DROP: tl.constexpr, STORED: tl.constexpr = False):
    """(target, u, z, a, g, h, mask) of step n on columns c0 : c0 + BH, from h = h_{n−1} and the delayed
    h_{n−1−m} (zero before the first state); absent branches give 0 (u, z) or 1 (a, g). With DROP (state dropout,
    D the (B, T, 2, H) factors): from h̃ = K0 ⊙ h_{n−1} and q̃ = K1 ⊙ h_{n−1−m} (K = D[:, n − 1]), h = h̃. WHT, W2T:
    the maps transposed (:func:`transposed`). With STORED, E holds the branches u, z, a, g that the forward stored
    (:func:`_store_branches`), read instead of computed."""
    sE = T * NE * H
    sS = (T + 1) * H
    sD = T * 2 * H
    k0 = D + (n - 1) * 2 * H  # K0; K1 at k0 + H
    e = E + (n - 1) * NE * H
    hp = S + (n - 1) * H
    hd = S + (n - 1 - M) * H
    dmask = rmask & (rows * 0 + n - 1 - M >= 0)  # zero history
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    zero = tl.zeros((BB, BH), dtype=S.dtype.element_ty)
    u = zero
    z = zero
    a = zero + 1.0
    g = zero + 1.0
    if HAS_U:
        u = tl.load(e + EU * H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
        if not STORED:
            pu = _mv_kept(u, hp, sS, k0, sD, rows, rmask, WHT + WU * H * H, c0, H, BH, PRECISION, DROP)
            if U_DELAYED:
                pu = _mv_kept(pu, hd, sS, k0 + H, sD, rows, dmask, W2T, c0, H, BH, PRECISION, DROP)
            u = tanh(pu)
    if HAS_Z:
        z = tl.load(e + EZ * H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
        if not STORED:
            z = tanh(_mv_kept(z, hd, sS, k0 + H, sD, rows, dmask, W2T, c0, H, BH, PRECISION, DROP))
        if HAS_A:
            a = tl.load(e + EA * H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
            if not STORED:
                a = sigmoid(_mv_kept(a, hp, sS, k0, sD, rows, rmask, WHT + WA * H * H, c0, H, BH, PRECISION, DROP))
    if HAS_G:
        g = tl.load(e + EG * H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
        if not STORED:
            g = sigmoid(_mv_kept(g, hp, sS, k0, sD, rows, rmask, WHT + WG * H * H, c0, H, BH, PRECISION, DROP))
    h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    if DROP:
        h = h * tl.load(k0 + rows[:, None] * sD + cols[None, :], mask=m, other=0.0)
    return _target(u, z, a, alpha, beta, HAS_U, HAS_Z), u, z, a, g, h, m


@triton.jit
def _store_branches(PRE, n, rows, cols, m, u, z, a, g, T, H, NE: tl.constexpr, HAS_U: tl.constexpr,
                    HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr, EU: tl.constexpr,
                    EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr):
    """Step n's branches u, z, a, g (those present) of columns ``cols`` into PRE (B, T, NE·H) at their encodings'
    blocks, for a backward that reads them (STORED)."""
    at = PRE + (n - 1) * NE * H + rows[:, None] * (T * NE * H) + cols[None, :]
    if HAS_U:
        tl.store(at + EU * H, u, mask=m)
    if HAS_Z:
        tl.store(at + EZ * H, z, mask=m)
        if HAS_A:
            tl.store(at + EA * H, a, mask=m)
    if HAS_G:
        tl.store(at + EG * H, g, mask=m)


@triton.jit
def _forward_tile(E, WHT, W2T, S, D, dt, alpha, beta, n, c0, rows, rmask, T, H, M, NE: tl.constexpr,
                  HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                  U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
                  WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
                  PRECISION: tl.constexpr, DROP: tl.constexpr, PRE=None, STORE: tl.constexpr = False):
    """Columns c0 : c0 + BH of h_n = h + Δt (g ⊙ target − g ⊙ h) (eq. 14 / eq. 12; with DROP, h = h̃); with STORE,
    the branches into PRE (:func:`_store_branches`)."""
    target, u, z, a, g, h, m = _branches(E, WHT, W2T, S, D, alpha, beta, n, c0, rows, rmask, T, H, M, NE, HAS_U,
                                         HAS_Z, HAS_G, HAS_A, U_DELAYED, EU, EZ, EG, EA, WU, WG, WA, BB, BH,
                                         PRECISION, DROP)
    cols = c0 + tl.arange(0, BH)
    h = h + dt * (g * target - g * h)
    tl.store(S + n * H + rows[:, None] * ((T + 1) * H) + cols[None, :], h, mask=m)
    if STORE:
        _store_branches(PRE, n, rows, cols, m, u, z, a, g, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A, EU, EZ, EG, EA)


@triton.jit
def _store_gate_gradients(gp, sE, rows, cols, m, lam, target, h, u, z, a, g, dt, alpha, beta, H, HAS_U: tl.constexpr,
                          HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr, EU: tl.constexpr,
                          EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr):
    """The pre-activation gradients of the present branches on columns ``cols`` into their blocks of gp (row stride
    sE), from λ_n = lam and the step's branches (:func:`_branches`)."""
    gt = lam * dt * g  # ∂L/∂target
    if HAS_G:
        tl.store(gp + EG * H + rows[:, None] * sE + cols[None, :], lam * dt * (target - h) * g * (1.0 - g), mask=m)
    if HAS_U:
        tl.store(gp + EU * H + rows[:, None] * sE + cols[None, :], gt * beta * (1.0 - u * u), mask=m)
    if HAS_Z:
        tl.store(gp + EZ * H + rows[:, None] * sE + cols[None, :], gt * alpha * a * (1.0 - z * z), mask=m)
        if HAS_A:
            tl.store(gp + EA * H + rows[:, None] * sE + cols[None, :], gt * alpha * z * a * (1.0 - a), mask=m)


@triton.jit
def _backward_gates_tile(E, WHT, W2T, S, D, G, L, dt, alpha, beta, n, c0, rows, rmask, B, T, H, M, NE: tl.constexpr,
                         HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                         U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr,
                         EA: tl.constexpr, WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, BB: tl.constexpr,
                         BH: tl.constexpr, PRECISION: tl.constexpr, DROP: tl.constexpr, STORED: tl.constexpr = False):
    """The pre-activation gradients of step n on columns c0 : c0 + BH from λ_n = L[n % 2], and λ_{n−1}'s direct
    part λ_n (1 − Δt g) into L[(n − 1) % 2] (L: (2, B, H)); STORED: the branches read (:func:`_branches`)."""
    sE = T * NE * H
    cur = n % 2
    gp = G + (n - 1) * NE * H
    cols = c0 + tl.arange(0, BH)
    target, u, z, a, g, h, m = _branches(E, WHT, W2T, S, D, alpha, beta, n, c0, rows, rmask, T, H, M, NE, HAS_U,
                                         HAS_Z, HAS_G, HAS_A, U_DELAYED, EU, EZ, EG, EA, WU, WG, WA, BB, BH,
                                         PRECISION, DROP, STORED)
    lam = tl.load(L + cur * B * H + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    _store_gate_gradients(gp, sE, rows, cols, m, lam, target, h, u, z, a, g, dt, alpha, beta, H, HAS_U, HAS_Z, HAS_G,
                          HAS_A, EU, EZ, EG, EA)
    tl.store(L + (1 - cur) * B * H + rows[:, None] * H + cols[None, :], lam * (1.0 - dt * g), mask=m)


@triton.jit
def _backward_adjoint_tile(WH, W2, GO, G, L, LD, D, n, c0, rows, rmask, B, T, H, M, NE: tl.constexpr,
                           HAS_U: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr, EU: tl.constexpr,
                           EG: tl.constexpr, EA: tl.constexpr, WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr,
                           ED: tl.constexpr, HAS_D: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
                           PRECISION: tl.constexpr, DROP: tl.constexpr):
    """λ_{n−1} on columns c0 : c0 + BH = its direct part (L[(n − 1) % 2]) + Σ_b g_b W_b + ∂L/∂h_{n−1} + the
    delayed adjoint LD[n − 1]; the delayed read's g_delayed W2 goes to LD[n − 1 − m] (to λ_{n−1} when m = 0). With
    DROP: K0 ⊙ (direct part + Σ_b g_b W_b) (what flows through h̃), and K1 ⊙ g_delayed W2."""
    sE = T * NE * H
    sS = (T + 1) * H
    sO = T * H
    nxt = L + (1 - n % 2) * B * H
    gp = G + (n - 1) * NE * H
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    lam = tl.load(nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    if HAS_U:
        lam = mv(lam, gp + EU * H, sE, rows, rmask, WH + WU * H * H, H, c0, H, H, True, BH, PRECISION)
    if HAS_G:
        lam = mv(lam, gp + EG * H, sE, rows, rmask, WH + WG * H * H, H, c0, H, H, True, BH, PRECISION)
    if HAS_A:
        lam = mv(lam, gp + EA * H, sE, rows, rmask, WH + WA * H * H, H, c0, H, H, True, BH, PRECISION)
    if DROP:
        k0, k1 = _factors(D, n, rows, rmask, cols, cols < H, T, H)
        lam = lam * k0
    lam += tl.load(GO + (n - 2) * H + rows[:, None] * sO + cols[None, :], mask=m & (cols * 0 + n >= 2)[None, :],
                   other=0.0)
    lam += tl.load(LD + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    if HAS_D:
        zero = tl.zeros((BB, BH), dtype=L.dtype.element_ty)
        gd = mv(zero, gp + ED * H, sE, rows, rmask, W2, H, c0, H, H, True, BH, PRECISION)
        if DROP:
            gd = gd * k1
        lam += tl.where(cols * 0 + M == 0, 1.0, 0.0)[None, :] * gd  # m = 0: the current state
        tl.store(LD + (n - 1 - M) * H + rows[:, None] * sS + cols[None, :], gd,
                 mask=m & ((cols * 0 + M > 0) & (cols * 0 + n - 1 - M >= 0))[None, :])
    tl.store(nxt + rows[:, None] * H + cols[None, :], lam, mask=m)


@triton.jit
def _forward(E, WH, W2, WHT, W2T, C, S, B, T, H, M, D, NE: tl.constexpr,
             HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
             U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
             WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
             PRECISION: tl.constexpr, DROP: tl.constexpr):
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    alpha = tl.load(C + 1)
    beta = tl.load(C + 2)
    for n in range(1, T + 1):
        for c0 in range(0, H, BH):
            _forward_tile(E, WHT, W2T, S, D, dt, alpha, beta, n, c0, rows, rmask, T, H, M, NE, HAS_U, HAS_Z, HAS_G,
                          HAS_A, U_DELAYED, EU, EZ, EG, EA, WU, WG, WA, BB, BH, PRECISION, DROP)
        tl.debug_barrier()


@triton.jit
def _backward(E, WH, W2, WHT, W2T, C, S, GO, G, L, LD, B, T, H, M, D, NE: tl.constexpr,
              HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
              U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
              WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, ED: tl.constexpr, HAS_D: tl.constexpr,
              BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, DROP: tl.constexpr):
    """G (B, T, NE·H) pre-activation gradients (encoding layout); L (2, B, H) adjoint ping-pong: step n reads
    L[n % 2] and writes L[(n − 1) % 2]; LD (B, T+1, H) the delayed-read adjoints, zero-initialised; ED = the
    encoding block of the delayed pre-activation; D (B, T, 2, H) the dropout factors, read with DROP."""
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    alpha = tl.load(C + 1)
    beta = tl.load(C + 2)
    for i in range(0, T):
        n = T - i
        for c0 in range(0, H, BH):  # the gradients of step n's pre-activations; λ_{n−1}'s direct part
            _backward_gates_tile(E, WHT, W2T, S, D, G, L, dt, alpha, beta, n, c0, rows, rmask, B, T, H, M, NE, HAS_U,
                                 HAS_Z, HAS_G, HAS_A, U_DELAYED, EU, EZ, EG, EA, WU, WG, WA, BB, BH, PRECISION, DROP)
        tl.debug_barrier()
        for c0 in range(0, H, BH):  # λ_{n−1} += Σ g_b W_b + dL/dh_{n−1} + delayed adjoints
            _backward_adjoint_tile(WH, W2, GO, G, L, LD, D, n, c0, rows, rmask, B, T, H, M, NE, HAS_U, HAS_G, HAS_A,
                                   EU, EG, EA, WU, WG, WA, ED, HAS_D, BB, BH, PRECISION, DROP)
        tl.debug_barrier()


@triton.jit
def _step_program(TABLE, REF, B, BB: tl.constexpr, BH: tl.constexpr):
    """This program's batch rows (axis 0 of the grid), their mask, its first column (axis 1), E, WH, W2, S and
    (Δt, α, β) from the address table (entries 0–4 = [E, WH, W2, C, S] in both step kernels)."""
    rows, rmask = batch_rows(B, BB)
    C = address(TABLE, 3, REF)
    return (rows, rmask, tl.program_id(1) * BH, address(TABLE, 0, REF), address(TABLE, 1, REF),
            address(TABLE, 2, REF), address(TABLE, 4, REF), tl.load(C), tl.load(C + 1), tl.load(C + 2))


@triton.jit(do_not_specialize=["n"])
def _step(TABLE, REF, n, B, T, H, M, PHASE: tl.constexpr, NE: tl.constexpr,
          HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
          U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
          WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
          PRECISION: tl.constexpr, DROP: tl.constexpr, STORE: tl.constexpr = False):
    """The stepwise schedule (stepwise.py): step n (one phase, PHASE = 0) on one (batch block, column tile)
    program; TABLE = the addresses of [E, WH, W2, C, S, D, WHT, W2T] (D: the dropout factors, read with DROP; WHT,
    W2T: the maps transposed, :func:`transposed`, the only ones read forward) and, with STORE, PRE (B, T, NE·H): the
    branches of every step, for a backward with STORED."""
    tl.static_assert(PHASE == 0)
    rows, rmask, c0, E, WH, W2, S, dt, alpha, beta = _step_program(TABLE, REF, B, BB, BH)
    D = S  # not read without DROP
    if DROP:
        D = address(TABLE, 5, REF)
    PRE = address(TABLE, 8, REF) if STORE else E
    _forward_tile(E, address(TABLE, 6, REF), address(TABLE, 7, REF), S, D, dt, alpha, beta, n, c0, rows, rmask, T, H,
                  M, NE, HAS_U, HAS_Z, HAS_G, HAS_A, U_DELAYED, EU, EZ, EG, EA, WU, WG, WA, BB, BH, PRECISION, DROP,
                  PRE, STORE)


@triton.jit(do_not_specialize=["n"])
def _step_backward(TABLE, REF, n, B, T, H, M, PHASE: tl.constexpr, NE: tl.constexpr,
                   HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                   U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
                   WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, ED: tl.constexpr, HAS_D: tl.constexpr,
                   BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, DROP: tl.constexpr,
                   STORED: tl.constexpr = False):
    """Phase PHASE of the backward of step n (0: the pre-activation gradients, 1: λ_{n−1}) on one program;
    TABLE = the addresses of [E, WH, W2, C, S, GO, G, L, LD, D, WHT, W2T] (D read with DROP; WHT, W2T: the maps
    transposed, for the recomputed pre-activations; with STORED, E is the branches the forward stored, read
    instead)."""
    rows, rmask, c0, E, WH, W2, S, dt, alpha, beta = _step_program(TABLE, REF, B, BB, BH)
    G = address(TABLE, 6, REF)
    L = address(TABLE, 7, REF)
    D = S  # not read without DROP
    if DROP:
        D = address(TABLE, 9, REF)
    if PHASE == 0:
        _backward_gates_tile(E, address(TABLE, 10, REF), address(TABLE, 11, REF), S, D, G, L, dt, alpha, beta, n, c0,
                             rows, rmask, B, T, H, M, NE, HAS_U, HAS_Z, HAS_G, HAS_A, U_DELAYED, EU, EZ, EG, EA, WU,
                             WG, WA, BB, BH, PRECISION, DROP, STORED)
    else:
        _backward_adjoint_tile(WH, W2, address(TABLE, 5, REF), G, L, address(TABLE, 8, REF), D, n, c0, rows, rmask,
                               B, T, H, M, NE, HAS_U, HAS_G, HAS_A, EU, EG, EA, WU, WG, WA, ED, HAS_D, BB, BH,
                               PRECISION, DROP)


@triton.jit
def _weights_resident(WH, W2, WHT, W2T, H, HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr,
                      HAS_A: tl.constexpr, U_DELAYED: tl.constexpr, WU: tl.constexpr, WG: tl.constexpr,
                      WA: tl.constexpr, BH: tl.constexpr):
    """(W, Wᵀ) register tiles of the present maps (u, g, a of h; W2 of the delayed state), Wᵀ read in order from
    the transposed copies WHT, W2T; zeros otherwise."""
    none = tl.zeros((BH, BH), dtype=WH.dtype.element_ty)
    wu, wut, wg, wgt, wa, wat, w2, w2t = none, none, none, none, none, none, none, none
    if HAS_U:
        wu, wut = weights(WH + WU * H * H, H, H, BH), weights(WHT + WU * H * H, H, H, BH)
    if HAS_G:
        wg, wgt = weights(WH + WG * H * H, H, H, BH), weights(WHT + WG * H * H, H, H, BH)
    if HAS_A:
        wa, wat = weights(WH + WA * H * H, H, H, BH), weights(WHT + WA * H * H, H, H, BH)
    if HAS_Z or U_DELAYED:
        w2, w2t = weights(W2, H, H, BH), weights(W2T, H, H, BH)
    return wu, wut, wg, wgt, wa, wat, w2, w2t


@triton.jit
def _inputs_resident(E, n, rows, rmask, cols, cmask, T, H, NE: tl.constexpr, HAS_U: tl.constexpr,
                     HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr, EU: tl.constexpr,
                     EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr):
    """Step n's encoded input blocks (eu, ez, ea, eg) as (BB, BH) tiles: zero where the cell has no such block or
    outside 1 ≤ n ≤ T (the resident kernels load them a step ahead of their use)."""
    e = E - NE * H  # step n's blocks at e + n NE H
    sE = T * NE * H
    zero = tl.zeros((BB, BH), dtype=E.dtype.element_ty)
    eu = zero
    ez = zero
    ea = zero
    eg = zero
    if HAS_U:
        eu = tile_at(e + EU * H, n, NE * H, sE, rows, rmask, cols, cmask, 1, T)
    if HAS_Z:
        ez = tile_at(e + EZ * H, n, NE * H, sE, rows, rmask, cols, cmask, 1, T)
        if HAS_A:
            ea = tile_at(e + EA * H, n, NE * H, sE, rows, rmask, cols, cmask, 1, T)
    if HAS_G:
        eg = tile_at(e + EG * H, n, NE * H, sE, rows, rmask, cols, cmask, 1, T)
    return eu, ez, ea, eg


@triton.jit
def _stored_resident(S, GO, n, M, rows, rmask, cols, cmask, T, H):
    """What the resident backward of step n reads from the forward: (h_{n−1}, h_{n−1−m}, ∂L/∂h_{n−1} from the
    outputs), zero outside 1 ≤ n ≤ T (and before h_0, and the output gradient before n = 2)."""
    sS = (T + 1) * H
    return (tile_at(S - H, n, H, sS, rows, rmask, cols, cmask, 1, T),
            tile_at(S - (1 + M) * H, n, H, sS, rows, rmask, cols, cmask, 1 + M, T),
            tile_at(GO - 2 * H, n, H, T * H, rows, rmask, cols, cmask, 2, T))


@triton.jit
def _branches_resident(eu, ez, ea, eg, h, hd, wut, wgt, wat, w2t, alpha, beta,
                       HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                       U_DELAYED: tl.constexpr, PRECISION: tl.constexpr):
    """:func:`_branches` with the weights, h and the step's encoded input (:func:`_inputs_resident`) in
    registers (h, hd: this program's columns, or the whole rows against column tiles of the weights)."""
    zero = eu * 0.0
    u = zero
    z = zero
    a = zero + 1.0
    g = zero + 1.0
    if HAS_U:
        pu = dot(h, wut, eu, PRECISION)
        if U_DELAYED:
            pu = dot(hd, w2t, pu, PRECISION)
        u = tanh(pu)
    if HAS_Z:
        z = tanh(dot(hd, w2t, ez, PRECISION))
        if HAS_A:
            a = sigmoid(dot(h, wat, ea, PRECISION))
    if HAS_G:
        g = sigmoid(dot(h, wgt, eg, PRECISION))
    return _target(u, z, a, alpha, beta, HAS_U, HAS_Z), u, z, a, g


@triton.jit
def _target(u, z, a, alpha, beta, HAS_U: tl.constexpr, HAS_Z: tl.constexpr):
    """β u + α a ⊙ z of the present branches (u = tanh(·), z = tanh(·), a = σ̂(·) or 1)."""
    target = u * 0.0
    if HAS_U:
        target = beta * u
    if HAS_Z:
        target += alpha * (a * z)
    return target


@triton.jit
def _forward_resident(E, WH, W2, WHT, W2T, C, S, B, T, H, M, D, NE: tl.constexpr,
                      HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                      U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr,
                      EA: tl.constexpr, WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, BB: tl.constexpr,
                      BH: tl.constexpr, PRECISION: tl.constexpr, DROP: tl.constexpr):
    """hidden ≤ BH: weights and h in registers; the delayed state read back from the state buffer (a barrier
    per step makes the other threads' stores visible). DROP: the step from h̃, q̃ (factors loaded a step ahead)."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    alpha = tl.load(C + 1)
    beta = tl.load(C + 2)
    sS = (T + 1) * H
    wu, wut, wg, wgt, wa, wat, w2, w2t = _weights_resident(WH, W2, WHT, W2T, H, HAS_U, HAS_Z, HAS_G, HAS_A,
                                                           U_DELAYED, WU, WG, WA, BH)
    h = tile(S, sS, rows, rmask, cols, cmask)
    eu, ez, ea, eg = _inputs_resident(E, 1, rows, rmask, cols, cmask, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A, EU, EZ,
                                      EG, EA, BB, BH)
    if DROP:
        k0, k1 = _factors(D, 1, rows, rmask, cols, cmask, T, H)
    for n in range(1, T + 1):
        # step n + 1's encoded input, loaded while step n computes
        fu, fz, fa, fg = _inputs_resident(E, n + 1, rows, rmask, cols, cmask, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A,
                                          EU, EZ, EG, EA, BB, BH)
        hd = tile(S + (n - 1 - M) * H, sS, rows, rmask & (rows * 0 + n - 1 - M >= 0), cols, cmask)
        if DROP:  # h̃ = K0 ⊙ h_{n−1}, q̃ = K1 ⊙ h_{n−1−m}
            f0, f1 = _factors(D, n + 1, rows, rmask, cols, cmask, T, H)
            h = h * k0
            hd = hd * k1
        target, u, z, a, g = _branches_resident(eu, ez, ea, eg, h, hd, wut, wgt, wat, w2t, alpha, beta, HAS_U,
                                                HAS_Z, HAS_G, HAS_A, U_DELAYED, PRECISION)
        h = h + dt * (g * target - g * h)
        tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)
        tl.debug_barrier()
        eu, ez, ea, eg = fu, fz, fa, fg
        if DROP:
            k0, k1 = f0, f1


@triton.jit
def _backward_resident(E, WH, W2, WHT, W2T, C, S, GO, G, L, LD, B, T, H, M, D, NE: tl.constexpr,
                       HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                       U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr,
                       EA: tl.constexpr, WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, ED: tl.constexpr,
                       HAS_D: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr,
                       DROP: tl.constexpr):
    """hidden ≤ BH: weights and the adjoint in registers; L (B, H): final-state adjoint in, initial out; LD as in
    :func:`_backward` (global: written at step n for the state n − 1 − m, read m steps later); DROP as there."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    alpha = tl.load(C + 1)
    beta = tl.load(C + 2)
    sE = T * NE * H
    sS = (T + 1) * H
    wu, wut, wg, wgt, wa, wat, w2, w2t = _weights_resident(WH, W2, WHT, W2T, H, HAS_U, HAS_Z, HAS_G, HAS_A,
                                                           U_DELAYED, WU, WG, WA, BH)
    lam = tile(L, H, rows, rmask, cols, cmask)
    eu, ez, ea, eg = _inputs_resident(E, T, rows, rmask, cols, cmask, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A, EU, EZ,
                                      EG, EA, BB, BH)
    h, hd, go = _stored_resident(S, GO, T, M, rows, rmask, cols, cmask, T, H)
    if DROP:
        k0, k1 = _factors(D, T, rows, rmask, cols, cmask, T, H)
    for i in range(0, T):
        n = T - i
        gp = G + (n - 1) * NE * H
        # step n − 1's encoded input, stored states and output gradient, loaded while step n computes
        fu, fz, fa, fg = _inputs_resident(E, n - 1, rows, rmask, cols, cmask, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A,
                                          EU, EZ, EG, EA, BB, BH)
        h_next, hd_next, go_next = _stored_resident(S, GO, n - 1, M, rows, rmask, cols, cmask, T, H)
        if DROP:  # the branches of h̃ = K0 ⊙ h_{n−1}, q̃ = K1 ⊙ h_{n−1−m}
            f0, f1 = _factors(D, n - 1, rows, rmask, cols, cmask, T, H)
            h = h * k0
            hd = hd * k1
        target, u, z, a, g = _branches_resident(eu, ez, ea, eg, h, hd, wut, wgt, wat, w2t, alpha, beta, HAS_U,
                                                HAS_Z, HAS_G, HAS_A, U_DELAYED, PRECISION)
        gt = lam * dt * g
        new = lam * (1.0 - dt * g)
        if HAS_G:
            gg = lam * dt * (target - h) * g * (1.0 - g)
            tl.store(gp + EG * H + rows[:, None] * sE + cols[None, :], gg, mask=m)
            new = dot(gg, wg, new, PRECISION)
        if HAS_U:
            gu = gt * beta * (1.0 - u * u)
            tl.store(gp + EU * H + rows[:, None] * sE + cols[None, :], gu, mask=m)
            new = dot(gu, wu, new, PRECISION)
        if HAS_Z:
            gz = gt * alpha * a * (1.0 - z * z)
            tl.store(gp + EZ * H + rows[:, None] * sE + cols[None, :], gz, mask=m)
            if HAS_A:
                ga = gt * alpha * z * a * (1.0 - a)
                tl.store(gp + EA * H + rows[:, None] * sE + cols[None, :], ga, mask=m)
                new = dot(ga, wa, new, PRECISION)
        if DROP:  # what flows through h̃
            new = new * k0
        if HAS_D:
            if U_DELAYED:
                gd = dot(gu, w2, tl.zeros((BB, BH), dtype=h.dtype), PRECISION)
            else:
                gd = dot(gz, w2, tl.zeros((BB, BH), dtype=h.dtype), PRECISION)
            if DROP:
                gd = gd * k1
            new += tl.where(cols * 0 + M == 0, 1.0, 0.0)[None, :] * gd  # m = 0: the current state
            tl.store(LD + (n - 1 - M) * H + rows[:, None] * sS + cols[None, :], gd,
                     mask=m & ((cols * 0 + M > 0) & (cols * 0 + n - 1 - M >= 0))[None, :])
        new += go
        tl.debug_barrier()  # LD[n − 1] was written m steps ago, possibly by another thread
        new += tl.load(LD + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
        lam = new
        eu, ez, ea, eg = fu, fz, fa, fg
        h, hd, go = h_next, hd_next, go_next
        if DROP:
            k0, k1 = f0, f1
    tl.store(L + rows[:, None] * H + cols[None, :], lam, mask=m)


@triton.jit
def _grid(TABLE, REF, SYNC, B, T, H, M, BACKWARD: tl.constexpr, NE: tl.constexpr,
          HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
          U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
          WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, ED: tl.constexpr, HAS_D: tl.constexpr,
          BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr, DROP: tl.constexpr,
          STORED: tl.constexpr = False):
    """The grid-synchronised schedule (grid.py): :func:`_step` for every step (or, BACKWARD, the two phases of
    :func:`_step_backward`, steps T … 1) in one launch, a barrier after each phase; TABLE as theirs; STORED: the
    forward stores its branches (STORE), the backward reads them."""
    k = 0
    spins = LIMIT
    for i in range(0, T):
        if BACKWARD:
            for phase in tl.static_range(2):
                _step_backward(TABLE, REF, T - i, B, T, H, M, phase, NE, HAS_U, HAS_Z, HAS_G, HAS_A, U_DELAYED, EU,
                               EZ, EG, EA, WU, WG, WA, ED, HAS_D, BB, BH, PRECISION, DROP, STORED)
                k, spins = grid.barrier(SYNC, k, spins)
        else:
            _step(TABLE, REF, i + 1, B, T, H, M, 0, NE, HAS_U, HAS_Z, HAS_G, HAS_A, U_DELAYED, EU, EZ, EG, EA, WU, WG,
                  WA, BB, BH, PRECISION, DROP, STORED)
            k, spins = grid.barrier(SYNC, k, spins)


# -- the grid schedule with weights on chip (grid.resident): a program keeps its column tiles of the present maps
# (both orientations in the backward) for the whole sequence and reads the whole rows of h_{n−1}, h_{n−1−m}
# (forward) or of the pre-activation gradients (backward); one barrier a step each way. The delayed adjoint
# g_delayed W2 of this program's columns goes to LD at those columns, read back by this program m steps later --

@triton.jit
def _column_pair(W, WT, cols, H, HP: tl.constexpr):
    """An H × H map's ``grid.column_tile``s for this program's columns: (for G @ it = G W, for S @ it = S Wᵀ), the
    second from its transposed copy WT."""
    return grid.column_tile(W, H, cols, H, HP), grid.column_tile(WT, H, cols, H, HP)


@triton.jit
def _weights_grid(WH, W2, WHT, W2T, cols, H, HP: tl.constexpr, HAS_U: tl.constexpr, HAS_Z: tl.constexpr,
                  HAS_G: tl.constexpr, HAS_A: tl.constexpr, U_DELAYED: tl.constexpr, WU: tl.constexpr,
                  WG: tl.constexpr, WA: tl.constexpr):
    """:func:`_weights_resident`'s (W, Wᵀ) pairs as ``grid.column_tile``s (TRANS, and not) for this program's
    columns; zeros for the absent maps."""
    none = tl.zeros((HP, cols.shape[0]), dtype=WH.dtype.element_ty)
    wu, wut, wg, wgt, wa, wat, w2, w2t = none, none, none, none, none, none, none, none
    if HAS_U:
        wu, wut = _column_pair(WH + WU * H * H, WHT + WU * H * H, cols, H, HP)
    if HAS_G:
        wg, wgt = _column_pair(WH + WG * H * H, WHT + WG * H * H, cols, H, HP)
    if HAS_A:
        wa, wat = _column_pair(WH + WA * H * H, WHT + WA * H * H, cols, H, HP)
    if HAS_Z or U_DELAYED:
        w2, w2t = _column_pair(W2, W2T, cols, H, HP)
    return wu, wut, wg, wgt, wa, wat, w2, w2t


@triton.jit
def _grid_rows(S, n, M, rows, rmask, T, H, HP: tl.constexpr):
    """The whole rows of h_{n−1} and of the delayed h_{n−1−m} (zero before h_0)."""
    sS = (T + 1) * H
    return (grid.rows_of(S + (n - 1) * H, sS, rows, rmask, H, HP),
            grid.rows_of(S + (n - 1 - M) * H, sS, rows, rmask & (rows * 0 + n - 1 - M >= 0), H, HP))


@triton.jit
def _grid_dropped(D, n, h_row, hd_row, h, rows, rmask, cols, cmask, T, H, HP: tl.constexpr):
    """Step n's dropout (factors K = D[:, n − 1]) on :func:`_grid_rows`'s rows and this program's columns h of
    h_{n−1}: (K0 ⊙ h_row, K1 ⊙ hd_row, K0 ⊙ h, the columns' (K0, K1))."""
    sD = T * 2 * H
    k = D + (n - 1) * 2 * H
    k0, k1 = _factors(D, n, rows, rmask, cols, cmask, T, H)
    return (h_row * grid.rows_of(k, sD, rows, rmask, H, HP), hd_row * grid.rows_of(k + H, sD, rows, rmask, H, HP),
            h * k0, k0, k1)


@triton.jit
def _grid_forward(E, WH, W2, WHT, W2T, C, S, SYNC, B, T, H, M, D, NE: tl.constexpr,
                  HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                  U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
                  WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, HP: tl.constexpr, BB: tl.constexpr,
                  BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr, DROP: tl.constexpr, PRE=None,
                  STORE: tl.constexpr = False):
    """h_n on this program's columns for every step, kept in registers, a barrier after each step; DROP: from h̃,
    q̃. With STORE its columns of each step's branches u, z, a, g (those present) into PRE (B, T, NE·H) at their
    encodings' blocks, stored after the step's barrier (drained while the next step computes)."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt, alpha, beta = tl.load(C), tl.load(C + 1), tl.load(C + 2)
    sS = (T + 1) * H
    _, wut, _, wgt, _, wat, _, w2t = _weights_grid(WH, W2, WHT, W2T, cols, H, HP, HAS_U, HAS_Z, HAS_G, HAS_A,
                                                   U_DELAYED, WU, WG, WA)
    h = tile(S, sS, rows, rmask, cols, cmask)
    k = 0
    spins = LIMIT
    for n in range(1, T + 1):
        eu, ez, ea, eg = _inputs_resident(E, n, rows, rmask, cols, cmask, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A, EU,
                                          EZ, EG, EA, BB, BH)
        h_row, hd_row = _grid_rows(S, n, M, rows, rmask, T, H, HP)
        if DROP:
            h_row, hd_row, h, k0, k1 = _grid_dropped(D, n, h_row, hd_row, h, rows, rmask, cols, cmask, T, H, HP)
        target, u, z, a, g = _branches_resident(eu, ez, ea, eg, h_row, hd_row, wut, wgt, wat, w2t, alpha, beta,
                                                HAS_U, HAS_Z, HAS_G, HAS_A, U_DELAYED, PRECISION)
        h = h + dt * (g * target - g * h)
        tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)
        k, spins = grid.barrier(SYNC, k, spins)
        if STORE:
            _store_branches(PRE, n, rows, cols, m, u, z, a, g, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A, EU, EZ, EG, EA)


@triton.jit
def _grid_backward(E, WH, W2, WHT, W2T, C, S, GO, G, L, LD, SYNC, B, T, H, M, D, NE: tl.constexpr,
                   HAS_U: tl.constexpr, HAS_Z: tl.constexpr, HAS_G: tl.constexpr, HAS_A: tl.constexpr,
                   U_DELAYED: tl.constexpr, EU: tl.constexpr, EZ: tl.constexpr, EG: tl.constexpr, EA: tl.constexpr,
                   WU: tl.constexpr, WG: tl.constexpr, WA: tl.constexpr, ED: tl.constexpr, HAS_D: tl.constexpr,
                   HP: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr,
                   LIMIT: tl.constexpr, DROP: tl.constexpr, STORED: tl.constexpr = False):
    """Step n's backward on this program's columns (:func:`_backward_resident`'s, the products over the whole rows
    of the pre-activation gradients after one barrier); λ in registers, L (B, H): the final state's adjoint in,
    the initial state's out; DROP as there. E: the encodings, whose branches it recomputes from the stored states,
    or with STORED the branches u, z, a, g that :func:`_grid_forward` stored (STORE), each step's loaded one step
    ahead: then only the adjoints' products, and one orientation of the weight tiles."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt, alpha, beta = tl.load(C), tl.load(C + 1), tl.load(C + 2)
    sE = T * NE * H
    sS = (T + 1) * H
    wu, wut, wg, wgt, wa, wat, w2, w2t = _weights_grid(WH, W2, WHT, W2T, cols, H, HP, HAS_U, HAS_Z, HAS_G, HAS_A,
                                                       U_DELAYED, WU, WG, WA)
    lam = tile(L, H, rows, rmask, cols, cmask)
    stored = _inputs_resident(E, T, rows, rmask, cols, cmask, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A, EU, EZ, EG, EA,
                              BB, BH)
    k = 0
    spins = LIMIT
    for i in range(0, T):
        n = T - i
        gp = G + (n - 1) * NE * H
        eu, ez, ea, eg = stored
        stored = _inputs_resident(E, n - 1, rows, rmask, cols, cmask, T, H, NE, HAS_U, HAS_Z, HAS_G, HAS_A, EU, EZ,
                                  EG, EA, BB, BH)  # loaded while step n computes (the encodings, or STORED)
        h_row, hd_row = _grid_rows(S, n, M, rows, rmask, T, H, HP)
        h, _, go = _stored_resident(S, GO, n, M, rows, rmask, cols, cmask, T, H)
        if DROP:
            h_row, hd_row, h, k0, k1 = _grid_dropped(D, n, h_row, hd_row, h, rows, rmask, cols, cmask, T, H, HP)
        if STORED:  # the branches themselves (a, g: 1 where absent)
            u, z = eu, ez
            a = ea if HAS_A else ea * 0.0 + 1.0
            g = eg if HAS_G else eg * 0.0 + 1.0
            target = _target(u, z, a, alpha, beta, HAS_U, HAS_Z)
        else:
            target, u, z, a, g = _branches_resident(eu, ez, ea, eg, h_row, hd_row, wut, wgt, wat, w2t, alpha, beta,
                                                    HAS_U, HAS_Z, HAS_G, HAS_A, U_DELAYED, PRECISION)
        _store_gate_gradients(gp, sE, rows, cols, m, lam, target, h, u, z, a, g, dt, alpha, beta, H, HAS_U, HAS_Z,
                              HAS_G, HAS_A, EU, EZ, EG, EA)
        k, spins = grid.barrier(SYNC, k, spins)  # also orders LD's columns, written by this program m steps ago
        lam = lam * (1.0 - dt * g)
        if HAS_G:
            lam = dot(grid.rows_of(gp + EG * H, sE, rows, rmask, H, HP), wg, lam, PRECISION)
        if HAS_U:
            lam = dot(grid.rows_of(gp + EU * H, sE, rows, rmask, H, HP), wu, lam, PRECISION)
        if HAS_Z:
            if HAS_A:
                lam = dot(grid.rows_of(gp + EA * H, sE, rows, rmask, H, HP), wa, lam, PRECISION)
        if DROP:  # what flows through h̃
            lam = lam * k0
        if HAS_D:
            gd = dot(grid.rows_of(gp + ED * H, sE, rows, rmask, H, HP), w2, tl.zeros((BB, BH), dtype=lam.dtype),
                     PRECISION)
            if DROP:
                gd = gd * k1
            lam += tl.where(cols * 0 + M == 0, 1.0, 0.0)[None, :] * gd  # m = 0: the current state
            tl.store(LD + (n - 1 - M) * H + rows[:, None] * sS + cols[None, :], gd,
                     mask=m & ((cols * 0 + M > 0) & (cols * 0 + n - 1 - M >= 0))[None, :])
        lam += go
        lam += tl.load(LD + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    tl.store(L + rows[:, None] * H + cols[None, :], lam, mask=m)


_FLAGS = ("NE", "HAS_U", "HAS_Z", "HAS_G", "HAS_A", "U_DELAYED", "EU", "EZ", "EG", "EA", "WU", "WG", "WA", "ED")


def transposed(W: torch.Tensor) -> torch.Tensor:
    """W's H × H blocks (W: (k·H, H)) each transposed, contiguous: the maps of the kernels' products S Wᵀ, whose
    tiles are then read along their rows (Triton's FMA products load them with ldmatrix, free of shared-memory bank
    conflicts; ``lem.transposed_weights`` says what reading W's rows cost)."""
    H = W.shape[-1]
    return W.view(-1, H, H).transpose(1, 2).contiguous().view(W.shape)


class DelayGRUSequence(torch.autograd.Function):
    """``apply(enc, weight_h, W2, h0, dt, alpha, beta, lag, layout, block_h, drop, train, schedule) -> (hs,
    h_T)``;
    ``layout`` = (NE, HAS_U, HAS_Z, HAS_G, HAS_A, U_DELAYED, EU, EZ, EG, EA, WU, WG, WA, ED, h_rows) with h_rows the
    (encoding block, weight_h block) pairs of the maps of h; ``drop``: None or the state-dropout factors (B, T, 2, H)
    (no gradient): step n runs from h̃ = drop[:, n − 1, 0] ⊙ h_{n−1} and q̃ = drop[:, n − 1, 1] ⊙ h_{n−1−m};
    ``train``: whether autograd records the call (``torch.is_grad_enabled()`` at the call); ``schedule``:
    "persistent", "stepwise" or "grid" (``grid.schedule_for``)."""

    @staticmethod
    def forward(ctx, enc, weight_h, W2, h0, dt, alpha, beta, lag, layout, block_h, drop, train, schedule="persistent"):
        ctx.precision = dot_precision(enc.dtype)  # fixed at the forward: the backward recomputes with it
        B, T, _ = enc.shape
        H = h0.shape[1]
        enc, weight_h = enc.contiguous(), weight_h.contiguous()
        W2c = enc.new_zeros(1) if W2 is None else W2.contiguous()
        maps = (weight_h, W2c, transposed(weight_h), transposed(W2c))  # the forward reads the transposed ones
        S = enc.new_empty(B, T + 1, H)
        S[:, 0] = h0
        consts = on_device([dt, alpha, beta], enc.dtype, enc.device)
        dropped = drop is not None
        D = drop.to(enc.dtype).contiguous() if dropped else consts  # read only with DROP
        BB, BH = block_sizes(B, H, block_h)
        flags = dict(zip(_FLAGS[:13], layout[:13]), DROP=dropped)
        ctx.stored = False  # the branches stored in place of the encodings (saved as enc)
        if schedule == "grid" and grid.resident(B, H, block_h, enc.device, ctx.precision):
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            pre = torch.empty_like(enc) if ctx.stored else None
            grid.launch_resident(_grid_forward, (enc, *maps, consts, S), B, T, H, ctx.precision, M=lag, D=D, **flags,
                                 PRE=pre, STORE=ctx.stored)
            enc = pre if ctx.stored else enc
        elif schedule in ("grid", "stepwise"):  # the maps streamed through the step kernels
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            table = [enc, *maps[:2], consts, S, D, *maps[2:]] + ([torch.empty_like(enc)] if ctx.stored else [])
            if schedule == "grid":  # the backward's two flags, unused forward
                grid.launch(_grid, table, consts, B, T, H, block_h, ctx.precision, False, M=lag, **flags, ED=0,
                            HAS_D=False, STORED=ctx.stored)
            else:
                launch_steps(table, step_launches(_step, 1, range(1, T + 1), consts, B, T, H, BB, BH, ctx.precision,
                                                  M=lag, **flags, STORE=ctx.stored))
            enc = table[-1] if ctx.stored else enc
        else:
            forward = _forward_resident if resident(H, block_h) else _forward
            forward[(triton.cdiv(B, BB),)](enc, *maps, consts, S, B, T, H, lag, D, **flags, BB=BB, BH=BH,
                                           PRECISION=ctx.precision, num_warps=warps(BH))
        ctx.save_for_backward(enc, *maps, consts, S, D)
        ctx.lag, ctx.layout, ctx.block_h, ctx.has_w2, ctx.schedule = lag, layout, block_h, W2 is not None, schedule
        ctx.dropped = dropped
        return S[:, 1:], S[:, T].clone()

    @staticmethod
    @kernel_backward("cuda")
    def backward(ctx, grad_hs, grad_h):
        enc, weight_h, W2, WHT, W2T, consts, S, D = ctx.saved_tensors
        B, T, _ = enc.shape
        H = S.shape[2]
        lag, layout = ctx.lag, ctx.layout
        grad_hs = grad_hs.contiguous()
        G = torch.zeros_like(enc)
        L = enc.new_empty(2, B, H)
        L[T % 2] = grad_h + grad_hs[:, T - 1]
        LD = enc.new_zeros(B, T + 1, H)
        BB, BH = block_sizes(B, H, ctx.block_h)
        flags = dict(zip(_FLAGS, layout[:14]), DROP=ctx.dropped)
        flags["HAS_D"] = bool(flags["HAS_Z"] or flags["U_DELAYED"])
        if ctx.schedule == "grid" and grid.resident(B, H, ctx.block_h, enc.device, ctx.precision):
            L[0] = L[T % 2]
            grid.launch_resident(_grid_backward, (enc, weight_h, W2, WHT, W2T, consts, S, grad_hs, G, L[0], LD), B, T,
                                 H, ctx.precision, M=lag, D=D, **flags, STORED=ctx.stored)
        elif ctx.schedule == "grid":
            grid.launch(_grid, [enc, weight_h, W2, consts, S, grad_hs, G, L, LD, D, WHT, W2T], consts, B, T, H,
                        ctx.block_h, ctx.precision, True, M=lag, **flags, STORED=ctx.stored)
        elif ctx.schedule == "stepwise":
            launch_steps([enc, weight_h, W2, consts, S, grad_hs, G, L, LD, D, WHT, W2T],
                         step_launches(_step_backward, 2, range(T, 0, -1), consts, B, T, H, BB, BH, ctx.precision,
                                       M=lag, **flags, STORED=ctx.stored))
        elif resident(H, ctx.block_h):  # one buffer: final-state adjoint in, initial-state adjoint out
            L[0] = L[T % 2]
            _backward_resident[(triton.cdiv(B, BB),)](enc, weight_h, W2, WHT, W2T, consts, S, grad_hs, G, L[0], LD, B,
                                                      T, H, lag, D, **flags, BB=BB, BH=BH,
                                                      PRECISION=ctx.precision, num_warps=warps(BH))
        else:
            _backward[(triton.cdiv(B, BB),)](enc, weight_h, W2, WHT, W2T, consts, S, grad_hs, G, L, LD, B, T, H, lag, D,
                                             **flags, BB=BB, BH=BH, PRECISION=ctx.precision, num_warps=warps(BH))
        del LD  # the delayed adjoints: not needed by the weight gradients, whose products then copy less at once
        blocks = sorted(layout[14], key=lambda pair: pair[1])  # in weight_h order
        # every encoding block against h_{n-1} (with dropout h̃_{n−1}); the maps of h are some of them
        d_all = outer_sum(G, D[:, :, 0] * S[:, :-1] if ctx.dropped else S[:, :-1])
        d_weight_h = torch.cat([d_all[e * H:(e + 1) * H] for e, _ in blocks])
        d_W2 = None
        if ctx.has_w2:
            ed = layout[13]
            d_W2 = torch.zeros_like(W2)
            if T > lag:  # step n's delayed pre-activation against h_{n−1−m} (with dropout q̃)
                delayed = D[:, lag:, 1] * S[:, : T - lag] if ctx.dropped else S[:, : T - lag]
                d_W2 = outer_sum(G[:, lag:, ed * H:(ed + 1) * H], delayed)
        return G, d_weight_h, d_W2, L[0].clone(), None, None, None, None, None, None, None, None, None


def _lag(lags) -> int:
    return int(lags[0]) if lags else 0  # no delay (τ = 0): the delayed state is the current one


def _run(system, x, state, dt, unfolds, lags, layout, alpha, beta, block_h, chosen, drop):
    """The sequence from the state (h0,) in one piece, or, with no backward to come (and no unfolds), in chunks of
    :func:`~odelab.kernels.chunks.steps_per_chunk` steps. The first ``lag`` steps of the sequence, or of a chunk,
    read delayed states from before it (a :class:`DelayedState`'s history; a chunk's: the states before it): their
    part W2 h_{n−1−m} of the delayed branch's pre-activation is added to the encoding (``chunks.add_history``; the
    kernel then reads zero history there); the later steps read their delayed states inside, as in one piece. The
    peak holds the outputs and one chunk's buffers. The final state carries the history on. ``drop``: the state
    dropout factors (B, T · unfolds, 2, H) or None (:func:`run_taugru`), a chunk's the slice of its steps."""
    (h0,) = state
    lag = _lag(lags)
    before = incoming_history(state, lag)
    before = None if before is None else before[0]
    H = h0.shape[1]
    drop = chunks.delay_factors(drop, x, unfolds, H, lags)
    branch = layout[13] * H
    steps = chunks.steps_per_chunk(x, unfolds, H)
    if steps >= x.shape[1] or unfolds != 1 or chunks.needs_backward(system, x, state):
        enc = system.encode(x)
        if unfolds != 1:
            enc = enc.repeat_interleave(unfolds, dim=1)  # sub-steps of dt/L, input held; lags count sub-steps
        chunks.add_history(enc, before, lag, system.W2, branch, keep=drop)
        hs, hT = grid.apply(DelayGRUSequence, enc, system.weight_h, system.W2, h0, float(dt) / unfolds, alpha, beta,
                            lag, layout, block_h, drop, torch.is_grad_enabled(), chosen)
        return hs[:, unfolds - 1::unfolds], _final(lags, hT, before, h0, hs)
    B, T = x.shape[:2]
    out, h = None, h0
    for t0 in range(0, T, steps):
        enc = system.encode(x[:, t0:t0 + steps].contiguous())
        keep = None if drop is None else drop[:, t0:t0 + steps]
        # the chunk continues the sequence: the states before it are its history (before the first: the state's)
        chunks.add_history(enc, before if t0 == 0 else carried_history(before, h0, out[:, :t0], lag), lag,
                           system.W2, branch, keep=keep)
        hs, h = grid.apply(DelayGRUSequence, enc, system.weight_h, system.W2, h, float(dt), alpha, beta, lag, layout,
                           block_h, keep, torch.is_grad_enabled(), chosen)
        if out is None:
            out = hs.new_empty(B, T, H)
        out[:, t0:t0 + hs.shape[1]] = hs
    return out, _final(lags, h, before, h0, out)


def _final(lags, h, before, h0, states):
    """The final state: a DelayedState carrying the last ⌊τ/h⌋ states on; τ = 0 (no delay system): a plain one."""
    return DelayedState((h,), (carried_history(before, h0, states, _lag(lags)),)) if lags else (h,)


def run_taugru(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None, drop=None):
    """τ-GRU, "euler", ring buffer of lag m = ``lags[0]`` (or none). ``schedule`` ("auto", "persistent", "stepwise"
    or "grid"; default ``$ODELAB_CUDA_SCHEDULE`` or "auto": grid on CUDA): the stepwise or the grid-synchronised
    one (stepwise.py, grid.py) replaces the tiled kernels where they would run (hidden > 32 or ``block_h`` given).
    ``drop`` (state dropout): None or the factors (B, T · unfolds, 2, H), no gradient: sub-step k starts from
    drop[:, k, 0] ⊙ h_k and reads drop[:, k, 1] ⊙ h_{k−m} (without a delay: drop[:, k, 0] ⊙ h_k, as the field)."""
    chosen = grid.schedule_for(schedule, x, state[0].shape[1], block_h)
    enc_index = {b: i for i, b in enumerate(system.branches)}
    h_index = {b: i for i, b in enumerate(system.h_branches)}
    has = {b: b in enc_index for b in "uzga"}
    layout = (len(system.branches), has["u"], has["z"], has["g"], has["a"], False,
              enc_index.get("u", 0), enc_index.get("z", 0), enc_index.get("g", 0), enc_index.get("a", 0),
              h_index.get("u", 0), h_index.get("g", 0), h_index.get("a", 0), enc_index.get("z", 0),
              tuple((enc_index[b], h_index[b]) for b in system.h_branches))
    return _run(system, x, state, dt, unfolds, lags, layout, system.alpha, system.beta, block_h, chosen, drop)


def run_delaygru(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None, drop=None):
    """Delay GRU, "euler", ring buffer of lag m = ``lags[0]`` (or none); ``schedule`` and ``drop`` as in
    :func:`run_taugru`."""
    chosen = grid.schedule_for(schedule, x, state[0].shape[1], block_h)
    layout = (2, True, False, True, False, True, 0, 0, 1, 0, 0, 1, 0, 0, ((0, 0), (1, 1)))
    return _run(system, x, state, dt, unfolds, lags, layout, 1.0, 1.0, block_h, chosen, drop)
