"""Where a phase of the grid-synchronised schedule (odelab/kernels/cuda/grid.py) spends its time, on a GPU.

LEM's weights-on-chip grid kernel at (128, 1000, 128) took 21.3 ms forward on an H200 (2026-11-26): 10.6 µs for
each of its 2 phases a step, against cuDNN's LSTM at 3.1 µs a whole step. A phase is a barrier of the batch
block's column programs, the exchange of the state through global memory (this program's tile stored, the block's
whole rows loaded back) and the products. This script times each part alone, over the same grid of programs
(⌈B/16⌉ batch blocks × ⌈H/16⌉ column tiles of 8 warps):

    barrier    ``grid.barrier`` in a loop, nothing else
    poll       a candidate barrier in the same loop: a release-only arrival that waits for no reply, then acquire
               reads of the counter (``grid.barrier(..., REPLY=False)``)
    exchange   a (16, 16) tile stored, the barrier, the block's (16, HP) rows loaded back and used
    loads      the same stores and loads without the barrier (the values are then not meaningful)
    products   the exchange and three (16, HP) × (HP, 16) products of the loaded rows with weight tiles held in the
               program (LEM's first phase without its inputs' loads and activations), IEEE float32, the tiles read
               from rows of Wᵀ as the kernels read them (``lem.transposed_weights``: Triton's FMA products then load
               them with ldmatrix, no bank conflict)
    products-conflicted  the same with the tiles read from W's own rows, as the kernels did until 2026-12-04 (8
               lanes of each 16-byte shared-memory load on the same banks: 5.7× the wavefronts in sm_90 PTX)
    lem        LEM's forward under the grid schedule (``schedule="grid"``; up to hidden 32 the one-launch kernel, as
               recorded), µs a step (two phases)
    lem-one-barrier  the same with ``ODELAB_LEM_GRID=one-barrier`` (one grid barrier a step; where the weights stay
               on chip), µs a step

and reports µs a phase (median of ``--repeats`` launches of ``--steps`` phases each), for hidden 32 … 256 at batch
128 (2 … 16 column programs per barrier) and for batch 16 … 1024 at hidden 128 where the programs fit at once. The
difference lem − exchange is the products and the activations; exchange − loads the barrier in place. JSON into
``--out`` (default benchmarks/results/grid_barrier.json). CUDA only; ``--smoke`` runs the kernels under Triton's
interpreter on the CPU at one column tile (a check of the script, no figures).

    python benchmarks/grid_barrier.py [--steps 1000] [--repeats 7] [--out FILE] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch
import triton
import triton.language as tl

from odelab import cells
from odelab.kernels.cuda import grid
from odelab.kernels.cuda._common import dot
from odelab.kernels.cuda import lem as lem_kernels

ROWS, COLUMNS = grid.ROWS[0], grid.RESIDENT_BH  # the weights-on-chip kernels' (16, 16) blocks


@triton.jit
def _barriers(SYNC, STEPS, VARIANT: tl.constexpr, LIMIT: tl.constexpr):
    k = 0
    spins = LIMIT
    for _ in range(STEPS):
        k, spins = grid.barrier(SYNC, k, spins, REPLY=VARIANT == 0)


@triton.jit
def _weight_tile(W, cols, H, HP: tl.constexpr, DOTS: tl.constexpr):
    """DOTS 1: ``grid.column_tile`` of W, [k, i] = W[k, cols_i], as the kernels read their (transposed) weights; 2:
    [k, i] = W[cols_i, k], read from W's own rows as the kernels' products S Wᵀ did until 2026-12-04."""
    if DOTS == 1:
        return grid.column_tile(W, H, cols, H, HP)
    ks = tl.arange(0, HP)
    return tl.load(W + cols[None, :] * H + ks[:, None], mask=(ks < H)[:, None] & (cols < H)[None, :], other=0.0)


@triton.jit
def _exchange(BUF, W, OUT, SYNC, B, H, STEPS, HP: tl.constexpr, BB: tl.constexpr, BH: tl.constexpr,
              BARRIER: tl.constexpr, DOTS: tl.constexpr, LIMIT: tl.constexpr):
    """Phase n: this program's tile of slot n % 2 stored, (the barrier,) the block's whole rows of that slot loaded
    (and, DOTS 1 or 2, multiplied by three weight tiles: 1 [k, i] = W[k, cols_i], as the kernels read their
    transposed weights, 2 [k, i] = W[cols_i, k]); two slots, so a program that runs ahead writes the slot no one
    reads any more (as LEM's state buffers)."""
    rows, rmask, cols, cmask, m = grid.block(B, H, BB, BH)
    if DOTS:  # three H × H blocks of W (3H, H), their tiles for this program's columns
        w1t = _weight_tile(W, cols, H, HP, DOTS)
        w2t = _weight_tile(W + H * H, cols, H, HP, DOTS)
        w3t = _weight_tile(W + 2 * H * H, cols, H, HP, DOTS)
    acc = tl.zeros((BB, BH), dtype=tl.float32)
    k = 0
    spins = LIMIT
    for n in range(STEPS):
        slot = BUF + (n % 2) * B * H
        tl.store(slot + rows[:, None] * H + cols[None, :], acc, mask=m)
        if BARRIER:
            k, spins = grid.barrier(SYNC, k, spins)
        whole = grid.rows_of(slot, H, rows, rmask, H, HP)
        if DOTS:
            p1 = dot(whole, w1t, acc, "ieee")
            p2 = dot(whole, w2t, acc, "ieee")
            p3 = dot(whole, w3t, acc, "ieee")
            acc = 0.25 * (p1 + p2 * p3)
        else:
            acc = acc * 0.5 + tl.sum(whole, axis=1)[:, None] / H  # the next store depends on every loaded value
    tl.store(OUT + rows[:, None] * H + cols[None, :], acc, mask=m)


def _median_seconds(run, repeats: int, device: torch.device) -> float:
    run()  # compile, warm up
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _programs(batch: int, hidden: int) -> tuple[int, int]:
    return triton.cdiv(batch, ROWS), triton.cdiv(hidden, COLUMNS)


def measure(batch: int, hidden: int, steps: int, repeats: int, device: torch.device) -> list[dict]:
    """µs a phase of each part at (batch, hidden)."""
    grid_shape = _programs(batch, hidden)
    HP = max(16, triton.next_power_of_2(hidden))
    rows = []

    def record(kind, seconds, count, schedule="grid", unit="phase"):
        rows.append({"kind": kind, "batch": batch, "hidden": hidden, "programs": list(grid_shape),
                     "schedule": schedule, f"us_per_{unit}": 1e6 * seconds / count})
        print(f"  {kind:16s} B={batch:5d} H={hidden:4d} programs {grid_shape[0]}x{grid_shape[1]}: "
              f"{rows[-1][f'us_per_{unit}']:8.3f} µs a {unit} ({schedule})", flush=True)

    for kind, variant in (("barrier", 0), ("poll", 1)):
        def barriers(variant=variant):
            sync = grid.counters(batch, ROWS, device)
            _barriers[grid_shape](sync, steps, VARIANT=variant, LIMIT=grid.SPIN_LIMIT, num_warps=8)
            grid.check(sync)
        record(kind, _median_seconds(barriers, repeats, device), steps)
    buf = torch.zeros(2, batch, hidden, device=device)
    weights = torch.randn(3 * hidden, hidden, device=device) / hidden
    out = torch.empty(batch, hidden, device=device)
    for kind, with_barrier, dots in (("exchange", True, 0), ("loads", False, 0), ("products", True, 1),
                                     ("products-conflicted", True, 2)):
        def exchange(with_barrier=with_barrier, dots=dots):
            sync = grid.counters(batch, ROWS, device)
            _exchange[grid_shape](buf, weights, out, sync, batch, hidden, steps, HP=HP, BB=ROWS, BH=COLUMNS,
                                  BARRIER=with_barrier, DOTS=dots, LIMIT=grid.SPIN_LIMIT, num_warps=8)
            grid.check(sync)
        record(kind, _median_seconds(exchange, repeats, device), steps)
    torch.manual_seed(0)
    model = cells.LEM(1, hidden).to(device)
    x = torch.randn(batch, steps // 2, 1, device=device)
    state = model.system.initial_state(batch)
    state = tuple(s.to(device) for s in state)

    def lem_forward():
        with torch.no_grad():
            lem_kernels.run(model.system, x, state, model.dt, schedule="grid")

    schedule = grid.schedule_for("grid", x, hidden, None)  # up to hidden 32 the one-launch kernel runs
    before = os.environ.get(lem_kernels.GRID_ENV)
    try:
        for kind, choice in (("lem", "two-barriers"), ("lem-one-barrier", "one-barrier")):
            os.environ[lem_kernels.GRID_ENV] = choice
            if kind == "lem" or (schedule == "grid" and grid.resident(batch, hidden, None, device)):
                record(kind, _median_seconds(lem_forward, repeats, device), steps // 2, schedule, unit="step")
    finally:
        if before is None:
            os.environ.pop(lem_kernels.GRID_ENV, None)
        else:
            os.environ[lem_kernels.GRID_ENV] = before
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="phases a launch (LEM: half as many steps)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="benchmarks/results/grid_barrier.json")
    parser.add_argument("--smoke", action="store_true", help="the interpreter on the CPU, one column tile")
    args = parser.parse_args()
    if args.smoke:
        device, sizes, args.steps, args.repeats = torch.device("cpu"), [(16, 16), (32, 16)], 4, 1
    elif not torch.cuda.is_available():
        raise SystemExit("grid_barrier.py measures a GPU: no CUDA device here (--smoke checks the script on the CPU)")
    else:
        device = torch.device("cuda")
        slots = torch.cuda.get_device_properties(device).multi_processor_count
        sizes = [(128, h) for h in (32, 64, 128, 256)] + [(b, 128) for b in (16, 32, 64, 256, 512, 1024)]
        sizes = [(b, h) for b, h in sizes if _programs(b, h)[0] * _programs(b, h)[1] <= slots]
    rows, meta = [], {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (interpreter)",
                      "torch": torch.__version__, "triton": triton.__version__, "steps": args.steps,
                      "repeats": args.repeats}
    print(f"grid phases on {meta['device']}: {args.steps} phases a launch, median of {args.repeats}", flush=True)
    for batch, hidden in sizes:
        rows += measure(batch, hidden, args.steps, args.repeats, device)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
