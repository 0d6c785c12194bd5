"""LEM with the "imex" scheme (000 eq. 3) as one Triton launch forward and one backward over the sequence.

    z_n = z_{n−1} + Δt (σ̂(p1) ⊙ tanh(q) − σ̂(p1) ⊙ z_{n−1}),  p1 = W1 y_{n−1} + a1,  q = Wz y_{n−1} + az
    y_n = y_{n−1} + Δt (σ̂(p2) ⊙ tanh(r) − σ̂(p2) ⊙ y_{n−1}),  p2 = W2 y_{n−1} + a2,  r = Wy z_n + ay

with [a1, az, a2, ay] = ``system.encode(x)`` (one GEMM in torch, its backward by autograd). The forward keeps
the states z_0..z_T, y_0..y_T; the backward recomputes the gates from them (or, with ``ODELAB_GRID_GATES=stored``
on the grid and stepwise schedules, reads the pre-activations the forward stored) and writes the gradient of every
pre-activation [p1, q, p2, r] per step (= the gradient of the encoding); the weight gradients are then three
GEMMs over all steps: dW1z = Σ [g_p1, g_q]ᵀ y_{n−1}, dW2 = Σ g_p2ᵀ y_{n−1}, dWy = Σ g_rᵀ z_n. With the constexpr
GAPS (irregular sampling), Δt is each row's own step n, HS[row, n − 1] (``_common.step_length``); with DHS as well
(the gaps requiring grad) every backward gives ∂L/∂HS[row, n − 1] = λy_n · ∂y_n/∂Δt + λz_n · ∂z_n/∂Δt (λz_n in
full, its path through r included), each ∂x_n/∂Δt = σ̂(p) ⊙ (tanh(·) − x_{n−1}): the persistent kernels sum it over
their column tiles in registers; in the stepwise and grid schedules each column-tile program writes its own part (a
(B, T, parts) buffer, summed by torch).
"""
from __future__ import annotations

