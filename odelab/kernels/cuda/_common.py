"""Shared pieces of the Triton kernels: accurate elementwise functions, the tiled and the register-resident
matrix products, block sizes, and the device check the registry asks for.

Every kernel runs a whole sequence in ONE launch forward and ONE launch backward; the input projection
(``system.encode``) is one GEMM in torch before it (autograd differentiates it), and the recurrent weight
gradients are GEMMs in torch after it, over all steps at once (dW = Σ_n g_nᵀ s_{n−1}) from the per-step
pre-activation gradients g_n the backward kernel writes.

Grid: a program owns ``BB`` = 16 batch rows for the whole sequence (⌈B/16⌉ programs; ``tl.dot`` needs
blocks ≥ 16, rows and hidden columns beyond the sizes are masked and padded with zeros). What is stored for
the backward: the states of every step, ``(batch, T + 1, hidden)`` per block (index 0 = the initial state;
they are also the outputs), nothing else; the backward recomputes the gates from them.

Two variants per dense cell:

* **register-resident** (hidden ≤ ``MAX_RESIDENT`` = 32, the default there): the H × H weights (both
  orientations in the backward) and the state/adjoint stay on chip for the whole sequence, one (16, BH) tile
  per block; a step loads its encoded input, does its ``tl.dot``s and writes its state. sm_90 (ptxas):
  40–110 registers, no spills (BH = 16 with 4 warps, 32 with 8).
* **tiled** (larger hidden, or ``block_h`` given): a step reads the previous state from the state buffer in
  ``BH``-wide tiles (BH = 16 or 32) and multiplies it with BH × BH weight tiles streamed from L2
  (:func:`mv`); any hidden size runs. Phases of a step that need a full row of the previous phase (LEM's y
  after z, the adjoint after the pre-activation gradients) are separated by ``tl.debug_barrier()`` (a CTA
  barrier; the CTA's global writes are visible after it). 150–185 registers with 8 warps at BH = 32, no spills
  (64-wide tiles spill: not used).

Dots are fp64, or fp32 in IEEE precision -- or in TF32 (10-bit mantissas in, fp32 sums) where torch's own float32
matmuls may use it (``torch.set_float32_matmul_precision("high")``, ``torch.backends.cuda.matmul.fp32_precision =
"tf32"``), or as three TF32 products ("tf32x3", float32 accuracy on tensor cores) or of bfloat16-rounded operands
("bf16") with ``ODELAB_FLOAT32_PRODUCTS``: :func:`dot_precision`, read when a sequence's forward runs and kept for its
backward. Scalars (Δt, γ, ε, α, β) are read from a small tensor of
the computation dtype, so that fp64 runs are fp64 throughout (a Python float argument would be fp32).
"""
from __future__ import annotations

import triton
import triton.language as tl

BLOCK_B = 16  # tl.dot needs M, N, K >= 16
MAX_BLOCK_H = 32  # BH = 64 spills (ptxas, sm_90: 255 registers + stack) in the tiled backward
MAX_RESIDENT = 32  # hidden sizes up to this run the register-resident variant (where a kernel has one)


def available() -> bool:
    """The registry's check (``Implementation.available``): Triton imported (this module did) and a CUDA device,
    or Triton's interpreter (``TRITON_INTERPRET=1``), which runs the kernels anywhere."""
    import os

    import torch

    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def capturing(device) -> bool:
    """Whether work on ``device`` is being recorded into a CUDA graph (e.g. a user's ``torch.cuda.graph``): nothing
    may then be copied from the host or read back, so values enter as kernel arguments."""
    import torch

    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


def filled(values: list, dtype, device):
    """A new tensor on ``device`` holding ``values``, one fill each: no host-to-device copy, which a CUDA graph
    capture forbids (the values are recorded in the graph)."""
    import torch

    out = torch.empty(len(values), dtype=dtype, device=device)
    for i, value in enumerate(values):
        out[i].fill_(value)
    return out


_CONSTANTS: dict = {}  # (values, dtype, device) -> the tensor: each distinct set copied to the device once
_MAX_CONSTANTS = 256


def on_device(values: list, dtype, device):
    """The scalars a kernel reads (Δt, α, β, ...) as a tensor on ``device``, which kernels only read. Copied once per
    distinct values and kept: torch copies a pageable host tensor to the GPU and then waits for the stream, which
    would stall every call's host until the GPU was idle. While a CUDA graph is being captured (:func:`capturing`):
    :func:`filled`, so that the graph owns what it reads."""
    import torch

    device = torch.device(device)
    if capturing(device):
        return filled(values, dtype, device)
    key = (tuple(values), dtype, device)
    out = _CONSTANTS.get(key)
    if out is None:
        if len(_CONSTANTS) >= _MAX_CONSTANTS:  # a training run with changing Δt: forget the oldest
            del _CONSTANTS[next(iter(_CONSTANTS))]
        with torch.inference_mode(False):  # a later call may save it for its backward
            out = _CONSTANTS[key] = torch.tensor(values, dtype=dtype, device=device)
    return out


