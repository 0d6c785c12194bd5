"""The grid-synchronised schedule of the CUDA cells: the stepwise schedule's programs and phases (:mod:`.stepwise`),
run by ONE launch forward and one backward whose programs wait for each other at a barrier between phases.

The stepwise schedule spreads a step over ⌈B/BB⌉ × ⌈H/BH⌉ (batch block, column tile) programs and separates its
phases by launch boundaries, replayed from a CUDA graph: every phase pays a kernel launch and the ramp of a new
grid (LEM at (128, 1000, 128) on an H200: 5 launches a step, 64.6 ms forward + backward, ≈ 13 µs a launch, against
cuDNN's 7 µs a whole step). Here the same programs stay resident for the whole sequence and a phase ends at
:func:`barrier`, which only the column tiles of one batch block share (a batch block's rows never read another's):
a CTA barrier, then one thread adds 1 to the block's counter with acquire-release semantics at GPU scope and spins
on it with acquire semantics until every column tile of the block has arrived -- the pattern of cooperative groups'
grid sync. Its cost is a round trip to L2 per phase instead of a launch. Measured on an H200 (2026-11-26, fp32
forward + backward, T = 1000): LEM 47.4 ms at (128, 1000, 128) and 245.9 ms at (1024, 1000, 256) against the
stepwise schedule's 64.6 and 411.3 ms, and faster for every other cell that has both (the liquid cells equal), so it
is the CUDA default ("auto").

Every program must be resident at once, or a waiting program would hold a multiprocessor that a program it waits
for needs. Triton has no cooperative launch, so :func:`rows_per_block` keeps the grid within one program per
multiprocessor (whatever the kernel's occupancy): it grows the batch block (16, 32, 64 rows) until ⌈B/BB⌉ ×
⌈H/BH⌉ fits, and the caller falls back to the stepwise schedule where nothing does. A spin is also bounded
(:data:`SPIN_LIMIT` reads of the counter, seconds): a barrier that is never met sets a flag, the program waits at
no later barrier, and :func:`check` raises instead of returning wrong values; nothing hangs. A forward so stopped
runs again with the stepwise schedule (:func:`apply`), which its device keeps from then on.

LEM, coRNN, the neural oscillator, GRU-ODE (reset after), τ-GRU and Delay GRU from hidden 33 to 128 go one step
further (:func:`resident`; ``_grid_forward`` / ``_grid_backward`` in each module, ``_lem_grid_…`` for LEM): a
program keeps its 16-wide column tiles of the weights (both orientations in the backward, one where the forward
stored its gates: :func:`stored_gates`) on chip for the whole sequence and reads only the whole rows of the states
(or of the pre-activation gradients) each phase, cuDNN's persistent-RNN layout. On chip means shared memory under
the default IEEE float32 products, whose FMA products Triton feeds from shared memory (each thread reads its column
of a tile, 128 floats, every phase: with ldmatrix, free of bank conflicts, because every tile is a
:func:`column_tile` of rows contiguous along its columns -- of W for the products G W, of a transposed copy of W for
S Wᵀ; read from W's own rows, S Wᵀ's loads put 8 lanes on the same banks, ``benchmarks/shared_banks.py``), and
registers under TF32 or BF16 products (sm_90, Triton 3.9: LEM's forward 76 registers and 40 KB of shared memory, 32
KB of it the weights, against 186 and 176 registers; the register-resident kernels up to hidden 32 likewise). Their
backwards need fewer barriers than phases (LEM 2 a step instead of 3, the others 1 instead of 2): the last phase
writes only this program's λ columns, which no other program reads. The liquid cells' synapses are not a matrix
product (a sigmoid per (batch, j, i)): their grid driver runs the step kernels, whose parameter tiles a program
re-reads every sub-step from its L1.

Triton's interpreter runs a grid's programs one after another, so there a barrier can only be met by a batch
block of one column tile (``block_h`` ≥ hidden); :func:`rows_per_block` refuses more.
"""
from __future__ import annotations

