"""The GRU as an ODE (004 eq. 54) with explicit Euler: h_n = h_{n−1} + Δt (σ(f) ⊙ tanh(c) − σ(f) ⊙ h_{n−1}),

    r = W_r h + a_r,  f = W_f h + a_f                     ([a_r, a_f, a_u] = ``encode(x)``)
    c = a_u + σ(r) ⊙ (W_u h + b_hu)     (reset_after, torch's convention; the default)
    c = a_u + W_u (σ(r) ⊙ h)            (reset before the matmul, eq. 53)

one Triton launch forward and one backward (or, with the stepwise schedule of stepwise.py, one launch per phase
of a step). The backward recomputes the gates from the stored states (or, on the weights-on-chip grid with
``ODELAB_GRID_GATES=stored``, reads the gates the forward stored) and writes per step the pre-activation
gradients [g_r, g_f, g_c, g_m] (g_m: of W_u h + b_hu, or of σ(r) ⊙ h's matmul input); the weight gradients are
GEMMs over all steps in torch. With per-sample steps requiring grad (constexpr DHS), every backward also gives ∂L/∂Δt
of each row and step, Σ λ_n ⊙ σ(f) ⊙ (tanh(c) − h_{n−1}): the persistent kernels sum it over their column tiles in
registers; in the stepwise and grid schedules each column-tile program writes its own part (a (B, T, column tiles)
buffer, summed by torch).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..derivatives import kernel_backward
from ..chunks import in_chunks
from ..gaps import per_step_lengths
from . import grid
from ._common import (  # noqa: F401
    address, available, batch_rows, block_sizes, dot, dot_precision, four_blocks, mv, on_device, outer_sum, resident,
    resident_block, sigmoid, step_launches, step_length, store_length_part, tanh, tile, tile_at, warps, weights)
from .stepwise import launch_steps


@triton.jit
def _reset(E, WHT, S, n, c0, rows, rmask, T, H, BH: tl.constexpr, PRECISION: tl.constexpr):
    """r = W_r h_{n−1} + a_r of step n on columns c0 : c0 + BH (WHT: the transposed weights,
    :func:`transposed_weights`)."""
    cols = c0 + tl.arange(0, BH)
    r = tile(E + (n - 1) * 3 * H, T * 3 * H, rows, rmask, cols, cols < H)
    return mv(r, S + (n - 1) * H, (T + 1) * H, rows, rmask, WHT, H, c0, H, H, True, BH, PRECISION)


@triton.jit
def _gates(E, WHT, BHU, S, RS, sR, n, c0, rows, rmask, T, H, RESET_AFTER: tl.constexpr, BB: tl.constexpr,
           BH: tl.constexpr, PRECISION: tl.constexpr, STORED: tl.constexpr = False):
    """(f, c, σ(r), μ = W_u h_{n−1} + b_hu, h_{n−1}) of step n on columns c0 : c0 + BH; reset before, c reads
    ρ = σ(r) ⊙ h_{n−1} from RS (row stride sR), and σ(r), μ are not computed (zeros); WHT as :func:`_reset`'s.
    With STORED (reset after), E holds (f, c, σ(r), μ) of every step (B, T, 4H), stored by the forward
    (:func:`_state_tile` with STORE), read instead of computed."""
    sS = (T + 1) * H
    hp = S + (n - 1) * H
    cols = c0 + tl.arange(0, BH)
    cmask = cols < H
    if STORED:
        f, c, sr, mu = four_blocks(E, n, rows, rmask, cols, cmask, T, H)
        return f, c, sr, mu, tile(hp, sS, rows, rmask, cols, cmask)
    sE = T * 3 * H
    e = E + (n - 1) * 3 * H
    f = mv(tile(e + H, sE, rows, rmask, cols, cmask), hp, sS, rows, rmask, WHT + H * H, H, c0, H, H, True, BH,
           PRECISION)
    c = tile(e + 2 * H, sE, rows, rmask, cols, cmask)
    sr = tl.zeros((BB, BH), dtype=S.dtype.element_ty)
    mu = tl.zeros((BB, BH), dtype=S.dtype.element_ty)
    if RESET_AFTER:
        sr = sigmoid(_reset(E, WHT, S, n, c0, rows, rmask, T, H, BH, PRECISION))
        mu = mv(mu, hp, sS, rows, rmask, WHT + 2 * H * H, H, c0, H, H, True, BH, PRECISION)
        mu += tl.load(BHU + cols, mask=cmask, other=0.0)[None, :]
        c += sr * mu
    else:
        c = mv(c, RS, sR, rows, rmask, WHT + 2 * H * H, H, c0, H, H, True, BH, PRECISION)
    return f, c, sr, mu, tile(hp, sS, rows, rmask, cols, cmask)


@triton.jit
def _reset_tile(E, WHT, S, RS, sR, n, c0, rows, rmask, T, H, BH: tl.constexpr, PRECISION: tl.constexpr):
    """Reset before: ρ = σ(r) ⊙ h_{n−1} of step n (W_u's input) on columns c0 : c0 + BH, into RS (row stride sR)."""
    cols = c0 + tl.arange(0, BH)
    cmask = cols < H
    rho = sigmoid(_reset(E, WHT, S, n, c0, rows, rmask, T, H, BH, PRECISION)) * tile(
        S + (n - 1) * H, (T + 1) * H, rows, rmask, cols, cmask)
    tl.store(RS + rows[:, None] * sR + cols[None, :], rho, mask=rmask[:, None] & cmask[None, :])


@triton.jit
def _store_blocks(PRE, n, rows, cols, m, a, b, c, d, T, H):
    """Step n's four tiles a, b, c, d on columns ``cols`` into blocks 0 … 3 of PRE (B, T, 4H): the gates a forward
    stores for a backward that reads them (STORE / STORED)."""
    at = PRE + (n - 1) * 4 * H + rows[:, None] * (T * 4 * H) + cols[None, :]
    tl.store(at, a, mask=m)
    tl.store(at + H, b, mask=m)
    tl.store(at + 2 * H, c, mask=m)
    tl.store(at + 3 * H, d, mask=m)


@triton.jit
def _state_tile(E, WHT, BHU, S, R, dt, n, c0, rows, rmask, T, H, RESET_AFTER: tl.constexpr, BB: tl.constexpr,
                BH: tl.constexpr, PRECISION: tl.constexpr, PRE=None, STORE: tl.constexpr = False):
    """h_n = h_{n−1} + Δt (σ(f) ⊙ tanh(c) − σ(f) ⊙ h_{n−1}) on columns c0 : c0 + BH (reset before: ρ in R (B, H));
    with STORE (reset after), (f, c, σ(r), μ) into PRE (B, T, 4H) for a backward that reads them."""
    f, c, sr, mu, h = _gates(E, WHT, BHU, S, R, H, n, c0, rows, rmask, T, H, RESET_AFTER, BB, BH, PRECISION)
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    sf = sigmoid(f)
    h = h + dt * (sf * tanh(c) - sf * h)
    tl.store(S + n * H + rows[:, None] * ((T + 1) * H) + cols[None, :], h, mask=m)
    if STORE:
        _store_blocks(PRE, n, rows, cols, m, f, c, sr, mu, T, H)


@triton.jit
def _store_gate_gradients(g, sG, rows, cols, m, lam, dt, sr, sf, tc, mu, h, H, RESET_AFTER: tl.constexpr):
    """g_f, g_c (and, reset after, g_r, g_m) of a step on columns ``cols`` into their blocks of g (row stride sG),
    from λ_n = lam, σ(r), σ(f), tanh(c), W_u h + b_hu and h = h_{n−1}."""
    gc = lam * dt * sf * (1.0 - tc * tc)
    tl.store(g + H + rows[:, None] * sG + cols[None, :], lam * dt * (tc - h) * sf * (1.0 - sf), mask=m)
    tl.store(g + 2 * H + rows[:, None] * sG + cols[None, :], gc, mask=m)
    if RESET_AFTER:
        tl.store(g + rows[:, None] * sG + cols[None, :], gc * mu * sr * (1.0 - sr), mask=m)
        tl.store(g + 3 * H + rows[:, None] * sG + cols[None, :], gc * sr, mask=m)


@triton.jit
def _backward_gates_tile(E, WHT, BHU, S, RS, G, L, dt, n, c0, rows, rmask, B, T, H, RESET_AFTER: tl.constexpr,
                         BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, STORED: tl.constexpr = False):
    """Step n on columns c0 : c0 + BH: g_f, g_c (and g_r, g_m, reset after) from λ_n in L[n % 2], and λ_{n−1}'s
    direct part λ_n ⊙ (1 − Δt σ(f)) into L[(n − 1) % 2] (L: (2, B, H); RS: ρ per step, reset before); returns the
    rows' part of ∂L/∂Δt from these columns (STORED: the gates read, :func:`_gates`)."""
    sG = T * 4 * H
    cur = n % 2
    g = G + (n - 1) * 4 * H
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    f, c, sr, mu, h = _gates(E, WHT, BHU, S, RS + (n - 1) * H, T * H, n, c0, rows, rmask, T, H, RESET_AFTER, BB,
                             BH, PRECISION, STORED)
    lam = tl.load(L + cur * B * H + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    sf = sigmoid(f)
    tc = tanh(c)
    _store_gate_gradients(g, sG, rows, cols, m, lam, dt, sr, sf, tc, mu, h, H, RESET_AFTER)
    tl.store(L + (1 - cur) * B * H + rows[:, None] * H + cols[None, :], lam * (1.0 - dt * sf), mask=m)
    return tl.sum(tl.where(m, lam * sf * (tc - h), 0.0), axis=1)


@triton.jit
def _backward_reset_tile(E, WH, WHT, S, G, L, n, c0, rows, rmask, B, T, H, BB: tl.constexpr, BH: tl.constexpr,
                         PRECISION: tl.constexpr):
    """Reset before, step n on columns c0 : c0 + BH: g_ρ = g_c W_u (a full row of g_c), g_r = g_ρ ⊙ h_{n−1} ⊙ σ'(r),
    and λ_{n−1} += g_ρ ⊙ σ(r) in L[(n − 1) % 2] (WH: the weights, WHT: their transposed copy)."""
    sG = T * 4 * H
    nxt = L + (1 - n % 2) * B * H
    g = G + (n - 1) * 4 * H
    cols = c0 + tl.arange(0, BH)
    cmask = cols < H
    m = rmask[:, None] & cmask[None, :]
    grho = mv(tl.zeros((BB, BH), dtype=S.dtype.element_ty), g + 2 * H, sG, rows, rmask, WH + 2 * H * H, H, c0, H, H,
              True, BH, PRECISION)
    sr = sigmoid(_reset(E, WHT, S, n, c0, rows, rmask, T, H, BH, PRECISION))
    h = tile(S + (n - 1) * H, (T + 1) * H, rows, rmask, cols, cmask)
    tl.store(g + rows[:, None] * sG + cols[None, :], grho * h * sr * (1.0 - sr), mask=m)
    lam = tl.load(nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    tl.store(nxt + rows[:, None] * H + cols[None, :], lam + grho * sr, mask=m)


@triton.jit
def _backward_lambda_tile(WH, G, GO, L, n, c0, rows, rmask, B, T, H, RESET_AFTER: tl.constexpr, BH: tl.constexpr,
                          PRECISION: tl.constexpr):
    """λ_{n−1} on columns c0 : c0 + BH = its part so far (L[(n − 1) % 2]) + [g_r, g_f] [W_r; W_f] (+ g_m W_u,
    reset after) + ∂L/∂h_{n−1}."""
    sG = T * 4 * H
    nxt = L + (1 - n % 2) * B * H
    g = G + (n - 1) * 4 * H
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    lam = tl.load(nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    lam = mv(lam, g, sG, rows, rmask, WH, H, c0, 2 * H, H, True, BH, PRECISION)
    if RESET_AFTER:
        lam = mv(lam, g + 3 * H, sG, rows, rmask, WH + 2 * H * H, H, c0, H, H, True, BH, PRECISION)
    lam += tl.load(GO + (n - 2) * H + rows[:, None] * (T * H) + cols[None, :], mask=m & (cols * 0 + n >= 2)[None, :],
                   other=0.0)
    tl.store(nxt + rows[:, None] * H + cols[None, :], lam, mask=m)


@triton.jit
def _forward(E, WHT, BHU, C, HS, S, R, B, T, H, RESET_AFTER: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
             PRECISION: tl.constexpr, GAPS: tl.constexpr):
    """S (B, T+1, H) states; R (B, H) scratch for ρ = σ(r) ⊙ h (reset before the matmul); HS (B, T): each row's
    step lengths, with GAPS (eq. 54 stepped by the sample's own Δt); WHT: the transposed weights."""
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    for n in range(1, T + 1):
        if not RESET_AFTER:
            for c0 in range(0, H, BH):  # ρ from h_{n−1}
                _reset_tile(E, WHT, S, R, H, n, c0, rows, rmask, T, H, BH, PRECISION)
            tl.debug_barrier()
        for c0 in range(0, H, BH):  # h_n from h_{n−1} (and ρ)
            ds = step_length(dt, HS, rows, rmask, n, T, GAPS)
            _state_tile(E, WHT, BHU, S, R, ds, n, c0, rows, rmask, T, H, RESET_AFTER, BB, BH, PRECISION)
        tl.debug_barrier()


@triton.jit
def _backward(E, WH, WHT, BHU, C, HS, S, GO, G, RS, L, B, T, H, DH, RESET_AFTER: tl.constexpr, BB: tl.constexpr,
              BH: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """G (B, T, 4H) = [g_r, g_f, g_c, g_m]; RS (B, T, H) = σ(r) ⊙ h_{n−1} per step (reset before); the adjoint λ
    ping-pongs in L (2, B, H): step n reads L[n % 2] and writes L[(n − 1) % 2]; HS as in :func:`_forward`; with
    DHS, DH[row, n − 1] = ∂L/∂HS[row, n − 1], summed over the column tiles in registers; WH: the weights, WHT:
    their transposed copy (for the recomputed gates)."""
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    for i in range(0, T):
        n = T - i
        if not RESET_AFTER:
            for c0 in range(0, H, BH):  # ρ of step n
                _reset_tile(E, WHT, S, RS + (n - 1) * H, T * H, n, c0, rows, rmask, T, H, BH, PRECISION)
            tl.debug_barrier()
        dh = tl.zeros((BB,), dtype=S.dtype.element_ty)
        for c0 in range(0, H, BH):  # g_f, g_c (g_r, g_m); λ_{n−1}'s direct part
            ds = step_length(dt, HS, rows, rmask, n, T, GAPS)
            part = _backward_gates_tile(E, WHT, BHU, S, RS, G, L, ds, n, c0, rows, rmask, B, T, H, RESET_AFTER, BB,
                                        BH, PRECISION)
            if DHS:
                dh += part
        if DHS:
            tl.store(DH + rows * T + (n - 1), dh, mask=rmask)
        tl.debug_barrier()
        if not RESET_AFTER:
            for c0 in range(0, H, BH):  # g_r (a full row of g_c needed)
                _backward_reset_tile(E, WH, WHT, S, G, L, n, c0, rows, rmask, B, T, H, BB, BH, PRECISION)
            tl.debug_barrier()
        for c0 in range(0, H, BH):  # λ_{n−1} (full rows of g needed)
            _backward_lambda_tile(WH, G, GO, L, n, c0, rows, rmask, B, T, H, RESET_AFTER, BH, PRECISION)
        tl.debug_barrier()


@triton.jit
def _step_program(TABLE, REF, B, BB: tl.constexpr, BH: tl.constexpr):
    """This program's batch rows (axis 0 of the grid), their mask, its first column (axis 1), and E, WH, BHU, Δt,
    S from the address table (entries 0–4 in both step kernels)."""
    rows, rmask = batch_rows(B, BB)
    return (rows, rmask, tl.program_id(1) * BH, address(TABLE, 0, REF), address(TABLE, 1, REF),
            address(TABLE, 2, REF), tl.load(address(TABLE, 3, REF)), address(TABLE, 4, REF))


@triton.jit(do_not_specialize=["n"])
def _step(TABLE, REF, n, B, T, H, PHASE: tl.constexpr, RESET_AFTER: tl.constexpr, BB: tl.constexpr,
          BH: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, STORE: tl.constexpr = False):
    """The stepwise schedule (stepwise.py): phase PHASE of step n on one (batch block, column tile) program (reset
    before: 0 ρ, 1 h_n; reset after: 0 h_n); TABLE = the addresses of [E, WHT, BHU, C, S, R, HS] (WHT: the
    transposed weights, :func:`transposed_weights`; HS: the per-step lengths, with GAPS) and, with STORE (reset
    after), PRE (B, T, 4H): the gates of every step, for a backward with STORED."""
    rows, rmask, c0, E, WHT, BHU, dt, S = _step_program(TABLE, REF, B, BB, BH)
    dt = step_length(dt, address(TABLE, 6, REF), rows, rmask, n, T, GAPS)
    R = address(TABLE, 5, REF)
    if RESET_AFTER:
        PRE = address(TABLE, 7, REF) if STORE else E
        _state_tile(E, WHT, BHU, S, R, dt, n, c0, rows, rmask, T, H, RESET_AFTER, BB, BH, PRECISION, PRE, STORE)
    elif PHASE == 0:
        _reset_tile(E, WHT, S, R, H, n, c0, rows, rmask, T, H, BH, PRECISION)
    else:
        _state_tile(E, WHT, BHU, S, R, dt, n, c0, rows, rmask, T, H, RESET_AFTER, BB, BH, PRECISION)


@triton.jit(do_not_specialize=["n"])
def _step_backward(TABLE, REF, n, B, T, H, PHASE: tl.constexpr, RESET_AFTER: tl.constexpr, BB: tl.constexpr,
                   BH: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr,
                   STORED: tl.constexpr = False):
    """Phase PHASE of the backward of step n on one program (reset before: 0 ρ, 1 the gates, 2 g_r, 3 λ_{n−1};
    reset after: 0 the gates, 1 λ_{n−1}); TABLE = the addresses of [E, WH, BHU, C, S, GO, G, RS, L, HS, WHT] (WHT:
    the transposed weights, for the recomputed gates; with STORED, reset after, E is the gates the forward stored,
    read instead) and, with DHS, DP: the gates phase writes its columns' part of ∂L/∂Δt_n
    (:func:`store_length_part`)."""
    rows, rmask, c0, E, WH, BHU, dt, S = _step_program(TABLE, REF, B, BB, BH)
    dt = step_length(dt, address(TABLE, 9, REF), rows, rmask, n, T, GAPS)
    GO, G, RS, L = address(TABLE, 5, REF), address(TABLE, 6, REF), address(TABLE, 7, REF), address(TABLE, 8, REF)
    WHT = address(TABLE, 10, REF)
    if RESET_AFTER:
        if PHASE == 0:
            part = _backward_gates_tile(E, WHT, BHU, S, RS, G, L, dt, n, c0, rows, rmask, B, T, H, RESET_AFTER, BB,
                                        BH, PRECISION, STORED)
            if DHS:
                store_length_part(address(TABLE, 11, REF), part, rows, rmask, n, T, tl.program_id(1),
                                  tl.num_programs(1))
        else:
            _backward_lambda_tile(WH, G, GO, L, n, c0, rows, rmask, B, T, H, RESET_AFTER, BH, PRECISION)
    elif PHASE == 0:
        _reset_tile(E, WHT, S, RS + (n - 1) * H, T * H, n, c0, rows, rmask, T, H, BH, PRECISION)
    elif PHASE == 1:
        part = _backward_gates_tile(E, WHT, BHU, S, RS, G, L, dt, n, c0, rows, rmask, B, T, H, RESET_AFTER, BB, BH,
                                    PRECISION)
        if DHS:
            store_length_part(address(TABLE, 11, REF), part, rows, rmask, n, T, tl.program_id(1), tl.num_programs(1))
    elif PHASE == 2:
        _backward_reset_tile(E, WH, WHT, S, G, L, n, c0, rows, rmask, B, T, H, BB, BH, PRECISION)
    else:
        _backward_lambda_tile(WH, G, GO, L, n, c0, rows, rmask, B, T, H, RESET_AFTER, BH, PRECISION)


@triton.jit
def _forward_resident(E, WHT, BHU, C, HS, S, B, T, H, BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr,
                      GAPS: tl.constexpr):
    """reset_after and hidden ≤ BH: W_r, W_f, W_u (from their transposed copy WHT) and the state on chip for the
    whole sequence (with GAPS, each step's length loaded one step ahead, as its input)."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    sE = T * 3 * H
    sS = (T + 1) * H
    wrt = weights(WHT, H, H, BH)
    wft = weights(WHT + H * H, H, H, BH)
    wut = weights(WHT + 2 * H * H, H, H, BH)
    bhu = tl.load(BHU + cols, mask=cmask, other=0.0)[None, :]
    h = tile(S, sS, rows, rmask, cols, cmask)
    # step n's encoded input [r, f, c] at E + (n − 1) 3H, loaded one step ahead of its use
    er, ef, ec = (tile_at(E - 3 * H, 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                  tile_at(E - 2 * H, 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                  tile_at(E - H, 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T))
    ds = step_length(dt, HS, rows, rmask, 1, T, GAPS)
    for n in range(1, T + 1):
        fr, ff, fc = (tile_at(E - 3 * H, n + 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                      tile_at(E - 2 * H, n + 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                      tile_at(E - H, n + 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T))
        ds_next = step_length(dt, HS, rows, rmask, n + 1, T, GAPS)
        r = dot(h, wrt, er, PRECISION)
        f = dot(h, wft, ef, PRECISION)
        mu = dot(h, wut, tl.zeros((BB, BH), dtype=h.dtype) + bhu, PRECISION)
        c = ec + sigmoid(r) * mu
        sf = sigmoid(f)
        h = h + ds * (sf * tanh(c) - sf * h)
        tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)
        er, ef, ec = fr, ff, fc
        ds = ds_next


@triton.jit
def _backward_resident(E, WH, WHT, BHU, C, HS, S, GO, G, L, B, T, H, DH, BB: tl.constexpr, BH: tl.constexpr,
                       PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """reset_after and hidden ≤ BH: weights (both orientations: WH and its transposed copy WHT) and adjoint in
    registers; L (B, H): final-state adjoint in, initial-state adjoint out; with DHS, DH as :func:`_backward`'s."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    sE = T * 3 * H
    sG = T * 4 * H
    sS = (T + 1) * H
    sO = T * H
    wr, wrt = weights(WH, H, H, BH), weights(WHT, H, H, BH)
    wf, wft = weights(WH + H * H, H, H, BH), weights(WHT + H * H, H, H, BH)
    wu, wut = weights(WH + 2 * H * H, H, H, BH), weights(WHT + 2 * H * H, H, H, BH)
    bhu = tl.load(BHU + cols, mask=cmask, other=0.0)[None, :]
    lam = tile(L, H, rows, rmask, cols, cmask)
    # step n reads h_{n−1}, its encoded input, ∂L/∂h_{n−1} (and its length) from the outputs: loaded one step ahead
    hp = tile_at(S - H, T, H, sS, rows, rmask, cols, cmask, 1, T)
    er, ef, ec = (tile_at(E - 3 * H, T, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                  tile_at(E - 2 * H, T, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                  tile_at(E - H, T, 3 * H, sE, rows, rmask, cols, cmask, 1, T))
    go = tile_at(GO - 2 * H, T, H, sO, rows, rmask, cols, cmask, 2, T)
    ds = step_length(dt, HS, rows, rmask, T, T, GAPS)
    for i in range(0, T):
        n = T - i
        g = G + (n - 1) * 4 * H
        hq = tile_at(S - H, n - 1, H, sS, rows, rmask, cols, cmask, 1, T)
        fr, ff, fc = (tile_at(E - 3 * H, n - 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                      tile_at(E - 2 * H, n - 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T),
                      tile_at(E - H, n - 1, 3 * H, sE, rows, rmask, cols, cmask, 1, T))
        gq = tile_at(GO - 2 * H, n - 1, H, sO, rows, rmask, cols, cmask, 2, T)
        ds_next = step_length(dt, HS, rows, rmask, n - 1, T, GAPS)
        r = dot(hp, wrt, er, PRECISION)
        f = dot(hp, wft, ef, PRECISION)
        mu = dot(hp, wut, tl.zeros((BB, BH), dtype=hp.dtype) + bhu, PRECISION)
        sr = sigmoid(r)
        sf = sigmoid(f)
        tc = tanh(ec + sr * mu)
        gc = lam * ds * sf * (1.0 - tc * tc)
        gf = lam * ds * (tc - hp) * sf * (1.0 - sf)
        gr = gc * mu * sr * (1.0 - sr)
        gm = gc * sr
        if DHS:  # ∂h_n/∂Δt against λ_n
            tl.store(DH + rows * T + (n - 1), tl.sum(lam * sf * (tc - hp), axis=1), mask=rmask)
        tl.store(g + rows[:, None] * sG + cols[None, :], gr, mask=m)
        tl.store(g + H + rows[:, None] * sG + cols[None, :], gf, mask=m)
        tl.store(g + 2 * H + rows[:, None] * sG + cols[None, :], gc, mask=m)
        tl.store(g + 3 * H + rows[:, None] * sG + cols[None, :], gm, mask=m)
        lam = lam * (1.0 - ds * sf)
        lam = dot(gr, wr, lam, PRECISION)
        lam = dot(gf, wf, lam, PRECISION)
        lam = dot(gm, wu, lam, PRECISION)
        lam += go
        hp, er, ef, ec, go = hq, fr, ff, fc, gq
        ds = ds_next
    tl.store(L + rows[:, None] * H + cols[None, :], lam, mask=m)


@triton.jit
def _grid(TABLE, REF, SYNC, B, T, H, BACKWARD: tl.constexpr, PHASES: tl.constexpr, RESET_AFTER: tl.constexpr,
          BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr,
          DHS: tl.constexpr, STORED: tl.constexpr = False):
    """The grid-synchronised schedule (grid.py): the PHASES phases of :func:`_step` (or, BACKWARD, of
    :func:`_step_backward`, steps T … 1, DHS as its) for every step in one launch, a barrier after each; TABLE as
    theirs; STORED (reset after): the forward stores its gates (STORE), the backward reads them."""
    k = 0
    spins = LIMIT
    for i in range(0, T):
        for phase in tl.static_range(PHASES):
            if BACKWARD:
                _step_backward(TABLE, REF, T - i, B, T, H, phase, RESET_AFTER, BB, BH, PRECISION, GAPS, DHS, STORED)
            else:
                _step(TABLE, REF, i + 1, B, T, H, phase, RESET_AFTER, BB, BH, PRECISION, GAPS, STORED)
            k, spins = grid.barrier(SYNC, k, spins)


# -- the grid schedule with weights on chip (grid.resident; reset_after): a program keeps its column tiles of W_r, W_f,
# W_u (both orientations in the backward) for the whole sequence and reads only the whole rows of h_{n−1} (forward)
# or of the pre-activation gradients (backward); one barrier a step each way --

@triton.jit
def _gate_tiles(WH, cols, H, HP: tl.constexpr):
    """``grid.column_tile`` of W_r, W_f and W_u (``weight_hidden`` = [W_r; W_f; W_u]), or of their transposes from
    :func:`transposed_weights`."""
    return (grid.column_tile(WH, H, cols, H, HP), grid.column_tile(WH + H * H, H, cols, H, HP),
            grid.column_tile(WH + 2 * H * H, H, cols, H, HP))


@triton.jit
def _grid_gates(E, S, bhu, wrt, wft, wut, n, rows, rmask, cols, cmask, T, H, HP: tl.constexpr, PRECISION: tl.constexpr):
    """(r, f, W_u h + b_hu, c) of step n on this program's columns from the whole rows of h_{n−1}."""
    sE = T * 3 * H
    e = E + (n - 1) * 3 * H
    h_row = grid.rows_of(S + (n - 1) * H, (T + 1) * H, rows, rmask, H, HP)
    r = dot(h_row, wrt, tile(e, sE, rows, rmask, cols, cmask), PRECISION)
    f = dot(h_row, wft, tile(e + H, sE, rows, rmask, cols, cmask), PRECISION)
    mu = dot(h_row, wut, tl.zeros(r.shape, dtype=r.dtype) + bhu, PRECISION)
    return r, f, mu, tile(e + 2 * H, sE, rows, rmask, cols, cmask) + sigmoid(r) * mu


@triton.jit
def _grid_forward(E, WHT, BHU, C, HS, S, SYNC, B, T, H, HP: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
                  PRECISION: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr, PRE=None,
                  STORE: tl.constexpr = False):
    """h_n on this program's columns for every step (reset_after), kept in registers, a barrier after each step
    (WHT: the transposed weights). With STORE its columns of each step's (r, f, W_u h + b_hu, c) into PRE (B, T,
    4H), stored after the step's barrier (drained while the next step computes)."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    wrt, wft, wut = _gate_tiles(WHT, cols, H, HP)
    bhu = tl.load(BHU + cols, mask=cmask, other=0.0)[None, :]
    h = tile(S, sS, rows, rmask, cols, cmask)
    k = 0
    spins = LIMIT
    for n in range(1, T + 1):
        ds = step_length(dt, HS, rows, rmask, n, T, GAPS)
        r, f, mu, c = _grid_gates(E, S, bhu, wrt, wft, wut, n, rows, rmask, cols, cmask, T, H, HP, PRECISION)
        sf = sigmoid(f)
        h = h + ds * (sf * tanh(c) - sf * h)
        tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)
        k, spins = grid.barrier(SYNC, k, spins)
        if STORE:
            _store_blocks(PRE, n, rows, cols, m, r, f, mu, c, T, H)


@triton.jit
def _grid_backward(E, WH, WHT, BHU, C, HS, S, GO, G, L, DP, SYNC, B, T, H, HP: tl.constexpr, BB: tl.constexpr,
                   BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr,
                   DHS: tl.constexpr, STORED: tl.constexpr = False):
    """Step n's backward on this program's columns (reset_after): [g_r, g_f, g_c, g_m] written (with DHS, the
    columns' part of ∂L/∂Δt_n into DP, :func:`store_length_part`), a barrier, then λ_{n−1} = λ (1 − Δt σ(f)) +
    [g_r, g_f, g_m] [W_r; W_f; W_u] over their whole rows + ∂L/∂h_{n−1}; λ in registers, L (B, H): the final
    state's adjoint in, the initial state's out. E: the encodings, whose gates it recomputes from the stored states
    (three products a step), or with STORED the (r, f, W_u h + b_hu, c) that :func:`_grid_forward` stored (STORE),
    each step's loaded one step ahead: then only the adjoints' products, and one orientation of the weight tiles."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    sG = T * 4 * H
    if STORED:
        stored = four_blocks(E, T, rows, rmask, cols, cmask, T, H)
    else:  # the forward's orientation as well, for the recomputed gates
        wrt, wft, wut = _gate_tiles(WHT, cols, H, HP)
    wr, wf, wu = _gate_tiles(WH, cols, H, HP)
    bhu = tl.load(BHU + cols, mask=cmask, other=0.0)[None, :]
    lam = tile(L, H, rows, rmask, cols, cmask)
    k = 0
    spins = LIMIT
    for i in range(0, T):
        n = T - i
        g = G + (n - 1) * 4 * H
        ds = step_length(dt, HS, rows, rmask, n, T, GAPS)
        if STORED:
            r, f, mu, c = stored
            stored = four_blocks(E, n - 1, rows, rmask, cols, cmask, T, H)  # (r, f, W_u h + b_hu, c)
        else:
            r, f, mu, c = _grid_gates(E, S, bhu, wrt, wft, wut, n, rows, rmask, cols, cmask, T, H, HP, PRECISION)
        sf = sigmoid(f)
        sr = sigmoid(r)
        tc = tanh(c)
        hp = tile(S + (n - 1) * H, sS, rows, rmask, cols, cmask)
        _store_gate_gradients(g, sG, rows, cols, m, lam, ds, sr, sf, tc, mu, hp, H, True)
        if DHS:  # ∂h_n/∂Δt against λ_n
            part = tl.sum(tl.where(m, lam * sf * (tc - hp), 0.0), axis=1)
            store_length_part(DP, part, rows, rmask, n, T, tl.program_id(1), tl.num_programs(1))
        k, spins = grid.barrier(SYNC, k, spins)
        lam = lam * (1.0 - ds * sf)
        lam = dot(grid.rows_of(g, sG, rows, rmask, H, HP), wr, lam, PRECISION)
        lam = dot(grid.rows_of(g + H, sG, rows, rmask, H, HP), wf, lam, PRECISION)
        lam = dot(grid.rows_of(g + 3 * H, sG, rows, rmask, H, HP), wu, lam, PRECISION)
        lam += tile_at(GO - 2 * H, n, H, T * H, rows, rmask, cols, cmask, 2, T)
    tl.store(L + rows[:, None] * H + cols[None, :], lam, mask=m)


def transposed_weights(weight_hidden: torch.Tensor) -> torch.Tensor:
    """[W_rᵀ; W_fᵀ; W_uᵀ] (3H, H), contiguous, for the kernels' products S Wᵀ (the gates), whose tiles are then read
    along their rows (Triton's FMA products load them with ldmatrix, free of shared-memory bank conflicts;
    ``lem.transposed_weights`` says what reading W's rows cost)."""
    H = weight_hidden.shape[1]
    return weight_hidden.view(3, H, H).transpose(1, 2).contiguous().view(3 * H, H)


class GRUSequence(torch.autograd.Function):
    """``apply(enc, weight_hidden, b_hu, h0, dt, reset_after, hs, block_h, train, schedule) -> (hs, h_T)``; ``hs``:
    None, or each row's step lengths (B, T) (``kernels.gaps.per_step_lengths``), which replace ``dt``, with their
    gradient where they require one (every schedule); ``train``: whether autograd records the call
    (``torch.is_grad_enabled()`` at the call); ``schedule``: "persistent", "stepwise" or "grid"
    (``grid.schedule_for``)."""

    @staticmethod
    def forward(ctx, enc, weight_hidden, b_hu, h0, dt, reset_after, hs, block_h, train, schedule="persistent"):
        ctx.precision = dot_precision(enc.dtype)  # fixed at the forward: the backward recomputes with it
        B, T, _ = enc.shape
        H = h0.shape[1]
        enc, weight_hidden = enc.contiguous(), weight_hidden.contiguous()
        WHT = transposed_weights(weight_hidden)  # the forward's products use it alone
        b_hu = enc.new_zeros(H) if b_hu is None else b_hu.contiguous()
        S = enc.new_empty(B, T + 1, H)
        S[:, 0] = h0
        R = enc.new_empty(B, H)
        consts = on_device([dt], enc.dtype, enc.device)
        gaps = hs is not None
        hs = hs if gaps else consts  # read only with GAPS
        BB, BH = block_sizes(B, H, block_h)
        ctx.stored = False  # the gates (B, T, 4H) stored in place of the encodings (saved as enc)
        if schedule == "grid" and reset_after and grid.resident(B, H, block_h, enc.device, ctx.precision):
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            pre = enc.new_empty(B, T, 4 * H) if ctx.stored else None
            grid.launch_resident(_grid_forward, (enc, WHT, b_hu, consts, hs, S), B, T, H, ctx.precision,
                                 GAPS=gaps, PRE=pre, STORE=ctx.stored)
            enc = pre if ctx.stored else enc
        elif schedule in ("grid", "stepwise"):  # the weights streamed through the step kernels
            ctx.stored = reset_after and grid.stored_gates(train and any(ctx.needs_input_grad))
            table = [enc, WHT, b_hu, consts, S, R, hs] + ([enc.new_empty(B, T, 4 * H)] if ctx.stored else [])
            if schedule == "grid":
                grid.launch(_grid, table, consts, B, T, H, block_h, ctx.precision, False,
                            PHASES=1 if reset_after else 2, RESET_AFTER=reset_after, GAPS=gaps, DHS=False,
                            STORED=ctx.stored)
            else:
                launch_steps(table, step_launches(_step, 1 if reset_after else 2, range(1, T + 1), consts, B, T, H,
                                                  BB, BH, ctx.precision, RESET_AFTER=reset_after, GAPS=gaps,
                                                  STORE=ctx.stored))
            enc = table[-1] if ctx.stored else enc
        elif reset_after and resident(H, block_h):
            _forward_resident[(triton.cdiv(B, BB),)](enc, WHT, b_hu, consts, hs, S, B, T, H, BB=BB, BH=BH,
                                                     PRECISION=ctx.precision, GAPS=gaps, num_warps=warps(BH))
        else:
            _forward[(triton.cdiv(B, BB),)](enc, WHT, b_hu, consts, hs, S, R, B, T, H,
                                            RESET_AFTER=reset_after, BB=BB, BH=BH, PRECISION=ctx.precision, GAPS=gaps,
                                            num_warps=warps(BH))
        ctx.save_for_backward(enc, weight_hidden, WHT, b_hu, consts, S, hs)
        ctx.reset_after, ctx.block_h, ctx.schedule, ctx.gaps = reset_after, block_h, schedule, gaps
        return S[:, 1:], S[:, T].clone()

    @staticmethod
    @kernel_backward("cuda")
    def backward(ctx, grad_hs, grad_h):
        enc, weight_hidden, WHT, b_hu, consts, S, hs = ctx.saved_tensors
        B, T, _ = enc.shape
        H = S.shape[2]
        reset_after = ctx.reset_after
        grad_hs = grad_hs.contiguous()
        G = enc.new_empty(B, T, 4 * H)
        RS = enc.new_empty(B, T, H) if not reset_after else enc.new_empty(1)
        L = enc.new_empty(2, B, H)
        L[T % 2] = grad_h + grad_hs[:, T - 1]
        BB, BH = block_sizes(B, H, ctx.block_h)
        gaps = ctx.gaps
        dhs = enc.new_empty(B, T) if ctx.needs_input_grad[6] else None
        DH = consts if dhs is None else dhs  # written only with DHS
        on_chip = ctx.schedule == "grid" and reset_after and grid.resident(B, H, ctx.block_h, enc.device,
                                                                           ctx.precision)
        in_parts = dhs is not None and ctx.schedule != "persistent"  # dhs from each column-tile program's part
        DP = enc.new_empty(B, T, triton.cdiv(H, grid.RESIDENT_BH if on_chip else BH)) if in_parts else consts
        tensors = [enc, weight_hidden, b_hu, consts, S, grad_hs, G, RS, L, hs, WHT] + ([DP] if in_parts else [])
        if on_chip:
            L[0] = L[T % 2]
            grid.launch_resident(_grid_backward, (enc, weight_hidden, WHT, b_hu, consts, hs, S, grad_hs, G, L[0], DP),
                                 B, T, H, ctx.precision, GAPS=gaps, DHS=in_parts, STORED=ctx.stored)
        elif ctx.schedule == "grid":
            grid.launch(_grid, tensors, consts, B, T, H, ctx.block_h, ctx.precision, True,
                        PHASES=2 if reset_after else 4, RESET_AFTER=reset_after, GAPS=gaps, DHS=in_parts,
                        STORED=ctx.stored)
        elif ctx.schedule == "stepwise":
            launch_steps(tensors, step_launches(_step_backward, 2 if reset_after else 4, range(T, 0, -1), consts, B, T,
                                                H, BB, BH, ctx.precision, RESET_AFTER=reset_after, GAPS=gaps,
                                                DHS=in_parts, STORED=ctx.stored))
        elif reset_after and resident(H, ctx.block_h):  # one buffer: final-state adjoint in, initial out
            L[0] = L[T % 2]
            _backward_resident[(triton.cdiv(B, BB),)](enc, weight_hidden, WHT, b_hu, consts, hs, S, grad_hs, G, L[0],
                                                      B, T, H, DH, BB=BB, BH=BH, PRECISION=ctx.precision, GAPS=gaps,
                                                      DHS=dhs is not None, num_warps=warps(BH))
        else:
            _backward[(triton.cdiv(B, BB),)](enc, weight_hidden, WHT, b_hu, consts, hs, S, grad_hs, G, RS, L, B, T, H,
                                             DH, RESET_AFTER=reset_after, BB=BB, BH=BH, PRECISION=ctx.precision,
                                             GAPS=gaps, DHS=dhs is not None, num_warps=warps(BH))
        if in_parts:
            torch.sum(DP, 2, out=dhs)
        h_prev = S[:, :-1]
        if reset_after:  # [W_r; W_f] and W_u all map h_{n-1}: G's columns r, f, (c), u
            d_all = outer_sum(G, h_prev)
            d_rf, d_u = d_all[: 2 * H], d_all[3 * H:]
            d_b_hu = G[..., 3 * H:].sum((0, 1))
        else:
            d_rf = outer_sum(G[..., : 2 * H], h_prev)
            d_u = outer_sum(G[..., 2 * H: 3 * H], RS)
            d_b_hu = None
        return G[..., : 3 * H], torch.cat((d_rf, d_u)), d_b_hu, L[0].clone(), None, None, dhs, None, None, None


@in_chunks
def run(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """The GRU field with explicit Euler ("euler") over ``x`` from ``state`` = (h0,), ``unfolds`` = L sub-steps
    of dt/L per sample (the input held); ``dt`` a float, or a (batch, time) tensor of each sample's own gap
    (``Recurrent.forward(x, dt=gaps)``), with its gradient when the gaps require one (from every schedule).
    ``schedule`` ("auto", "persistent", "stepwise" or "grid"; default ``$ODELAB_CUDA_SCHEDULE`` or "auto": grid on
    CUDA): the stepwise or the grid-synchronised one (stepwise.py, grid.py) replaces the tiled kernels at hidden >
    32 or with ``block_h`` given (below, reset before keeps its one-tile persistent kernel)."""
    steps, h = per_step_lengths(dt, unfolds, x.dtype, keep_grad=True)
    chosen = grid.schedule_for(schedule, x, state[0].shape[1], block_h)
    enc = system.encode(x)
    if unfolds != 1:  # the input held over L sub-steps (x encoded once)
        enc = enc.repeat_interleave(unfolds, dim=1)
    b_hu = system.bias_hidden_candidate if system.reset_after else None
    hs, hT = grid.apply(GRUSequence, enc, system.weight_hidden, b_hu, state[0], h, system.reset_after,
                        steps, block_h, torch.is_grad_enabled(), chosen)
    if unfolds != 1:
        hs = hs[:, unfolds - 1::unfolds]
    return hs, (hT,)