PRODUCTS_ENV = "ODELAB_FLOAT32_PRODUCTS"
FLOAT32_PRODUCTS = ("ieee", "tf32", "tf32x3", "bf16")


def dot_precision(dtype) -> str:
    """The kernels' ``tl.dot`` input precision for states of ``dtype``: "ieee" for float64; for float32
    ``$ODELAB_FLOAT32_PRODUCTS`` where set (read at each forward) -- "ieee", "tf32", or "tf32x3": each product as
    three TF32 tensor-core products of the operands' high and low parts (a_hi b_hi + a_hi b_lo + a_lo b_hi, a = a_hi
    + a_lo, both parts rounded to TF32), which keeps about 21 of float32's 24 bits, within float32 round-off of IEEE
    products, or "bf16": both operands rounded to bfloat16 (8-bit mantissas, tensor cores, float32 sums; under
    Triton's interpreter, which cannot multiply bfloat16 operands, "bf16-rounded": the same roundings done in float32
    bits, the products in float32) -- otherwise torch's float32 matmul switch: "tf32" where torch's own matmuls may
    use TF32, "ieee" (the default) elsewhere."""
    import os

    import torch

    if dtype != torch.float32:
        return "ieee"
    asked = os.environ.get(PRODUCTS_ENV, "").strip().lower()
    if asked:
        if asked not in FLOAT32_PRODUCTS:
            raise ValueError(f"${PRODUCTS_ENV}: expected one of {', '.join(FLOAT32_PRODUCTS)}, got {asked!r}")
        if asked == "bf16" and os.environ.get("TRITON_INTERPRET") == "1":
            return "bf16-rounded"
        return asked
    matmul = torch.backends.cuda.matmul
    chosen = getattr(matmul, "fp32_precision", "none")  # torch's newer switch; "none": the legacy one decides
    if chosen in ("ieee", "tf32"):
        return chosen
    try:
        return "tf32" if matmul.allow_tf32 else "ieee"
    except RuntimeError:  # torch refuses to read the legacy switch after the newer one was set on another backend
        return "ieee"


OUTER_SUM_CHUNK_BYTES = 1 << 28  # the most of a state operand :func:`outer_sum` copies at once


