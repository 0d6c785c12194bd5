"""Second-order cells, state (z, y) with y' = z: coRNN ("imex": damping explicit, "imex-implicit": damping
implicit; 002 eq. 2.3) and the neural oscillator ("symplectic-euler"; thesis eq. 4.1), one Triton launch
forward and one backward over the sequence -- or, under the stepwise schedule (stepwise.py: on CUDA from hidden 33),
one launch per step forward and two per step backward over (batch blocks, column tiles), the same tile helpers, or
those launches' phases in one launch forward and one backward with a barrier between them (grid.py).

    a_n = 𝒲 z_{n−1} + W y_{n−1} + (V u_n + b)          (the oscillator: 𝒲 = 0, γ = ε = 0)
    z_n = z_{n−1} + Δt (tanh(a_n) − γ y_{n−1} − ε z_{n−1})          coRNN, explicit damping
    z_n = (z_{n−1} + Δt (tanh(a_n) − γ y_{n−1})) / (1 + Δt ε)      coRNN, implicit damping
    z_n = z_{n−1} + Δt tanh(a_n)                                    neural oscillator
    y_n = y_{n−1} + Δt z_n

Δt is shared, or with per-sample steps (irregular sampling, ``Recurrent.forward(x, dt=gaps)``; constexpr GAPS)
each row's own length of step n (``_common.step_length``), in the γ, ε sums too; with gaps requiring grad (a learned
Δt) every backward also gives ∂L/∂h per row and step (constexpr DHS): the persistent kernels sum it over their column
tiles in registers; in the stepwise and grid schedules each column-tile program writes its own part (a (B, T, column
tiles) buffer, summed by torch).

The backward recomputes a_n from the stored states, writes g_a = ∂L/∂a_n per step (= the gradient of the
encoding V u + b) and accumulates the γ, ε gradients per (batch, hidden) element; the recurrent weight
gradient is one GEMM: d[𝒲 | W] = Σ_n g_aᵀ [z_{n−1} | y_{n−1}].
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
    address, available, batch_rows, block_sizes, dot, dot_precision, mv, on_device, outer_sum, resident, resident_block,
    step_launches, step_length, store_length_part, tanh, tile, tile_at, warps, weights)
from .stepwise import launch_steps

OSCILLATOR, EXPLICIT, IMPLICIT = 0, 1, 2


@triton.jit
def _preactivation(E, WRT, Z, Y, n, c0, rows, rmask, T, H, MODE: tl.constexpr, BH: tl.constexpr,
                   PRECISION: tl.constexpr):
    """(a_n, columns, mask) on columns c0 : c0 + BH: a_n = 𝒲 z_{n−1} + W y_{n−1} + e_n (𝒲 = 0 for the oscillator);
    WRT: W_recᵀ (:func:`transposed_weights`)."""
    sS = (T + 1) * H
    WYT = WRT
    if MODE != 0:
        WYT = WRT + H * H
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    a = tl.load(E + (n - 1) * H + rows[:, None] * (T * H) + cols[None, :], mask=m, other=0.0)
    if MODE != 0:
        a = mv(a, Z + (n - 1) * H, sS, rows, rmask, WRT, H, c0, H, H, True, BH, PRECISION)
    a = mv(a, Y + (n - 1) * H, sS, rows, rmask, WYT, H, c0, H, H, True, BH, PRECISION)
    return a, cols, m


@triton.jit
def _update(z, y, th, dt, gamma, eps, MODE: tl.constexpr):
    """(z_n, y_n) from (z_{n−1}, y_{n−1}) and th = tanh(a_n): the module docstring's step for MODE."""
    if MODE == 0:
        z = z + dt * th
    elif MODE == 1:
        z = z + dt * ((th - gamma * y) - eps * z)
    else:
        z = (z + dt * (th - gamma * y)) / (1.0 + dt * eps)
    return z, y + dt * z