import os
import warnings

import torch
import triton
import triton.language as tl

from ._common import batch_rows, block_sizes, capturing, warps
from .stepwise import chosen_schedule, device_table, use_stepwise

RESIDENT_H = 128  # hidden sizes up to this (padded to a power of two) may keep their weight tiles on chip
RESIDENT_BH = 16  # the column tiles of those kernels (8 warps unless $ODELAB_GRID_WARPS asks for 4)
SPIN_LIMIT = 1 << 22  # reads of a barrier's counter before it is declared failed (≈ 1 µs each on an H100: seconds)
ROWS = (16, 32, 64)  # batch rows per program tried, smallest first (tl.dot needs ≥ 16)


@triton.jit
def barrier(SYNC, k, spins, REPLY: tl.constexpr = True):
    """The k-th barrier (from 0) of this program's batch block (axis 0 of the grid) among its column programs (axis
    1), waiting at most ``spins`` reads of its counter; returns (k + 1, the spins of the next barrier: 0 once one
    was not met, so a failed launch ends after one limit per program). SYNC: int32 [one counter per batch block,
    then the failure flag], zeroed before the launch; counter b reaches (k + 1) · (column programs) at barrier k.
    ``REPLY=False`` is a candidate that ``benchmarks/grid_barrier.py`` times beside it: the arrival a release-only
    add whose old value no one waits for, then every program (the last one too) reads the counter."""
    tl.debug_barrier()  # every thread of this program has issued its stores of the phase
    counter = SYNC + tl.program_id(0)
    target = (k + 1) * tl.num_programs(1)
    if REPLY:
        # acq_rel: the last program to arrive does not spin, so its arrival must also acquire the others' stores
        # (and drop this multiprocessor's stale L1 lines of buffers rewritten every phase at the same addresses)
        seen = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") + 1
    else:
        tl.atomic_add(counter, 1, sem="release", scope="gpu")
        seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    tries = 0
    while (seen < target) & (tries < spins):
        seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
        tries += 1
    if seen < target:
        tl.atomic_max(SYNC + tl.num_programs(0), 1, scope="gpu")
        spins = 0
    tl.debug_barrier()  # no thread reads the next phase's inputs before the wait is over
    return k + 1, spins


@triton.jit
def block(B, H, BB: tl.constexpr, BH: tl.constexpr):
    """This program's batch rows (axis 0 of the grid) and columns (axis 1), their masks and the block's mask."""
    rows, rmask = batch_rows(B, BB)
    cols = tl.program_id(1) * BH + tl.arange(0, BH)
    cmask = cols < H
    return rows, rmask, cols, cmask, rmask[:, None] & cmask[None, :]


@triton.jit
def rows_of(ptr, stride, rows, rmask, H, HP: tl.constexpr):
    """The (BB, HP) block of whole rows (columns 0 … H − 1, zero beyond) at ptr + row · stride."""
    ks = tl.arange(0, HP)
    return tl.load(ptr + rows[:, None] * stride + ks[None, :], mask=rmask[:, None] & (ks < H)[None, :], other=0.0)


@triton.jit
def column_tile(W, stride, cols, H, HP: tl.constexpr):
    """An H × H block's (HP, BH) tile for this program's columns (W's rows ``stride`` apart): [k, i] = W[k, cols_i]
    (G @ it = (G W)[:, cols]; given Wᵀ, S @ it = (S Wᵀ)[:, cols]), zero outside: rows contiguous along the columns,
    which Triton's FMA products read with ldmatrix, free of bank conflicts."""
    ks = tl.arange(0, HP)
    m = (ks < H)[:, None] & (cols < H)[None, :]
    return tl.load(W + ks[:, None] * stride + cols[None, :], mask=m, other=0.0)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def rows_per_block(batch: int, hidden: int, block_h: int, device: torch.device) -> int | None:
    """Batch rows per program (:data:`ROWS`) such that every program of the grid can be resident at once (one per
    multiprocessor), or None where none fits (or, under Triton's interpreter, where a batch block has more than
    one column tile)."""
    tiles = triton.cdiv(hidden, block_h)
    if device.type != "cuda":
        return ROWS[0] if tiles == 1 or not interpreting() else None
    slots = torch.cuda.get_device_properties(device).multi_processor_count
    return next((rows for rows in ROWS if triton.cdiv(batch, rows) * tiles <= slots), None)


