"""The per-step schedule of the CUDA cells: one launch per phase of every step over a 2-D grid of (16-row batch
block, hidden column tile) programs, recorded once per configuration as a CUDA graph and replayed.

The persistent kernels give a batch block's whole sequence to one program, so a batch of 128 keeps 8 of an
H200's 132 multiprocessors busy, and from hidden 128 on every step streams its weight tiles through that one
program (measured 2026-11-25: LEM at (128, 1000, 128) 32× cuDNN's LSTM). Here a phase of a step is a launch
whose programs each own one column tile, and a launch boundary is the barrier between phases, so the work of a
step spreads over ⌈B/16⌉ × ⌈H/BH⌉ programs. Per-step launches from Python would cost more than they save, so on
CUDA the launches of a sequence are recorded once as a CUDA graph (per shape, dtype, device, product precision
and tiles) and replayed. The kernels read the addresses of their tensors from a small int64 table on the device,
written before every replay: the graph holds no address of a call's own tensors, so nothing is copied in or
out and saved tensors are never overwritten by a later call.

Measured on an H200 (2026-11-26, fp32 forward + backward, T = 1000): LEM at (128, 1000, 128) 64.6 ms against the
tiled persistent kernel's 218.7 ms (3.4×), at (1024, 1000, 256) 412 ms against 823 ms (2.0×). The grid-synchronised
schedule (:mod:`.grid`: these phases in one launch) was faster again for every cell that has it (LEM 47.4 and
245.9 ms), so "auto" (the default) runs that one on CUDA wherever the tiled variant would run (hidden > 32, or
``block_h`` given) and its programs fit at once, and this one elsewhere; ``ODELAB_CUDA_SCHEDULE=stepwise`` asks for
this one (off CUDA too: Triton's interpreter, where its launches run eagerly), ``=persistent`` for the one-launch
kernels. The kernels that have it: LEM (2 launches a
step forward, 3 backward), coRNN and the neural oscillator (1 and 2), GRU-ODE (1 and 2; with the reset gate before
the candidate 2 and 4), τ-GRU and Delay GRU (1 and 2), the liquid cells LTC, STC and LRCU-A/S (1 and 2 a sub-step);
only LEM's gain is measured on a GPU so far.
"""
from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from typing import Callable

import torch

from ._common import capturing, filled, resident

SCHEDULE_ENV = "ODELAB_CUDA_SCHEDULE"
SCHEDULES = ("auto", "persistent", "stepwise", "grid")


def chosen_schedule(override: str | None = None, device: torch.device | None = None) -> str:
    """"persistent", "stepwise" or "grid" (:mod:`.grid`; every kernel with the stepwise schedule has it):
    ``override``, else ``$ODELAB_CUDA_SCHEDULE``, else "auto", which is "grid" on a CUDA ``device`` (where its
    programs do not all fit at once, ``grid.schedule_for`` answers "stepwise") and "persistent" elsewhere."""
    choice = (override or os.environ.get(SCHEDULE_ENV, "")).strip().lower() or "auto"
    if choice not in SCHEDULES:
        raise ValueError(f"{SCHEDULE_ENV}: expected one of {', '.join(SCHEDULES)}, got {choice!r}")
    if choice == "auto":
        return "grid" if device is not None and torch.device(device).type == "cuda" else "persistent"
    return choice


def use_stepwise(schedule: str | None, device, hidden: int, block_h: int | None) -> bool:
    """Whether a kernel with both schedules runs the stepwise one or the grid-synchronised one (``grid``, whose
    drivers run the stepwise phases): chosen (:func:`chosen_schedule`) and where the tiled persistent variant
    would run (not ``_common.resident``)."""
    return chosen_schedule(schedule, device) in ("stepwise", "grid") and not resident(hidden, block_h)


