"""Irregularly sampled sequences: a cell stepped by each sample's own gap, against cuDNN/ATen nn.LSTM reading the gap
as an input feature (the LRC paper's baseline treatment) and against the same cell on a regular grid.

    python benchmarks/irregular.py [--batch 32] [--steps 1000] [--hidden 16] [--repeats 7] [--threads 1]
                                   [--device cpu|cuda] [--models lem,lrcu-a,ltc,cornn,gru-ode]
                                   [--out benchmarks/results/irregular.json]

Forward + backward of a mean loss over (batch, steps) inputs of one feature plus the gap (U[0.04, 0.76], the
``fhn-irregular`` task's), float32, medians of ``--repeats`` after a warm-up, on the CPU (the C++ kernels take the
gaps) or on CUDA (the Triton kernels take them), for each model of ``--models`` (default: LEM):

- ``cell(x, dt=gaps)`` with ``engine="auto"`` (the kernel) and ``engine="generic"`` (fewer repeats; ``--no-generic``
  skips it: on CUDA it takes about a second a step);
- ``cell(x, dt=gaps)`` with gaps that require grad (a learned step's case: the kernels that give the gaps' gradient;
  on CUDA the default schedule, and for LEM, coRNN and GRU-ODE the persistent one, which such gaps ran before
  2026-12-02 (the liquid cells ran the generic loop);
- ``cell(x)`` on a regular grid (the cost the gaps add);
- torch ``nn.LSTM`` of the same hidden size on [x, gap] (the anchor; cuDNN on CUDA).

Ratios are each over nn.LSTM. JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import odelab

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {  # name -> cell (input_size, hidden) with a kernel that takes the gaps
    "lem": lambda m, d: odelab.cells.LEM(m, d),
    "cornn": lambda m, d: odelab.cells.CoRNN(m, d),
    "gru-ode": lambda m, d: odelab.cells.GRUODE(m, d),
    "ltc": lambda m, d: odelab.cells.LTC(m, d),
    "lrcu-a": lambda m, d: odelab.cells.LRCU(m, d),
}

PERSISTENT_BEFORE = ("lem", "cornn", "gru-ode")  # gaps requiring grad ran the persistent schedule (to 2026-12-02)


def median_time(step, repeats: int, device: str) -> float:
    def synchronised():
        step()
        if device == "cuda":
            torch.cuda.synchronize()

    synchronised()  # warm-up (and the kernel's first build)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        synchronised()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def persistent(step):
    """``step`` under the CUDA kernels' persistent schedule (``ODELAB_CUDA_SCHEDULE``, read at every call)."""
    def under_persistent():
        before = os.environ.get("ODELAB_CUDA_SCHEDULE")
        os.environ["ODELAB_CUDA_SCHEDULE"] = "persistent"
        try:
            step()
        finally:
            if before is None:
                del os.environ["ODELAB_CUDA_SCHEDULE"]
            else:
                os.environ["ODELAB_CUDA_SCHEDULE"] = before
    return under_persistent


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--models", default="lem", help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--no-generic", action="store_true", help="skip the generic loop")
    parser.add_argument("--out", default=str(RESULTS / "irregular.json"))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)} (expected some of {', '.join(MODELS)})")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    device = args.device
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.steps, 1, device=device)
    gaps = 0.04 + 0.72 * torch.rand(args.batch, args.steps, device=device)
    lstm = torch.nn.LSTM(2, args.hidden, batch_first=True).to(device)
    with_gap = torch.cat([x, gaps.unsqueeze(-1)], -1)

    learned = gaps.clone().requires_grad_()  # the gaps' gradient wanted too

    def cell_step(cell, engine: str, irregular: bool, steps=gaps):
        def step():
            cell.engine = engine
            out, _ = cell(x, dt=steps) if irregular else cell(x)
            out.mean().backward()
        return step

    def lstm_step():
        lstm(with_gap)[0].mean().backward()

    anchor_name = "nn.LSTM on [x, gap] (anchor)"
    rows = {anchor_name: median_time(lstm_step, args.repeats, device)}
    for name in names:
        cell = MODELS[name](1, args.hidden).to(device)
        rows[f"{name}, gaps, kernel (auto)"] = median_time(cell_step(cell, "auto", True), args.repeats, device)
        if not args.no_generic:
            rows[f"{name}, gaps, generic loop"] = median_time(cell_step(cell, "generic", True), min(args.repeats, 3),
                                                              device)
        rows[f"{name}, regular grid, kernel"] = median_time(cell_step(cell, "auto", False), args.repeats, device)
        rows[f"{name}, gaps requiring grad (auto)"] = median_time(cell_step(cell, "auto", True, learned), args.repeats,
                                                                  device)
        if device == "cuda" and name in PERSISTENT_BEFORE:
            rows[f"{name}, gaps requiring grad (persistent)"] = median_time(
                persistent(cell_step(cell, "auto", True, learned)), args.repeats, device)
        _write(args, device, rows, anchor_name)  # after every model: a run cut short keeps what it measured
    where = f"{args.threads} thread(s)" if device == "cpu" else torch.cuda.get_device_name()
    anchor = rows[anchor_name]
    print(f"(batch, steps, hidden) = ({args.batch}, {args.steps}, {args.hidden}), float32, {device}, {where}; "
          f"forward + backward, median of {args.repeats}")
    for name, seconds in rows.items():
        print(f"{name:40s}{seconds * 1e3:10.1f} ms{seconds / anchor:8.2f}× nn.LSTM")
    return _write(args, device, rows, anchor_name)


def _write(args, device: str, rows: dict, anchor_name: str) -> dict:
    """The rows so far, with their ratios to the anchor, as JSON to ``--out``."""
    anchor = rows[anchor_name]
    where = f"{args.threads} thread(s)" if device == "cpu" else torch.cuda.get_device_name()
    result = {"shape": [args.batch, args.steps, args.hidden], "device": device, "where": where,
              "threads": args.threads, "repeats": args.repeats, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(),
              "seconds": rows, "ratio_to_lstm": {k: v / anchor for k, v in rows.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
