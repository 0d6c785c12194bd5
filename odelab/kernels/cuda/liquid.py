"""Liquid cells (004): LTC and STC with the fused semi-implicit step ("imex-implicit", ``unfolds`` = L sub-steps
of δ = Δ/L, the input held), LRC (LRCU-A / LRCU-S) with explicit Euler. With y = [h, x] and per synapse
o_ji = σ(a_ji y_j + b_ji):

    f_i = Σ_j g_ji o_ji + g_l,   u_i = Σ_j k_ji o_ji + g_l                                    (1)
    LTC:  h ← (h + δ u e_l) / (1 + δ f)          STC:  h ← (h + δ tanh(u) e_l) / (1 + δ σ(f))
    LRC:  h ← h + δ ε(w) (tanh(u) e_l − σ(f) h),  w = O_hᵀ h + (O_xᵀ x + p),  ε = σ(w) or σ(w+k) − σ(w−k)

Δ is the shared dt or, with the constexpr GAPS (``Recurrent.forward(x, dt=gaps)``, irregular sampling), each
sample's own gap: HS (B, T) holds every sample's δ = Δ/L, read by row (:func:`._common.step_length`) or by element
(:func:`_element_lengths`).

The input synapses with the leak (f_in, u_in: the sums of (1) over the inputs j, plus g_l) and LRC's O_xᵀ x + p do
not depend on h: they are computed for the whole sequence, once per sample (:func:`input_conductances`, one launch whose
openings stay in registers, recomputed by :func:`input_gradients` in the backward; O_xᵀ x + p by torch), and the
kernels add the hidden synapses, B × m × m sigmoids per sub-step, which are not a matrix product (σ acts on every
(batch, j, i)). What is stored for the backward: the states of every sub-step (with ``ODELAB_GRID_GATES=stored``,
the synapse-tile schedules' conductances of every sub-step too: :class:`LiquidSequence`). The backward recomputes
the openings from them; it writes ∂L/∂f_in, ∂L/∂u_in per sample (summed over its sub-steps) and ∂L/∂w per sub-step
(LRC: the O_h gradient is one GEMM over them), and sums the hidden synapses' parameter gradients (g, k, a, b: one
(m, m) matrix each) in the kernel per batch block or row slab (summed over those in torch); e_l and the elastance
shift per element.

Three layouts of that work:

* **batch blocks** (the "persistent" schedule: one launch forward, one backward): a program per 16-row batch block
  (``ODELAB_LIQUID_ROWS``) walks all sub-steps. The default up to hidden :data:`RESIDENT_H`, where the synapses,
  the state and the parameter sums stay in registers and a thread holds a (row, neuron) with all its presynaptic
  neurons j, so the sums over j (and LRC's O_hᵀ h) stay in the thread and the parameter sums are reduced over the
  rows once, at the end (2026-11-27; before, a sub-step reduced across threads: in sm_90 PTX, float32, LTC's
  forward sub-step went from 433 instructions, 80 shuffles, 105 shared-memory accesses and 12 CTA barriers to 150,
  0, 4 and 1, its backward from 797, 144, 114 and 18 to 493, 64, 8 and 2; GPU speed not measured yet). Above, its
  (BB, BJ, BH) blocks of openings are reduced over j across threads: at (128, 1000, 128) on an H200
  (2026-11-25/26) 1.6 s (LRCU) and 9.3 s (LTC, 6 sub-steps) a training step, and 0.39 and 2.2 s with those tiles
  a launch per phase (32 programs).
* **synapse tiles** (the "stepwise" and "grid" schedules, the default on CUDA from hidden 17; section below): a
  program owns a (BJ, BI) tile of synapses for a range of batch rows, sums each opening inside one thread, and the
  tiles' partial sums meet in small buffers between phases: 128 programs at hidden 128 and 256 (H200 figures in
  ``docs/kernels.md``).
* **row slabs** (the same schedules with ``ODELAB_LIQUID_LAYOUT=rows``, opt-in; section below): a program owns the
  synapses from a few presynaptic neurons to every neuron for a slab of batch rows, so that a sub-step takes one
  barrier of the slab's programs instead of two of all (GPU speed not measured yet).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch.nn import functional as F

from ..derivatives import kernel_backward
from ..chunks import in_chunks
from ..gaps import is_per_sample, sample_lengths
from . import grid
from ._common import (  # noqa: F401 -- available: the registry asks the kernel module
    address, available, batch_rows, block_sizes, dot_precision, mv, on_device, outer_sum, resident_block, sigmoid,
    step_length, tanh, tile_at, warps)
from .stepwise import chosen_schedule, device_table, launch_steps

LTC, STC, LRC_ASYMMETRIC, LRC_SYMMETRIC = 0, 1, 2, 3
RESIDENT_H = 16  # hidden sizes up to this run the register-resident kernels (one (16, 16, 16) block of openings)


def resident(hidden: int, block_h: int | None) -> bool:
    """The register-resident kernels: hidden ≤ :data:`RESIDENT_H` and no tile width asked for."""
    return block_h is None and hidden <= RESIDENT_H


# presynaptic rows a block for fewer than 16 batch rows a program (ODELAB_LIQUID_ROWS), 16- or 32-wide tiles: the
# largest whose one-launch forward and backward do not spill (ptxas of Triton 3.6, sm_90, float32)
FEWER_ROWS_BJ = {8: 16, 4: 16, 2: 32, 1: 64}


def block_j(block_h: int, rows: int = 16, hidden: int | None = None) -> int:
    """Presynaptic rows per (BB, BJ, BH) block: with 16 batch rows, 8 with 16-wide tiles and 4 with 32 (8 spills
    there on sm_90); with fewer, :data:`FEWER_ROWS_BJ`, at most ``hidden`` rounded up to a power of two; 16 under
    Triton's interpreter (no registers to spill; fewer interpreted steps)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return 16
    if rows < 16:
        return min(FEWER_ROWS_BJ[rows], triton.next_power_of_2(hidden or 1 << 30))
    return 8 if block_h <= 16 else 4


@triton.jit
def _synapses(GS, AS, BS, KS, js, cols, H):
    """The hidden synapses' (g, a, b, k) [j, i] for presynaptic rows js and neurons cols, zero beyond H."""
    pm = (js < H)[:, None] & (cols < H)[None, :]
    off = js[:, None] * H + cols[None, :]
    return (tl.load(GS + off, mask=pm, other=0.0), tl.load(AS + off, mask=pm, other=0.0),
            tl.load(BS + off, mask=pm, other=0.0), tl.load(KS + off, mask=pm, other=0.0))


ROWS_ENV = "ODELAB_LIQUID_ROWS"


def persistent_rows(mode: int, on_chip: bool = False) -> int:
    """Batch rows per program of the one-launch kernels: ``$ODELAB_LIQUID_ROWS`` (1, 2, 4, 8 or 16), 16 by default.
    Fewer rows, more programs: at batch 32, 16 rows leave 2 programs on a GPU of 132 SMs. Their GPU speed is not
    measured yet. LRC's tiled kernels keep 16 (their O_hᵀ h products are tl.dot, which asks for 16 rows); in the
    register-resident ones (``on_chip``) its sums are the synapses' (no tl.dot), any rows."""
    value = os.environ.get(ROWS_ENV, "").strip() or "16"
    if value not in ("1", "2", "4", "8", "16"):
        raise ValueError(f"${ROWS_ENV}: expected 1, 2, 4, 8 or 16 batch rows a program, got {value!r}")
    return 16 if mode >= LRC_ASYMMETRIC and not on_chip else int(value)