def schedule_for(schedule: str | None, x: torch.Tensor, hidden: int, block_h: int | None) -> str:
    """The schedule a kernel with a grid driver runs: "persistent" unless the tiled kernels would run (hidden > 32
    or ``block_h`` given) and the chosen schedule (``stepwise.chosen_schedule``) is another; "grid" only where
    its programs fit at once (:func:`rows_per_block`) and no grid barrier failed on the device, otherwise
    "stepwise"."""
    if not use_stepwise(schedule, x.device, hidden, block_h):
        return "persistent"
    if chosen_schedule(schedule, x.device) == "grid" and not retired(x.device):
        _, BH = block_sizes(x.shape[0], hidden, block_h)
        if rows_per_block(x.shape[0], hidden, BH, x.device) is not None:
            return "grid"
    return "stepwise"


def launch(driver, tensors: list[torch.Tensor], ref: torch.Tensor, B: int, T: int, H: int, block_h: int | None,
           precision: str, backward: bool, **meta) -> None:
    """One launch of a grid driver, ``driver(TABLE, REF, SYNC, B, T, H, BACKWARD=…, BB=…, BH=…, PRECISION=…,
    LIMIT=…, **meta)``, over (⌈B/rows⌉, ⌈H/BH⌉) programs, TABLE the addresses of ``tensors`` (as the step kernels
    read them); raises if a barrier was not met."""
    _, BH = block_sizes(B, H, block_h)
    rows = rows_per_block(B, H, BH, ref.device)
    sync = counters(B, rows, ref.device)
    driver[(triton.cdiv(B, rows), triton.cdiv(H, BH))](
        device_table(tensors), ref, sync, B, T, H, BACKWARD=backward, BB=rows, BH=BH,
        PRECISION=precision, LIMIT=SPIN_LIMIT, num_warps=warps(BH), **meta)
    check(sync)


def resident(batch: int, hidden: int, block_h: int | None, device: torch.device, precision: str = "ieee") -> bool:
    """Whether a kernel with weights on chip runs (LEM's and the oscillators' ``_grid_forward`` kernels): hidden ≤
    :data:`RESIDENT_H`, no tile width asked for, products other than three TF32 ones (which hold each weight tile
    twice, its high and low parts: LEM's backward spills 1340 bytes a thread, τ-GRU's 1564; ptxas of Triton 3.6,
    sm_90), and its programs (16-row batch blocks × 16-wide column tiles) fit at once; otherwise the weights
    stream through the step kernels' phases (no spills there with three TF32 products at 16 rows)."""
    return (block_h is None and hidden <= RESIDENT_H and precision != "tf32x3"
            and rows_per_block(batch, hidden, RESIDENT_BH, device) == ROWS[0])


WARPS_ENV = "ODELAB_GRID_WARPS"
GATES_ENV = "ODELAB_GRID_GATES"


def resident_warps() -> int:
    """Warps a program of the weights-on-chip grid kernels: ``$ODELAB_GRID_WARPS`` (read at each launch), 8 (unset:
    the default, a thread per element of the 16 × 16 tile) or 4 (two elements a thread: their FMA products read
    fewer operands from shared memory a multiprocessor -- in sm_90 PTX at hidden 128, LEM's forward 4240
    wavefronts a step instead of 6304, its backward 10640 instead of 14752, but 612 bytes a thread spilled there;
    coRNN's and GRU-ODE's kernels spill nothing). Opt-in until a GPU measures it; anything else is an error."""
    asked = os.environ.get(WARPS_ENV, "").strip() or "8"
    if asked not in ("4", "8"):
        raise ValueError(f"${WARPS_ENV}: expected 4 or 8 warps a program, got {asked!r}")
    return int(asked)