@triton.jit
def _forward_tile(E, WRT, Z, Y, dt, gamma, eps, n, c0, rows, rmask, T, H, MODE: tl.constexpr, BH: tl.constexpr,
                  PRECISION: tl.constexpr, PRE=None, STORE: tl.constexpr = False):
    """Columns c0 : c0 + BH of (z_n, y_n) from (z_{n−1}, y_{n−1}) (the module docstring's step; WRT: W_recᵀ); with
    STORE, tanh(a_n) into PRE (B, T, H, the encodings' layout)."""
    sS = (T + 1) * H
    a, cols, m = _preactivation(E, WRT, Z, Y, n, c0, rows, rmask, T, H, MODE, BH, PRECISION)
    z = tl.load(Z + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    y = tl.load(Y + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    th = tanh(a)
    z, y = _update(z, y, th, dt, gamma, eps, MODE)
    tl.store(Z + n * H + rows[:, None] * sS + cols[None, :], z, mask=m)
    tl.store(Y + n * H + rows[:, None] * sS + cols[None, :], y, mask=m)
    if STORE:
        tl.store(PRE + (n - 1) * H + rows[:, None] * (T * H) + cols[None, :], th, mask=m)


@triton.jit
def _update_adjoint(lz, ly, th, Z, Y, n, sS, rows, cols, m, dt, gamma, eps, H, MODE: tl.constexpr):
    """The adjoint of :func:`_update` on columns ``cols`` for λ_n = (lz, ly), th = tanh(a_n): (g_a, λz_{n−1} and
    λy_{n−1} without the products through a_n, this step's ∂L/∂γ and ∂L/∂ε terms; z_{n−1}, y_{n−1}, z_n read from
    the state buffers where the mode needs them)."""
    lz = lz + dt * ly  # through y_n = y_{n−1} + Δt z_n
    if MODE == 0:
        return lz * dt * (1.0 - th * th), lz, ly, lz * 0.0, lz * 0.0
    z = tl.load(Z + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    y = tl.load(Y + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    if MODE == 1:
        return lz * dt * (1.0 - th * th), lz * (1.0 - dt * eps), ly - lz * dt * gamma, -lz * dt * y, -lz * dt * z
    d = 1.0 + dt * eps
    zn = tl.load(Z + n * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    return lz * dt / d * (1.0 - th * th), lz / d, ly - lz * dt * gamma / d, -lz * dt * y / d, -lz * zn * dt / d


@triton.jit
def _length_gradient(lz, ly, th, z, y, zn, h, gamma, eps, MODE: tl.constexpr):
    """∂L/∂h of step n per row (its columns' share): Σ_j λy_j z_n,j + (λz_j + h λy_j) ∂z_n,j/∂h, for λ_n = (lz, ly)
    before this step's backward, th = tanh(a_n), (z, y) = (z_{n−1}, y_{n−1})."""
    if MODE == 0:
        dz = th
    elif MODE == 1:
        dz = (th - gamma * y) - eps * z
    else:
        dz = ((th - gamma * y) - eps * zn) / (1.0 + h * eps)
    return tl.sum(ly * zn + (lz + h * ly) * dz, axis=1)


@triton.jit
def _backward_gate_tile(E, WRT, Z, Y, G, LZ, LY, AC, dt, gamma, eps, n, c0, rows, rmask, B, T, H,
                        MODE: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, DHS: tl.constexpr = False,
                        STORED: tl.constexpr = False):
    """Step n's backward on columns c0 : c0 + BH, first part: g_a = ∂L/∂a_n into G, the γ, ε sums into AC, and
    λz_{n−1}, λy_{n−1} without the products through a_n into LZ/LY[(n − 1) % 2] (λ_n read from LZ/LY[n % 2]);
    DHS: returns these columns' share of ∂L/∂h per row (:func:`_length_gradient`); WRT: W_recᵀ; STORED: E holds
    tanh(a_n), stored by the forward (:func:`_forward_tile` with STORE), read instead of recomputed."""
    sS = (T + 1) * H
    cur = n % 2
    if STORED:
        cols = c0 + tl.arange(0, BH)
        m = rmask[:, None] & (cols < H)[None, :]
        th = tl.load(E + (n - 1) * H + rows[:, None] * (T * H) + cols[None, :], mask=m, other=0.0)
    else:
        a, cols, m = _preactivation(E, WRT, Z, Y, n, c0, rows, rmask, T, H, MODE, BH, PRECISION)
        th = tanh(a)
    lz = tl.load(LZ + cur * B * H + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    ly = tl.load(LY + cur * B * H + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    ga, lz_part, ly_part, d_gamma, d_eps = _update_adjoint(lz, ly, th, Z, Y, n, sS, rows, cols, m, dt, gamma, eps, H,
                                                           MODE)
    if MODE != 0:
        acc_g = tl.load(AC + rows[:, None] * H + cols[None, :], mask=m, other=0.0) + d_gamma
        acc_e = tl.load(AC + B * H + rows[:, None] * H + cols[None, :], mask=m, other=0.0) + d_eps
        tl.store(AC + rows[:, None] * H + cols[None, :], acc_g, mask=m)
        tl.store(AC + B * H + rows[:, None] * H + cols[None, :], acc_e, mask=m)
    tl.store(G + (n - 1) * H + rows[:, None] * (T * H) + cols[None, :], ga, mask=m)
    tl.store(LZ + (1 - cur) * B * H + rows[:, None] * H + cols[None, :], lz_part, mask=m)
    tl.store(LY + (1 - cur) * B * H + rows[:, None] * H + cols[None, :], ly_part, mask=m)
    if DHS:
        z = tl.load(Z + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
        y = tl.load(Y + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
        zn = tl.load(Z + n * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
        return _length_gradient(lz, ly, th, z, y, zn, dt, gamma, eps, MODE)


@triton.jit
def _backward_adjoint_tile(WR, G, GO, LZ, LY, n, c0, rows, rmask, B, T, H, MODE: tl.constexpr, BH: tl.constexpr,
                           PRECISION: tl.constexpr):
    """Step n's backward on columns c0 : c0 + BH, second part (every column of g_a written):
    λ_{n−1} += g_a [𝒲 | W], + ∂L/∂y_{n−1}, in LZ/LY[(n − 1) % 2]."""
    sE = T * H
    sW = H
    WY = WR
    if MODE != 0:
        sW = 2 * H
        WY = WR + H
    nxt = (1 - n % 2) * B * H
    g = G + (n - 1) * H
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    if MODE != 0:
        lz = tl.load(LZ + nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
        lz = mv(lz, g, sE, rows, rmask, WR, sW, c0, H, H, True, BH, PRECISION)
        tl.store(LZ + nxt + rows[:, None] * H + cols[None, :], lz, mask=m)
    ly = tl.load(LY + nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    ly = mv(ly, g, sE, rows, rmask, WY, sW, c0, H, H, True, BH, PRECISION)
    ly += tl.load(GO + (n - 2) * H + rows[:, None] * sE + cols[None, :], mask=m & (cols * 0 + n >= 2)[None, :],
                  other=0.0)
    tl.store(LY + nxt + rows[:, None] * H + cols[None, :], ly, mask=m)


@triton.jit
def _program(C, B, BB: tl.constexpr):
    """This program's batch rows, their mask, and (Δt, γ, ε) from C."""
    rows, rmask = batch_rows(B, BB)
    return rows, rmask, tl.load(C), tl.load(C + 1), tl.load(C + 2)


@triton.jit
def _forward(E, WRT, C, HS, Z, Y, B, T, H, MODE: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
             PRECISION: tl.constexpr, GAPS: tl.constexpr):
    """HS: with GAPS, each row's step lengths (B, T) in place of Δt (``step_length``); WRT: W_recᵀ."""
    rows, rmask, dt, gamma, eps = _program(C, B, BB)
    for n in range(1, T + 1):
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        for c0 in range(0, H, BH):
            _forward_tile(E, WRT, Z, Y, h, gamma, eps, n, c0, rows, rmask, T, H, MODE, BH, PRECISION)
        tl.debug_barrier()


@triton.jit
def _backward(E, WR, WRT, C, HS, Z, Y, GO, G, LZ, LY, AC, B, T, H, DH, MODE: tl.constexpr, BB: tl.constexpr,
              BH: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """λz, λy ping-pong in LZ/LY (2, B, H); AC (2, B, H) accumulates ∂L/∂γ, ∂L/∂ε per element (their terms with
    each row's own step, GAPS); DHS (with GAPS): ∂L/∂h of every row's step n into DH (B, T), summed over the
    column tiles in registers. WR: W_rec, WRT: W_recᵀ (for the recomputed preactivations)."""
    rows, rmask, dt, gamma, eps = _program(C, B, BB)
    for i in range(0, T):
        n = T - i
        if DHS:
            dh = tl.zeros((BB,), dtype=DH.dtype.element_ty)
        for c0 in range(0, H, BH):  # GAPS: the row's step read per tile (held across them: 48 bytes spilled)
            if DHS:
                dh += _backward_gate_tile(E, WRT, Z, Y, G, LZ, LY, AC, step_length(dt, HS, rows, rmask, n, T, GAPS),
                                          gamma, eps, n, c0, rows, rmask, B, T, H, MODE, BH, PRECISION, True)
            else:
                _backward_gate_tile(E, WRT, Z, Y, G, LZ, LY, AC, step_length(dt, HS, rows, rmask, n, T, GAPS), gamma,
                                    eps, n, c0, rows, rmask, B, T, H, MODE, BH, PRECISION)
        if DHS:
            tl.store(DH + rows * T + (n - 1), dh, mask=rmask)
        tl.debug_barrier()
        for c0 in range(0, H, BH):
            _backward_adjoint_tile(WR, G, GO, LZ, LY, n, c0, rows, rmask, B, T, H, MODE, BH, PRECISION)
        tl.debug_barrier()


@triton.jit(do_not_specialize=["n"])
def _step(TABLE, REF, n, B, T, H, PHASE: tl.constexpr, MODE: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
          PRECISION: tl.constexpr, GAPS: tl.constexpr, STORE: tl.constexpr = False):
    """The stepwise schedule (stepwise.py): step n on one (batch block, column tile) program (one phase);
    TABLE = the addresses of [E, W_recᵀ, C, Z, Y, HS] (:func:`transposed_weights`; HS: the per-step lengths, with
    GAPS) and, with STORE, PRE (B, T, H): tanh(a_n) of every step, for a backward with STORED."""
    rows, rmask = batch_rows(B, BB)
    C = address(TABLE, 2, REF)
    E = address(TABLE, 0, REF)
    PRE = address(TABLE, 6, REF) if STORE else E
    _forward_tile(E, address(TABLE, 1, REF), address(TABLE, 3, REF), address(TABLE, 4, REF),
                  step_length(tl.load(C), address(TABLE, 5, REF), rows, rmask, n, T, GAPS), tl.load(C + 1),
                  tl.load(C + 2), n, tl.program_id(1) * BH, rows, rmask, T, H, MODE, BH, PRECISION, PRE, STORE)


@triton.jit(do_not_specialize=["n"])
def _step_backward(TABLE, REF, n, B, T, H, PHASE: tl.constexpr, MODE: tl.constexpr, BB: tl.constexpr,
                   BH: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr,
                   STORED: tl.constexpr = False):
    """Phase PHASE of step n's backward (0: g_a and λ's direct parts, 1: the products through a_n) on one
    program; TABLE = the addresses of [E, W_rec, C, Z, Y, GO, G, LZ, LY, AC, HS, W_recᵀ] (with STORED, E is the
    tanh(a_n) the forward stored) and, with DHS, DP: phase 0 writes its columns' part of ∂L/∂h of step n
    (:func:`store_length_part`)."""
    rows, rmask = batch_rows(B, BB)
    c0 = tl.program_id(1) * BH
    WR = address(TABLE, 1, REF)
    G = address(TABLE, 6, REF)
    LZ = address(TABLE, 7, REF)
    LY = address(TABLE, 8, REF)
    if PHASE == 0:
        C = address(TABLE, 2, REF)
        HS = address(TABLE, 10, REF)
        WRT = address(TABLE, 11, REF)
        if DHS:
            h = step_length(tl.load(C), HS, rows, rmask, n, T, GAPS)
            part = _backward_gate_tile(address(TABLE, 0, REF), WRT, address(TABLE, 3, REF), address(TABLE, 4, REF),
                                       G, LZ, LY, address(TABLE, 9, REF), h, tl.load(C + 1), tl.load(C + 2), n, c0,
                                       rows, rmask, B, T, H, MODE, BH, PRECISION, True, STORED)
            store_length_part(address(TABLE, 12, REF), part, rows, rmask, n, T, tl.program_id(1), tl.num_programs(1))
        else:
            _backward_gate_tile(address(TABLE, 0, REF), WRT, address(TABLE, 3, REF), address(TABLE, 4, REF), G, LZ,
                                LY, address(TABLE, 9, REF), step_length(tl.load(C), HS, rows, rmask, n, T, GAPS),
                                tl.load(C + 1), tl.load(C + 2), n, c0, rows, rmask, B, T, H, MODE, BH, PRECISION,
                                False, STORED)
    else:
        _backward_adjoint_tile(WR, G, address(TABLE, 5, REF), LZ, LY, n, c0, rows, rmask, B, T, H, MODE, BH,
                               PRECISION)


@triton.jit
def _resident_weights(WR, H, MODE: tl.constexpr, BH: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """𝒲 (acting on z; coRNN only) and W (on y) as register tiles: (𝒲, W) from W_rec = [𝒲 W] (H × 2H; the
    oscillator's one matrix stands for both), or with TRANSPOSED (𝒲ᵀ, Wᵀ) from W_recᵀ (:func:`transposed_weights`,
    its rows read in order)."""
    if MODE == 0:
        wy = weights(WR, H, H, BH)
        wz = wy
    elif TRANSPOSED:
        wz = weights(WR, H, H, BH)
        wy = weights(WR + H * H, H, H, BH)
    else:
        wz = weights(WR, 2 * H, H, BH)
        wy = weights(WR + H, 2 * H, H, BH)
    return wz, wy


@triton.jit
def _forward_resident(E, WRT, C, HS, Z, Y, B, T, H, MODE: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
                      PRECISION: tl.constexpr, GAPS: tl.constexpr):
    """hidden ≤ BH: 𝒲, W (from WRT = W_recᵀ) and the state on chip for the whole sequence; step n's input (and,
    with GAPS, its length) loaded one step ahead."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    gamma = tl.load(C + 1)
    eps = tl.load(C + 2)
    sE = T * H
    sS = (T + 1) * H
    wzt, wyt = _resident_weights(WRT, H, MODE, BH, True)
    z = tile(Z, sS, rows, rmask, cols, cmask)
    y = tile(Y, sS, rows, rmask, cols, cmask)
    x = tile_at(E - H, 1, H, sE, rows, rmask, cols, cmask, 1, T)  # step n's input at E + (n − 1) H
    h = step_length(dt, HS, rows, rmask, 1, T, GAPS)
    for n in range(1, T + 1):
        x_next = tile_at(E - H, n + 1, H, sE, rows, rmask, cols, cmask, 1, T)  # loaded while step n computes
        h_next = step_length(dt, HS, rows, rmask, n + 1, T, GAPS)
        a = dot(y, wyt, x, PRECISION)
        if MODE != 0:
            a = dot(z, wzt, a, PRECISION)
        z, y = _update(z, y, tanh(a), h, gamma, eps, MODE)
        tl.store(Z + n * H + rows[:, None] * sS + cols[None, :], z, mask=m)
        tl.store(Y + n * H + rows[:, None] * sS + cols[None, :], y, mask=m)
        x = x_next
        h = h_next


@triton.jit
def _backward_resident(E, WR, WRT, C, HS, Z, Y, GO, G, LZ, LY, AC, B, T, H, DH, MODE: tl.constexpr, BB: tl.constexpr,
                       BH: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """hidden ≤ BH: weights, adjoints and the γ, ε sums in registers; LZ/LY (B, H): final-state adjoints in,
    initial-state adjoints out; AC (2, B, H) the γ, ε sums out (with GAPS each row's step h in place of Δt, loaded
    one step ahead); DHS (with GAPS): ∂L/∂h of every row's step n into DH (B, T)."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    gamma = tl.load(C + 1)
    eps = tl.load(C + 2)
    sE = T * H
    sS = (T + 1) * H
    wz, wy = _resident_weights(WR, H, MODE, BH)
    wzt, wyt = _resident_weights(WRT, H, MODE, BH, True)
    lz = tile(LZ, H, rows, rmask, cols, cmask)
    ly = tile(LY, H, rows, rmask, cols, cmask)
    acc_g = tl.zeros((BB, BH), dtype=lz.dtype)
    acc_e = tl.zeros((BB, BH), dtype=lz.dtype)
    # step n reads z_{n−1}, y_{n−1}, its input, z_n and ∂L/∂y_{n−1} from the outputs: loaded one step ahead
    zp = tile_at(Z - H, T, H, sS, rows, rmask, cols, cmask, 1, T)
    yp = tile_at(Y - H, T, H, sS, rows, rmask, cols, cmask, 1, T)
    x = tile_at(E - H, T, H, sE, rows, rmask, cols, cmask, 1, T)
    zn = tile_at(Z, T, H, sS, rows, rmask, cols, cmask, 1, T)
    go = tile_at(GO - 2 * H, T, H, sE, rows, rmask, cols, cmask, 2, T)
    h = step_length(dt, HS, rows, rmask, T, T, GAPS)
    for i in range(0, T):
        n = T - i
        zq = tile_at(Z - H, n - 1, H, sS, rows, rmask, cols, cmask, 1, T)
        yq = tile_at(Y - H, n - 1, H, sS, rows, rmask, cols, cmask, 1, T)
        xq = tile_at(E - H, n - 1, H, sE, rows, rmask, cols, cmask, 1, T)
        gq = tile_at(GO - 2 * H, n - 1, H, sE, rows, rmask, cols, cmask, 2, T)
        hq = step_length(dt, HS, rows, rmask, n - 1, T, GAPS)
        a = dot(yp, wyt, x, PRECISION)
        if MODE != 0:
            a = dot(zp, wzt, a, PRECISION)
        th = tanh(a)
        if DHS:
            tl.store(DH + rows * T + (n - 1), _length_gradient(lz, ly, th, zp, yp, zn, h, gamma, eps, MODE),
                     mask=rmask)
        lz = lz + h * ly  # through y_n = y_{n−1} + Δt z_n
        if MODE == 0:
            ga = lz * h * (1.0 - th * th)
        elif MODE == 1:
            ga = lz * h * (1.0 - th * th)
            acc_g += -lz * h * yp
            acc_e += -lz * h * zp
            ly = ly - lz * h * gamma
            lz = lz * (1.0 - h * eps)
        else:
            d = 1.0 + h * eps
            ga = lz * h / d * (1.0 - th * th)
            acc_g += -lz * h * yp / d
            acc_e += -lz * zn * h / d
            ly = ly - lz * h * gamma / d
            lz = lz / d
        tl.store(G + (n - 1) * H + rows[:, None] * sE + cols[None, :], ga, mask=m)
        if MODE != 0:
            lz = dot(ga, wz, lz, PRECISION)
        ly = dot(ga, wy, ly, PRECISION)
        ly += go
        zp, yp, x, zn, go = zq, yq, xq, zp, gq
        h = hq
    tl.store(LZ + rows[:, None] * H + cols[None, :], lz, mask=m)
    tl.store(LY + rows[:, None] * H + cols[None, :], ly, mask=m)
    tl.store(AC + rows[:, None] * H + cols[None, :], acc_g, mask=m)
    tl.store(AC + B * H + rows[:, None] * H + cols[None, :], acc_e, mask=m)


@triton.jit
def _grid(TABLE, REF, SYNC, B, T, H, BACKWARD: tl.constexpr, MODE: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
          PRECISION: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr,
          STORED: tl.constexpr = False):
    """The grid-synchronised schedule (grid.py): :func:`_step` for every step (or, BACKWARD, the two phases of
    :func:`_step_backward`, steps T … 1, DHS as its) in one launch, a barrier of the batch block's column programs
    after each phase; TABLE as theirs; STORED: the forward stores tanh(a_n) (STORE), the backward reads it."""
    k = 0
    spins = LIMIT
    for i in range(0, T):
        if BACKWARD:
            for phase in tl.static_range(2):
                _step_backward(TABLE, REF, T - i, B, T, H, phase, MODE, BB, BH, PRECISION, GAPS, DHS, STORED)
                k, spins = grid.barrier(SYNC, k, spins)
        else:
            _step(TABLE, REF, i + 1, B, T, H, 0, MODE, BB, BH, PRECISION, GAPS, STORED)
            k, spins = grid.barrier(SYNC, k, spins)


# -- the grid schedule with weights on chip (grid.resident): a program keeps its column tiles of [𝒲 | W] (both
# orientations in the backward) for the whole sequence and reads only the states' whole rows; one barrier a step
# forward (a_n needs the whole rows of z_{n−1}, y_{n−1}) and one backward (λ_{n−1} needs the whole row of g_a) --

@triton.jit
def _recurrent_tiles(WR, cols, H, HP: tl.constexpr, MODE: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """``grid.column_tile`` of 𝒲 and W (W_rec = [𝒲 | W], rows 2H apart; the oscillator: W alone, 𝒲's tile unused),
    or with TRANSPOSED of 𝒲ᵀ and Wᵀ from W_recᵀ (:func:`transposed_weights`)."""
    if MODE == 0:
        return grid.column_tile(WR, H, cols, H, HP), grid.column_tile(WR, H, cols, H, HP)
    if TRANSPOSED:
        return grid.column_tile(WR, H, cols, H, HP), grid.column_tile(WR + H * H, H, cols, H, HP)
    return grid.column_tile(WR, 2 * H, cols, H, HP), grid.column_tile(WR + H, 2 * H, cols, H, HP)


@triton.jit
def _grid_preactivation(E, wzt, wyt, Z, Y, n, rows, rmask, cols, cmask, T, H, MODE: tl.constexpr, HP: tl.constexpr,
                        PRECISION: tl.constexpr):
    """a_n on this program's columns from the whole rows of z_{n−1}, y_{n−1} and the weights in registers."""
    sS = (T + 1) * H
    a = tile(E + (n - 1) * H, T * H, rows, rmask, cols, cmask)
    if MODE != 0:
        a = dot(grid.rows_of(Z + (n - 1) * H, sS, rows, rmask, H, HP), wzt, a, PRECISION)
    return dot(grid.rows_of(Y + (n - 1) * H, sS, rows, rmask, H, HP), wyt, a, PRECISION)


@triton.jit
def _grid_forward(E, WRT, C, HS, Z, Y, SYNC, B, T, H, MODE: tl.constexpr, HP: tl.constexpr, BB: tl.constexpr,
                  BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr, PRE=None,
                  STORE: tl.constexpr = False):
    """(z_n, y_n) on this program's columns for every step, kept in registers, a barrier after each step (GAPS:
    each row's own step, ``step_length``; WRT: W_recᵀ). With STORE its columns of each step's tanh(a_n) into PRE
    (B, T, H, the encodings' layout), stored after the step's barrier (drained while the next step computes)."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt, gamma, eps = tl.load(C), tl.load(C + 1), tl.load(C + 2)
    sS = (T + 1) * H
    wzt, wyt = _recurrent_tiles(WRT, cols, H, HP, MODE, True)
    z = tile(Z, sS, rows, rmask, cols, cmask)
    y = tile(Y, sS, rows, rmask, cols, cmask)
    k = 0
    spins = LIMIT
    for n in range(1, T + 1):
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        th = tanh(_grid_preactivation(E, wzt, wyt, Z, Y, n, rows, rmask, cols, cmask, T, H, MODE, HP, PRECISION))
        z, y = _update(z, y, th, h, gamma, eps, MODE)
        tl.store(Z + n * H + rows[:, None] * sS + cols[None, :], z, mask=m)
        tl.store(Y + n * H + rows[:, None] * sS + cols[None, :], y, mask=m)
        k, spins = grid.barrier(SYNC, k, spins)
        if STORE:
            tl.store(PRE + (n - 1) * H + rows[:, None] * (T * H) + cols[None, :], th, mask=m)


@triton.jit
def _grid_backward(E, WR, WRT, C, HS, Z, Y, GO, G, LZ, LY, AC, DP, SYNC, B, T, H, MODE: tl.constexpr, HP: tl.constexpr,
                   BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr,
                   GAPS: tl.constexpr, DHS: tl.constexpr, STORED: tl.constexpr = False):
    """Step n's backward on this program's columns (:func:`_backward_gate_tile`, then g_a [𝒲 | W] over the whole row
    of g_a after one barrier); λz, λy and the γ, ε sums stay in registers. LZ, LY (B, H): the final state's adjoints
    in, the initial state's out; AC (2, B, H): the γ, ε sums out; DHS: the columns' part of ∂L/∂h of every step into
    DP (:func:`store_length_part`). E: the encodings, whose tanh(a_n) it recomputes from the stored states (one or two
    products a step), or with STORED the tanh(a_n) that :func:`_grid_forward` stored (STORE), each step's loaded one
    step ahead: then only the adjoints' products, and one orientation of the weight tiles on chip."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt, gamma, eps = tl.load(C), tl.load(C + 1), tl.load(C + 2)
    sS = (T + 1) * H
    if STORED:
        th_next = tile_at(E, T - 1, H, T * H, rows, rmask, cols, cmask, 0, T - 1)
    else:  # the forward's orientation as well, for the recomputed pre-activations
        wzt, wyt = _recurrent_tiles(WRT, cols, H, HP, MODE, True)
    wz, wy = _recurrent_tiles(WR, cols, H, HP, MODE)
    lz = tile(LZ, H, rows, rmask, cols, cmask)
    ly = tile(LY, H, rows, rmask, cols, cmask)
    acc_g = tl.zeros((BB, BH), dtype=ly.dtype)
    acc_e = tl.zeros((BB, BH), dtype=ly.dtype)
    k = 0
    spins = LIMIT
    for i in range(0, T):
        n = T - i
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        if STORED:
            th = th_next
            th_next = tile_at(E, n - 2, H, T * H, rows, rmask, cols, cmask, 0, T - 1)
        else:
            th = tanh(_grid_preactivation(E, wzt, wyt, Z, Y, n, rows, rmask, cols, cmask, T, H, MODE, HP, PRECISION))
        if DHS:  # against λ_n, before this step's backward
            zp = tile(Z + (n - 1) * H, sS, rows, rmask, cols, cmask)
            yp = tile(Y + (n - 1) * H, sS, rows, rmask, cols, cmask)
            zn = tile(Z + n * H, sS, rows, rmask, cols, cmask)
            part = _length_gradient(lz, ly, th, zp, yp, zn, h, gamma, eps, MODE)
            store_length_part(DP, part, rows, rmask, n, T, tl.program_id(1), tl.num_programs(1))
        ga, lz, ly, d_gamma, d_eps = _update_adjoint(lz, ly, th, Z, Y, n, sS, rows, cols, m, h, gamma, eps, H, MODE)
        acc_g += d_gamma
        acc_e += d_eps
        tl.store(G + (n - 1) * H + rows[:, None] * (T * H) + cols[None, :], ga, mask=m)
        k, spins = grid.barrier(SYNC, k, spins)
        g_row = grid.rows_of(G + (n - 1) * H, T * H, rows, rmask, H, HP)
        if MODE != 0:
            lz = dot(g_row, wz, lz, PRECISION)
        ly = dot(g_row, wy, ly, PRECISION)
        ly += tile_at(GO - 2 * H, n, H, T * H, rows, rmask, cols, cmask, 2, T)
    tl.store(LZ + rows[:, None] * H + cols[None, :], lz, mask=m)
    tl.store(LY + rows[:, None] * H + cols[None, :], ly, mask=m)
    tl.store(AC + rows[:, None] * H + cols[None, :], acc_g, mask=m)
    tl.store(AC + B * H + rows[:, None] * H + cols[None, :], acc_e, mask=m)


def transposed_weights(W_rec: torch.Tensor) -> torch.Tensor:
    """W_recᵀ, contiguous: [𝒲ᵀ; Wᵀ] (2H, H) for coRNN, Wᵀ for the oscillator -- the weights of the kernels'
    products S Wᵀ, whose tiles are then read along their rows (Triton's FMA products load them with ldmatrix, free of
    shared-memory bank conflicts; ``lem.transposed_weights`` says what reading W's rows cost)."""
    return W_rec.t().contiguous()


class SecondOrderSequence(torch.autograd.Function):
    """``apply(enc, W_rec, coefficients, z0, y0, dt, mode, hs, block_h, train, schedule) -> (ys, z_T, y_T)``; W_rec
    = [𝒲 | W] (H, 2H) for coRNN, W (H, H) for the oscillator; coefficients = (γ, ε); ``hs``: None, or each row's
    step lengths (B, T) (``kernels.gaps.per_step_lengths``), which replace ``dt``, with their gradient where they
    require one (every schedule); ``train``: whether autograd records the call (``torch.is_grad_enabled()`` at the
    call); schedule: "persistent", "stepwise" or "grid" (``grid.schedule_for``)."""

    @staticmethod
    def forward(ctx, enc, W_rec, coefficients, z0, y0, dt, mode, hs, block_h, train, schedule="persistent"):
        # fixed at the forward (the backward recomputes with it); the neural oscillator takes IEEE products where
        # TF32 was asked for: it has no damping, and with TF32's 10-bit mantissas its gradients over 1000 steps lost
        # every digit (an H200: 3.4 relative on the initial state's; the interpreter's emulation: 1.0) -- measured on
        # a random W whose states run away, where even two float64 implementations part by 1e-2 (tests:
        # restoring_oscillator); TF32 on a bounded oscillator is not measured, so IEEE stays. Three TF32 products
        # ("tf32x3") keep float32's accuracy and are taken.
        ctx.precision = dot_precision(enc.dtype)
        if mode == OSCILLATOR and ctx.precision in ("tf32", "bf16", "bf16-rounded"):  # bfloat16: coarser still
            ctx.precision = "ieee"
        B, T, H = enc.shape
        enc, W_rec = enc.contiguous(), W_rec.contiguous()
        WRT = transposed_weights(W_rec)  # the forward's products use it alone
        Z = enc.new_empty(B, T + 1, H)
        Y = enc.new_empty(B, T + 1, H)
        Z[:, 0] = z0
        Y[:, 0] = y0
        consts = torch.cat((on_device([dt], enc.dtype, enc.device),
                            coefficients.detach().to(enc.dtype)))
        gaps = hs is not None
        hs = hs if gaps else consts  # read only with GAPS
        BB, BH = block_sizes(B, H, block_h)
        ctx.stored = False  # tanh(a_n) stored in place of the encodings (saved as enc)
        if schedule == "grid" and grid.resident(B, H, block_h, enc.device, ctx.precision):
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            pre = torch.empty_like(enc) if ctx.stored else None
            grid.launch_resident(_grid_forward, (enc, WRT, consts, hs, Z, Y), B, T, H, ctx.precision, MODE=mode,
                                 GAPS=gaps, PRE=pre, STORE=ctx.stored)
            enc = pre if ctx.stored else enc
        elif schedule in ("grid", "stepwise"):  # the weights streamed through the step kernels
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            table = [enc, WRT, consts, Z, Y, hs] + ([torch.empty_like(enc)] if ctx.stored else [])
            if schedule == "grid":
                grid.launch(_grid, table, consts, B, T, H, block_h, ctx.precision, False, MODE=mode, GAPS=gaps,
                            DHS=False, STORED=ctx.stored)
            else:
                launch_steps(table, step_launches(_step, 1, range(1, T + 1), consts, B, T, H, BB, BH, ctx.precision,
                                                  MODE=mode, GAPS=gaps, STORE=ctx.stored))
            enc = table[-1] if ctx.stored else enc
        else:
            forward = _forward_resident if resident(H, block_h) else _forward
            forward[(triton.cdiv(B, BB),)](enc, WRT, consts, hs, Z, Y, B, T, H, MODE=mode, BB=BB, BH=BH,
                                           PRECISION=ctx.precision, GAPS=gaps, num_warps=warps(BH))
        ctx.save_for_backward(enc, W_rec, WRT, consts, hs, Z, Y)
        ctx.mode, ctx.block_h, ctx.schedule, ctx.gaps = mode, block_h, schedule, gaps
        return Y[:, 1:], Z[:, T].clone(), Y[:, T].clone()

    @staticmethod
    @kernel_backward("cuda")
    def backward(ctx, grad_ys, grad_z, grad_y):
        enc, W_rec, WRT, consts, hs, Z, Y = ctx.saved_tensors
        B, T, H = enc.shape
        mode, gaps = ctx.mode, ctx.gaps
        grad_ys = grad_ys.contiguous()
        G = torch.empty_like(enc)
        AC = enc.new_zeros(2, B, H)
        lz, ly = grad_z.contiguous(), grad_y + grad_ys[:, T - 1]  # the final state's adjoints
        BB, BH = block_sizes(B, H, ctx.block_h)
        dhs = enc.new_empty(B, T) if ctx.needs_input_grad[7] else None
        DH = consts if dhs is None else dhs  # written only with DHS
        on_chip = ctx.schedule == "grid" and grid.resident(B, H, ctx.block_h, enc.device, ctx.precision)
        in_parts = dhs is not None and ctx.schedule != "persistent"  # dhs from each column-tile program's part
        DP = enc.new_empty(B, T, triton.cdiv(H, grid.RESIDENT_BH if on_chip else BH)) if in_parts else consts
        if on_chip:
            LZ, LY = lz.clone(), ly  # one buffer each: the final state's adjoints in, the initial state's out
            grid.launch_resident(_grid_backward, (enc, W_rec, WRT, consts, hs, Z, Y, grad_ys, G, LZ, LY, AC, DP), B, T,
                                 H, ctx.precision, MODE=mode, GAPS=gaps, DHS=in_parts, STORED=ctx.stored)
        elif ctx.schedule in ("grid", "stepwise") or not resident(H, ctx.block_h):
            LZ, LY = enc.new_empty(2, B, H), enc.new_empty(2, B, H)  # two buffers: step n's and step n − 1's
            LZ[T % 2], LY[T % 2] = lz, ly
            tensors = [enc, W_rec, consts, Z, Y, grad_ys, G, LZ, LY, AC, hs, WRT] + ([DP] if in_parts else [])
            if ctx.schedule == "grid":
                grid.launch(_grid, tensors, consts, B, T, H, ctx.block_h, ctx.precision, True, MODE=mode, GAPS=gaps,
                            DHS=in_parts, STORED=ctx.stored)
            elif ctx.schedule == "stepwise":
                launch_steps(tensors, step_launches(_step_backward, 2, range(T, 0, -1), consts, B, T, H, BB, BH,
                                                    ctx.precision, MODE=mode, GAPS=gaps, DHS=in_parts,
                                                    STORED=ctx.stored))
            else:
                _backward[(triton.cdiv(B, BB),)](enc, W_rec, WRT, consts, hs, Z, Y, grad_ys, G, LZ, LY, AC, B, T, H, DH,
                                                 MODE=mode, BB=BB, BH=BH, PRECISION=ctx.precision, GAPS=gaps,
                                                 DHS=dhs is not None, num_warps=warps(BH))
            LZ, LY = LZ[0].clone(), LY[0].clone()
        else:
            LZ, LY = lz.clone(), ly  # as the grid's resident kernel: one buffer each
            _backward_resident[(triton.cdiv(B, BB),)](enc, W_rec, WRT, consts, hs, Z, Y, grad_ys, G, LZ, LY, AC, B, T,
                                                      H, DH, MODE=mode, BB=BB, BH=BH, PRECISION=ctx.precision,
                                                      GAPS=gaps, DHS=dhs is not None, num_warps=warps(BH))
        if in_parts:
            torch.sum(DP, 2, out=dhs)
        d_Wy = outer_sum(G, Y[:, :-1])
        if mode == OSCILLATOR:
            d_W = d_Wy
        else:
            d_W = torch.cat((outer_sum(G, Z[:, :-1]), d_Wy), dim=1)
        d_coefficients = AC.sum((1, 2)) if ctx.needs_input_grad[2] else None
        return G, d_W, d_coefficients, LZ, LY, None, None, dhs, None, None, None


def _run(system, x, state, dt, unfolds, mode, W_rec, coefficients, block_h, schedule):
    """``dt`` a float, or a (batch, time) tensor of each sample's own gap (``Recurrent.forward(x, dt=gaps)``, its
    gradient too where it requires one: a learned Δt); ``schedule`` ("auto", "persistent", "stepwise" or "grid";
    default ``$ODELAB_CUDA_SCHEDULE`` or "auto": grid on CUDA): the stepwise or the grid-synchronised one
    (stepwise.py, grid.py) replaces the tiled kernels where they would run (hidden > 32 or ``block_h`` given), the
    gaps' gradient included."""
    hs, h = per_step_lengths(dt, unfolds, x.dtype, keep_grad=True)
    chosen = grid.schedule_for(schedule, x, state[0].shape[1], block_h)
    enc = system.encode(x)
    if unfolds != 1:  # L sub-steps of dt/L with the input held (x encoded once)
        enc = enc.repeat_interleave(unfolds, dim=1)
    ys, z, y = grid.apply(SecondOrderSequence, enc, W_rec, coefficients, state[0], state[1], h, mode,
                          hs, block_h, torch.is_grad_enabled(), chosen)
    if unfolds != 1:
        ys = ys[:, unfolds - 1::unfolds]
    return ys, (z, y)


@in_chunks
def run_cornn_explicit(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """coRNN, "imex" (explicit damping, the official cell); per-sample gaps, with their gradient: :func:`_run`."""
    coefficients = torch.stack(system.gamma_epsilon())
    return _run(system, x, state, dt, unfolds, EXPLICIT, system.weight[:, system.input_size:], coefficients, block_h,
                schedule)


@in_chunks
def run_cornn_implicit(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """coRNN, "imex-implicit" (implicit damping, the paper's option); per-sample gaps, with their gradient:
    :func:`_run`."""
    coefficients = torch.stack(system.gamma_epsilon())
    return _run(system, x, state, dt, unfolds, IMPLICIT, system.weight[:, system.input_size:], coefficients, block_h,
                schedule)


@in_chunks
def run_oscillator(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """Neural oscillator, "symplectic-euler"; per-sample gaps, with their gradient: :func:`_run`."""
    coefficients = x.new_zeros(2)
    return _run(system, x, state, dt, unfolds, OSCILLATOR, system.weight[:, system.input_size:], coefficients,
                block_h, schedule)
