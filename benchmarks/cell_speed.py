"""Training-step speed of the LEM cell: odelab's generic (system, scheme, dt) path against torch.nn.LSTM and a
plain hand-written LEM loop (eq. 3, with the same performance rules: one input matmul, unbind, stack).

    python benchmarks/cell_speed.py [--repeats 7] [--sizes 32x1000x16,128x1000x128] [--device cpu]

Prints a table of median times (forward + backward) and ratios; writes benchmarks/results/cell_speed.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import odelab


class HandWrittenLEM(nn.Module):
    """LEM eq. 3 as one would write it by hand (the official code's layout, input projection hoisted)."""

    def __init__(self, input_size: int, hidden_size: int, dt: float = 1.0):
        super().__init__()
        self.dt, self.hidden_size = dt, hidden_size
        self.inp2hid = nn.Linear(input_size, 4 * hidden_size)
        self.hid2hid = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.transform_z = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x):
        d = self.hidden_size
        y = x.new_zeros(x.shape[0], d)
        z = x.new_zeros(x.shape[0], d)
        outputs = []
        for i_all in self.inp2hid(x).unbind(1):
            i_dt1, i_dt2, i_z, i_y = i_all.chunk(4, dim=1)
            h_dt1, h_dt2, h_y = self.hid2hid(y).chunk(3, dim=1)
            ms_dt_bar = self.dt * torch.sigmoid(i_dt1 + h_dt1)
            ms_dt = self.dt * torch.sigmoid(i_dt2 + h_dt2)
            z = (1 - ms_dt) * z + ms_dt * torch.tanh(i_y + h_y)
            y = (1 - ms_dt_bar) * y + ms_dt_bar * torch.tanh(self.transform_z(z) + i_z)
            outputs.append(y)
        return torch.stack(outputs, 1), (z, y)


def time_training_step(model: nn.Module, x: torch.Tensor, repeats: int) -> float:
    """Median seconds of forward + backward of a mean loss over the outputs."""
    def step():
        out = model(x)[0]
        out.mean().backward()

    step()  # warm-up
    times = []
    for _ in range(repeats):
        if x.is_cuda:
            torch.cuda.synchronize()
        tic = time.perf_counter()
        step()
        if x.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - tic)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", default="32x1000x16,128x1000x128", help="batch x time x hidden, comma separated")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cell_speed.json"))
    args = parser.parse_args()

    rows = []
    for spec in args.sizes.split(","):
        batch, steps, hidden = map(int, spec.split("x"))
        torch.manual_seed(0)
        x = torch.randn(batch, steps, 1, device=args.device)
        models = {
            "odelab LEM (imex)": odelab.cells.LEM(1, hidden).to(args.device),
            "hand-written LEM": HandWrittenLEM(1, hidden).to(args.device),
            "torch.nn.LSTM": odelab.cells.LSTM(1, hidden).to(args.device),
        }
        # interleave the models over repeats so that machine noise hits all of them alike
        samples = {name: [] for name in models}
        for _ in range(args.repeats):
            for name, model in models.items():
                samples[name].append(time_training_step(model, x, 1))
        med = {name: statistics.median(v) for name, v in samples.items()}
        row = {"batch": batch, "time": steps, "hidden": hidden, "median_seconds": med,
               "odelab_over_handwritten": med["odelab LEM (imex)"] / med["hand-written LEM"],
               "odelab_over_lstm": med["odelab LEM (imex)"] / med["torch.nn.LSTM"],
               "handwritten_over_lstm": med["hand-written LEM"] / med["torch.nn.LSTM"]}
        rows.append(row)
        print(f"\nbatch {batch}, time {steps}, hidden {hidden} ({args.device}, median of {args.repeats})")
        for name, s in med.items():
            print(f"  {name:22s} {s * 1e3:9.1f} ms")
        print(f"  odelab / hand-written  {row['odelab_over_handwritten']:9.2f}x   (target <= 1.1x)")
        print(f"  odelab / nn.LSTM       {row['odelab_over_lstm']:9.2f}x")
        print(f"  hand-written / LSTM    {row['handwritten_over_lstm']:9.2f}x")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": args.device, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "machine": platform.machine(), "repeats": args.repeats}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