def outer_sum(g, s, chunk_bytes: int = OUTER_SUM_CHUNK_BYTES):
    """Σ_{b,t} g[b, t]ᵀ s[b, t] for g (B, T, K) and s (B, T, H), a (K, H) weight gradient (``einsum("btk,bth->kh")``).
    A state buffer without its first or last step (``S[:, :-1]``) is a view whose batch and time rows do not merge,
    so one product copies all of it (1 GB for (1024, 1000, 256) float32, on top of the backward's own buffers);
    here batch chunks of at most ``chunk_bytes`` of s are multiplied one after another, each copied alone."""
    import torch

    B, T, K = g.shape
    H = s.shape[2]
    rows = max(1, chunk_bytes // max(1, T * H * s.element_size()))
    if rows >= B:  # one product (an einsum would add a dozen permutes, views and copies on the host)
        return torch.mm(g.reshape(-1, K).mT, s.reshape(-1, H))
    out = g.new_zeros(K, H)
    for b0 in range(0, B, rows):
        out.addmm_(g[b0:b0 + rows].reshape(-1, K).mT, s[b0:b0 + rows].reshape(-1, H))
    return out


def resident(hidden: int, block_h: int | None) -> bool:
    """Use the register-resident variant: weights and state held on chip for the whole sequence (one tile)."""
    return block_h is None and hidden <= MAX_RESIDENT


def block_sizes(batch: int, hidden: int, block_h: int | None = None) -> tuple[int, int]:
    """(BB, BH): 16 batch rows per program; hidden tiles of the next power of two ≥ 16, at most 32
    (``block_h`` forces a tile width, and with it the tiled variant)."""
    if block_h is None:
        block_h = min(MAX_BLOCK_H, max(16, triton.next_power_of_2(hidden)))
    return BLOCK_B, block_h


def warps(block_h: int) -> int:
    """Warps per program: 8 from 32-wide tiles on (4 warps spill there: 238–255 registers on sm_90)."""
    return 4 if block_h <= 16 else 8


@triton.jit
def tanh(x):
    """float64: tanh(x) = −expm1(−2|x|) / (2 + expm1(−2|x|)) with sign; expm1 by Kahan's trick (accurate near 0,
    where 1 − exp(−2|x|) would cancel). float32: c P(c²) / Q(c²), c = x clamped to ±9.5 (where tanh rounds to ±1),
    P of degree 5 and Q of degree 3 fitted to the relative error (6.5 ulp in float32 arithmetic against torch's 1.1;
    within [−1, 1]): eight FMAs and one division on the recurrences' critical path instead of an exponential, a
    logarithm and two divisions (and no exponential: with one, LLVM's SLP vectorizer in Triton 3.9 fails on LEM's
    backward)."""
    if x.dtype == tl.float64:
        u = -2.0 * tl.abs(x)
        e = tl.exp(u)
        safe = tl.where((e == 1.0) | (e == 0.0), 0.5, e)
        em1 = tl.where(e == 1.0, u, (safe - 1.0) * u / tl.log(safe))
        em1 = tl.where(e == 0.0, -1.0, em1)
        t = -em1 / (2.0 + em1)
        return tl.where(x < 0, -t, t)
    else:
        c = tl.minimum(tl.maximum(x, -9.5, propagate_nan=tl.PropagateNan.ALL), 9.5, propagate_nan=tl.PropagateNan.ALL)
        s = c * c
        p = ((((1.6240329e-11 * s - 1.1971566e-08) * s + 8.993664e-06) * s + 0.002890669) * s + 0.12891282) * s + 1.0
        q = ((0.00022394262 * s + 0.023640059) * s + 0.46224561) * s + 1.0
        t = c * p / q
        return tl.minimum(tl.maximum(t, -1.0, propagate_nan=tl.PropagateNan.ALL), 1.0,
                          propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def dot(a, b, acc, PRECISION: tl.constexpr):
    """acc + a @ b in acc's dtype (Triton before 3.7 asks for an fp64 accumulator's dtype by name), products at
    PRECISION (:func:`dot_precision`)."""
    if PRECISION == "bf16":
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc, out_dtype=acc.dtype)
    elif PRECISION == "bf16-rounded":
        return tl.dot(bf16_rounded(a), bf16_rounded(b), acc, input_precision="ieee", out_dtype=acc.dtype)
    else:
        return tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=acc.dtype)


