"""Where a fused training step's time goes on the GPU: every kernel's device time, against the step's wall time.

    python benchmarks/kernel_trace.py [--models unicornn,lem,ltc] [--sizes 32x1000x16,128x1000x128]
                                      [--steps 5] [--products ieee,bf16] [--grid default,stored,4-warps]
                                      [--out FILE] [--append] [--device cuda|cpu]

For each model × size (the names of ``cell_speed.py``, so "lem-stepwise" runs that schedule): warm-up steps, the
median wall time of ``--steps`` plain training steps (forward + backward of a mean loss, synchronised), then the same
steps under ``torch.profiler`` with CUDA activity: per kernel its launches and device milliseconds a step, their
sum (the GPU's busy time), and the host operators that took the most CPU time. A step whose wall time is far above
its kernels' sum waits on the host (launches, Python, allocations); one near it waits on its kernels, and the
kernel list says which. JSON into ``--out`` (default benchmarks/results/kernel_trace.json), written after every
row. ``--products`` runs every row once per float32 product setting of the CUDA kernels (``ODELAB_FLOAT32_PRODUCTS``,
read at each forward; default: the environment's), each row naming its own; ``--grid`` likewise once per setting
of the opt-in variants of the weights-on-chip grid kernels (:data:`GRID_SETTINGS`: their environment variables;
"one-barrier" is LEM's alone, so other models' rows skip it). ``--device cpu`` checks the script without a GPU (host
operators only).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from cell_speed import ANCHORS, MODELS, build, scheduled, set_engine, sync, training_step  # noqa: E402


GRID_SETTINGS = {  # --grid: the environment of each variant of the weights-on-chip grid kernels (odelab.kernels.cuda)
    "default": {},
    "one-barrier": {"ODELAB_LEM_GRID": "one-barrier"},  # LEM only
    "stored": {"ODELAB_GRID_GATES": "stored"},
    "4-warps": {"ODELAB_GRID_WARPS": "4"},
    "stored-4-warps": {"ODELAB_GRID_GATES": "stored", "ODELAB_GRID_WARPS": "4"},
    "rows": {"ODELAB_LIQUID_LAYOUT": "rows"},  # the liquid cells only
    "rows-stored": {"ODELAB_LIQUID_LAYOUT": "rows", "ODELAB_GRID_GATES": "stored"},
}
GRID_VARIABLES = ("ODELAB_LEM_GRID", "ODELAB_GRID_GATES", "ODELAB_GRID_WARPS", "ODELAB_LIQUID_LAYOUT")


LIQUID = ("ltc", "stc", "lrcu-a", "lrcu-s")  # their synapse tiles: stored conductances, no weights on chip


def uses_grid_setting(name: str, variant: str) -> bool:
    """Whether ``--grid``'s ``variant`` changes model ``name``'s kernels: not an anchor's, nor a named schedule's
    ("lem-stepwise"), "one-barrier" LEM's alone, of the liquid cells' "stored" and the row slabs ("rows",
    "rows-stored"), which are theirs alone."""
    if name in ANCHORS or name.endswith(("-stepwise", "-persistent")):
        return False
    if name in LIQUID:
        return variant in ("stored", "rows", "rows-stored")
    return variant not in ("rows", "rows-stored") and (variant != "one-barrier" or name == "lem")


def device_time_ms(event) -> float:
    """An event's own device time in ms (torch names it ``self_device_time_total`` from 2.4, ``self_cuda_time_total``
    before)."""
    return getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)) / 1e3


def trace(name: str, size: tuple[int, int, int], device: str, steps: int) -> dict:
    batch, time_steps, hidden = size
    torch.manual_seed(0)
    model = build(name, hidden, device)
    if name in MODELS:
        set_engine(model, "fused")
    x = torch.randn(batch, time_steps, 1, device=device)
    with scheduled(name):
        for _ in range(3):  # compiles the kernels, records a stepwise schedule's graphs
            training_step(model, x)
        sync(device)
        walls = []
        for _ in range(steps):
            tic = time.perf_counter()
            training_step(model, x)
            sync(device)
            walls.append(time.perf_counter() - tic)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            for _ in range(steps):
                training_step(model, x)
            sync(device)
    events = prof.key_averages()
    kernels = sorted(({"name": e.key, "calls_per_step": e.count / steps, "ms_per_step": device_time_ms(e) / steps}
                      for e in events if e.device_type == torch.autograd.DeviceType.CUDA and device_time_ms(e) > 0),
                     key=lambda k: -k["ms_per_step"])
    host = sorted(({"name": e.key, "calls_per_step": e.count / steps, "cpu_ms_per_step": e.self_cpu_time_total / 1e3 / steps}
                   for e in events if e.device_type == torch.autograd.DeviceType.CPU),
                  key=lambda k: -k["cpu_ms_per_step"])
    busy = sum(k["ms_per_step"] for k in kernels)
    return {"model": name, "batch": batch, "time": time_steps, "hidden": hidden, "device": device,
            "wall_ms_median": 1e3 * statistics.median(walls), "wall_ms_samples": [1e3 * w for w in walls],
            "kernel_ms_per_step": busy, "launches_per_step": sum(k["calls_per_step"] for k in kernels),
            "kernels": kernels, "host_top": host[:15]}


def show(row: dict) -> None:
    print(f"\n{row['model']} ({row['batch']}, {row['time']}, {row['hidden']}) on {row['device']}: wall "
          f"{row['wall_ms_median']:.3f} ms a step, kernels {row['kernel_ms_per_step']:.3f} ms "
          f"({row['launches_per_step']:.0f} launches)")
    for k in row["kernels"][:12]:
        print(f"  {k['ms_per_step']:9.3f} ms  {k['calls_per_step']:6.1f}×  {k['name'][:90]}")
    print("  host, own CPU time:")
    for h in row["host_top"][:8]:
        print(f"  {h['cpu_ms_per_step']:9.3f} ms  {h['calls_per_step']:6.1f}×  {h['name'][:90]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="unicornn,unicornn-reversible,lem,lstm")
    parser.add_argument("--sizes", default="32x1000x16,128x1000x128")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    parser.add_argument("--products", default=None,
                        help="comma separated ODELAB_FLOAT32_PRODUCTS settings (ieee, tf32, tf32x3, bf16), each row "
                             "once under each; default: the environment's")
    parser.add_argument("--grid", default=None,
                        help=f"comma separated settings of the grid kernels ({', '.join(GRID_SETTINGS)}), each row "
                             "once under each; default: the environment's")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "kernel_trace.json"))
    parser.add_argument("--append", action="store_true", help="keep the rows already in --out and add these")
    args = parser.parse_args()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS and n not in ANCHORS]
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from {', '.join([*MODELS, *ANCHORS])}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch.cuda.is_available() is False")
    rows = json.loads(Path(args.out).read_text())["rows"] if args.append and Path(args.out).exists() else []
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    settings, variants = [None], [None]
    if args.products:  # the CUDA kernels' settings (Triton's modules, imported only here)
        from odelab.kernels.cuda._common import FLOAT32_PRODUCTS, PRODUCTS_ENV

        settings = [p.strip() for p in args.products.split(",")]
        unknown = [p for p in settings if p not in FLOAT32_PRODUCTS]
        if unknown:
            parser.error(f"--products: unknown {unknown}; choose from {', '.join(FLOAT32_PRODUCTS)}")
    if args.grid:
        variants = [v.strip() for v in args.grid.split(",")]
        unknown = [v for v in variants if v not in GRID_SETTINGS]
        if unknown:
            parser.error(f"--grid: unknown {unknown}; choose from {', '.join(GRID_SETTINGS)}")
    for spec in args.sizes.split(","):
        size = tuple(map(int, spec.split("x")))
        for products, variant, name in itertools.product(settings, variants, names):
            if variant != variants[0] and not uses_grid_setting(name, variant):
                continue  # one row
            if products is not None:
                os.environ[PRODUCTS_ENV] = products
            if variant is not None:
                for key in GRID_VARIABLES:
                    os.environ[key] = GRID_SETTINGS[variant].get(key, "")
            try:
                row = trace(name, size, args.device, args.steps)
            except Exception as err:  # a model that cannot run here (FlashRNN's limits): reported, the rest go on
                row = {"model": name, "batch": size[0], "time": size[1], "hidden": size[2], "error": repr(err)}
                print(f"\n{name} {size}: {err!r}")
            else:
                row["products"] = products  # None: the environment's
                row["grid"] = variant if variant is None or uses_grid_setting(name, variant) else None
                for what, value in (("float32 products", products), ("grid kernels", row["grid"])):
                    if value is not None:
                        print(f"\n  ({what}: {value})")
                show(row)
            rows.append(row)
            meta = {"torch": torch.__version__, "steps": args.steps,
                    "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
            Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