def stored_gates(train: bool) -> bool:
    """Whether a grid or stepwise forward stores its pre-activations (LEM's [p1, q, p2, r], coRNN's and the
    oscillator's tanh(a), GRU-ODE's gates (reset after), the delay GRUs' branches; the liquid cells' conductances of
    every sub-step) for its backward, which then reads them instead of recomputing them from the stored states (the
    same bits, fewer products or openings a step; the weights on chip or streamed): ``$ODELAB_GRID_GATES`` (read at
    each forward) = "stored", and only where a backward follows (``train``); "recomputed" (unset: the default)
    otherwise. Opt-in until a GPU measures it; anything else is an error."""
    asked = os.environ.get(GATES_ENV, "").strip().lower() or "recomputed"
    if asked not in ("recomputed", "stored"):
        raise ValueError(f"${GATES_ENV}: expected recomputed or stored, got {asked!r}")
    return asked == "stored" and train


def launch_resident(kernel, args, B: int, T: int, H: int, precision: str, **meta) -> None:
    """One launch of a weights-on-chip grid kernel, ``kernel(*args, SYNC, B, T, H, HP=…, BB=16, BH=16,
    PRECISION=…, LIMIT=…, **meta)``, over (⌈B/16⌉, ⌈H/16⌉) programs of :func:`resident_warps` warps; raises if a
    barrier was not met."""
    device = args[0].device
    sync = counters(B, ROWS[0], device)
    kernel[(triton.cdiv(B, ROWS[0]), triton.cdiv(H, RESIDENT_BH))](
        *args, sync, B, T, H, HP=max(16, triton.next_power_of_2(H)), BB=ROWS[0], BH=RESIDENT_BH, PRECISION=precision,
        LIMIT=SPIN_LIMIT, num_warps=resident_warps(), **meta)
    check(sync)


def counters(batch: int, rows: int, device: torch.device) -> torch.Tensor:
    """The barrier counters of a launch (one per batch block) and its failure flag, zeroed."""
    return torch.zeros(triton.cdiv(batch, rows) + 1, dtype=torch.int32, device=device)


class BarrierNotMet(RuntimeError):
    """A grid barrier was never met: the launch's programs were not all resident at once (another process or stream
    held multiprocessors); its results are invalid."""


_NOT_RESIDENT: set = set()  # devices where a grid barrier was not met: they take the stepwise schedule from then on


def retired(device: torch.device) -> bool:
    """Whether a grid barrier failed on ``device`` (which then takes the stepwise schedule)."""
    return device in _NOT_RESIDENT


def check(sync: torch.Tensor) -> None:
    """Raise :class:`BarrierNotMet` if a barrier of the launch that used ``sync`` was never met, and let the device
    take the stepwise schedule from then on (reads the flag on the host; skipped while a CUDA graph is being
    captured, where nothing may be read back: the flag stays in ``sync``)."""
    if capturing(sync.device):
        return
    if int(sync[-1]) != 0:
        _NOT_RESIDENT.add(sync.device)
        raise BarrierNotMet(f"odelab: a grid barrier of the CUDA kernel was not met on {sync.device} (its programs "
                            "were not all resident at once; another process or stream held multiprocessors): this "
                            "call's results are invalid, and later calls on this device take the stepwise schedule")


def apply(function, *args):
    """``function.apply(*args)``, an autograd Function whose last argument is the schedule; where a forward's grid
    barrier is not met, the same forward once more with the stepwise schedule (warned once per device; the device
    keeps it from then on). A backward's barrier that is not met raises :class:`BarrierNotMet`: run the step again."""
    try:
        return function.apply(*args)
    except BarrierNotMet as err:
        warnings.warn(f"{err}; this call reran with the stepwise schedule", RuntimeWarning, stacklevel=3)
        return function.apply(*args[:-1], "stepwise")