@triton.jit
def bf16_rounded(x):
    """float32 x rounded to bfloat16's 8-bit mantissa, to nearest, ties to even (as the conversion to bfloat16
    does), kept in float32: the low 16 bits of the word cleared after adding 0x7FFF + the kept part's lowest bit."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def mv(acc, s_ptr, s_stride, rows, rmask, w_ptr, w_stride, n0, K, N,
       TRANS: tl.constexpr, BH: tl.constexpr, PRECISION: tl.constexpr):
    """acc (BB, BH) += S[rows, 0:K] @ op(W)[:, n0:n0 + BH], op(W) = Wᵀ (W stored (N, K), row stride w_stride)
    or, with TRANS, W itself (stored (K, N)). S rows at s_ptr + row * s_stride (unit column stride). PRECISION:
    the products' (:func:`dot_precision`)."""
    cols = n0 + tl.arange(0, BH)
    cmask = cols < N
    for k0 in range(0, K, BH):
        ks = k0 + tl.arange(0, BH)
        kmask = ks < K
        s = tl.load(s_ptr + rows[:, None] * s_stride + ks[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)
        if TRANS:
            w = tl.load(w_ptr + ks[:, None] * w_stride + cols[None, :], mask=kmask[:, None] & cmask[None, :],
                        other=0.0)
        else:
            w = tl.load(w_ptr + cols[None, :] * w_stride + ks[:, None], mask=kmask[:, None] & cmask[None, :],
                        other=0.0)
        acc = dot(s, w, acc, PRECISION)
    return acc


@triton.jit
def batch_rows(B, BB: tl.constexpr):
    """This program's BB batch rows (axis 0 of the grid) as 64-bit offsets (B·T·H may pass 2³¹), and their mask."""
    rows = (tl.program_id(0) * BB + tl.arange(0, BB)).to(tl.int64)
    return rows, rows < B


@triton.jit
def resident_block(B, H, BB: tl.constexpr, BH: tl.constexpr):
    """A register-resident kernel's (BB, BH) block: its batch rows and hidden columns, their masks and the
    block's mask."""
    rows, rmask = batch_rows(B, BB)
    cols = tl.arange(0, BH)
    cmask = cols < H
    return rows, rmask, cols, cmask, rmask[:, None] & cmask[None, :]


@triton.jit
def tile(ptr, stride, rows, rmask, cols, cmask):
    """A (BB, BH) block of a row-major array (row stride ``stride``), zero outside the masks."""
    return tl.load(ptr + rows[:, None] * stride + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0)


@triton.jit
def tile_at(ptr, n, step, stride, rows, rmask, cols, cmask, lo, hi):
    """:func:`tile` of ptr + n·step, zero unless lo ≤ n ≤ hi: a step's block that a register-resident kernel loads
    one step ahead of its use, off the recurrence's path (n may run past the ends there)."""
    ok = rmask & (rows * 0 + n >= lo) & (rows * 0 + n <= hi)
    return tile(ptr + n * step, stride, rows, ok, cols, cmask)


@triton.jit
def four_blocks(E, n, rows, rmask, cols, cmask, T, H):
    """Step n's four H-wide blocks of a (B, T, 4H) buffer (LEM's encoded input [a1, az, a2, ay], or the gates a
    forward stored) as :func:`tile_at` tiles, zero outside 1 ≤ n ≤ T."""
    sE = T * 4 * H
    return (tile_at(E - 4 * H, n, 4 * H, sE, rows, rmask, cols, cmask, 1, T),
            tile_at(E - 3 * H, n, 4 * H, sE, rows, rmask, cols, cmask, 1, T),
            tile_at(E - 2 * H, n, 4 * H, sE, rows, rmask, cols, cmask, 1, T),
            tile_at(E - H, n, 4 * H, sE, rows, rmask, cols, cmask, 1, T))


@triton.jit
def step_length(dt, HS, rows, rmask, n, T, GAPS: tl.constexpr):
    """The length of step n for this program's rows: the shared ``dt``, or with GAPS each row's own, HS[row, n − 1]
    of the (B, T) per-step lengths (irregular sampling, ``Recurrent.forward(x, dt=gaps)``), as a (BB, 1) column --
    zero outside 1 ≤ n ≤ T, so that a register-resident kernel may load it a step ahead or behind."""
    if GAPS:
        ok = rmask & (rows * 0 + n >= 1) & (rows * 0 + n <= T)
        return tl.load(HS + rows * T + (n - 1), mask=ok, other=0.0)[:, None]
    else:
        return dt


@triton.jit
def store_length_part(DP, part, rows, rmask, n, T, slot, slots):
    """A column-tile program's part of ∂L/∂Δt_n (its columns' sum, per row) into slot ``slot`` of DP (B, T, slots),
    which torch sums over its last axis: the stepwise and grid schedules' gaps gradient, each slot written by one
    program (no atomics, no program adds another's)."""
    tl.store(DP + (rows * T + (n - 1)) * slots + slot, part, mask=rmask)


@triton.jit
def weights(W, stride, H, BH: tl.constexpr):
    """An H × H matrix (row stride ``stride``) as a zero-padded (BH, BH) register tile, read along its rows (for
    the products S Wᵀ, a transposed copy of W: a tile read down W's columns instead would be loaded against the
    shared-memory banks by Triton's FMA products, ``benchmarks/shared_banks.py``)."""
    i = tl.arange(0, BH)
    m = (i < H)[:, None] & (i < H)[None, :]
    return tl.load(W + i[:, None] * stride + i[None, :], mask=m, other=0.0)


# -- the stepwise schedule (stepwise.py): step kernels read their tensors through a device table of addresses --

@triton.jit
def address(TABLE, i, REF):
    """Entry i of the address table as a pointer to REF's element type."""
    return tl.load(TABLE + i).to(tl.pointer_type(REF.dtype.element_ty))


def step_launches(kernel, phases: int, steps, ref, B: int, T: int, H: int, BB: int, BH: int, precision: str,
                  **meta):
    """``launch(table)``: every phase of every step in ``steps``, one launch each over (batch blocks, column tiles)
    of ``kernel(TABLE, REF, n, B, T, H, PHASE=…, BB=…, BH=…, PRECISION=…, **meta)``. ``launch.key``: everything
    the launches depend on but the table (the key of their recorded CUDA graph)."""
    grid = (triton.cdiv(B, BB), triton.cdiv(H, BH))

    def launch(table) -> None:
        for n in steps:
            for phase in range(phases):
                kernel[grid](table, ref, n, B, T, H, PHASE=phase, BB=BB, BH=BH, PRECISION=precision,
                             num_warps=warps(BH), **meta)

    launch.key = (kernel, phases, steps, B, T, H, BB, BH, precision, ref.dtype, ref.device, tuple(sorted(meta.items())))
    return launch
