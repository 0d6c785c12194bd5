"""Irregularly sampled sequences: LEM stepped by each sample's own gap, against cuDNN/ATen nn.LSTM reading the gap
as an input feature (the LRC paper's baseline treatment) and against LEM on a regular grid.

    python benchmarks/irregular.py [--batch 32] [--steps 1000] [--hidden 16] [--repeats 7] [--threads 1]
                                   [--out benchmarks/results/irregular.json]

Forward + backward of a mean loss over (batch, steps) inputs of one feature plus the gap (U[0.04, 0.76], the
``fhn-irregular`` task's), float32, CPU, medians of ``--repeats`` after a warm-up:

- odelab LEM ``cell(x, dt=gaps)`` with ``engine="auto"`` (the C++ kernel takes the gaps) and ``engine="generic"``;
- odelab LEM ``cell(x)`` on a regular grid (the cost the gaps add);
- torch ``nn.LSTM`` of the same hidden size on [x, gap] (the anchor).

Ratios are each over nn.LSTM. JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import odelab

RESULTS = Path(__file__).resolve().parent / "results"


def median_time(step, repeats: int) -> float:
    step()  # warm-up (and the kernel's first build)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "irregular.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.steps, 1)
    gaps = 0.04 + 0.72 * torch.rand(args.batch, args.steps)
    lem = odelab.cells.LEM(1, args.hidden)
    lstm = torch.nn.LSTM(2, args.hidden, batch_first=True)
    with_gap = torch.cat([x, gaps.unsqueeze(-1)], -1)

    def lem_step(engine: str, irregular: bool):
        def step():
            lem.engine = engine
            out, _ = lem(x, dt=gaps) if irregular else lem(x)
            out.mean().backward()
        return step

    def lstm_step():
        lstm(with_gap)[0].mean().backward()

    rows = {"nn.LSTM on [x, gap] (anchor)": median_time(lstm_step, args.repeats),
            "LEM, gaps, kernel (auto)": median_time(lem_step("auto", True), args.repeats),
            "LEM, gaps, generic loop": median_time(lem_step("generic", True), min(args.repeats, 3)),
            "LEM, regular grid, kernel": median_time(lem_step("auto", False), args.repeats)}
    anchor = rows["nn.LSTM on [x, gap] (anchor)"]
    print(f"(batch, steps, hidden) = ({args.batch}, {args.steps}, {args.hidden}), float32, CPU, {args.threads} thread(s); "
          f"forward + backward, median of {args.repeats}")
    for name, seconds in rows.items():
        print(f"{name:32s}{seconds * 1e3:10.1f} ms{seconds / anchor:8.2f}× nn.LSTM")
    result = {"shape": [args.batch, args.steps, args.hidden], "threads": args.threads, "repeats": args.repeats,
              "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "seconds": rows, "ratio_to_lstm": {k: v / anchor for k, v in rows.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
