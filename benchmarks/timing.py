"""What the solver benchmarks share: the median of timed repeats after a warm-up, XLA held to one CPU thread (set
before jax is imported) when torch runs on one, the timing of an anchor run a sample at a time or jitted, and the
JSON they write."""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np


def median_time(fn, repeats: int) -> tuple[float, object]:
    """The median wall time of ``repeats`` calls of ``fn`` after one untimed call, and the last call's result."""
    out = fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def one_xla_thread() -> None:
    """XLA on one CPU thread, as torch: call before jax is imported."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()


def per_sample_rows(one, count: int, batch: int, repeats: int) -> dict:
    """``one(b, grad)`` -> (value, slope) timed on samples 0..count−1, forward and with the gradient, scaled to
    ``batch``; the values and slopes of the gradient run as "times" and "slopes"."""
    forward_s, _ = median_time(lambda: [one(b, False) for b in range(count)], repeats)
    backward_s, pairs = median_time(lambda: [one(b, True) for b in range(count)], repeats)
    scale = batch / count
    times, slopes = (np.array(x) for x in zip(*pairs))
    return {"forward_s": forward_s * scale, "forward_backward_s": backward_s * scale, "timed_samples": count,
            "times": times, "slopes": slopes}


def jitted_rows(forward, slope, *args, repeats: int) -> dict:
    """Jitted jax functions ``forward`` and ``slope`` of ``args``: each first call (its compilation) and the median
    of later ones, and their outputs as "times" and "slopes"."""
    import jax

    rows = {}
    for name, fn in (("forward", forward), ("forward_backward", slope)):
        begin = time.perf_counter()
        jax.block_until_ready(fn(*args))
        rows[f"{name}_first_call_s"] = time.perf_counter() - begin
        rows[f"{name}_s"], out = median_time(lambda: jax.block_until_ready(fn(*args)), repeats)
        rows["times" if name == "forward" else "slopes"] = np.asarray(out)
    return rows


def write_rows(out: str, rows: dict, **meta) -> None:
    """``{"meta": meta + the versions and machine, "rows": rows}`` as JSON to ``out``."""
    import torch

    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta.update(torch=torch.__version__, python=platform.python_version(), machine=platform.machine())
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {path}")
