"""CUDA graphs of solver work: the capture helpers of the adaptive loop's chunks (:mod:`.triton_step`), and whole
fixed-step solves replayed per configuration (``odelab.solve(..., method="rk4", dt=..., cuda_graph=True)``).

A fixed-step solve that records no gradient is one fixed sequence of kernels once its configuration is fixed (the
system, scheme, step grid, history and state shapes): its drivers plan every delayed read on the host and read
nothing back per step. :func:`replayed` runs a configuration's first call eagerly (kernels compiled, memory
allocated), captures the whole solve over a static copy of y0 at the second, and from then on copies y0 in and
replays the graph: one launch of recorded work instead of the field's ops launched from Python one by one.

What the captured code closed over is frozen, as in any CUDA graph: the system's parameters and buffers are read
where they are (in-place updates are seen; a parameter replaced by another tensor is another configuration), and
the system object and the history are part of the configuration (the cache keeps them alive). A capture that
fails (a field that reads a value on the host, copies from the CPU, ...) warns once, and that configuration runs
eagerly from then on.
"""
from __future__ import annotations

import dataclasses
import warnings
from collections import OrderedDict
from typing import Callable

import torch
from torch import Tensor

from ..systems.base import State
from .solution import Solution

DEVICES = ("cuda",)  # where a solve can be captured
CAPACITY = 8  # configurations whose graphs are kept (least recently used dropped first)


def capturing() -> bool:
    """Whether the current CUDA stream is being captured (host checks must be skipped then)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def capture(run: Callable[[], None]):
    """A CUDA graph of ``run()``'s work (recorded, not executed: ``replay()`` runs it)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads' CUDA calls stay legal
        run()
    return graph


def warm_up(run: Callable[[], None]) -> None:
    """``run()`` before its capture, on a side stream on CUDA (as torch's graph capture asks: libraries set up their
    per-stream state, e.g. cuBLAS workspaces, outside the capture)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        run()
        return
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)


@dataclasses.dataclass
class _Configuration:
    keep: tuple  # the objects the captured work reads through (kept alive, so their ids stay theirs)
    graph: object = None
    static: State | None = None
    captured: list = dataclasses.field(default_factory=list)  # the captured solve: each replay writes its tensors
    failed: bool = False


_GRAPHS: OrderedDict[tuple, _Configuration] = OrderedDict()


def replayed(drive: Callable[[State], Solution], state: State, ts: Tensor, config: tuple, keep: tuple) -> Solution:
    """``drive(state)``, the whole solve, as a CUDA graph replayed per configuration (see the module docstring).

    ``config``: hashable, everything besides ``state``'s values that the solve depends on (its times, step, method,
    and ids of the objects in ``keep``); the state's shapes, dtypes and device and the system's parameter storage
    are added here."""
    if any(x.device.type not in DEVICES for x in state):
        raise ValueError(f"cuda_graph: replays a solve on the GPU, but y0 is on {state[0].device.type}")
    modules = [m for m in keep if isinstance(m, torch.nn.Module)]
    tensors = [x for m in modules for x in (*m.parameters(), *m.buffers())]
    key = (config, tuple((x.shape, x.dtype, x.device) for x in state),
           tuple((x.data_ptr(), x.shape, x.dtype) for x in tensors))
    entry = _GRAPHS.get(key)
    if entry is None:  # first call: eager, as the warm-up
        _GRAPHS[key] = _Configuration(keep)
        while len(_GRAPHS) > CAPACITY:
            _GRAPHS.popitem(last=False)
        return drive(state)
    _GRAPHS.move_to_end(key)
    if entry.failed:
        return drive(state)
    if entry.graph is None:
        static = tuple(x.clone() for x in state)
        warm_up(lambda: drive(static))
        try:
            entry.graph = capture(lambda: entry.captured.append(drive(static)))
        except Exception as err:  # noqa: BLE001 -- nothing ran; the eager solve takes over
            entry.failed = True
            warnings.warn(f"odelab: capturing the fixed-step solve in a CUDA graph failed ({type(err).__name__}: "
                          f"{str(err)[:300]}); this configuration runs eagerly", RuntimeWarning, stacklevel=3)
            return drive(state)
        entry.static = static
    for buffer, x in zip(entry.static, state):
        buffer.copy_(x)
    entry.graph.replay()
    solution = entry.captured[-1]
    return dataclasses.replace(solution, ts=ts, ys=tuple(y.clone() for y in solution.ys),
                               stats={k: v.clone() for k, v in solution.stats.items()}, status=solution.status.clone())


def clear() -> None:
    """Drop every captured solve (their graphs' memory is freed when nothing else holds them)."""
    _GRAPHS.clear()