def resident_warps(rows: int) -> int:
    """Warps of a register-resident kernel with ``rows`` batch rows: a thread per (row, neuron) of its (rows, 16)
    block, whose sums over the presynaptic neurons j then stay in the thread."""
    return max(1, rows * RESIDENT_H // 32)


@triton.jit
def _conductances(f, u, hp, sS, rows, rmask, cols, GS, AS, BS, KS, H, BJ: tl.constexpr):
    """(f, u) + the hidden synapses' Σ_{j<H} (g_ji, k_ji) σ(a_ji h_j + b_ji) of a (BB, BH) tile (h at hp):
    (BB, BJ, BH) blocks of openings reduced over j, BJ presynaptic neurons a trip."""
    for j0 in range(0, H, BJ):
        js = j0 + tl.arange(0, BJ)
        jmask = js < H
        hv = tl.load(hp + rows[:, None] * sS + js[None, :], mask=rmask[:, None] & jmask[None, :], other=0.0)
        g, a, b, k = _synapses(GS, AS, BS, KS, js, cols, H)
        o = sigmoid(a[None, :, :] * hv[:, :, None] + b[None, :, :])
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
def _update(h, f, u, w, el, shift, dt, MODE: tl.constexpr):
    """h_n from h_{n−1} = h and the conductances (f, u; w for LRC): the step of the module docstring."""
    if MODE == 0:
        return (h + dt * (u * el)) / (1.0 + dt * f)
    elif MODE == 1:
        return (h + dt * (tanh(u) * el)) / (1.0 + dt * sigmoid(f))
    else:
        eps, deps, dshift = _elastance(w, shift, MODE == 3)
        return h + dt * (eps * tanh(u) * el - eps * sigmoid(f) * h)


@triton.jit
def _update_adjoint(lam, h, hn, f, u, w, el, shift, dt, MODE: tl.constexpr):
    """The adjoint of :func:`_update` for λ_n = lam (hn = h_n): (∂L/∂f, ∂L/∂u, the e_l term, λ_{n−1}'s direct
    part, ∂L/∂w, the shift term); the last two are zero but for LRC."""
    if MODE == 0:
        d = 1.0 + dt * f
        return -lam * hn * dt / d, lam / d * dt * el, lam / d * dt * u, lam / d, lam * 0.0, lam * 0.0
    elif MODE == 1:
        sf = sigmoid(f)
        tu = tanh(u)
        d = 1.0 + dt * sf
        return (-lam * hn * dt / d * sf * (1.0 - sf), lam / d * dt * el * (1.0 - tu * tu), lam / d * dt * tu,
                lam / d, lam * 0.0, lam * 0.0)
    else:
        eps, deps, dshift = _elastance(w, shift, MODE == 3)
        sf = sigmoid(f)
        tu = tanh(u)
        lk = lam * dt
        leps = lk * (tu * el - sf * h)
        return (-lk * eps * h * sf * (1.0 - sf), lk * eps * el * (1.0 - tu * tu), lk * eps * tu,
                lam * (1.0 - dt * eps * sf), leps * deps, leps * dshift)


@triton.jit
def _length_adjoint(lam, h, hn, f, u, w, el, shift, dt, MODE: tl.constexpr):
    """λ_n ∂h_n/∂δ by element, the sub-step length's gradient (hn = h_n): LTC λ (u e_l − f h_n) / (1 + δ f), STC
    λ (tanh(u) e_l − σ(f) h_n) / (1 + δ σ(f)), LRC λ ε(w) (tanh(u) e_l − σ(f) h_{n−1})."""
    if MODE == 0:
        return lam * (u * el - f * hn) / (1.0 + dt * f)
    elif MODE == 1:
        sf = sigmoid(f)
        return lam * (tanh(u) * el - sf * hn) / (1.0 + dt * sf)
    else:
        eps, deps, dshift = _elastance(w, shift, MODE == 3)
        return lam * eps * (tanh(u) * el - sigmoid(f) * h)


@triton.jit
def _gates(FIN, UIN, WIN, GS, AS, BS, KS, OH, S, n, rows, rmask, c0, T, H, MODE: tl.constexpr, BJ: tl.constexpr,
           BH: tl.constexpr, L: tl.constexpr, PRECISION: tl.constexpr):
    """Sub-step n's (f, u, w; w only for LRC) on the (rows, c0 + [0, BH)) tile from h_{n−1}, its per-sample
    offsets, columns, mask, and the address of h_{n−1}; T sub-steps, T // L samples (the input of sample
    (n − 1) // L is held over its L sub-steps)."""
    cols = c0 + tl.arange(0, BH)
    cmask = cols < H
    m = rmask[:, None] & cmask[None, :]
    sS = (T + 1) * H
    hp = S + (n - 1) * H
    io = rows[:, None] * (T // L) * H + ((n - 1) // L) * H + cols[None, :]
    f = tl.load(FIN + io, mask=m, other=0.0)
    u = tl.load(UIN + io, mask=m, other=0.0)
    f, u = _conductances(f, u, hp, sS, rows, rmask, cols, GS, AS, BS, KS, H, BJ)
    w = f * 0.0
    if MODE >= 2:
        w = tl.load(WIN + io, mask=m, other=0.0)
        w = mv(w, hp, sS, rows, rmask, OH, H, c0, H, H, True, BH, PRECISION)
    return f, u, w, io, cols, m, hp


@triton.jit
def _forward_tile(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, S, dt, n, rows, rmask, c0, T, H, MODE: tl.constexpr,
                  BJ: tl.constexpr, BH: tl.constexpr, L: tl.constexpr, PRECISION: tl.constexpr):
    """h_n on one (rows, columns) tile."""
    f, u, w, io, cols, m, hp = _gates(FIN, UIN, WIN, GS, AS, BS, KS, OH, S, n, rows, rmask, c0, T, H, MODE, BJ, BH,
                                      L, PRECISION)
    sS = (T + 1) * H
    el = tl.load(EL + cols, mask=cols < H, other=0.0)[None, :]
    shift = tl.load(KSH + cols, mask=cols < H, other=0.0)[None, :]
    h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    h = _update(h, f, u, w, el, shift, dt, MODE)
    tl.store(S + n * H + rows[:, None] * sS + cols[None, :], h, mask=m)


@triton.jit
def _backward_gate_tile(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, S, GF, GU, GW, LAM, FU, AE, dt, n, rows, rmask,
                        c0, B, T, H, MODE: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr, L: tl.constexpr,
                        PRECISION: tl.constexpr):
    """Backward of sub-step n, first phase, on a tile of neurons i: from λ_n, ∂L/∂f and ∂L/∂u (kept in FU for the
    second phase and added to the sample's GF, GU), ∂L/∂w (GW, LRC), the direct part of λ_{n−1}, and the
    per-element sums for e_l and the shift (AE); returns the tile's Σ_i λ_n ∂h_n/∂δ per row (unused but with DHS)."""
    f, u, w, io, cols, m, hp = _gates(FIN, UIN, WIN, GS, AS, BS, KS, OH, S, n, rows, rmask, c0, T, H, MODE, BJ, BH,
                                      L, PRECISION)
    sS = (T + 1) * H
    ij = rows[:, None] * H + cols[None, :]
    cur = n % 2
    el = tl.load(EL + cols, mask=cols < H, other=0.0)[None, :]
    h = tl.load(hp + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    hn = tl.load(S + n * H + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    shift = tl.load(KSH + cols, mask=cols < H, other=0.0)[None, :]
    lam = tl.load(LAM + cur * B * H + ij, mask=m, other=0.0)
    lf, lu, d_el, part, gw, d_shift = _update_adjoint(lam, h, hn, f, u, w, el, shift, dt, MODE)
    if MODE >= 2:
        tl.store(GW + (n - 1) * H + rows[:, None] * T * H + cols[None, :], gw, mask=m)
        tl.store(AE + B * H + ij, tl.load(AE + B * H + ij, mask=m, other=0.0) + d_shift, mask=m)
    tl.store(AE + ij, tl.load(AE + ij, mask=m, other=0.0) + d_el, mask=m)
    tl.store(FU + ij, lf, mask=m)
    tl.store(FU + B * H + ij, lu, mask=m)
    tl.store(GF + io, tl.load(GF + io, mask=m, other=0.0) + lf, mask=m)
    tl.store(GU + io, tl.load(GU + io, mask=m, other=0.0) + lu, mask=m)
    tl.store(LAM + (1 - cur) * B * H + ij, part, mask=m)
    return tl.sum(_length_adjoint(lam, h, hn, f, u, w, el, shift, dt, MODE), axis=1)


@triton.jit
def _backward_synapse_tile(GS, AS, BS, KS, OH, S, GO, GW, LAM, FU, ACC, n, rows, rmask, c0, B, T, H,
                           MODE: tl.constexpr, BB: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr,
                           L: tl.constexpr, PRECISION: tl.constexpr):
    """Backward of sub-step n, second phase, on a tile of presynaptic neurons j: λ_{n−1,j} += Σ_i ∂L/∂o_ji a_ji
    o_ji (1 − o_ji) (+ (∂L/∂w O_hᵀ)_j for LRC, + the output gradient where h_{n−1} is an output), and this
    batch block's sums for g, k, a, b (ACC, row block program_id(0), rows j of the tile: no other program writes
    them)."""
    sS = (T + 1) * H
    hp = S + (n - 1) * H
    lnxt = LAM + (1 - n % 2) * B * H
    acc = ACC + tl.program_id(0) * 4 * H * H
    for j0 in range(c0, c0 + BH, BJ):
        js = j0 + tl.arange(0, BJ)
        jmask = js < H
        hm = rmask[:, None] & jmask[None, :]
        hv = tl.load(hp + rows[:, None] * sS + js[None, :], mask=hm, other=0.0)
        ly = tl.zeros((BB, BJ), dtype=hv.dtype)
        for i0 in range(0, H, BH):
            cols = i0 + tl.arange(0, BH)
            cmask = cols < H
            m = rmask[:, None] & cmask[None, :]
            ij = rows[:, None] * H + cols[None, :]
            lf = tl.load(FU + ij, mask=m, other=0.0)
            lu = tl.load(FU + B * H + ij, mask=m, other=0.0)
            pm = jmask[:, None] & cmask[None, :]
            off = js[:, None] * H + cols[None, :]
            g, a, b, k = _synapses(GS, AS, BS, KS, js, cols, H)
            o = sigmoid(a[None, :, :] * hv[:, :, None] + b[None, :, :])
            ds = (lf[:, None, :] * g[None, :, :] + lu[:, None, :] * k[None, :, :]) * o * (1.0 - o)
            ly += tl.sum(ds * a[None, :, :], axis=2)
            tl.store(acc + off, tl.load(acc + off, mask=pm, other=0.0) + tl.sum(lf[:, None, :] * o, axis=0),
                     mask=pm)
            tl.store(acc + H * H + off,
                     tl.load(acc + H * H + off, mask=pm, other=0.0) + tl.sum(lu[:, None, :] * o, axis=0), mask=pm)
            tl.store(acc + 2 * H * H + off,
                     tl.load(acc + 2 * H * H + off, mask=pm, other=0.0) + tl.sum(ds * hv[:, :, None], axis=0),
                     mask=pm)
            tl.store(acc + 3 * H * H + off,
                     tl.load(acc + 3 * H * H + off, mask=pm, other=0.0) + tl.sum(ds, axis=0), mask=pm)
        lh = tl.load(lnxt + rows[:, None] * H + js[None, :], mask=hm, other=0.0)
        tl.store(lnxt + rows[:, None] * H + js[None, :], lh + ly, mask=hm)
    tl.debug_barrier()  # the tile's λ rows were written by other threads of this program
    cols = c0 + tl.arange(0, BH)
    m = rmask[:, None] & (cols < H)[None, :]
    lam = tl.load(lnxt + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    if MODE >= 2:
        lam = mv(lam, GW + (n - 1) * H, T * H, rows, rmask, OH, H, c0, H, H, False, BH, PRECISION)
    out = (n - 1) // L - 1  # h_{n−1} is output `out` where n − 1 is a positive multiple of L
    is_out = (cols * 0 + (n - 1) % L == 0) & (cols * 0 + out >= 0)
    lam += tl.load(GO + out * H + rows[:, None] * (T // L) * H + cols[None, :], mask=m & is_out[None, :], other=0.0)
    tl.store(lnxt + rows[:, None] * H + cols[None, :], lam, mask=m)


@triton.jit
def _forward(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, HS, S, B, T, H, MODE: tl.constexpr, BB: tl.constexpr,
             BJ: tl.constexpr, BH: tl.constexpr, L: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr):
    """All T sub-steps of a 16-row batch block in one program; with GAPS, sub-step n is HS[row, (n − 1) // L] long."""
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    for n in range(1, T + 1):
        delta = step_length(dt, HS, rows, rmask, (n - 1) // L + 1, T // L, GAPS)
        for c0 in range(0, H, BH):
            _forward_tile(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, S, delta, n, rows, rmask, c0, T, H, MODE, BJ,
                          BH, L, PRECISION)
        tl.debug_barrier()


@triton.jit
def _backward(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, HS, S, GO, GF, GU, GW, LAM, FU, AE, ACC, B, T, H, DH,
              MODE: tl.constexpr, BB: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr, L: tl.constexpr,
              PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """GF, GU (B, T // L, H): ∂L/∂f_in, ∂L/∂u_in per sample; GW (B, T, H) ∂L/∂w per sub-step (LRC); LAM (2, B, H)
    the adjoints; FU (2, B, H) ∂L/∂f, ∂L/∂u of the current sub-step; AE (2, B, H) per-element sums for e_l and
    the shift; ACC (batch blocks, 4, H, H) the per-block sums for g, k, a, b; HS as :func:`_forward`'s; with DHS,
    DH (B, T // L) = ∂L/∂HS, each sample's sum over its sub-steps and the column tiles, kept in registers."""
    rows, rmask = batch_rows(B, BB)
    dt = tl.load(C)
    dh = tl.zeros((BB,), dtype=S.dtype.element_ty)
    for i in range(0, T):
        n = T - i
        delta = step_length(dt, HS, rows, rmask, (n - 1) // L + 1, T // L, GAPS)
        for c0 in range(0, H, BH):
            part = _backward_gate_tile(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, S, GF, GU, GW, LAM, FU, AE, delta,
                                       n, rows, rmask, c0, B, T, H, MODE, BJ, BH, L, PRECISION)
            if DHS:
                dh += part
        if DHS:
            if (n - 1) % L == 0:  # the sample's first sub-step, its last here
                tl.store(DH + rows * (T // L) + (n - 1) // L, dh, mask=rmask)
                dh = tl.zeros((BB,), dtype=S.dtype.element_ty)
        tl.debug_barrier()
        for c0 in range(0, H, BH):
            _backward_synapse_tile(GS, AS, BS, KS, OH, S, GO, GW, LAM, FU, ACC, n, rows, rmask, c0, B, T, H, MODE,
                                   BB, BJ, BH, L, PRECISION)
        tl.debug_barrier()


@triton.jit
def _sample_inputs(FIN, UIN, WIN, sample, rows, rmask, cols, cmask, N, H, MODE: tl.constexpr):
    """Sample ``sample``'s (f_in, u_in, w_in) tiles of the (B, N, H) inputs (w_in: LRC only), zero outside
    0 ≤ sample < N."""
    fin = tile_at(FIN, sample, H, N * H, rows, rmask, cols, cmask, 0, N - 1)
    win = fin * 0.0
    if MODE >= 2:
        win = tile_at(WIN, sample, H, N * H, rows, rmask, cols, cmask, 0, N - 1)
    return fin, tile_at(UIN, sample, H, N * H, rows, rmask, cols, cmask, 0, N - 1), win


@triton.jit
def _synapse_blocks(GS, AS, BS, KS, OH, off, pm, MODE: tl.constexpr):
    """The hidden synapses (g, a, b, k) and, LRC, O_h (zero otherwise) at the 2-D offsets ``off`` (zero outside
    ``pm``) as 3-D blocks with a middle axis of one, for the rows of a block of openings whose first axis is summed
    in each thread (Triton's layout puts the threads on the last two axes)."""
    g = tl.load(GS + off, mask=pm, other=0.0)[:, None, :]
    a = tl.load(AS + off, mask=pm, other=0.0)[:, None, :]
    b = tl.load(BS + off, mask=pm, other=0.0)[:, None, :]
    k = tl.load(KS + off, mask=pm, other=0.0)[:, None, :]
    oh = g * 0.0
    if MODE >= 2:
        oh = tl.load(OH + off, mask=pm, other=0.0)[:, None, :]
    return g, a, b, k, oh


@triton.jit
def _resident_gates(h, fin, uin, win, g, a, b, k, oh, MODE: tl.constexpr):
    """A sub-step's presynaptic states h_j as a (BH, BB, 1) block, its openings o (BH, BB, BH) [j, row, i] and (f,
    u, w) from h in registers (w = w_in + Σ_j O_h[j, i] h_j: LRC only, oh as (BH, 1, BH) [j, ·, i])."""
    hj = tl.trans(h)[:, :, None]
    o = sigmoid(a * hj + b)
    f = fin + tl.sum(o * g, axis=0)
    u = uin + tl.sum(o * k, axis=0)
    w = f * 0.0
    if MODE >= 2:
        w = win + tl.sum(oh * hj, axis=0)
    return hj, o, f, u, w


@triton.jit
def _forward_resident(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, HS, S, B, T, H, MODE: tl.constexpr,
                      BB: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr, L: tl.constexpr, PRECISION: tl.constexpr,
                      GAPS: tl.constexpr):
    """hidden ≤ BH: the synapses, O_h and the state in registers for all T sub-steps; a sample's input
    conductances (and, with GAPS, its sub-step length) loaded once for its L sub-steps."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    g, a, b, k, oh = _synapse_blocks(GS, AS, BS, KS, OH, cols[:, None] * H + cols[None, :],
                                     cmask[:, None] & cmask[None, :], MODE)  # [j, ·, i]
    el = tl.load(EL + cols, mask=cmask, other=0.0)[None, :]
    shift = tl.load(KSH + cols, mask=cmask, other=0.0)[None, :]
    h = tl.load(S + rows[:, None] * sS + cols[None, :], mask=m, other=0.0)
    fin, uin, win = _sample_inputs(FIN, UIN, WIN, 0, rows, rmask, cols, cmask, T // L, H, MODE)
    delta = step_length(dt, HS, rows, rmask, 1, T // L, GAPS)
    for sample in range(0, T // L):
        # the next sample's input conductances (and length), loaded while this one's L sub-steps compute
        f_next, u_next, w_next = _sample_inputs(FIN, UIN, WIN, sample + 1, rows, rmask, cols, cmask, T // L, H, MODE)
        d_next = step_length(dt, HS, rows, rmask, sample + 2, T // L, GAPS)
        for q in range(0, L):
            hj, o, f, u, w = _resident_gates(h, fin, uin, win, g, a, b, k, oh, MODE)
            h = _update(h, f, u, w, el, shift, delta, MODE)
            tl.store(S + (sample * L + q + 1) * H + rows[:, None] * sS + cols[None, :], h, mask=m)
        fin, uin, win = f_next, u_next, w_next
        delta = d_next


@triton.jit
def _backward_resident(FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, HS, S, GO, GF, GU, GW, LAM, FU, AE, ACC, B, T,
                       H, DH, MODE: tl.constexpr, BB: tl.constexpr, BJ: tl.constexpr, BH: tl.constexpr,
                       L: tl.constexpr, PRECISION: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr):
    """hidden ≤ BH: as :func:`_backward` with the synapses, O_h, the adjoint and every parameter sum in registers
    (the sums as (j, row, i) blocks, reduced over the rows once, at the end); LAM (B, H): the final-state adjoint
    in, the initial-state adjoint out (FU unused); DH and DHS as :func:`_backward`'s."""
    rows, rmask, cols, cmask, m = resident_block(B, H, BB, BH)
    dt = tl.load(C)
    sS = (T + 1) * H
    sI = (T // L) * H
    g, a, b, k, oh = _synapse_blocks(GS, AS, BS, KS, OH, cols[:, None] * H + cols[None, :],
                                     cmask[:, None] & cmask[None, :], MODE)  # [j, ·, i]
    el = tl.load(EL + cols, mask=cmask, other=0.0)[None, :]
    shift = tl.load(KSH + cols, mask=cmask, other=0.0)[None, :]
    lam = tl.load(LAM + rows[:, None] * H + cols[None, :], mask=m, other=0.0)
    d_g = tl.zeros((BH, BB, BH), dtype=lam.dtype)
    d_k = tl.zeros((BH, BB, BH), dtype=lam.dtype)
    d_a = tl.zeros((BH, BB, BH), dtype=lam.dtype)
    d_b = tl.zeros((BH, BB, BH), dtype=lam.dtype)
    a_el = tl.zeros((BB, BH), dtype=lam.dtype)
    a_sh = tl.zeros((BB, BH), dtype=lam.dtype)
    # h_{n−1} and h_n of sub-step n, and the inputs (and length) of its sample, each loaded one sub-step or sample
    # ahead
    h = tile_at(S - H, T, H, sS, rows, rmask, cols, cmask, 1, T + 1)
    hn = tile_at(S, T, H, sS, rows, rmask, cols, cmask, 0, T)
    fin, uin, win = _sample_inputs(FIN, UIN, WIN, T // L - 1, rows, rmask, cols, cmask, T // L, H, MODE)
    delta = step_length(dt, HS, rows, rmask, T // L, T // L, GAPS)
    for back in range(0, T // L):
        sample = T // L - 1 - back
        io = rows[:, None] * sI + sample * H + cols[None, :]
        f_next, u_next, w_next = _sample_inputs(FIN, UIN, WIN, sample - 1, rows, rmask, cols, cmask, T // L, H, MODE)
        d_next = step_length(dt, HS, rows, rmask, sample, T // L, GAPS)  # sample − 1's
        gf = tl.zeros((BB, BH), dtype=lam.dtype)
        gu = tl.zeros((BB, BH), dtype=lam.dtype)
        dh = tl.zeros((BB, BH), dtype=lam.dtype)  # with DHS: Σ over the sample's sub-steps of λ_n ∂h_n/∂δ
        for q in range(0, L):
            n = sample * L + L - q
            h_next = tile_at(S - 2 * H, n, H, sS, rows, rmask, cols, cmask, 2, T + 1)  # h_{n−2}
            hj, o, f, u, w = _resident_gates(h, fin, uin, win, g, a, b, k, oh, MODE)
            lf, lu, d_el, part, gw, d_shift = _update_adjoint(lam, h, hn, f, u, w, el, shift, delta, MODE)
            if DHS:
                dh += _length_adjoint(lam, h, hn, f, u, w, el, shift, delta, MODE)
            a_el += d_el
            gf += lf
            gu += lu
            ds = (lf[None, :, :] * g + lu[None, :, :] * k) * o * (1.0 - o)
            d_g += lf[None, :, :] * o
            d_k += lu[None, :, :] * o
            d_a += ds * hj
            d_b += ds
            # λ_{n−1, j} = its direct part + Σ_i ∂L/∂o_ji σ' a_ji (+ Σ_i ∂L/∂w_i O_h[j, i], LRC)
            if MODE >= 2:
                a_sh += d_shift
                tl.store(GW + (n - 1) * H + rows[:, None] * T * H + cols[None, :], gw, mask=m)
                lam = part + tl.trans(tl.sum(ds * a + gw[None, :, :] * oh, axis=2))
            else:
                lam = part + tl.trans(tl.sum(ds * a, axis=2))
            out = (n - 1) // L - 1  # h_{n−1} is output `out` where n − 1 is a positive multiple of L
            is_out = (cols * 0 + (n - 1) % L == 0) & (cols * 0 + out >= 0)
            lam += tl.load(GO + out * H + rows[:, None] * sI + cols[None, :], mask=m & is_out[None, :], other=0.0)
            h, hn = h_next, h
        tl.store(GF + io, gf, mask=m)
        tl.store(GU + io, gu, mask=m)
        if DHS:
            tl.store(DH + rows * (T // L) + sample, tl.sum(dh, axis=1), mask=rmask)
        fin, uin, win = f_next, u_next, w_next
        delta = d_next
    tl.store(LAM + rows[:, None] * H + cols[None, :], lam, mask=m)
    tl.store(AE + rows[:, None] * H + cols[None, :], a_el, mask=m)
    tl.store(AE + B * H + rows[:, None] * H + cols[None, :], a_sh, mask=m)
    pm = cmask[:, None] & cmask[None, :]
    off = cols[:, None] * H + cols[None, :]
    acc = ACC + tl.program_id(0) * 4 * H * H
    tl.store(acc + off, tl.sum(d_g, axis=1), mask=pm)
    tl.store(acc + H * H + off, tl.sum(d_k, axis=1), mask=pm)
    tl.store(acc + 2 * H * H + off, tl.sum(d_a, axis=1), mask=pm)
    tl.store(acc + 3 * H * H + off, tl.sum(d_b, axis=1), mask=pm)


# -- the stepwise and grid-synchronised schedules: synapse tiles over the whole GPU -----------------------------------
#
# A sub-step's hidden synapses are B × m × m openings. Here a program owns a (BJ, BI) tile of synapses (presynaptic
# j, postsynaptic i) for a range of batch rows, and each phase is one of two kinds:
#   synapse phase  forward: the tile's partial conductances Σ_{j∈tile} (g, k) o_ji (and O_h's Σ_j for LRC) into
#                  P[j-tile]; backward of sub-step n: those of sub-step n (recomputed) and the tile's partial
#                  adjoint Σ_{i∈tile} ∂L/∂o_ji σ'(·) a_ji of sub-step n + 1 (+ Σ_i ∂L/∂w_i O_h[j, i]) into
#                  LP[i-tile], with the tile's sums for g, k, a, b;
#   element phase  per (row, neuron): the partials summed, the update (forward) or its adjoint (backward).
# Each opening's sum runs inside one thread (the summed axis is the tensor's first, which Triton's layout leaves in
# the thread), so a synapse phase reduces across threads only through P and LP (sm_90 PTX, float32: no shuffle in
# the forward's loop; shared memory only hands the loaded states between threads).
# The stepwise schedule launches each phase over (tiles, slabs of RS rows) or element blocks; the grid one runs
# every phase in one launch of one program per tile (their number at most the multiprocessors: :func:`synapse_tiles`)
# with a barrier after each, and keeps the tile's parameter sums in registers for the whole backward.
# TABLE = the addresses of [FIN, UIN, WIN, G, A, B, K, EL, OH, KSH, C, S, P] (forward),
# + [GO, GF, GU, GW, LAM, PART, FU, LP, AE, ACC] (backward), then HS (the samples' sub-step lengths, read with GAPS)

THREADS = 256  # threads a program of these phases (8 warps)
ELEMENTS = 256  # (row, neuron) elements an element phase's block (the grid's: up to 4 × as many, below)
SYNAPSE_TILES = ((8, 4), (16, 4), (16, 8), (32, 8), (32, 16))  # (BJ, BI), the grid schedule's smallest that fits
STEPWISE_TILE = (16, 16)


def synapse_tiles(hidden: int, schedule: str, device: torch.device) -> tuple[int, int] | None:
    """(BJ, BI) synapse tiles of the stepwise or grid schedule. Grid: one program per tile, all resident at once, so
    the smallest tiles of :data:`SYNAPSE_TILES` whose count ⌈m/BJ⌉ ⌈m/BI⌉ is at most the multiprocessors (hidden 128:
    16 × 8, 128 programs; 256: 32 × 16), None where none fits; under Triton's interpreter, whose programs run one after
    another, one tile of the whole matrix. Stepwise: :data:`STEPWISE_TILE`."""
    if schedule != "grid":
        return STEPWISE_TILE
    if grid.interpreting():
        whole = max(4, triton.next_power_of_2(hidden))
        return whole, whole
    return grid_tiles(hidden, torch.cuda.get_device_properties(device).multi_processor_count)


def grid_tiles(hidden: int, slots: int) -> tuple[int, int] | None:
    """The smallest tiles of :data:`SYNAPSE_TILES` whose count is at most ``slots`` programs, None where none is."""
    return next(((bj, bi) for bj, bi in SYNAPSE_TILES if triton.cdiv(hidden, bj) * triton.cdiv(hidden, bi) <= slots),
                None)


def phase_rows(BJ: int, BI: int, batch: int) -> tuple[int, int]:
    """(RA, RC): batch rows a chunk of the forward sums' (BJ, RA, BI) and of the adjoint sums' (BI, RC, BJ) openings,
    :data:`THREADS` openings of each j (i) at once, at most the batch rounded up to a power of two."""
    most = max(1, triton.next_power_of_2(batch))
    return min(most, max(1, THREADS // BI)), min(most, max(1, THREADS // BJ))


def slab_rows(BJ: int, BI: int, batch: int) -> int:
    """Batch rows a program of the stepwise synapse phase (a slab; its parameter sums have their own slot)."""
    return max(phase_rows(BJ, BI, batch))


@triton.jit
def _tile_indices(tile, H, BJ: tl.constexpr, BI: tl.constexpr):
    """Synapse tile ``tile``'s presynaptic rows js, neurons cols and their masks (tiles row-major over (j, i))."""
    ni = tl.cdiv(H, BI)
    js = (tile // ni) * BJ + tl.arange(0, BJ)
    cols = (tile % ni) * BI + tl.arange(0, BI)
    return tile // ni, tile % ni, js, cols, js < H, cols < H


@triton.jit
def _partial_conductances(GS, AS, BS, KS, OH, S, P, n, tile, r_lo, r_hi, B, T, H, MODE: tl.constexpr,
                          BJ: tl.constexpr, BI: tl.constexpr, RA: tl.constexpr):
    """P[jt, c, rows, i] = the tile's Σ_{j} (g_ji, k_ji) σ(a_ji h_j + b_ji) and, LRC, Σ_j O_h[j, i] h_j (c = 0, 1, 2)
    from h = h_{n−1}, rows r_lo … r_hi − 1 in chunks of RA: (BJ, RA, BI) openings summed over their first axis."""
    jt, it, js, cols, jm, cm = _tile_indices(tile, H, BJ, BI)
    pm = jm[:, None] & cm[None, :]
    off = js[:, None] * H + cols[None, :]
    g, a, b, k, oh = _synapse_blocks(GS, AS, BS, KS, OH, off, pm, MODE)
    _partial_rows(S, P + jt * 3 * B * H, js, jm, cols, cm, g, a, b, k, oh, n, r_lo, r_hi, B, T, H, MODE, RA)


@triton.jit
def _partial_rows(S, part, js, jm, cols, cm, g, a, b, k, oh, n, r_lo, r_hi, B, T, H, MODE: tl.constexpr,
                  R: tl.constexpr):
    """part[c, rows, cols] = Σ_{j∈js} (g_ji, k_ji) σ(a_ji h_j + b_ji) (c = 0, 1) and, LRC, Σ_j O_h[j, i] h_j (c = 2)
    for rows r_lo … r_hi − 1 in chunks of R, h = h_{n−1}; the synapses (g, a, b, k, O_h) as (js, 1, cols) blocks:
    (js, R, cols) openings summed over their first axis, in each thread."""
    sS = (T + 1) * H
    for r0 in range(r_lo, r_hi, R):
        rows = (r0 + tl.arange(0, R)).to(tl.int64)
        rm = rows < r_hi
        h = tl.load(S + (n - 1) * H + rows[None, :] * sS + js[:, None], mask=jm[:, None] & rm[None, :],
                    other=0.0)[:, :, None]
        o = sigmoid(a * h + b)
        m = rm[:, None] & cm[None, :]
        dst = part + rows[:, None] * H + cols[None, :]
        tl.store(dst, tl.sum(o * g, axis=0), mask=m)
        tl.store(dst + B * H, tl.sum(o * k, axis=0), mask=m)
        if MODE >= 2:
            tl.store(dst + 2 * B * H, tl.sum(oh * h, axis=0), mask=m)


@triton.jit
def _partial_adjoints(GS, AS, BS, KS, OH, S, GW, FU, LP, n, tile, r_lo, r_hi, d_g, d_k, d_a, d_b, B, T, H,
                      MODE: tl.constexpr, BJ: tl.constexpr, BI: tl.constexpr, RC: tl.constexpr):
    """Sub-step n's LP[it, rows, j] = the tile's Σ_i ∂L/∂o_ji o_ji (1 − o_ji) a_ji (+ Σ_i ∂L/∂w_i O_h[j, i], LRC)
    with ∂L/∂o_ji = ∂L/∂f_i g_ji + ∂L/∂u_i k_ji (FU), o from h_{n−1}; (BI, RC, BJ) openings summed over their first
    axis. Returns the parameter sums (BI, RC, BJ) [i, row, j] with this sub-step's rows added (g, k, a, b)."""
    jt, it, js, cols, jm, cm = _tile_indices(tile, H, BJ, BI)
    sS = (T + 1) * H
    pm = cm[:, None] & jm[None, :]
    off = cols[:, None] + js[None, :] * H  # [i, j] = W[j, i]
    g, a, b, k, oh = _synapse_blocks(GS, AS, BS, KS, OH, off, pm, MODE)
    for r0 in range(r_lo, r_hi, RC):
        rows = (r0 + tl.arange(0, RC)).to(tl.int64)
        rm = rows < r_hi
        h = tl.load(S + (n - 1) * H + rows[:, None] * sS + js[None, :], mask=rm[:, None] & jm[None, :],
                    other=0.0)[None, :, :]
        em = cm[:, None] & rm[None, :]
        eo = rows[None, :] * H + cols[:, None]
        lf = tl.load(FU + eo, mask=em, other=0.0)[:, :, None]
        lu = tl.load(FU + B * H + eo, mask=em, other=0.0)[:, :, None]
        o = sigmoid(a * h + b)
        ds = (lf * g + lu * k) * o * (1.0 - o)
        lp = tl.sum(ds * a, axis=0)
        if MODE >= 2:
            gw = tl.load(GW + (n - 1) * H + rows[None, :] * T * H + cols[:, None], mask=em, other=0.0)[:, :, None]
            lp += tl.sum(gw * oh, axis=0)
        tl.store(LP + it * B * H + rows[:, None] * H + js[None, :], lp, mask=rm[:, None] & jm[None, :])
        d_g += lf * o
        d_k += lu * o
        d_a += ds * h
        d_b += ds
    return d_g, d_k, d_a, d_b


@triton.jit
def _add_parameter_sums(ACC, slot, tile, d_g, d_k, d_a, d_b, H, BJ: tl.constexpr, BI: tl.constexpr):
    """ACC[slot, q, j, i] += the tile's sums (g, k, a, b) over their rows."""
    jt, it, js, cols, jm, cm = _tile_indices(tile, H, BJ, BI)
    pm = cm[:, None] & jm[None, :]
    acc = ACC + slot * 4 * H * H + cols[:, None] + js[None, :] * H
    tl.store(acc, tl.load(acc, mask=pm, other=0.0) + tl.sum(d_g, axis=1), mask=pm)
    tl.store(acc + H * H, tl.load(acc + H * H, mask=pm, other=0.0) + tl.sum(d_k, axis=1), mask=pm)
    tl.store(acc + 2 * H * H, tl.load(acc + 2 * H * H, mask=pm, other=0.0) + tl.sum(d_a, axis=1), mask=pm)
    tl.store(acc + 3 * H * H, tl.load(acc + 3 * H * H, mask=pm, other=0.0) + tl.sum(d_b, axis=1), mask=pm)


@triton.jit
def _element_conductances(FIN, UIN, WIN, P, io, e, c, em, B, T, H, MODE: tl.constexpr, BJ: tl.constexpr,
                          STORED: tl.constexpr):
    """(f, u, w; w zero but for LRC) of elements at offsets ``e`` of the (B, H) rows: the input conductances (at
    ``io`` of the samples' (B, T // L, H)) plus the partials P[jt] (3, B, H) of every j-tile; with STORED read
    from P = CS (C, B, T, H) at ``c`` instead."""
    if STORED:
        f = tl.load(P + c, mask=em, other=0.0)
        u = tl.load(P + B * T * H + c, mask=em, other=0.0)
        w = f * 0.0
        if MODE >= 2:
            w = tl.load(P + 2 * B * T * H + c, mask=em, other=0.0)
    else:
        f = tl.load(FIN + io, mask=em, other=0.0)
        u = tl.load(UIN + io, mask=em, other=0.0)
        w = f * 0.0
        if MODE >= 2:
            w = tl.load(WIN + io, mask=em, other=0.0)
        for jt in range(0, tl.cdiv(H, BJ)):
            f += tl.load(P + jt * 3 * B * H + e, mask=em, other=0.0)
            u += tl.load(P + jt * 3 * B * H + B * H + e, mask=em, other=0.0)
            if MODE >= 2:
                w += tl.load(P + jt * 3 * B * H + 2 * B * H + e, mask=em, other=0.0)
    return f, u, w


@triton.jit
def _elements(FIN, UIN, WIN, EL, KSH, S, P, n, e0, B, T, H, MODE: tl.constexpr, BJ: tl.constexpr, L: tl.constexpr,
              E: tl.constexpr, STORED: tl.constexpr = False):
    """Elements e0 … e0 + E − 1 of the (B, H) rows: their offsets, mask, sample offsets, e_l, shift, h_{n−1} and the
    conductances (f, u, w) of sub-step n: the input ones plus the partials of every j-tile, or (STORED, a backward)
    those the forward stored, P = CS (:func:`_update_elements`)."""
    e = (e0 + tl.arange(0, E)).to(tl.int64)
    em = e < B * H
    row = e // H
    i = e % H
    sS = (T + 1) * H
    io = row * (T // L) * H + ((n - 1) // L) * H + i
    f, u, w = _element_conductances(FIN, UIN, WIN, P, io, e, row * T * H + (n - 1) * H + i, em, B, T, H, MODE, BJ,
                                    STORED)
    el = tl.load(EL + i, mask=em, other=0.0)
    shift = tl.load(KSH + i, mask=em, other=0.0)
    h = tl.load(S + row * sS + (n - 1) * H + i, mask=em, other=0.0)
    return e, em, row, i, io, el, shift, h, f, u, w


@triton.jit
def _element_lengths(dt, HS, row, em, n, T, L: tl.constexpr, GAPS: tl.constexpr):
    """Sub-step n's length for elements of rows ``row`` (a vector, as :func:`_elements`'): ``dt``, or with GAPS each
    row's own, HS[row, (n − 1) // L] of the (B, T // L) per-sample sub-steps (``step_length`` by element)."""
    if GAPS:
        return tl.load(HS + row * (T // L) + (n - 1) // L, mask=em, other=0.0)
    else:
        return dt


@triton.jit
def _update_elements(FIN, UIN, WIN, EL, KSH, S, P, dt, HS, CS, n, e0, B, T, H, MODE: tl.constexpr, BJ: tl.constexpr,
                     L: tl.constexpr, E: tl.constexpr, GAPS: tl.constexpr, STORED: tl.constexpr):
    """Forward element phase of sub-step n: h_n = the update of h_{n−1} (the module docstring's step); with STORED,
    its conductances (f, u; w for LRC) also into CS (C, B, T, H) at [·, row, n − 1, i] for the backward."""
    e, em, row, i, io, el, shift, h, f, u, w = _elements(FIN, UIN, WIN, EL, KSH, S, P, n, e0, B, T, H, MODE, BJ, L,
                                                         E)
    delta = _element_lengths(dt, HS, row, em, n, T, L, GAPS)
    tl.store(S + row * (T + 1) * H + n * H + i, _update(h, f, u, w, el, shift, delta, MODE), mask=em)
    if STORED:
        _store_conductances(CS, row * T * H + (n - 1) * H + i, f, u, w, em, B, T, H, MODE)


@triton.jit
def _store_conductances(CS, c, f, u, w, em, B, T, H, MODE: tl.constexpr):
    """CS (C, B, T, H)[·, c] = (f, u; w for LRC): what :func:`_element_conductances` reads back with STORED."""
    tl.store(CS + c, f, mask=em)
    tl.store(CS + B * T * H + c, u, mask=em)
    if MODE >= 2:
        tl.store(CS + 2 * B * T * H + c, w, mask=em)


@triton.jit
def _element_adjoint(lam, h, hn, f, u, w, el, shift, delta, FU, DIRECT, GF, GU, GW, AE, DE, e, io, c, em, B, H,
                     MODE: tl.constexpr, DHS: tl.constexpr):
    """The adjoint of the update of elements at ``e`` (offsets of the (B, H) rows; their samples' at ``io``, their
    sub-step's in (B, T, H) at ``c``) for λ_n = lam: ∂L/∂f, ∂L/∂u into FU (2, B, H) and added to GF, GU, λ_{n−1}'s
    direct part into DIRECT, the e_l term added to AE[0], with DHS λ_n ∂h_n/∂δ added to DE; LRC ∂L/∂w into GW and
    the shift term added to AE[1]."""
    lf, lu, d_el, direct, gw, d_shift = _update_adjoint(lam, h, hn, f, u, w, el, shift, delta, MODE)
    tl.store(FU + e, lf, mask=em)
    tl.store(FU + B * H + e, lu, mask=em)
    tl.store(DIRECT + e, direct, mask=em)
    tl.store(GF + io, tl.load(GF + io, mask=em, other=0.0) + lf, mask=em)
    tl.store(GU + io, tl.load(GU + io, mask=em, other=0.0) + lu, mask=em)
    tl.store(AE + e, tl.load(AE + e, mask=em, other=0.0) + d_el, mask=em)
    if DHS:
        d_len = _length_adjoint(lam, h, hn, f, u, w, el, shift, delta, MODE)
        tl.store(DE + io, tl.load(DE + io, mask=em, other=0.0) + d_len, mask=em)
    if MODE >= 2:
        tl.store(GW + c, gw, mask=em)
        tl.store(AE + B * H + e, tl.load(AE + B * H + e, mask=em, other=0.0) + d_shift, mask=em)


@triton.jit
def _adjoint_elements(FIN, UIN, WIN, EL, KSH, S, P, GO, GF, GU, GW, LAM, PART, FU, LP, AE, dt, HS, DE, n, e0, B, T,
                      H, MODE: tl.constexpr, BJ: tl.constexpr, BI: tl.constexpr, L: tl.constexpr, E: tl.constexpr,
                      GAPS: tl.constexpr, DHS: tl.constexpr, STORED: tl.constexpr):
    """Backward element phase of sub-step n (T … 1, then 0): λ_n (LAM at n = T; otherwise λ_{n}'s direct part PART,
    the partials LP of every i-tile and the output gradient where h_n is an output), then, for n ≥ 1, the adjoint of
    the update: ∂L/∂f, ∂L/∂u into FU and the sample's GF, GU, ∂L/∂w into GW (LRC), λ_{n−1}'s direct part into PART,
    the e_l and shift terms into AE (with DHS, λ_n ∂h_n/∂δ into the sample's DE, (B, T // L, H)); for n = 0, λ_0
    into LAM. The conductances of sub-step n: summed from P, or with STORED read from it (:func:`_elements`)."""
    e = (e0 + tl.arange(0, E)).to(tl.int64)
    em = e < B * H
    if n == T:
        lam = tl.load(LAM + e, mask=em, other=0.0)
    else:
        lam = tl.load(PART + e, mask=em, other=0.0)
        for it in range(0, tl.cdiv(H, BI)):
            lam += tl.load(LP + it * B * H + e, mask=em, other=0.0)
        out = n // L - 1  # h_n is output `out` where n is a positive multiple of L
        is_out = (e * 0 + n % L == 0) & (e * 0 + out >= 0)
        lam += tl.load(GO + (e // H) * (T // L) * H + out * H + e % H, mask=em & is_out, other=0.0)
    if n == 0:
        tl.store(LAM + e, lam, mask=em)
    else:
        e, em, row, i, io, el, shift, h, f, u, w = _elements(FIN, UIN, WIN, EL, KSH, S, P, n, e0, B, T, H, MODE, BJ,
                                                             L, E, STORED)
        hn = tl.load(S + row * (T + 1) * H + n * H + i, mask=em, other=0.0)
        delta = _element_lengths(dt, HS, row, em, n, T, L, GAPS)
        _element_adjoint(lam, h, hn, f, u, w, el, shift, delta, FU, PART, GF, GU, GW, AE, DE, e, io,
                         row * T * H + (n - 1) * H + i, em, B, H, MODE, DHS)


@triton.jit
def _tensors(TABLE, REF):
    return (address(TABLE, 0, REF), address(TABLE, 1, REF), address(TABLE, 2, REF), address(TABLE, 3, REF),
            address(TABLE, 4, REF), address(TABLE, 5, REF), address(TABLE, 6, REF), address(TABLE, 7, REF),
            address(TABLE, 8, REF), address(TABLE, 9, REF), address(TABLE, 10, REF), address(TABLE, 11, REF),
            address(TABLE, 12, REF))


@triton.jit
def _gradients(TABLE, REF):
    return (address(TABLE, 13, REF), address(TABLE, 14, REF), address(TABLE, 15, REF), address(TABLE, 16, REF),
            address(TABLE, 17, REF), address(TABLE, 18, REF), address(TABLE, 19, REF), address(TABLE, 20, REF),
            address(TABLE, 21, REF), address(TABLE, 22, REF))


@triton.jit
def _zeros(BI: tl.constexpr, RC: tl.constexpr, BJ: tl.constexpr, REF):
    z = tl.zeros((BI, RC, BJ), dtype=REF.dtype.element_ty)
    return z, z, z, z


@triton.jit
def _synapse_phase(TABLE, REF, n, tile, r_lo, r_hi, d_g, d_k, d_a, d_b, B, T, H, BACKWARD: tl.constexpr,
                   MODE: tl.constexpr, BJ: tl.constexpr, BI: tl.constexpr, RA: tl.constexpr, RC: tl.constexpr,
                   STORED: tl.constexpr):
    """The synapse phase of sub-step n on one tile and rows r_lo … r_hi − 1: the partial conductances of sub-step n
    (n ≥ 1; not in a backward whose forward stored the conductances, STORED), and backward the partial adjoints of
    sub-step n + 1 (n < T); returns the parameter sums."""
    FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, S, P = _tensors(TABLE, REF)
    if n >= 1 and not (BACKWARD and STORED):
        _partial_conductances(GS, AS, BS, KS, OH, S, P, n, tile, r_lo, r_hi, B, T, H, MODE, BJ, BI, RA)
    if BACKWARD:
        GO, GF, GU, GW, LAM, PART, FU, LP, AE, ACC = _gradients(TABLE, REF)
        if n < T:
            d_g, d_k, d_a, d_b = _partial_adjoints(GS, AS, BS, KS, OH, S, GW, FU, LP, n + 1, tile, r_lo, r_hi, d_g,
                                                   d_k, d_a, d_b, B, T, H, MODE, BJ, BI, RC)
    return d_g, d_k, d_a, d_b


@triton.jit
def _element_phase(TABLE, REF, n, e0, B, T, H, BACKWARD: tl.constexpr, MODE: tl.constexpr, BJ: tl.constexpr,
                   BI: tl.constexpr, L: tl.constexpr, E: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr,
                   STORED: tl.constexpr):
    """The element phase of sub-step n on elements e0 … e0 + E − 1 (HS: the table's entry 23 or 13; DE, with DHS:
    24; with STORED the forward's CS, entry 14, and the backward's P is CS)."""
    FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, S, P = _tensors(TABLE, REF)
    dt = tl.load(C)
    if BACKWARD:
        GO, GF, GU, GW, LAM, PART, FU, LP, AE, ACC = _gradients(TABLE, REF)
        DE = REF
        if DHS:
            DE = address(TABLE, 24, REF)
        _adjoint_elements(FIN, UIN, WIN, EL, KSH, S, P, GO, GF, GU, GW, LAM, PART, FU, LP, AE, dt,
                          address(TABLE, 23, REF), DE, n, e0, B, T, H, MODE, BJ, BI, L, E, GAPS, DHS, STORED)
    else:
        CS = REF
        if STORED:
            CS = address(TABLE, 14, REF)
        _update_elements(FIN, UIN, WIN, EL, KSH, S, P, dt, address(TABLE, 13, REF), CS, n, e0, B, T, H, MODE, BJ, L,
                         E, GAPS, STORED)


@triton.jit(do_not_specialize=["n"])
def _synapse_step(TABLE, REF, n, B, T, H, BACKWARD: tl.constexpr, MODE: tl.constexpr, BJ: tl.constexpr,
                  BI: tl.constexpr, RA: tl.constexpr, RC: tl.constexpr, RS: tl.constexpr,
                  STORED: tl.constexpr = False):
    """Stepwise: the synapse phase of sub-step n on tile program_id(0) and the RS-row slab program_id(1); backward,
    the slab's parameter sums added to ACC[slab]."""
    r_lo = tl.program_id(1) * RS
    d_g, d_k, d_a, d_b = _zeros(BI, RC, BJ, REF)
    d_g, d_k, d_a, d_b = _synapse_phase(TABLE, REF, n, tl.program_id(0), r_lo, tl.minimum(r_lo + RS, B), d_g, d_k,
                                        d_a, d_b, B, T, H, BACKWARD, MODE, BJ, BI, RA, RC, STORED)
    if BACKWARD:
        if n < T:
            _add_parameter_sums(address(TABLE, 22, REF), tl.program_id(1), tl.program_id(0), d_g, d_k, d_a, d_b, H,
                                BJ, BI)


@triton.jit(do_not_specialize=["n"])
def _element_step(TABLE, REF, n, B, T, H, BACKWARD: tl.constexpr, MODE: tl.constexpr, BJ: tl.constexpr,
                  BI: tl.constexpr, L: tl.constexpr, E: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr,
                  STORED: tl.constexpr = False):
    """Stepwise: the element phase of sub-step n on element block program_id(0)."""
    _element_phase(TABLE, REF, n, tl.program_id(0) * E, B, T, H, BACKWARD, MODE, BJ, BI, L, E, GAPS, DHS, STORED)


@triton.jit
def _grid(TABLE, REF, SYNC, B, T, H, BACKWARD: tl.constexpr, MODE: tl.constexpr, BJ: tl.constexpr,
          BI: tl.constexpr, RA: tl.constexpr, RC: tl.constexpr, L: tl.constexpr, E: tl.constexpr,
          LIMIT: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr, STORED: tl.constexpr = False):
    """The grid-synchronised schedule: one program per synapse tile (axis 1; one counter, axis 0 has one block), all
    rows; every sub-step's synapse phase, a barrier, its element phase (elements spread over the programs), a
    barrier -- forward sub-steps 1 … T, backward T … 0; the backward's parameter sums stay in registers until the
    end (ACC[0]). STORED: the forward stores every sub-step's conductances, which the backward reads instead of
    recomputing their openings (:func:`_synapse_phase`)."""
    tile = tl.program_id(1)
    programs = tl.num_programs(1)
    k = 0
    spins = LIMIT
    d_g, d_k, d_a, d_b = _zeros(BI, RC, BJ, REF)
    for q in range(0, T + 1 if BACKWARD else T):
        n = T - q if BACKWARD else q + 1
        d_g, d_k, d_a, d_b = _synapse_phase(TABLE, REF, n, tile, 0, B, d_g, d_k, d_a, d_b, B, T, H, BACKWARD, MODE,
                                            BJ, BI, RA, RC, STORED)
        k, spins = grid.barrier(SYNC, k, spins)
        for e0 in range(tile * E, B * H, programs * E):
            _element_phase(TABLE, REF, n, e0, B, T, H, BACKWARD, MODE, BJ, BI, L, E, GAPS, DHS, STORED)
        k, spins = grid.barrier(SYNC, k, spins)
    if BACKWARD:
        _add_parameter_sums(address(TABLE, 22, REF), 0, tile, d_g, d_k, d_a, d_b, H, BJ, BI)


def _launch_phases(tensors, backward: bool, B: int, TS: int, H: int, tiles: tuple[int, int], mode: int,
                   unfolds: int, schedule: str, gaps: bool, dhs: bool = False, stored: bool = False):
    """Run the phases of every sub-step: "grid" one launch (:func:`_grid`), "stepwise" a launch per phase
    (recorded as a CUDA graph, :func:`.stepwise.launch_steps`); ``gaps``: the element phases read HS (the table's
    entry 23 or 13); ``dhs`` (backward): they add the sub-step lengths' gradient to DE (entry 24); ``stored``: the
    forward stores the conductances into CS (entry 14), the backward reads them from its P (entry 12)."""
    BJ, BI = tiles
    RA, RC = phase_rows(BJ, BI, B)
    count = triton.cdiv(H, BJ) * triton.cdiv(H, BI)
    meta = dict(BACKWARD=backward, MODE=mode, BJ=BJ, BI=BI, STORED=stored)
    ref = tensors[10]
    if schedule == "grid":  # a program's share of the elements in one block where it fits in 4 × ELEMENTS
        E = min(4 * ELEMENTS, max(ELEMENTS, triton.next_power_of_2(triton.cdiv(B * H, count))))
        sync = grid.counters(1, 1, ref.device)
        _grid[(1, count)](device_table(tensors), ref, sync, B, TS, H, RA=RA, RC=RC, L=unfolds, E=E,
                          LIMIT=grid.SPIN_LIMIT, GAPS=gaps, DHS=dhs, num_warps=THREADS // 32, **meta)
        grid.check(sync)
        return
    RS = slab_rows(BJ, BI, B)
    steps = range(TS, -1, -1) if backward else range(1, TS + 1)
    synapses = (count, triton.cdiv(B, RS))
    elements = (triton.cdiv(B * H, ELEMENTS),)

    def launch(table) -> None:
        for n in steps:
            _synapse_step[synapses](table, ref, n, B, TS, H, RA=RA, RC=RC, RS=RS, num_warps=THREADS // 32, **meta)
            _element_step[elements](table, ref, n, B, TS, H, L=unfolds, E=ELEMENTS, GAPS=gaps, DHS=dhs, num_warps=4,
                                    **meta)

    launch.key = ("liquid", backward, B, TS, H, tiles, mode, unfolds, gaps, dhs, stored, ref.dtype, ref.device)
    launch_steps(tensors, launch)


# -- the row-slab layout of the same schedules (``ODELAB_LIQUID_LAYOUT=rows``) ----------------------------------------
#
# A program owns the synapses from BJ presynaptic neurons js to every neuron i for a slab of RS batch rows, and the
# ⌈m/BJ⌉ programs of a slab (one per j-tile) form one barrier group (axis 0 of the grid: the slab, axis 1: the
# j-tile). Forward sub-step n: the synapse phase sums the slab's openings from h_{n−1} over the program's js into
# P[n % 2, jt] for every i; the slab's programs meet at a barrier; the element phase updates the slab's rows at the
# program's own js -- exactly the states its next synapse phase reads -- from every j-tile's partials. So a
# sub-step takes one barrier, shared by ⌈m/BJ⌉ programs, where the synapse tiles take two shared by all (their
# element phase spreads the elements over every program, and a tile's next synapse phase reads every row). P is
# double: a program rewrites sub-step n + 2's partials only after its whole slab passed the barrier of n + 1, so
# after every program finished reading those of n. Stepwise: a launch per phase (the barrier a launch boundary).
# Backward sub-step n: the element phase of n at the program's js (the update's adjoint, from λ_n; the conductances
# from n's partials or stored) and, unless stored, the partials of n − 1; a barrier; the synapse phase of n, which
# sums λ_{n−1} at the program's js over every neuron i inside the program (no partial adjoints to exchange) and its
# parameter sums. ∂L/∂(f, u) are double like P.

LAYOUT_ENV = "ODELAB_LIQUID_LAYOUT"
SLAB_BJ = 16  # presynaptic neurons a program of the row slabs (32 from hidden 129: at most 8 j-tiles a slab)
SLAB_ROWS_STEPWISE = 16  # rows a slab of the stepwise schedule (any number of programs)


def liquid_layout() -> str:
    """The synapse-tile schedules' layout, forward and backward: ``$ODELAB_LIQUID_LAYOUT`` (read at each forward),
    "tiles" (unset: the default) or "rows" (the row slabs: one barrier a sub-step; opt-in until a GPU measures
    it); anything else is an error."""
    asked = os.environ.get(LAYOUT_ENV, "").strip().lower() or "tiles"
    if asked not in ("tiles", "rows"):
        raise ValueError(f"${LAYOUT_ENV}: expected tiles or rows, got {asked!r}")
    return asked


def row_slabs(hidden: int, batch: int, schedule: str, device: torch.device) -> tuple[int, int] | None:
    """(BJ, RS) of the row slabs: BJ presynaptic neurons a program, RS batch rows a slab. Grid: ⌈m/BJ⌉ ⌈B/RS⌉
    programs, at most the multiprocessors, with the fewest rows a slab that fit (None where not even one row does);
    under Triton's interpreter, whose programs run one after another, one j-tile (each slab's group one program).
    Stepwise: :data:`SLAB_BJ` × :data:`SLAB_ROWS_STEPWISE`."""
    if schedule != "grid":
        return SLAB_BJ, SLAB_ROWS_STEPWISE
    if grid.interpreting():
        return max(4, triton.next_power_of_2(hidden)), 16
    return slab_shape(hidden, batch, torch.cuda.get_device_properties(device).multi_processor_count)


def slab_shape(hidden: int, batch: int, slots: int) -> tuple[int, int] | None:
    """(BJ, RS) of the grid's row slabs for ``slots`` programs at once, None where not even one row a slab fits."""
    bj = SLAB_BJ if hidden <= 128 else 2 * SLAB_BJ
    slabs = slots // triton.cdiv(hidden, bj)
    return (bj, triton.cdiv(batch, slabs)) if slabs > 0 else None


def slab_chunks(BJ: int, H: int, RS: int) -> tuple[int, int, int]:
    """(HB, RC, RE): the synapse phase's blocks of (BJ, RC rows, HB neurons i) openings, about 32 a thread (64
    spilled at (1024, ·, 256) in sm_90 PTX), and the element phase's (RE rows, BJ) blocks, a thread an element."""
    HB = min(128, max(4, triton.next_power_of_2(H)))
    most = max(1, triton.next_power_of_2(RS))
    return HB, min(most, max(1, THREADS * 32 // (BJ * HB))), min(most, max(1, THREADS // BJ))


@triton.jit
def _slab_synapses(TABLE, REF, n, slab, jt, B, T, H, RS, MODE: tl.constexpr, BJ: tl.constexpr, HB: tl.constexpr,
                   RC: tl.constexpr):
    """The synapse phase of sub-step n on the slab's rows and j-tile jt: P[n % 2, jt, c, rows, i] = Σ_{j∈jt}
    (g_ji, k_ji) σ(a_ji h_j + b_ji) and, LRC, Σ_j O_h[j, i] h_j (c = 0, 1, 2) for every neuron i, h = h_{n−1}:
    (BJ, RC, HB) openings summed over their first axis, in each thread."""
    FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, S, P = _tensors(TABLE, REF)
    js = jt * BJ + tl.arange(0, BJ)
    jm = js < H
    r_lo = slab * RS
    r_hi = tl.minimum(r_lo + RS, B)
    part = P + ((n % 2) * tl.cdiv(H, BJ) + jt) * 3 * B * H
    for i0 in range(0, H, HB):
        cols = i0 + tl.arange(0, HB)
        cm = cols < H
        g, a, b, k, oh = _synapse_blocks(GS, AS, BS, KS, OH, js[:, None] * H + cols[None, :],
                                         jm[:, None] & cm[None, :], MODE)
        _partial_rows(S, part, js, jm, cols, cm, g, a, b, k, oh, n, r_lo, r_hi, B, T, H, MODE, RC)


@triton.jit
def _slab_neurons(EL, KSH, slab, jt, B, H, RS, BJ: tl.constexpr):
    """j-tile jt's neurons i, their mask, e_l and shift as (1, BJ) rows, and the slab's rows r_lo … r_hi − 1."""
    i = jt * BJ + tl.arange(0, BJ)
    im = i < H
    el = tl.load(EL + i, mask=im, other=0.0)[None, :]
    shift = tl.load(KSH + i, mask=im, other=0.0)[None, :]
    r_lo = slab * RS
    return i, im, el, shift, r_lo, tl.minimum(r_lo + RS, B)


@triton.jit
def _slab_elements(TABLE, REF, n, slab, jt, B, T, H, RS, MODE: tl.constexpr, BJ: tl.constexpr, L: tl.constexpr,
                   RE: tl.constexpr, GAPS: tl.constexpr, STORED: tl.constexpr):
    """The element phase of sub-step n on the slab's rows at j-tile jt's neurons: h_n from h_{n−1} and the
    conductances, the input ones plus every j-tile's partials of P[n % 2] (with STORED also into CS, the table's
    entry 14, as :func:`_update_elements` stores them); HS (entry 13) read with GAPS."""
    FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, S, P = _tensors(TABLE, REF)
    dt = tl.load(C)
    i, im, el, shift, r_lo, r_hi = _slab_neurons(EL, KSH, slab, jt, B, H, RS, BJ)
    sS = (T + 1) * H
    part = P + (n % 2) * tl.cdiv(H, BJ) * 3 * B * H
    for r0 in range(r_lo, r_hi, RE):
        rows = (r0 + tl.arange(0, RE)).to(tl.int64)
        rm = rows < r_hi
        em = rm[:, None] & im[None, :]
        io = rows[:, None] * (T // L) * H + ((n - 1) // L) * H + i[None, :]
        f, u, w = _element_conductances(FIN, UIN, WIN, part, io, rows[:, None] * H + i[None, :], io, em, B, T, H,
                                        MODE, BJ, False)
        h = tl.load(S + rows[:, None] * sS + (n - 1) * H + i[None, :], mask=em, other=0.0)
        if GAPS:
            delta = tl.load(address(TABLE, 13, REF) + rows * (T // L) + (n - 1) // L, mask=rm, other=0.0)[:, None]
        else:
            delta = dt
        tl.store(S + rows[:, None] * sS + n * H + i[None, :], _update(h, f, u, w, el, shift, delta, MODE), mask=em)
        if STORED:
            _store_conductances(address(TABLE, 14, REF), rows[:, None] * T * H + (n - 1) * H + i[None, :], f, u, w,
                                em, B, T, H, MODE)


@triton.jit
def _slab_grid(TABLE, REF, SYNC, B, T, H, RS, MODE: tl.constexpr, BJ: tl.constexpr, HB: tl.constexpr,
               RC: tl.constexpr, L: tl.constexpr, RE: tl.constexpr, LIMIT: tl.constexpr, GAPS: tl.constexpr,
               STORED: tl.constexpr):
    """The row slabs' grid-synchronised forward: program (slab, j-tile), sub-steps 1 … T, each a synapse phase, a
    barrier of the slab's programs (counter ``slab``) and an element phase."""
    slab = tl.program_id(0)
    jt = tl.program_id(1)
    k = 0
    spins = LIMIT
    for n in range(1, T + 1):
        _slab_synapses(TABLE, REF, n, slab, jt, B, T, H, RS, MODE, BJ, HB, RC)
        k, spins = grid.barrier(SYNC, k, spins)
        _slab_elements(TABLE, REF, n, slab, jt, B, T, H, RS, MODE, BJ, L, RE, GAPS, STORED)
        tl.debug_barrier()  # the states just written are the next synapse phase's, read by other threads


@triton.jit(do_not_specialize=["n"])
def _slab_step(TABLE, REF, n, B, T, H, RS, PHASE: tl.constexpr, MODE: tl.constexpr, BJ: tl.constexpr,
               HB: tl.constexpr, RC: tl.constexpr, L: tl.constexpr, RE: tl.constexpr, GAPS: tl.constexpr,
               STORED: tl.constexpr):
    """Stepwise: phase PHASE (0 the synapses, 1 the elements) of sub-step n on program (slab, j-tile)."""
    if PHASE == 0:
        _slab_synapses(TABLE, REF, n, tl.program_id(0), tl.program_id(1), B, T, H, RS, MODE, BJ, HB, RC)
    else:
        _slab_elements(TABLE, REF, n, tl.program_id(0), tl.program_id(1), B, T, H, RS, MODE, BJ, L, RE, GAPS, STORED)


@triton.jit
def _slab_adjoint_elements(TABLE, REF, n, slab, jt, B, T, H, RS, MODE: tl.constexpr, BJ: tl.constexpr,
                           L: tl.constexpr, RE: tl.constexpr, GAPS: tl.constexpr, DHS: tl.constexpr,
                           STORED: tl.constexpr):
    """Backward element phase of sub-step n on the slab's rows at j-tile jt's neurons: from λ_n (LAM), the adjoint
    of the update -- ∂L/∂f, ∂L/∂u into FU[n % 2] and the sample's GF, GU, ∂L/∂w into GW (LRC), the e_l and shift
    terms into AE, with DHS λ_n ∂h_n/∂δ into DE -- and λ_{n−1}'s direct part into LAM; the conductances of
    sub-step n summed from P[n % 2] as the forward's element phase does, or with STORED read from P = CS."""
    FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, S, P = _tensors(TABLE, REF)
    GO, GF, GU, GW, LAM, FU, AE, ACC = _slab_gradients(TABLE, REF)
    DE = REF
    if DHS:
        DE = address(TABLE, 22, REF)
    dt = tl.load(C)
    i, im, el, shift, r_lo, r_hi = _slab_neurons(EL, KSH, slab, jt, B, H, RS, BJ)
    sS = (T + 1) * H
    part = P + (n % 2) * tl.cdiv(H, BJ) * 3 * B * H
    fu = FU + (n % 2) * 2 * B * H
    for r0 in range(r_lo, r_hi, RE):
        rows = (r0 + tl.arange(0, RE)).to(tl.int64)
        rm = rows < r_hi
        em = rm[:, None] & im[None, :]
        io = rows[:, None] * (T // L) * H + ((n - 1) // L) * H + i[None, :]
        e = rows[:, None] * H + i[None, :]
        f, u, w = _element_conductances(FIN, UIN, WIN, P if STORED else part, io, e,
                                        rows[:, None] * T * H + (n - 1) * H + i[None, :], em, B, T, H, MODE, BJ,
                                        STORED)
        h = tl.load(S + rows[:, None] * sS + (n - 1) * H + i[None, :], mask=em, other=0.0)
        hn = tl.load(S + rows[:, None] * sS + n * H + i[None, :], mask=em, other=0.0)
        if GAPS:
            delta = tl.load(address(TABLE, 21, REF) + rows * (T // L) + (n - 1) // L, mask=rm, other=0.0)[:, None]
        else:
            delta = dt
        lam = tl.load(LAM + e, mask=em, other=0.0)
        _element_adjoint(lam, h, hn, f, u, w, el, shift, delta, fu, LAM, GF, GU, GW, AE, DE, e, io,
                         rows[:, None] * T * H + (n - 1) * H + i[None, :], em, B, H, MODE, DHS)


@triton.jit
def _slab_adjoint_synapses(TABLE, REF, n, slab, jt, d_g, d_k, d_a, d_b, B, T, H, RS, MODE: tl.constexpr,
                           BJ: tl.constexpr, HB: tl.constexpr, RD: tl.constexpr, L: tl.constexpr,
                           KEEP: tl.constexpr):
    """Backward synapse phase of sub-step n on the slab's rows and j-tile jt: λ_{n−1, j} (LAM, holding its direct
    part) += Σ_i ∂L/∂o_ji o_ji (1 − o_ji) a_ji with ∂L/∂o_ji = ∂L/∂f_i g_ji + ∂L/∂u_i k_ji (FU[n % 2], every i;
    + Σ_i ∂L/∂w_i O_h[j, i], LRC) and the output gradient where h_{n−1} is an output, o from h_{n−1}; (BJ, RD, HB)
    openings, the sums over i across threads. The parameter sums (g, k, a, b): with KEEP (one block of neurons i)
    returned, in registers for the whole backward; else added to ACC[slab] block by block."""
    FIN, UIN, WIN, GS, AS, BS, KS, EL, OH, KSH, C, S, P = _tensors(TABLE, REF)
    GO, GF, GU, GW, LAM, FU, AE, ACC = _slab_gradients(TABLE, REF)
    js = jt * BJ + tl.arange(0, BJ)
    jm = js < H
    sS = (T + 1) * H
    r_lo = slab * RS
    r_hi = tl.minimum(r_lo + RS, B)
    fu = FU + (n % 2) * 2 * B * H
    for r0 in range(r_lo, r_hi, RD):
        rows = (r0 + tl.arange(0, RD)).to(tl.int64)
        rm = rows < r_hi
        h = tl.load(S + (n - 1) * H + rows[None, :] * sS + js[:, None], mask=jm[:, None] & rm[None, :],
                    other=0.0)[:, :, None]
        ly = tl.zeros((BJ, RD), dtype=h.dtype)
        for i0 in range(0, H, HB):
            cols = i0 + tl.arange(0, HB)
            cm = cols < H
            pm = jm[:, None] & cm[None, :]
            g, a, b, k, oh = _synapse_blocks(GS, AS, BS, KS, OH, js[:, None] * H + cols[None, :], pm, MODE)
            em = rm[:, None] & cm[None, :]
            e = rows[:, None] * H + cols[None, :]
            lf = tl.load(fu + e, mask=em, other=0.0)[None, :, :]
            lu = tl.load(fu + B * H + e, mask=em, other=0.0)[None, :, :]
            o = sigmoid(a * h + b)
            ds = (lf * g + lu * k) * o * (1.0 - o)
            ly += tl.sum(ds * a, axis=2)
            if MODE >= 2:
                gw = tl.load(GW + rows[:, None] * T * H + (n - 1) * H + cols[None, :], mask=em, other=0.0)
                ly += tl.sum(gw[None, :, :] * oh, axis=2)
            if KEEP:
                d_g += lf * o
                d_k += lu * o
                d_a += ds * h
                d_b += ds
            else:
                acc = ACC + slab * 4 * H * H + js[:, None] * H + cols[None, :]
                tl.store(acc, tl.load(acc, mask=pm, other=0.0) + tl.sum(lf * o, axis=1), mask=pm)
                tl.store(acc + H * H, tl.load(acc + H * H, mask=pm, other=0.0) + tl.sum(lu * o, axis=1), mask=pm)
                tl.store(acc + 2 * H * H, tl.load(acc + 2 * H * H, mask=pm, other=0.0) + tl.sum(ds * h, axis=1),
                         mask=pm)
                tl.store(acc + 3 * H * H, tl.load(acc + 3 * H * H, mask=pm, other=0.0) + tl.sum(ds, axis=1),
                         mask=pm)
        out = (n - 1) // L - 1  # h_{n−1} is output `out` where n − 1 is a positive multiple of L
        is_out = (js * 0 + (n - 1) % L == 0) & (js * 0 + out >= 0)
        lm = jm[:, None] & rm[None, :]
        ly += tl.load(GO + rows[None, :] * (T // L) * H + out * H + js[:, None], mask=lm & is_out[:, None],
                      other=0.0)
        lo = LAM + rows[None, :] * H + js[:, None]
        tl.store(lo, tl.load(lo, mask=lm, other=0.0) + ly, mask=lm)
    return d_g, d_k, d_a, d_b


@triton.jit
def _slab_gradients(TABLE, REF):
    """The row slabs' backward entries of the table: [GO, GF, GU, GW, LAM, FU, AE, ACC] (13 … 20)."""
    return (address(TABLE, 13, REF), address(TABLE, 14, REF), address(TABLE, 15, REF), address(TABLE, 16, REF),
            address(TABLE, 17, REF), address(TABLE, 18, REF), address(TABLE, 19, REF), address(TABLE, 20, REF))


@triton.jit
def _slab_parameter_sums(TABLE, REF, slab, jt, d_g, d_k, d_a, d_b, H, BJ: tl.constexpr, HB: tl.constexpr):
    """ACC[slab, q, j, i] = the registers' parameter sums (g, k, a, b) over their rows (KEEP)."""
    js = jt * BJ + tl.arange(0, BJ)
    cols = tl.arange(0, HB)
    pm = (js < H)[:, None] & (cols < H)[None, :]
    acc = address(TABLE, 20, REF) + slab * 4 * H * H + js[:, None] * H + cols[None, :]
    tl.store(acc, tl.sum(d_g, axis=1), mask=pm)
    tl.store(acc + H * H, tl.sum(d_k, axis=1), mask=pm)
    tl.store(acc + 2 * H * H, tl.sum(d_a, axis=1), mask=pm)
    tl.store(acc + 3 * H * H, tl.sum(d_b, axis=1), mask=pm)


@triton.jit
def _slab_backward_grid(TABLE, REF, SYNC, B, T, H, RS, MODE: tl.constexpr, BJ: tl.constexpr, HB: tl.constexpr,
                        RC: tl.constexpr, RD: tl.constexpr, L: tl.constexpr, RE: tl.constexpr, LIMIT: tl.constexpr,
                        GAPS: tl.constexpr, DHS: tl.constexpr, STORED: tl.constexpr, KEEP: tl.constexpr):
    """The row slabs' grid-synchronised backward: program (slab, j-tile), sub-steps T … 1, each the element phase
    of n and (but with STORED) the partial conductances of n − 1, a barrier of the slab's programs, and the
    synapse phase of n; sub-step T's partial conductances first (one barrier more)."""
    slab = tl.program_id(0)
    jt = tl.program_id(1)
    k = 0
    spins = LIMIT
    z = tl.zeros((BJ, RD, HB), dtype=REF.dtype.element_ty)
    d_g, d_k, d_a, d_b = z, z, z, z
    if not STORED:
        _slab_synapses(TABLE, REF, T, slab, jt, B, T, H, RS, MODE, BJ, HB, RC)
        k, spins = grid.barrier(SYNC, k, spins)
    for q in range(0, T):
        n = T - q
        _slab_adjoint_elements(TABLE, REF, n, slab, jt, B, T, H, RS, MODE, BJ, L, RE, GAPS, DHS, STORED)
        if not STORED:
            if n >= 2:
                _slab_synapses(TABLE, REF, n - 1, slab, jt, B, T, H, RS, MODE, BJ, HB, RC)
        k, spins = grid.barrier(SYNC, k, spins)
        d_g, d_k, d_a, d_b = _slab_adjoint_synapses(TABLE, REF, n, slab, jt, d_g, d_k, d_a, d_b, B, T, H, RS, MODE,
                                                    BJ, HB, RD, L, KEEP)
        tl.debug_barrier()  # λ's rows just written are the next element phase's, read by other threads
    if KEEP:
        _slab_parameter_sums(TABLE, REF, slab, jt, d_g, d_k, d_a, d_b, H, BJ, HB)


@triton.jit(do_not_specialize=["n"])
def _slab_backward_step(TABLE, REF, n, B, T, H, RS, PHASE: tl.constexpr, MODE: tl.constexpr, BJ: tl.constexpr,
                        HB: tl.constexpr, RC: tl.constexpr, RD: tl.constexpr, L: tl.constexpr, RE: tl.constexpr,
                        GAPS: tl.constexpr, DHS: tl.constexpr, STORED: tl.constexpr):
    """Stepwise backward on program (slab, j-tile): PHASE 0 the partial conductances of sub-step n (the first
    launch, n = T), 1 the element phase of n and the partial conductances of n − 1, 2 the synapse phase of n (the
    parameter sums added to ACC[slab])."""
    slab = tl.program_id(0)
    jt = tl.program_id(1)
    if PHASE == 0:
        _slab_synapses(TABLE, REF, n, slab, jt, B, T, H, RS, MODE, BJ, HB, RC)
    elif PHASE == 1:
        _slab_adjoint_elements(TABLE, REF, n, slab, jt, B, T, H, RS, MODE, BJ, L, RE, GAPS, DHS, STORED)
        if not STORED:
            if n >= 2:
                _slab_synapses(TABLE, REF, n - 1, slab, jt, B, T, H, RS, MODE, BJ, HB, RC)
    else:
        z = tl.zeros((BJ, RD, HB), dtype=REF.dtype.element_ty)
        _slab_adjoint_synapses(TABLE, REF, n, slab, jt, z, z, z, z, B, T, H, RS, MODE, BJ, HB, RD, L, False)


def _launch_slabs(tensors, backward: bool, B: int, TS: int, H: int, slabs: tuple[int, int], mode: int,
                  unfolds: int, schedule: str, gaps: bool, stored: bool, dhs: bool = False) -> None:
    """The row slabs over every sub-step: "grid" one launch (:func:`_slab_grid`, :func:`_slab_backward_grid`),
    "stepwise" a launch per phase, recorded as a CUDA graph. Forward, tensors: the forward's table with its P (2,
    ⌈m/BJ⌉, 3, B, m), then HS (13) and, stored, CS (14); backward: its first 12, P (or CS, stored), then [GO, GF,
    GU, GW, LAM, FU, AE, ACC] (13 … 20), HS (21) and, with ``dhs``, DE (22)."""
    BJ, RS = slabs
    HB, RC, RE = slab_chunks(BJ, H, RS)
    RD = min(max(1, triton.next_power_of_2(RS)), max(1, THREADS * 8 // (BJ * HB)))  # the backward's openings rows
    programs = (triton.cdiv(B, RS), triton.cdiv(H, BJ))
    meta = dict(MODE=mode, BJ=BJ, HB=HB, RC=RC, L=unfolds, RE=RE, GAPS=gaps, STORED=stored)
    if backward:
        meta.update(RD=RD, DHS=dhs)
    ref = tensors[10]
    if schedule == "grid":
        sync = grid.counters(B, RS, ref.device)
        kernel = _slab_backward_grid if backward else _slab_grid
        extra = dict(KEEP=H <= HB) if backward else {}
        kernel[programs](device_table(tensors), ref, sync, B, TS, H, RS, LIMIT=grid.SPIN_LIMIT,
                         num_warps=THREADS // 32, **meta, **extra)
        grid.check(sync)
        return

    def launch(table) -> None:
        if not backward:
            for n in range(1, TS + 1):
                for phase in (0, 1):
                    _slab_step[programs](table, ref, n, B, TS, H, RS, PHASE=phase, num_warps=THREADS // 32, **meta)
            return
        if not stored:
            _slab_backward_step[programs](table, ref, TS, B, TS, H, RS, PHASE=0, num_warps=THREADS // 32, **meta)
        for n in range(TS, 0, -1):
            for phase in (1, 2):
                _slab_backward_step[programs](table, ref, n, B, TS, H, RS, PHASE=phase, num_warps=THREADS // 32,
                                              **meta)

    launch.key = ("liquid-slabs", backward, B, TS, H, slabs, mode, unfolds, gaps, stored, dhs, ref.dtype,
                  ref.device)
    launch_steps(tensors, launch)


def liquid_schedule(schedule: str | None, x: torch.Tensor, hidden: int, block_h: int | None) -> str:
    """The schedule the liquid kernels run: "persistent" up to hidden :data:`RESIDENT_H` (the register-resident
    kernels) unless ``block_h`` is given, and where the chosen schedule (``stepwise.chosen_schedule``) is that one;
    otherwise "grid" where it was chosen, its synapse tiles fit at once (:func:`synapse_tiles`) and no grid barrier
    failed on the device, else "stepwise"."""
    chosen = chosen_schedule(schedule, x.device)
    if chosen == "persistent" or resident(hidden, block_h):
        return "persistent"
    if chosen == "grid" and not grid.retired(x.device) and synapse_tiles(hidden, "grid", x.device) is not None:
        return "grid"
    return "stepwise"


INPUT_ROWS = 16  # rows of x a block (both kernels)
INPUT_COLUMNS = 64  # postsynaptic neurons a block (both kernels)


@triton.jit
def _input_forward(X, A, BS, G, K, GL, FIN, UIN, R, N, M, J0, BR: tl.constexpr, BM: tl.constexpr):
    """f_in, u_in (eq. 1 over the inputs j, then + g_l) of rows r0 : r0 + BR of x (R, N), a column block at a
    time, the synapses of input j in row J0 + j of A, BS, G, K ((J0 + N) × M); the openings stay in registers."""
    rows = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)
    rmask = rows < R
    for c0 in range(0, M, BM):
        cols = c0 + tl.arange(0, BM)
        cmask = cols < M
        f = tl.zeros((BR, BM), dtype=FIN.dtype.element_ty)
        u = tl.zeros((BR, BM), dtype=FIN.dtype.element_ty)
        for j in range(0, N):
            x = tl.load(X + rows * N + j, mask=rmask, other=0.0)
            synapses = (J0 + j) * M + cols
            a = tl.load(A + synapses, mask=cmask, other=0.0)
            b = tl.load(BS + synapses, mask=cmask, other=0.0)
            opening = sigmoid(a[None, :] * x[:, None] + b[None, :])
            f += tl.load(G + synapses, mask=cmask, other=0.0)[None, :] * opening
            u += tl.load(K + synapses, mask=cmask, other=0.0)[None, :] * opening
        leak = tl.load(GL + cols, mask=cmask, other=0.0)[None, :]
        at = rows[:, None] * M + cols[None, :]
        m = rmask[:, None] & cmask[None, :]
        tl.store(FIN + at, f + leak, mask=m)
        tl.store(UIN + at, u + leak, mask=m)


@triton.jit
def _input_backward(X, A, BS, G, K, DF, DU, DX, P, R, N, M, J0, BR: tl.constexpr, BM: tl.constexpr):
    """Program (group, j) of input j, over rows group·BR, (group + groups)·BR, …: ∂L/∂x_j of those rows, Σ_i
    ∂L/∂(a_ji x_j + b_ji) a_ji, and the group's sums over its rows of ∂L/∂(g, k, a, b)_ji into P[group, q·N + j]
    (q = 0 … 3) and, for j = 0, of ∂L/∂g_l = Σ (∂L/∂f_in + ∂L/∂u_in) into P[group, 4N]; a column block at a time."""
    group, j, groups = tl.program_id(0), tl.program_id(1), tl.num_programs(0)
    out = P + group * (4 * N + 1) * M
    for c0 in range(0, M, BM):
        cols = c0 + tl.arange(0, BM)
        cmask = cols < M
        synapses = (J0 + j) * M + cols
        a = tl.load(A + synapses, mask=cmask, other=0.0)[None, :]
        b = tl.load(BS + synapses, mask=cmask, other=0.0)[None, :]
        g = tl.load(G + synapses, mask=cmask, other=0.0)[None, :]
        k = tl.load(K + synapses, mask=cmask, other=0.0)[None, :]
        zero = tl.zeros((BR, BM), dtype=DX.dtype.element_ty)
        d_g, d_k, d_a, d_b, d_leak = zero, zero, zero, zero, zero
        tl.debug_barrier()  # the previous column block's ∂L/∂x stores, read back below by other threads of the program
        for r0 in range(group * BR, R, groups * BR):
            rows = (r0 + tl.arange(0, BR)).to(tl.int64)
            rmask = rows < R
            at = rows[:, None] * M + cols[None, :]
            m = rmask[:, None] & cmask[None, :]
            x = tl.load(X + rows * N + j, mask=rmask, other=0.0)
            df = tl.load(DF + at, mask=m, other=0.0)
            du = tl.load(DU + at, mask=m, other=0.0)
            opening = sigmoid(a * x[:, None] + b)
            d_pre = (df * g + du * k) * opening * (1.0 - opening)
            d_g += df * opening
            d_k += du * opening
            d_a += d_pre * x[:, None]
            d_b += d_pre
            d_leak += df + du
            d_x = tl.sum(d_pre * a, 1)
            if c0 > 0:
                d_x += tl.load(DX + rows * N + j, mask=rmask, other=0.0)
            tl.store(DX + rows * N + j, d_x, mask=rmask)
        tl.store(out + j * M + cols, tl.sum(d_g, 0), mask=cmask)
        tl.store(out + (N + j) * M + cols, tl.sum(d_k, 0), mask=cmask)
        tl.store(out + (2 * N + j) * M + cols, tl.sum(d_a, 0), mask=cmask)
        tl.store(out + (3 * N + j) * M + cols, tl.sum(d_b, 0), mask=cmask)
        if j == 0:
            tl.store(out + 4 * N * M + cols, tl.sum(d_leak, 0), mask=cmask)


def input_groups(rows: int, inputs: int, device: torch.device) -> int:
    """Row groups of :func:`_input_backward` (programs: groups × inputs): about four programs a multiprocessor
    on CUDA (two elsewhere), at most one a block of rows."""
    slots = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2
    return max(1, min(triton.cdiv(4 * slots, inputs), triton.cdiv(rows, INPUT_ROWS)))


def input_conductances(x, a, b, g, k, g_leak):
    """(f_in, u_in), each (R, m): eq. 1's input synapses and the leak, f_in = Σ_j g_ji σ(a_ji x_j + b_ji) + g_l
    (u_in with k), for x (R, n) and the synapse matrices a, b, g, k ((m + n) × m, contiguous: the inputs' rows
    last), one launch; the openings σ(·) (R × n × m) are never stored."""
    (R, N), M = x.shape, a.shape[1]
    f, u = x.new_empty(R, M), x.new_empty(R, M)
    _input_forward[(triton.cdiv(R, INPUT_ROWS),)](x, a, b, g, k, g_leak, f, u, R, N, M, a.shape[0] - N,
                                                   BR=INPUT_ROWS, BM=INPUT_COLUMNS)
    return f, u


def input_gradients(x, a, b, g, k, grad_f, grad_u, d_synapses):
    """The backward of :func:`input_conductances` for ∂L/∂f_in, ∂L/∂u_in (R, m), one launch (the openings
    recomputed): returns (∂L/∂x, ∂L/∂g_l) and writes ∂L/∂(g, k, a, b) of the inputs' rows into the last n rows of
    ``d_synapses`` ((4, m + n, m)), summed over :func:`input_groups` row groups in torch."""
    (R, N), M = x.shape, a.shape[1]
    if N == 0:
        return torch.empty_like(x), grad_f.sum(0) + grad_u.sum(0)
    groups = input_groups(R, N, x.device)
    d_x = torch.empty_like(x)
    sums = x.new_empty(groups, 4 * N + 1, M)
    _input_backward[(groups, N)](x, a, b, g, k, grad_f, grad_u, d_x, sums, R, N, M, a.shape[0] - N, BR=INPUT_ROWS,
                                 BM=INPUT_COLUMNS)
    torch.sum(sums[:, :4 * N].view(groups, 4, N, M), 0, out=d_synapses[:, M:])
    return d_x, sums[:, 4 * N].sum(0)


class LiquidSequence(torch.autograd.Function):
    """``apply(x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, h0, dt, hs, unfolds, mode, block_h, train,
    schedule) -> (states, h_T)``: x (B, T, n) the inputs, w_in (B, T, H) the input part of w (LRC; None otherwise),
    g, a, b, k the synapses ((H + n) × H: the neurons' rows, then the inputs'), their input rows summed once a sample
    with the leak g_leak (:func:`input_conductances`); ``unfolds`` sub-steps of ``dt`` per sample -- or, hs (B, T)
    not None, of hs[b, t] (each sample's gap / unfolds; its gradient where it requires one, from every schedule's
    backward) --, states those at the samples' ends; ``train``: whether autograd records the call. One Function for
    both kinds of synapse: each parameter's gradient is written whole (no slices of it added up by autograd).

    With ``ODELAB_GRID_GATES=stored`` (``grid.stored_gates``) the synapse-tile schedules' forward stores every
    sub-step's conductances (f, u; LRC also w) for the backward, whose synapse phases then compute each opening once
    a sub-step instead of twice (the same bits); saved in place of the inputs' conductances: LRC with one sub-step a
    sample saves as much as without, LTC and STC 2 (L − 1) more (B, T, H) sequences for L sub-steps a sample."""

    @staticmethod
    def forward(ctx, x, w_in, g, a, b, k, g_leak, e_leak, o_hidden, shift, h0, dt, hs, unfolds, mode, block_h,
                train=False, schedule="persistent"):
        ctx.precision = dot_precision(x.dtype)  # fixed at the forward: the backward recomputes with it
        (B, T, n), H = x.shape, h0.shape[1]
        TS = T * unfolds
        like = h0
        x, g, a, b, k, g_leak, e_leak = (t.contiguous() for t in (x, g, a, b, k, g_leak, e_leak))
        f_in, u_in = (c.view(B, T, H) for c in input_conductances(x.view(B * T, n), a, b, g, k, g_leak))
        w_in = like.new_zeros(1) if w_in is None else w_in.contiguous()
        o_hidden = like.new_zeros(1) if o_hidden is None else o_hidden.contiguous()
        shift = like.new_zeros(H) if shift is None else shift.contiguous()
        S = like.new_empty(B, TS + 1, H)
        S[:, 0] = h0
        consts = on_device([dt], like.dtype, like.device)
        gaps = hs is not None
        hs = hs if gaps else consts  # read only with GAPS
        tensors = [f_in, u_in, w_in, g, a, b, k, e_leak, o_hidden, shift, consts, S]
        BB = None  # the persistent kernels' rows a program (the backward's too)
        ctx.stored, ctx.slabs = False, None
        if schedule in ("grid", "stepwise"):
            ctx.stored = grid.stored_gates(train and any(ctx.needs_input_grad))
            CS = [like.new_empty(3 if mode >= LRC_ASYMMETRIC else 2, B, TS, H)] if ctx.stored else []
            slabs = ctx.slabs = row_slabs(H, B, schedule, like.device) if liquid_layout() == "rows" else None
            if slabs is not None:  # P: every j-tile's partial conductances, of sub-steps of either parity
                P = like.new_empty(2, triton.cdiv(H, slabs[0]), 3, B, H)
                _launch_slabs([*tensors, P, hs, *CS], False, B, TS, H, slabs, mode, unfolds, schedule, gaps,
                              ctx.stored)
            else:
                tiles = synapse_tiles(H, schedule, like.device)
                P = like.new_empty(triton.cdiv(H, tiles[0]), 3, B, H)  # the partial conductances of every j-tile
                _launch_phases([*tensors, P, hs, *CS], False, B, TS, H, tiles, mode, unfolds, schedule, gaps,
                               stored=ctx.stored)
            del P
            if ctx.stored:  # the backward reads CS instead of the inputs' conductances
                placeholder = like.new_zeros(1)
                tensors = [placeholder, placeholder, placeholder, *tensors[3:], CS[0]]
        else:
            on_chip = resident(H, block_h)
            BH = block_sizes(B, H, block_h)[1]
            BB = persistent_rows(mode, on_chip)
            forward = _forward_resident if on_chip else _forward
            forward[(triton.cdiv(B, BB),)](*tensors[:-1], hs, S, B, TS, H, BB=BB, BH=BH, PRECISION=ctx.precision,
                                           num_warps=resident_warps(BB) if on_chip else warps(BH), MODE=mode,
                                           BJ=block_j(BH, BB, H), L=unfolds, GAPS=gaps)
        ctx.save_for_backward(*tensors, hs, x)
        ctx.unfolds, ctx.mode, ctx.block_h, ctx.schedule, ctx.rows = unfolds, mode, block_h, schedule, BB
        ctx.gaps = gaps
        return S[:, unfolds::unfolds], S[:, TS].clone()

    @staticmethod
    @kernel_backward("cuda")
    def backward(ctx, grad_hs, grad_h):
        *tensors, hs, x = ctx.saved_tensors
        if ctx.stored:  # [·, ·, ·, g, …, S, CS]: CS takes the phases' P
            *tensors, CS = tensors
        g, a, b, k = tensors[3:7]  # the forward's [f_in, u_in, w_in, g, a, b, k, ...]
        S = tensors[-1]
        B, T, H = S.shape[0], x.shape[1], S.shape[2]
        dhs = S.new_empty(B, T) if ctx.needs_input_grad[12] else None
        GF, GU, GW, AE, ACC, lam0 = LiquidSequence._sweep(ctx, tensors, hs, grad_hs.contiguous(), grad_h, dhs,
                                                          CS if ctx.stored else None)
        d_synapses = S.new_empty(4, *g.shape)  # ∂L/∂(g, k, a, b): the neurons' rows from ACC, the inputs' below
        torch.sum(ACC, 0, out=d_synapses[:, :H])
        d_x, d_g_leak = input_gradients(x.view(B * T, x.shape[2]), a, b, g, k, GF.view(B * T, H), GU.view(B * T, H),
                                        d_synapses)
        del GF, GU
        d_g, d_k, d_a, d_b = d_synapses.unbind(0)
        d_e_leak, d_shift = AE.sum(1).unbind(0)
        lrc, unfolds = ctx.mode >= LRC_ASYMMETRIC, ctx.unfolds
        d_w_in = (GW if unfolds == 1 else GW.view(B, T, unfolds, H).sum(2)) if lrc else None
        d_o_hidden = outer_sum(S[:, :-1], GW) if lrc else None  # Σ h_{n-1,j} ∂L/∂w_{n,i}: [j, i]
        d_shift = d_shift if ctx.mode == LRC_SYMMETRIC else None
        return (d_x.view(x.shape), d_w_in, d_g, d_a, d_b, d_k, d_g_leak, d_e_leak, d_o_hidden, d_shift, lam0,
                None, dhs, None, None, None, None, None)

    @staticmethod
    def _sweep(ctx, tensors, hs, grad_hs, grad_h, dhs, CS=None):
        """The kernels' backward over the sub-steps T … 1: (∂L/∂f_in, ∂L/∂u_in, ∂L/∂w (LRC), the e_l and shift
        sums, the neurons' synapse gradient sums ACC (slots, 4, H, H), λ_0), and into ``dhs`` (B, T) where it is
        not None the sub-step lengths' gradient; CS: the conductances the forward stored (or None); the phase
        buffers end with the call."""
        S = tensors[-1]
        unfolds, mode = ctx.unfolds, ctx.mode
        B, TS, H = S.shape[0], S.shape[1] - 1, S.shape[2]
        T = TS // unfolds
        GF, GU = S.new_zeros(B, T, H), S.new_zeros(B, T, H)
        GW = S.new_zeros(B, TS, H) if mode >= LRC_ASYMMETRIC else S.new_zeros(1)
        AE = S.new_zeros(2, B, H)
        if ctx.slabs is not None:  # the row slabs: λ of the slab's rows in one buffer, ∂L/∂(f, u) of either parity
            LAM = (grad_h + grad_hs[:, T - 1]).contiguous()  # λ at the last sub-step in, λ_0 out
            P = S.new_empty(2, triton.cdiv(H, ctx.slabs[0]), 3, B, H) if CS is None else CS
            ACC = S.new_zeros(triton.cdiv(B, ctx.slabs[1]), 4, H, H)
            grads = [grad_hs, GF, GU, GW, LAM, S.new_empty(2, 2, B, H), AE, ACC]
            DE = [] if dhs is None else [torch.zeros_like(GF)]
            _launch_slabs([*tensors, P, *grads, hs, *DE], True, B, TS, H, ctx.slabs, mode, unfolds, ctx.schedule,
                          ctx.gaps, CS is not None, dhs is not None)
            if dhs is not None:
                torch.sum(DE[0], 2, out=dhs)
            return GF, GU, GW, AE, ACC, LAM
        if ctx.schedule in ("grid", "stepwise"):
            tiles = synapse_tiles(H, ctx.schedule, S.device)
            slots = 1 if ctx.schedule == "grid" else triton.cdiv(B, slab_rows(*tiles, B))
            LAM = grad_h + grad_hs[:, T - 1]  # λ at the last sub-step in, λ_0 out
            P = S.new_empty(triton.cdiv(H, tiles[0]), 3, B, H) if CS is None else CS
            LP = S.new_empty(triton.cdiv(H, tiles[1]), B, H)  # the partial adjoints of every i-tile
            ACC = S.new_zeros(slots, 4, H, H)
            grads = [grad_hs, GF, GU, GW, LAM, S.new_empty(B, H), S.new_empty(2, B, H), LP, AE, ACC]
            DE = [] if dhs is None else [torch.zeros_like(GF)]  # λ ∂h/∂δ by element, each sample's sum
            _launch_phases([*tensors, P, *grads, hs, *DE], True, B, TS, H, tiles, mode, unfolds, ctx.schedule,
                           ctx.gaps, dhs is not None, stored=CS is not None)
            if dhs is not None:
                torch.sum(DE[0], 2, out=dhs)
            return GF, GU, GW, AE, ACC, LAM
        BB, BH = ctx.rows, block_sizes(B, H, ctx.block_h)[1]  # the forward's rows a program
        blocks = triton.cdiv(B, BB)
        lam = grad_h + grad_hs[:, T - 1]  # λ at the last sub-step
        ACC = S.new_zeros(blocks, 4, H, H)
        meta = dict(MODE=mode, BJ=block_j(BH, BB, H), L=unfolds, BB=BB, BH=BH, PRECISION=ctx.precision, GAPS=ctx.gaps,
                    DHS=dhs is not None)
        DH = tensors[10] if dhs is None else dhs  # written only with DHS
        if resident(H, ctx.block_h):  # one adjoint buffer: the final state's in, the initial state's out
            grads = [grad_hs, GF, GU, GW, lam, S.new_empty(2, B, H), AE, ACC]
            _backward_resident[(blocks,)](*tensors[:-1], hs, S, *grads, B, TS, H, DH, num_warps=resident_warps(BB),
                                          **meta)
            return GF, GU, GW, AE, ACC, lam
        LAM = S.new_empty(2, B, H)  # λ of sub-steps of either parity
        LAM[TS % 2] = lam
        grads = [grad_hs, GF, GU, GW, LAM, S.new_empty(2, B, H), AE, ACC]
        _backward[(blocks,)](*tensors[:-1], hs, S, *grads, B, TS, H, DH, num_warps=warps(BH), **meta)
        return GF, GU, GW, AE, ACC, LAM[0].clone()


def _run(system, x, state, dt, unfolds, mode, block_h, schedule):
    H = system.hidden_size
    w_in = o_hidden = shift = None
    if mode >= LRC_ASYMMETRIC:  # the input part of w, O_xᵀ x + p (not through encode: no concatenated copy)
        w_in, o_hidden = system.input_drive(x), system.o_hidden
        if mode == LRC_SYMMETRIC:
            shift = F.softplus(system.raw_k_shift)
    chosen = liquid_schedule(schedule, x, H, block_h)
    gaps = is_per_sample(dt)  # per-sample gaps (B, T): each sample's L sub-steps of gap/L
    hs = sample_lengths(dt, unfolds, x.dtype, keep_grad=True) if gaps else None
    states, hT = grid.apply(LiquidSequence, x, w_in, F.softplus(system.raw_g), system.a,
                            system.b, system.k, F.softplus(system.raw_g_leak), system.e_leak, o_hidden, shift,
                            state[0], 0.0 if gaps else float(dt) / unfolds, hs, unfolds, mode, block_h,
                            torch.is_grad_enabled(), chosen)
    return states, (hT,)


@in_chunks
def run_ltc(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """LTC, "imex-implicit" (the ncps fused solver), ``unfolds`` sub-steps per sample; ``dt`` a float, or a (batch,
    time) tensor of each sample's own gap (split into the sub-steps; with its gradient where it requires one, from
    every schedule). ``schedule``: as in :func:`.lem.run`."""
    return _run(system, x, state, dt, unfolds, LTC, block_h, schedule)


@in_chunks
def run_stc(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """STC, "imex-implicit", ``unfolds`` sub-steps per sample; ``dt`` as in :func:`run_ltc`."""
    return _run(system, x, state, dt, unfolds, STC, block_h, schedule)


@in_chunks
def run_lrc(system, x, state, dt, unfolds=1, lags=(), *, block_h=None, schedule=None):
    """LRC (LRCU-A / LRCU-S), "euler" (Farsang et al. 2024, App. A.3.2: a sample's gap as the step); ``dt`` as in
    :func:`run_ltc`."""
    mode = LRC_SYMMETRIC if system.raw_k_shift is not None else LRC_ASYMMETRIC
    return _run(system, x, state, dt, unfolds, mode, block_h, schedule)