import os

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
def _gate_pair(E, k, WAT, SA, WBT, SB, PREV, n, c0, rows, rmask, T, H, BB: tl.constexpr, BH: tl.constexpr,
               PRECISION: tl.constexpr, STORED: tl.constexpr = False):
    """On columns c0 : c0 + BH of step n: (SA WAᵀ + e_k, SB WBᵀ + e_{k+1}, PREV[n − 1], mask), with SA, SB rows
    of the state buffers, e_k the k-th H-wide block of the encoded input [a1, az, a2, ay] and WAT, WBT the
    transposed weights (:func:`transposed_weights`); with STORED, E holds the pre-activations [p1, q, p2, r]
    themselves (stored by the forward, :func:`_store_pair`): no product."""
    sE = T * 4 * H
    sS = (T + 1) * H
    e = E + (n - 1) * 4 * H + k * H
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    a = tl.load(e + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
    b = tl.load(e + H + rows[:, None] * sE + cols[None, :], mask=m, other=0.0)
    if not STORED:
        zero = tl.zeros((BB, BH), dtype=PREV.dtype.element_ty)
        a = mv(zero, SA, sS, rows, rmask, WAT, H, c0, H, H, True, BH, PRECISION) + a
        b = mv(zero, SB, sS, rows, rmask, WBT, H, c0, H, H, True, BH, PRECISION) + b
    prev = tl.load(PREV + (n - 1) * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    return a, b, prev, m


@triton.jit
def _store_pair(PRE, k, a, b, n, c0, rows, m, T, H, BH: tl.constexpr):
    """Step n's pre-activations a, b of columns c0 : c0 + BH into blocks k, k + 1 of PRE (B, T, 4H, the encodings'
    layout), for a backward that reads them (:func:`_gate_pair` with STORED)."""
    at = PRE + (n - 1) * 4 * H + k * H + rows[:, None] * (T * 4 * H) + (c0 + tl.arange(0, BH))[None, :]
    tl.store(at, a, mask=m)
    tl.store(at + H, b, mask=m)


@triton.jit
def _z_gates(E, W1ZT, Z, Y, n, c0, rows, rmask, T, H, BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr,
             STORED: tl.constexpr = False):
    """(p1, q, z_{n−1}, mask) of step n on columns c0 : c0 + BH (W1ZT: [W1ᵀ; Wzᵀ]; STORED: read, not computed)."""
    yp = Y + (n - 1) * H
    return _gate_pair(E, 0, W1ZT, yp, W1ZT + H * H, yp, Z, n, c0, rows, rmask, T, H, BB, BH, PRECISION, STORED)


@triton.jit
def _y_gates(E, W2T, WYT, Z, Y, n, c0, rows, rmask, T, H, BB: tl.constexpr, BH: tl.constexpr,
             PRECISION: tl.constexpr, STORED: tl.constexpr = False):
    """(p2, r, y_{n−1}, mask) of step n on columns c0 : c0 + BH (z_n written; W2T, WYT: W2ᵀ, Wyᵀ; STORED: read)."""
    return _gate_pair(E, 2, W2T, Y + (n - 1) * H, WYT, Z + n * H, Y, n, c0, rows, rmask, T, H, BB, BH, PRECISION,
                      STORED)


@triton.jit
def _z_tile(E, W1ZT, Z, Y, dt, n, c0, rows, rmask, T, H, BB: tl.constexpr, BH: tl.constexpr,
            PRECISION: tl.constexpr, PRE=None, STORE: tl.constexpr = False):
    """Columns c0 : c0 + BH of z_n from (z_{n−1}, y_{n−1}); with STORE, p1 and q into PRE."""
    p1, q, z, m = _z_gates(E, W1ZT, Z, Y, n, c0, rows, rmask, T, H, BB, BH, PRECISION)
    cols = c0 + tl.arange(0, BH)
    s1 = sigmoid(p1)
    z = z + dt * (s1 * tanh(q) - s1 * z)
    tl.store(Z + n * H + rows[:, None] * ((T + 1) * H) + cols[None, :], z, mask=m)
    if STORE:
        _store_pair(PRE, 0, p1, q, n, c0, rows, m, T, H, BH)


@triton.jit
def _y_tile(E, W2T, WYT, Z, Y, dt, n, c0, rows, rmask, T, H, BB: tl.constexpr, BH: tl.constexpr,
            PRECISION: tl.constexpr, PRE=None, STORE: tl.constexpr = False):
    """Columns c0 : c0 + BH of y_n from (y_{n−1}, z_n); with STORE, p2 and r into PRE."""
    p2, r, y, m = _y_gates(E, W2T, WYT, Z, Y, n, c0, rows, rmask, T, H, BB, BH, PRECISION)
    cols = c0 + tl.arange(0, BH)
    s2 = sigmoid(p2)
    y = y + dt * (s2 * tanh(r) - s2 * y)
    tl.store(Y + n * H + rows[:, None] * ((T + 1) * H) + cols[None, :], y, mask=m)
    if STORE:
        _store_pair(PRE, 2, p2, r, n, c0, rows, m, T, H, BH)


@triton.jit
def _backward_y_tile(E, W2T, WYT, Z, Y, G, LY, dt, n, c0, rows, rmask, B, T, H, BB: tl.constexpr,
                     BH: tl.constexpr, PRECISION: tl.constexpr, STORED: tl.constexpr = False):
    """The y-step of step n on columns c0 : c0 + BH: g_p2, g_r and λy's direct part, λy read from LY[n % 2] and
    written to LY[(n − 1) % 2] (LY: (2, B, H)); returns the rows' part of ∂L/∂Δt from these columns (STORED: p2,
    r read from E, the forward's pre-activations)."""
    sE = T * 4 * H
    cur = n % 2
    g = G + (n - 1) * 4 * H
    cols = c0 + tl.arange(0, BH)
    p2, r, y, m = _y_gates(E, W2T, WYT, Z, Y, n, c0, rows, rmask, T, H, BB, BH, PRECISION, STORED)
    ly = tl.load(LY + cur * B * H + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    s2 = sigmoid(p2)
    tr = tanh(r)
    gp2 = ly * dt * (tr - y) * s2 * (1.0 - s2)
    gr = ly * dt * s2 * (1.0 - tr * tr)
    tl.store(g + 2 * H + rows[:, None] * sE + cols[None, :], gp2, mask=m)
    tl.store(g + 3 * H + rows[:, None] * sE + cols[None, :], gr, mask=m)
    tl.store(LY + (1 - cur) * B * H + rows[:, None] * H + cols[None, :], ly * (1.0 - dt * s2), mask=m)
    return tl.sum(tl.where(m, ly * s2 * (tr - y), 0.0), axis=1)


@triton.jit
def _backward_z_tile(E, W1ZT, WY, Z, Y, G, LZ, dt, n, c0, rows, rmask, B, T, H, BB: tl.constexpr,
                     BH: tl.constexpr, PRECISION: tl.constexpr, STORED: tl.constexpr = False):
    """The z-step of step n on columns c0 : c0 + BH: λz_n in full (+ g_r Wy of every column), g_p1, g_q, and
    λz_{n−1} into LZ[(n − 1) % 2]; returns the rows' part of ∂L/∂Δt from these columns (W1ZT: [W1ᵀ; Wzᵀ], WY:
    Wy itself; STORED: p1, q read from E, the forward's pre-activations)."""
    sE = T * 4 * H
    cur = n % 2
    g = G + (n - 1) * 4 * H
    cols = c0 + tl.arange(0, BH)
    p1, q, z, m = _z_gates(E, W1ZT, Z, Y, n, c0, rows, rmask, T, H, BB, BH, PRECISION, STORED)
    lz = mv(tl.zeros((BB, BH), dtype=Z.dtype.element_ty), g + 3 * H, sE, rows, rmask, WY, H, c0, H, H, True, BH,
            PRECISION)
    lz += tl.load(LZ + cur * B * H + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    s1 = sigmoid(p1)
    tq = tanh(q)
    tl.store(g + rows[:, None] * sE + cols[None, :], lz * dt * (tq - z) * s1 * (1.0 - s1), mask=m)
    tl.store(g + H + rows[:, None] * sE + cols[None, :], lz * dt * s1 * (1.0 - tq * tq), mask=m)
    tl.store(LZ + (1 - cur) * B * H + rows[:, None] * H + cols[None, :], lz * (1.0 - dt * s1), mask=m)
    return tl.sum(tl.where(m, lz * s1 * (tq - z), 0.0), axis=1)


@triton.jit
def _backward_ly_tile(W1Z, W2, G, GO, LY, n, c0, rows, rmask, B, T, H, BB: tl.constexpr, BH: tl.constexpr,
                      PRECISION: tl.constexpr):
    """λy_{n−1} on columns c0 : c0 + BH = its direct part + [g_p1, g_q] W1z + g_p2 W2 + ∂L/∂y_{n−1}."""
    sE = T * 4 * H
    sO = T * H
    nxt = LY + (1 - n % 2) * B * H
    g = G + (n - 1) * 4 * H
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    ly = tl.load(nxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    ly = mv(ly, g, sE, rows, rmask, W1Z, H, c0, 2 * H, H, True, BH, PRECISION)
    ly = mv(ly, g + 2 * H, sE, rows, rmask, W2, H, c0, H, H, True, BH, PRECISION)
    ly += tl.load(GO + (n - 2) * H + rows[:, None] * sO + cols[None, :], mask=m & (cols * 0 + n >= 2)[None, :],
                  other=0.0)
    tl.store(nxt + rows[:, None] * H + cols[None, :], ly, mask=m)


@triton.jit
def _lem_forward(E, W1ZT, W2T, WYT, Z, Y, C, HS, B, T, H, BB: tl.constexpr, BH: tl.constexpr,
                 PRECISION: tl.constexpr, GAPS: tl.constexpr):
    """z_n, then y_n, tile by tile, a CTA barrier after each (W1ZT, W2T, WYT: the transposed weights)."""
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    for n in range(1, T + 1):
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        for c0 in range(0, H, BH):  # z_n from (z_{n−1}, y_{n−1})
            _z_tile(E, W1ZT, Z, Y, h, n, c0, rows, rmask, T, H, BB, BH, PRECISION)
        tl.debug_barrier()
        for c0 in range(0, H, BH):  # y_n from (y_{n−1}, z_n)
            _y_tile(E, W2T, WYT, Z, Y, h, n, c0, rows, rmask, T, H, BB, BH, PRECISION)
        tl.debug_barrier()


@triton.jit
def _lem_backward(E, W1Z, W2, WY, WT, Z, Y, GO, G, LZ, LY, C, HS, B, T, H, DH, BB: tl.constexpr, BH: tl.constexpr,
                  PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """Adjoints λz, λy ping-pong in LZ/LY (2, B, H): step n reads buffer n % 2 and writes (n − 1) % 2; with DHS,
    DH[row, n − 1] = ∂L/∂HS[row, n − 1], summed over the column tiles in registers. WT: the transposed weights
    (:func:`transposed_weights`), for the recomputed gates."""
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    for i in range(0, T):
        n = T - i
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        dh = tl.zeros((BB,), dtype=Z.dtype.element_ty)
        for c0 in range(0, H, BH):  # the y-step: g_p2, g_r; λy partial
            part = _backward_y_tile(E, WT + 2 * H * H, WT + 3 * H * H, Z, Y, G, LY, h, n, c0, rows, rmask, B, T, H,
                                    BB, BH, PRECISION)
            if DHS:
                dh += part
        tl.debug_barrier()
        for c0 in range(0, H, BH):  # the z-step: λz_n total, g_p1, g_q, λz_{n−1}
            part = _backward_z_tile(E, WT, WY, Z, Y, G, LZ, h, n, c0, rows, rmask, B, T, H, BB, BH, PRECISION)
            if DHS:
                dh += part
        if DHS:
            tl.store(DH + rows * T + (n - 1), dh, mask=rmask)
        tl.debug_barrier()
        for c0 in range(0, H, BH):  # λy_{n−1}
            _backward_ly_tile(W1Z, W2, G, GO, LY, n, c0, rows, rmask, B, T, H, BB, BH, PRECISION)
        tl.debug_barrier()


@triton.jit
def _step_program(TABLE, REF, B, BB: tl.constexpr, BH: tl.constexpr):
    """This program's batch rows (axis 0 of the grid), their mask, its first column (axis 1), and E, Z, Y from
    the address table (entries 0, 4, 5 in both step kernels)."""
    rows, rmask = batch_rows(B, BB)
    return (rows, rmask, tl.program_id(1) * BH, address(TABLE, 0, REF), address(TABLE, 4, REF),
            address(TABLE, 5, REF))


@triton.jit(do_not_specialize=["n"])
def _lem_step(TABLE, REF, n, B, T, H, PHASE: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
              PRECISION: tl.constexpr, GAPS: tl.constexpr, STORE: tl.constexpr = False):
    """The stepwise schedule (stepwise.py): phase PHASE of step n (0: z_n, 1: y_n) on one (batch block, column
    tile) program; TABLE = the addresses of [E, W1ZT, W2T, WYT, Z, Y, C, HS] (the transposed weights,
    :func:`transposed_weights`; HS: the per-step lengths, with GAPS) and, with STORE, PRE (B, T, 4H): the
    pre-activations [p1, q, p2, r] of every step, for a backward with STORED."""
    rows, rmask, c0, E, Z, Y = _step_program(TABLE, REF, B, BB, BH)
    dt = step_length(tl.load(address(TABLE, 6, REF)), address(TABLE, 7, REF), rows, rmask, n, T, GAPS)
    PRE = address(TABLE, 8, REF) if STORE else E
    if PHASE == 0:
        _z_tile(E, address(TABLE, 1, REF), Z, Y, dt, n, c0, rows, rmask, T, H, BB, BH, PRECISION, PRE, STORE)
    else:
        _y_tile(E, address(TABLE, 2, REF), address(TABLE, 3, REF), Z, Y, dt, n, c0, rows, rmask, T, H, BB, BH,
                PRECISION, PRE, STORE)


@triton.jit(do_not_specialize=["n"])
def _lem_step_backward(TABLE, REF, n, B, T, H, PHASE: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
                       PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr, STORED: tl.constexpr = False):
    """Phase PHASE of the backward of step n (0: the y-step, 1: the z-step, 2: λy_{n−1}) on one program;
    TABLE = the addresses of [E, W1Z, W2, WY, Z, Y, GO, G, LZ, LY, C, HS, WT] (WT: the transposed weights, for the
    recomputed gates; with STORED, E is the pre-activations the forward stored, and they are read instead: four
    products a step instead of eight) and, with DHS, DP (B, T, 2 · column tiles): the y- and z-steps write their
    columns' parts of ∂L/∂Δt_n, λy_n ∂y_n/∂Δt and λz_n ∂z_n/∂Δt, into slot PHASE · tiles + tile
    (:func:`store_length_part`)."""
    rows, rmask, c0, E, Z, Y = _step_program(TABLE, REF, B, BB, BH)
    G = address(TABLE, 7, REF)
    dt = step_length(tl.load(address(TABLE, 10, REF)), address(TABLE, 11, REF), rows, rmask, n, T, GAPS)
    WT = address(TABLE, 12, REF)
    if PHASE == 0:
        part = _backward_y_tile(E, WT + 2 * H * H, WT + 3 * H * H, Z, Y, G, address(TABLE, 9, REF), dt, n, c0, rows,
                                rmask, B, T, H, BB, BH, PRECISION, STORED)
    elif PHASE == 1:
        part = _backward_z_tile(E, WT, address(TABLE, 3, REF), Z, Y, G, address(TABLE, 8, REF), dt, n, c0, rows,
                                rmask, B, T, H, BB, BH, PRECISION, STORED)
    else:
        _backward_ly_tile(address(TABLE, 1, REF), address(TABLE, 2, REF), G, address(TABLE, 6, REF),
                          address(TABLE, 9, REF), n, c0, rows, rmask, B, T, H, BB, BH, PRECISION)
    if DHS and PHASE < 2:
        tiles = tl.num_programs(1)
        store_length_part(address(TABLE, 13, REF), part, rows, rmask, n, T, PHASE * tiles + tl.program_id(1),
                           2 * tiles)


@triton.jit
def _lem_grid(TABLE, REF, SYNC, B, T, H, BACKWARD: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
              PRECISION: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr,
              STORED: tl.constexpr = False):
    """The grid-synchronised schedule (grid.py): the phases of :func:`_lem_step` (or, BACKWARD, of
    :func:`_lem_step_backward`, steps T … 1, DHS as its) for every step in one launch, a barrier of the batch
    block's column programs after each; TABLE as theirs; STORED: the forward stores its pre-activations (STORE),
    the backward reads them."""
    k = 0
    spins = LIMIT
    for i in range(0, T):
        if BACKWARD:
            for phase in tl.static_range(3):
                _lem_step_backward(TABLE, REF, T - i, B, T, H, phase, BB, BH, PRECISION, GAPS, DHS, STORED)
                k, spins = grid.barrier(SYNC, k, spins)
        else:
            for phase in tl.static_range(2):
                _lem_step(TABLE, REF, i + 1, B, T, H, phase, BB, BH, PRECISION, GAPS, STORED)
                k, spins = grid.barrier(SYNC, k, spins)


@triton.jit
def _stored(Y, Z, GO, n, rows, rmask, cols, cmask, T, H):
    """What the backward of step n reads besides the weights and the input: (y_{n−1}, z_{n−1}, z_n, ∂L/∂y_{n−1}
    from the outputs), zero outside 1 ≤ n ≤ T (the output gradient outside 2 ≤ n ≤ T)."""
    sS = (T + 1) * H
    return (tile_at(Y - H, n, H, sS, rows, rmask, cols, cmask, 1, T),
            tile_at(Z - H, n, H, sS, rows, rmask, cols, cmask, 1, T),
            tile_at(Z, n, H, sS, rows, rmask, cols, cmask, 1, T),
            tile_at(GO - 2 * H, n, H, T * H, rows, rmask, cols, cmask, 2, T))


@triton.jit
def _lem_forward_resident(E, W1ZT, W2T, WYT, Z, Y, C, HS, B, T, H, BB: tl.constexpr, BH: tl.constexpr,
                          PRECISION: tl.constexpr, GAPS: tl.constexpr):
    """hidden ≤ BH: the four H × H weights (transposed, :func:`transposed_weights`) stay on chip for the whole
    sequence (:mod:`.grid`), the state too (no barrier, no re-read); each step writes z_n, y_n, its encoded input
    (and, with GAPS, its length) loaded one step ahead."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    w1t = weights(W1ZT, H, H, BH)
    wzt = weights(W1ZT + H * H, H, H, BH)
    w2t = weights(W2T, H, H, BH)
    wyt = weights(WYT, H, H, BH)
    z = tile(Z, sS, rows, rmask, cols, cmask)
    y = tile(Y, sS, rows, rmask, cols, cmask)
    e1, ez, e2, ey = four_blocks(E, 1, rows, rmask, cols, cmask, T, H)
    h = step_length(dt, HS, rows, rmask, 1, T, GAPS)
    for n in range(1, T + 1):
        # step n + 1's encoded input, loaded while step n computes: no memory round trip on the recurrence's path
        f1, fz, f2, fy = four_blocks(E, n + 1, rows, rmask, cols, cmask, T, H)
        h_next = step_length(dt, HS, rows, rmask, n + 1, T, GAPS)
        p1 = dot(y, w1t, e1, PRECISION)
        q = dot(y, wzt, ez, PRECISION)
        p2 = dot(y, w2t, e2, PRECISION)
        s1 = sigmoid(p1)
        z = z + h * (s1 * tanh(q) - s1 * z)
        r = dot(z, wyt, ey, PRECISION)
        s2 = sigmoid(p2)
        y = y + h * (s2 * tanh(r) - s2 * y)
        tl.store(Z + n * H + rows[:, None] * sS + cols[None, :], z, mask=m)
        tl.store(Y + n * H + rows[:, None] * sS + cols[None, :], y, mask=m)
        e1, ez, e2, ey = f1, fz, f2, fy
        h = h_next


@triton.jit
def _lem_backward_resident(E, W1Z, W2, WY, WT, Z, Y, GO, G, LZ, LY, C, HS, B, T, H, DH, BB: tl.constexpr,
                           BH: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """hidden ≤ BH: the weights (both orientations: W, and its transposed copy WT) and the adjoints λz, λy in
    registers; LZ/LY (B, H) hold the adjoints of the final state on entry and those of the initial state on exit;
    with DHS, DH as :func:`_lem_backward`'s."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    sE = T * 4 * H
    w1 = weights(W1Z, H, H, BH)
    wz = weights(W1Z + H * H, H, H, BH)
    w2 = weights(W2, H, H, BH)
    wy = weights(WY, H, H, BH)
    w1t = weights(WT, H, H, BH)
    wzt = weights(WT + H * H, H, H, BH)
    w2t = weights(WT + 2 * H * H, H, H, BH)
    wyt = weights(WT + 3 * H * H, H, H, BH)
    lz = tile(LZ, H, rows, rmask, cols, cmask)
    ly = tile(LY, H, rows, rmask, cols, cmask)
    e1, ez, e2, ey = four_blocks(E, T, rows, rmask, cols, cmask, T, H)
    yp, zp, zn, go = _stored(Y, Z, GO, T, rows, rmask, cols, cmask, T, H)
    h = step_length(dt, HS, rows, rmask, T, T, GAPS)
    for i in range(0, T):
        n = T - i
        g = G + (n - 1) * 4 * H
        # step n − 1's stored states, encoded input, output gradient (and length), loaded while step n computes
        f1, fz, f2, fy = four_blocks(E, n - 1, rows, rmask, cols, cmask, T, H)
        yq, zq, _, gq_out = _stored(Y, Z, GO, n - 1, rows, rmask, cols, cmask, T, H)
        h_next = step_length(dt, HS, rows, rmask, n - 1, T, GAPS)
        p2 = dot(yp, w2t, e2, PRECISION)
        r = dot(zn, wyt, ey, PRECISION)
        p1 = dot(yp, w1t, e1, PRECISION)
        q = dot(yp, wzt, ez, PRECISION)
        s2 = sigmoid(p2)
        tr = tanh(r)
        gp2 = ly * h * (tr - yp) * s2 * (1.0 - s2)
        gr = ly * h * s2 * (1.0 - tr * tr)
        lz = dot(gr, wy, lz, PRECISION)  # z_n feeds r
        s1 = sigmoid(p1)
        tq = tanh(q)
        gp1 = lz * h * (tq - zp) * s1 * (1.0 - s1)
        gq = lz * h * s1 * (1.0 - tq * tq)
        if DHS:  # ∂y_n/∂Δt, ∂z_n/∂Δt against the total adjoints λy_n, λz_n
            tl.store(DH + rows * T + (n - 1), tl.sum(ly * s2 * (tr - yp) + lz * s1 * (tq - zp), axis=1), mask=rmask)
        tl.store(g + rows[:, None] * sE + cols[None, :], gp1, mask=m)
        tl.store(g + H + rows[:, None] * sE + cols[None, :], gq, mask=m)
        tl.store(g + 2 * H + rows[:, None] * sE + cols[None, :], gp2, mask=m)
        tl.store(g + 3 * H + rows[:, None] * sE + cols[None, :], gr, mask=m)
        lz = lz * (1.0 - h * s1)
        ly = ly * (1.0 - h * s2)
        ly = dot(gp1, w1, ly, PRECISION)
        ly = dot(gq, wz, ly, PRECISION)
        ly = dot(gp2, w2, ly, PRECISION)
        ly += go
        e1, ez, e2, ey = f1, fz, f2, fy
        yp, zn, zp, go = yq, zp, zq, gq_out
        h = h_next
    tl.store(LZ + rows[:, None] * H + cols[None, :], lz, mask=m)
    tl.store(LY + rows[:, None] * H + cols[None, :], ly, mask=m)


# -- the grid schedule with weights on chip (grid.resident): a program keeps its column tile of the four weights (both
# orientations in the backward) for the whole sequence and reads only the states' whole rows each phase; 2 barriers a
# step. Compiled for sm_90 at hidden 128, 8 warps, float32, IEEE products (Triton 3.6 and 3.9): forward 76
# registers, no spills, 40 KB of shared memory (the weight tiles, :mod:`.grid`), backward 255 registers and 28 bytes
# of spills, 72 KB (with stored gates 100 registers, no spills, 40 KB; 64-row blocks would spill 15 KB: not used);
# every weight tile a column tile of W or of Wᵀ (:func:`transposed_weights`), read by ldmatrix without conflict --

@triton.jit
def _weight_tiles(W1Z, W2, WY, cols, H, HP: tl.constexpr):
    """``grid.column_tile`` of W1, Wz (W1Z = [W1; Wz]), W2 and Wy -- or of their transposes, given
    :func:`transposed_weights`' blocks."""
    return (grid.column_tile(W1Z, H, cols, H, HP), grid.column_tile(W1Z + H * H, H, cols, H, HP),
            grid.column_tile(W2, H, cols, H, HP), grid.column_tile(WY, H, cols, H, HP))


@triton.jit
def _lem_grid_forward(E, W1ZT, W2T, WYT, Z, Y, C, HS, SYNC, B, T, H, HP: tl.constexpr, BB: tl.constexpr,
                      BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr,
                      PRE=None, STORE: tl.constexpr = False):
    """Columns cols of z_n, then of y_n (eq. 3), a barrier after each: the whole rows y_{n−1}, z_n come from the
    state buffers, the weights (transposed, :func:`transposed_weights`) from on chip, this program's own (z, y)
    columns stay in registers. With STORE its columns of the pre-activations [p1, q, p2, r] of each step into PRE
    (B, T, 4H, the encodings' layout), each stored after the barrier that follows it (drained while the next phase
    computes, not before the barrier's release)."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    sE = T * 4 * H
    w1t, wzt, w2t, wyt = _weight_tiles(W1ZT, W2T, WYT, cols, H, HP)
    z = tile(Z, sS, rows, rmask, cols, cmask)
    y = tile(Y, sS, rows, rmask, cols, cmask)
    k = 0
    spins = LIMIT
    for n in range(1, T + 1):
        e = E + (n - 1) * 4 * H
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        ey = tile(e + 3 * H, sE, rows, rmask, cols, cmask)
        y_row = grid.rows_of(Y + (n - 1) * H, sS, rows, rmask, H, HP)
        p1 = dot(y_row, w1t, tile(e, sE, rows, rmask, cols, cmask), PRECISION)
        q = dot(y_row, wzt, tile(e + H, sE, rows, rmask, cols, cmask), PRECISION)
        p2 = dot(y_row, w2t, tile(e + 2 * H, sE, rows, rmask, cols, cmask), PRECISION)
        s1 = sigmoid(p1)
        z = z + h * (s1 * tanh(q) - s1 * z)
        tl.store(Z + n * H + rows[:, None] * sS + cols[None, :], z, mask=m)
        k, spins = grid.barrier(SYNC, k, spins)
        if STORE:
            _store_pair(PRE, 0, p1, q, n, tl.program_id(1) * BH, rows, m, T, H, BH)
        r = dot(grid.rows_of(Z + n * H, sS, rows, rmask, H, HP), wyt, ey, PRECISION)
        s2 = sigmoid(p2)
        y = y + h * (s2 * tanh(r) - s2 * y)
        tl.store(Y + n * H + rows[:, None] * sS + cols[None, :], y, mask=m)
        k, spins = grid.barrier(SYNC, k, spins)
        if STORE:
            _store_pair(PRE, 2, p2, r, n, tl.program_id(1) * BH, rows, m, T, H, BH)


@triton.jit
def _z_tile_operands(W1ZT, E, Z, n, rows, rmask, c0, sS, sE, H, HP: tl.constexpr, BH: tl.constexpr):
    """What the z-step of the column tile from c0 reads: its W1 and Wz tiles (from W1ZT = [W1ᵀ; Wzᵀ]), its two
    encoding tiles of step n and its columns of z_{n−1} (zero beyond H)."""
    tc = c0 + tl.arange(0, BH)
    tmask = tc < H
    e = E + (n - 1) * 4 * H
    return (grid.column_tile(W1ZT, H, tc, H, HP), grid.column_tile(W1ZT + H * H, H, tc, H, HP),
            tile(e, sE, rows, rmask, tc, tmask), tile(e + H, sE, rows, rmask, tc, tmask),
            tile(Z + (n - 1) * H, sS, rows, rmask, tc, tmask))


@triton.jit
def _lem_grid_forward_one_barrier(E, W1ZT, W2T, WYT, Z, Y, C, HS, SYNC, B, T, H, HP: tl.constexpr, BB: tl.constexpr,
                                  BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr,
                                  GAPS: tl.constexpr):
    """:func:`_lem_grid_forward` with one grid barrier a step instead of two: every column program of a batch block
    computes z_n's whole rows, tile by tile with the products of the program that owns each tile (so the same
    bits), and writes them (the programs write equal values to the same addresses); a CTA barrier then lets it read
    them back for its columns of y_n, and only y_n crosses programs. A program does the W1, Wz products of every
    column tile (their tiles read from memory every step, the next tile's while the current one multiplies) for
    half the grid barriers. Opt-in (``ODELAB_LEM_GRID=one-barrier``; not with ``ODELAB_GRID_GATES=stored``), its GPU
    speed not measured yet."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    sE = T * 4 * H
    w2t = grid.column_tile(W2T, H, cols, H, HP)
    wyt = grid.column_tile(WYT, H, cols, H, HP)
    y = tile(Y, sS, rows, rmask, cols, cmask)
    k = 0
    spins = LIMIT
    for n in range(1, T + 1):
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        w1n, wzn, e1n, eqn, zpn = _z_tile_operands(W1ZT, E, Z, n, rows, rmask, 0, sS, sE, H, HP, BH)
        for c0 in range(0, HP, BH):
            w1c, wzc, e1c, eqc, zp = w1n, wzn, e1n, eqn, zpn
            w1n, wzn, e1n, eqn, zpn = _z_tile_operands(W1ZT, E, Z, n, rows, rmask, c0 + BH, sS, sE, H, HP, BH)
            y_row = grid.rows_of(Y + (n - 1) * H, sS, rows, rmask, H, HP)  # reloaded (L1): no operand held
            s1 = sigmoid(dot(y_row, w1c, e1c, PRECISION))
            tc = c0 + tl.arange(0, BH)
            tl.store(Z + n * H + rows[:, None] * sS + tc[None, :],
                     zp + h * (s1 * tanh(dot(y_row, wzc, eqc, PRECISION)) - s1 * zp),
                     mask=rmask[:, None] & (tc < H)[None, :])
        tl.debug_barrier()  # this program's threads wrote z_n's whole rows
        e = E + (n - 1) * 4 * H
        r = dot(grid.rows_of(Z + n * H, sS, rows, rmask, H, HP), wyt, tile(e + 3 * H, sE, rows, rmask, cols, cmask),
                PRECISION)
        p2 = dot(grid.rows_of(Y + (n - 1) * H, sS, rows, rmask, H, HP), w2t,
                 tile(e + 2 * H, sE, rows, rmask, cols, cmask), PRECISION)
        s2 = sigmoid(p2)
        y = y + h * (s2 * tanh(r) - s2 * y)
        tl.store(Y + n * H + rows[:, None] * sS + cols[None, :], y, mask=m)
        k, spins = grid.barrier(SYNC, k, spins)


@triton.jit
def _lem_grid_backward(E, W1Z, W2, WY, WT, Z, Y, GO, G, LZ, LY, C, HS, SYNC, B, T, H, DP, HP: tl.constexpr,
                       BB: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr, LIMIT: tl.constexpr,
                       GAPS: tl.constexpr, DHS: tl.constexpr, STORED: tl.constexpr = False):
    """Step n's backward on columns cols, 2 barriers a step: the y-step's g_p2, g_r (written, barrier), the z-step's
    λz_n (+ g_r Wy over the whole row of g_r), g_p1, g_q (written, barrier), then λy_{n−1} (+ [g_p1, g_q, g_p2]
    [W1; Wz; W2] over whole rows) -- which no other program reads, so no third barrier. λz, λy of this program's
    columns stay in registers; LZ, LY (B, H): the final state's adjoints in, the initial state's out; with DHS, the
    columns' part of ∂L/∂Δt_n, λy_n ∂y_n/∂Δt + λz_n ∂z_n/∂Δt, into DP (B, T, column tiles)
    (:func:`store_length_part`). E: the encodings, whose gates it recomputes from the stored states (four products
    a step), or with STORED the pre-activations [p1, q, p2, r] that :func:`_lem_grid_forward` stored (STORE), each
    step's loaded one step ahead: four products a step, all on the adjoints' path."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    sE = T * 4 * H
    w1, wz, w2, wy = _weight_tiles(W1Z, W2, WY, cols, H, HP)
    lz = tile(LZ, H, rows, rmask, cols, cmask)
    ly = tile(LY, H, rows, rmask, cols, cmask)
    if STORED:
        a1, aq, a2, ar = four_blocks(E, T, rows, rmask, cols, cmask, T, H)  # step T's p1, q, p2, r (E's layout)
    else:  # the forward's orientation as well, for the recomputed gates
        w1t, wzt, w2t, wyt = _weight_tiles(WT, WT + 2 * H * H, WT + 3 * H * H, cols, H, HP)
    k = 0
    spins = LIMIT
    for i in range(0, T):
        n = T - i
        g = G + (n - 1) * 4 * H
        h = step_length(dt, HS, rows, rmask, n, T, GAPS)
        yp = tile(Y + (n - 1) * H, sS, rows, rmask, cols, cmask)
        zp = tile(Z + (n - 1) * H, sS, rows, rmask, cols, cmask)
        if STORED:
            p1, q, p2, r = a1, aq, a2, ar
            a1, aq, a2, ar = four_blocks(E, n - 1, rows, rmask, cols, cmask, T, H)
        else:
            e = E + (n - 1) * 4 * H
            y_row = grid.rows_of(Y + (n - 1) * H, sS, rows, rmask, H, HP)
            p2 = dot(y_row, w2t, tile(e + 2 * H, sE, rows, rmask, cols, cmask), PRECISION)
            z_row = grid.rows_of(Z + n * H, sS, rows, rmask, H, HP)
            r = dot(z_row, wyt, tile(e + 3 * H, sE, rows, rmask, cols, cmask), PRECISION)
            p1 = dot(y_row, w1t, tile(e, sE, rows, rmask, cols, cmask), PRECISION)
            q = dot(y_row, wzt, tile(e + H, sE, rows, rmask, cols, cmask), PRECISION)
        s2 = sigmoid(p2)
        tr = tanh(r)
        tl.store(g + 2 * H + rows[:, None] * sE + cols[None, :], ly * h * (tr - yp) * s2 * (1.0 - s2), mask=m)
        tl.store(g + 3 * H + rows[:, None] * sE + cols[None, :], ly * h * s2 * (1.0 - tr * tr), mask=m)
        k, spins = grid.barrier(SYNC, k, spins)
        lz = dot(grid.rows_of(g + 3 * H, sE, rows, rmask, H, HP), wy, lz, PRECISION)  # z_n feeds r
        s1 = sigmoid(p1)
        tq = tanh(q)
        tl.store(g + rows[:, None] * sE + cols[None, :], lz * h * (tq - zp) * s1 * (1.0 - s1), mask=m)
        tl.store(g + H + rows[:, None] * sE + cols[None, :], lz * h * s1 * (1.0 - tq * tq), mask=m)
        if DHS:  # ∂y_n/∂Δt, ∂z_n/∂Δt against the total adjoints λy_n, λz_n
            part = tl.sum(tl.where(m, ly * s2 * (tr - yp) + lz * s1 * (tq - zp), 0.0), axis=1)
            store_length_part(DP, part, rows, rmask, n, T, tl.program_id(1), tl.num_programs(1))
        k, spins = grid.barrier(SYNC, k, spins)
        lz = lz * (1.0 - h * s1)
        ly = ly * (1.0 - h * s2)
        ly = dot(grid.rows_of(g, sE, rows, rmask, H, HP), w1, ly, PRECISION)
        ly = dot(grid.rows_of(g + H, sE, rows, rmask, H, HP), wz, ly, PRECISION)
        ly = dot(grid.rows_of(g + 2 * H, sE, rows, rmask, H, HP), w2, ly, PRECISION)
        ly += tile_at(GO - 2 * H, n, H, T * H, rows, rmask, cols, cmask, 2, T)
    tl.store(LZ + rows[:, None] * H + cols[None, :], lz, mask=m)
    tl.store(LY + rows[:, None] * H + cols[None, :], ly, mask=m)


GRID_ENV = "ODELAB_LEM_GRID"
GRID_VARIANTS = ("two-barriers", "one-barrier")


def grid_variant() -> str:
    """LEM's weights-on-chip grid forward as ``$ODELAB_LEM_GRID`` asks (read at each forward): "two-barriers"
    (unset: the default) or "one-barrier" (one grid barrier a step, :func:`_lem_grid_forward_one_barrier`; opt-in
    until a GPU measures it). Whether it stores its pre-activations for the backward is ``$ODELAB_GRID_GATES``
    (``grid.stored_gates``), which the one-barrier kernel does not do."""
    asked = os.environ.get(GRID_ENV, "").strip().lower() or GRID_VARIANTS[0]
    if asked not in GRID_VARIANTS:
        raise ValueError(f"${GRID_ENV}: expected one of {', '.join(GRID_VARIANTS)}, got {asked!r}")
    return asked


def transposed_weights(weight_y: torch.Tensor, W2: torch.Tensor, Wy: torch.Tensor) -> torch.Tensor:
    """[W1ᵀ; Wzᵀ; W2ᵀ; Wyᵀ] (4H, H), contiguous, for the kernels' products S Wᵀ (the gates): their weight tiles are
    then rows of Wᵀ, contiguous along the output columns, which Triton feeds to its FMA products through ldmatrix
    with no shared-memory bank conflict. Read from W's own rows instead (contiguous along the sum), 8 lanes of each
    16-byte shared-memory load fall on the same banks: LEM's grid forward at hidden 128 took 5.7× the wavefronts of
    a conflict-free one a step (4352 against 768 a warp; sm_90 PTX of Triton 3.6 and 3.9, its lanes' addresses
    evaluated), its backward 5.2×, which at one wavefront a cycle is most of the 19.8 and 23.9 µs a step they took
    on the H200 (2026-12-04)."""
    H = W2.shape[0]
    return torch.stack([weight_y[:H].T, weight_y[H:].T, W2.T, Wy.T]).view(4 * H, H)  # one copy, no intermediate


class LEMSequence(torch.autograd.Function):
    """``apply(enc, weight_y, W2, Wy, z0, y0, dt, hs, block_h, train, schedule) -> (ys, z_T, y_T)``; ``hs``: None, or
    each row's step lengths (B, T) (``kernels.gaps.per_step_lengths``), which replace ``dt``, with their gradient where
    they require one (every schedule); ``train``: whether autograd records the call (``torch.is_grad_enabled()`` at
    the call: inside ``forward`` it is off); ``schedule``: "persistent", "stepwise" or "grid"
    (``grid.schedule_for``)."""

    @staticmethod
    def forward(ctx, enc, weight_y, W2, Wy, z0, y0, dt, hs, block_h, train, schedule="persistent"):
        ctx.precision = dot_precision(enc.dtype)  # fixed at the forward: the backward recomputes with it
        B, T, _ = enc.shape
        H = z0.shape[1]
        enc, weight_y, W2, Wy = (t.contiguous() for t in (enc, weight_y, W2, Wy))
        WT = transposed_weights(weight_y, W2, Wy)
        transposed = (WT[: 2 * H], WT[2 * H: 3 * H], WT[3 * H:])  # the forward's products use these alone
        Z = enc.new_empty(B, T + 1, H)
        Y = enc.new_empty(B, T + 1, H)
        Z[:, 0] = z0
        Y[:, 0] = y0
        consts = on_device([dt], enc.dtype, enc.device)
        gaps = hs is not None
        hs = hs if gaps else consts  # read only with GAPS
        BB, BH = block_sizes(B, H, block_h)
        ctx.stored = False  # the pre-activations stored in place of the encodings (saved as enc)
        if schedule == "grid" and grid.resident(B, H, block_h, enc.device, ctx.precision):
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            if grid_variant() == "one-barrier":
                if ctx.stored:
                    raise ValueError(f"${GRID_ENV}=one-barrier does not store its pre-activations: unset "
                                     f"${grid.GATES_ENV} or ${GRID_ENV}")
                grid.launch_resident(_lem_grid_forward_one_barrier, (enc, *transposed, Z, Y, consts, hs), B, T, H,
                                     ctx.precision, GAPS=gaps)
            else:
                pre = torch.empty_like(enc) if ctx.stored else None
                grid.launch_resident(_lem_grid_forward, (enc, *transposed, Z, Y, consts, hs), B, T, H, ctx.precision,
                                     GAPS=gaps, PRE=pre, STORE=ctx.stored)
                enc = pre if ctx.stored else enc
        elif schedule in ("grid", "stepwise"):  # the weights streamed through the step kernels' phases
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            table = [enc, *transposed, Z, Y, consts, hs] + ([torch.empty_like(enc)] if ctx.stored else [])
            if schedule == "grid":
                grid.launch(_lem_grid, table, consts, B, T, H, block_h, ctx.precision, False, GAPS=gaps, DHS=False,
                            STORED=ctx.stored)
            else:
                launch_steps(table, step_launches(_lem_step, 2, range(1, T + 1), consts, B, T, H, BB, BH,
                                                  ctx.precision, GAPS=gaps, STORE=ctx.stored))
            enc = table[-1] if ctx.stored else enc
        else:
            forward = _lem_forward_resident if resident(H, block_h) else _lem_forward
            forward[(triton.cdiv(B, BB),)](enc, *transposed, Z, Y, consts, hs, B, T, H, BB=BB, BH=BH,
                                           PRECISION=ctx.precision, GAPS=gaps, num_warps=warps(BH))
        ctx.save_for_backward(enc, weight_y, W2, Wy, WT, Z, Y, consts, hs)
        ctx.block_h, ctx.schedule, ctx.gaps = block_h, schedule, gaps
        return Y[:, 1:], Z[:, T].clone(), Y[:, T].clone()

    @staticmethod
    @kernel_backward("cuda")
    def backward(ctx, grad_ys, grad_z, grad_y):
        enc, weight_y, W2, Wy, WT, Z, Y, consts, hs = ctx.saved_tensors
        B, T, _ = enc.shape
        H = Z.shape[2]
        grad_ys = grad_ys.contiguous()
        G = torch.empty_like(enc)
        lz, ly = grad_z.contiguous(), grad_y + grad_ys[:, T - 1]  # the final state's adjoints
        BB, BH = block_sizes(B, H, ctx.block_h)
        gaps = ctx.gaps
        dhs = enc.new_empty(B, T) if ctx.needs_input_grad[7] else None
        DH = consts if dhs is None else dhs  # written only with DHS
        on_chip = ctx.schedule == "grid" and grid.resident(B, H, ctx.block_h, enc.device, ctx.precision)
        in_parts = dhs is not None and ctx.schedule != "persistent"  # dhs from each column-tile program's parts
        parts = triton.cdiv(H, grid.RESIDENT_BH) if on_chip else 2 * triton.cdiv(H, BH)  # stepwise: y- and z-steps'
        DP = enc.new_empty(B, T, parts) if in_parts else consts  # each slot written by its program: no zeroing
        if on_chip:
            LZ, LY = lz.clone(), ly  # one buffer each: the final state's adjoints in, the initial state's out
            grid.launch_resident(_lem_grid_backward,
                                 (enc, weight_y, W2, Wy, WT, Z, Y, grad_ys, G, LZ, LY, consts, hs), B, T, H,
                                 ctx.precision, DP=DP, GAPS=gaps, DHS=in_parts, STORED=ctx.stored)
        elif ctx.schedule in ("grid", "stepwise") or not resident(H, ctx.block_h):
            LZ, LY = enc.new_empty(2, B, H), enc.new_empty(2, B, H)  # two buffers: step n's and step n − 1's
            LZ[T % 2], LY[T % 2] = lz, ly
            tensors = [enc, weight_y, W2, Wy, Z, Y, grad_ys, G, LZ, LY, consts, hs, WT]
            table = tensors + ([DP] if in_parts else [])
            if ctx.schedule == "grid":
                grid.launch(_lem_grid, table, consts, B, T, H, ctx.block_h, ctx.precision, True, GAPS=gaps,
                            DHS=in_parts, STORED=ctx.stored)
            elif ctx.schedule == "stepwise":
                launch_steps(table, step_launches(_lem_step_backward, 3, range(T, 0, -1), consts, B, T, H, BB, BH,
                                                  ctx.precision, GAPS=gaps, DHS=in_parts, STORED=ctx.stored))
            else:
                _lem_backward[(triton.cdiv(B, BB),)](enc, weight_y, W2, Wy, WT, Z, Y, grad_ys, G, LZ, LY, consts, hs,
                                                     B, T, H, DH, BB=BB, BH=BH, PRECISION=ctx.precision,
                                                     GAPS=gaps, DHS=dhs is not None, num_warps=warps(BH))
            LZ, LY = LZ[0].clone(), LY[0].clone()
        else:
            LZ, LY = lz.clone(), ly  # as the grid's resident kernel: one buffer each
            _lem_backward_resident[(triton.cdiv(B, BB),)](enc, weight_y, W2, Wy, WT, Z, Y, grad_ys, G, LZ, LY, consts,
                                                          hs, B, T, H, DH, BB=BB, BH=BH, PRECISION=ctx.precision,
                                                          GAPS=gaps, DHS=dhs is not None, num_warps=warps(BH))
        if in_parts:
            torch.sum(DP, 2, out=dhs)
        d_of_y = outer_sum(G[..., : 3 * H], Y[:, :-1])  # [weight_y; W2]: the maps of y_{n-1}
        d_Wy = outer_sum(G[..., 3 * H:], Z[:, 1:])
        return G, d_of_y[: 2 * H], d_of_y[2 * H:], d_Wy, LZ, LY, None, dhs, None, None, None


@in_chunks
def run(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """The LEM "imex" recurrence over ``x`` (batch, time, input) from ``state`` = (z0, y0); ``dt`` a float, or a
    (batch, time) tensor of each sample's own gap (``Recurrent.forward(x, dt=gaps)``), with its gradient when the
    gaps require one (from every schedule). ``schedule`` ("auto", "persistent", "stepwise" or "grid"; default
    ``$ODELAB_CUDA_SCHEDULE`` or "auto": grid on CUDA): the stepwise or the grid-synchronised one (stepwise.py,
    grid.py) replaces the tiled kernels where they would run (hidden > 32 or ``block_h`` given)."""
    hs, h = per_step_lengths(dt, unfolds, x.dtype, keep_grad=True)
    chosen = grid.schedule_for(schedule, x, state[0].shape[1], block_h)
    enc = system.encode(x)
    if unfolds != 1:  # sub-steps of dt/L, the input held: the same cell with dt/L, L times per sample
        enc = enc.repeat_interleave(unfolds, dim=1)  # (x encoded once: the encoding is row-wise)
    ys, z, y = grid.apply(LEMSequence, enc, system.weight_y, system.W2, system.Wy, state[0], state[1],
                          h, hs, block_h, torch.is_grad_enabled(), chosen)
    return (ys if unfolds == 1 else ys[:, unfolds - 1::unfolds]), (z, y)