def address_table(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' addresses as an int64 tensor on the host (each must be contiguous: kernels index it densely),
    in pinned memory for CUDA tensors, so that copying it to the GPU (``non_blocking=True``) does not wait for the
    stream."""
    return torch.tensor(_addresses(tensors), dtype=torch.int64, pin_memory=tensors[0].is_cuda)


def _addresses(tensors: list[torch.Tensor]) -> list[int]:
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError("stepwise schedule: every tensor in the address table must be contiguous")
    return [t.data_ptr() for t in tensors]


def device_table(tensors: list[torch.Tensor]) -> torch.Tensor:
    """:func:`address_table` on the tensors' device, copied without waiting for the stream; inside a caller's CUDA
    graph capture, filled on the device (``_common.filled``)."""
    device = tensors[0].device
    if capturing(device):
        return filled(_addresses(tensors), torch.int64, device)
    return address_table(tensors).to(device, non_blocking=True)


def _cuda_capture(launch: Callable[[], None]) -> Callable[[], None]:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return graph.replay


class StepGraphs:
    """Recorded launch sequences, one per key (the least recently used dropped beyond ``size``).

    ``run(key, tensors, launch)``: the first call of a key launches eagerly (Triton compiles its kernels then,
    never inside a capture); the second records ``launch`` with ``capture`` and replays it; later calls replay.
    ``launch(table)`` must read every tensor through ``table``, the device copy of :func:`address_table`, which
    each call overwrites before its replay (stream-ordered after the replays that read it before). A capture
    that fails warns once and that key launches eagerly from then on. A key is a kernel and a shape: a model
    trained and evaluated at one shape holds 2 or 3 (forward, backward, a no-grad forward's last chunk), so 32 hold
    several models used in turn. With 8, ``cell_speed.py``'s cycle over six stepwise presets (12 keys) evicted each
    training step's keys before their next use, and LEM's stepwise training step at (128, 1000, 128) took 113 ms on
    the H200, launched step by step, against 64.6 ms replayed (2026-12-04)."""

    def __init__(self, capture: Callable[[Callable[[], None]], Callable[[], None]] = _cuda_capture, size: int = 32):
        self.capture, self.size = capture, size
        self.entries: OrderedDict = OrderedDict()  # key -> [device table, replay or None]
        self.captures = 0

    def run(self, key, tensors: list[torch.Tensor], launch: Callable[[torch.Tensor], None]) -> None:
        addresses = address_table(tensors)
        entry = self.entries.get(key)
        if entry is None:
            table = addresses.to(tensors[0].device, non_blocking=True)
            launch(table)
            self.entries[key] = [table, None]
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
            return
        self.entries.move_to_end(key)
        table = entry[0]
        table.copy_(addresses, non_blocking=True)
        if entry[1] is None:
            try:
                entry[1] = self.capture(lambda: launch(table))
                self.captures += 1
            except Exception as err:  # noqa: BLE001 -- any capture failure: run this key eagerly
                warnings.warn(f"odelab: recording the stepwise launches as a CUDA graph failed ({type(err).__name__}:"
                              f" {err}); they run eagerly", RuntimeWarning, stacklevel=3)
                entry[1] = lambda: launch(table)
        entry[1]()


GRAPHS = StepGraphs()


def graphs_for(device: torch.device) -> StepGraphs | None:
    """The graph cache for launches on ``device``: CUDA's; None elsewhere (Triton's interpreter: eager)."""
    return GRAPHS if device.type == "cuda" else None


def launch_steps(tensors: list[torch.Tensor], launch: Callable[[torch.Tensor], None]) -> None:
    """Run ``launch(table)`` (``_common.step_launches``) with the tensors' address table: through the graph cache on
    CUDA (keyed by ``launch.key``), eagerly otherwise -- and inside a CUDA graph that the caller is capturing, whose
    replays then replay these launches (a graph is not recorded inside another's capture)."""
    device = tensors[0].device
    graphs = graphs_for(device)
    if graphs is None or capturing(device):
        launch(device_table(tensors))
    else:
        graphs.run(launch.key, tensors, launch)
