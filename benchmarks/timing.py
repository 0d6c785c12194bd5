"""What the solver benchmarks share: the median of timed repeats after a warm-up, and XLA held to one CPU thread
(set before jax is imported) when torch runs on one."""
from __future__ import annotations

import os
import statistics
import time


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
