"""Training-step speed of the published cells: odelab's fused engine (``engine="fused"``: a compiled C++ loop
on CPU, Triton on CUDA) and generic engine (the (system, scheme, dt) loop in Python) against torch.nn.LSTM /
torch.nn.GRU of the same hidden size, plus a plain hand-written LEM loop (eq. 3, with the same performance rules:
one input matmul, unbind, stack) as the yardstick of the generic path.

    python benchmarks/cell_speed.py [--models lem,cornn,...] [--sizes 32x1000x16,128x1000x128]
                                    [--device cpu,cuda] [--engines fused,generic] [--tf32] [--repeats 7]
                                    [--threads 1] [--captured] [--out FILE]

(``ODELAB_FLOAT32_PRODUCTS=tf32x3`` or ``=bf16`` in the environment: the CUDA kernels' float32 products as three
TF32 products, or of bfloat16-rounded operands; ``THP_MEM_ALLOC_ENABLE=1``: torch's CPU buffers of 2 MiB and more
on transparent huge pages, as the ``odelab`` command sets it; both recorded in the JSON's meta.)

For every model × size × device: the median seconds of forward + backward of a mean loss over the outputs, and
of the forward alone (under ``torch.no_grad()``), and the peak memory of one training step and of one forward (CUDA:
``torch.cuda.max_memory_allocated`` above what was allocated before the step; CPU, with ``--cpu-memory``: the growth
of the peak RSS (Linux's VmHWM, reset before the step) over one training step in a fresh process per row, after a
one-step training step has loaded the kernels and paged in the code: the CPU allocator keeps no peak statistic,
and memory it kept from an earlier row would hide a step's growth). The models are interleaved over the repeats
so that machine noise hits all of them alike; on CUDA each timed step follows an untimed step of the same model,
as the steps of a training loop follow each other (``--warm-steps``, since 2026-12-04, when UnICORNN's training step
at (32, 1000, 16) on the H200 measured 1.54 ms here with other models' steps before each sample, and 0.80 ms in
``kernel_trace.py``'s back-to-back steps; cuDNN's LSTM 2.07 and 1.73 ms). Prints one table per size with ratios to
nn.LSTM and writes JSON
(``benchmarks/results/cell_speed.json`` by default). On CUDA the anchors run twice: ``lstm``/``gru`` as torch runs
them by default (cuDNN may use TF32 tensor cores for float32: ``torch.backends.cudnn.rnn.fp32_precision ==
"tf32"``) and ``lstm-ieee``/``gru-ieee`` with IEEE products, as odelab's kernels compute by default; each row gets
``fwd_bwd_over_lstm`` and ``fwd_bwd_over_lstm_ieee``.

The generic engine's yardstick is the hand-written LEM loop: when both ``lem`` and ``lem-handwritten`` run, the
generic row gets ``fwd_bwd_over_handwritten`` (ratio of the medians) and ``..._paired`` (median over the repeats of
the ratio of neighbouring samples, which shares the machine's load of the moment), in wall time and in the
calling thread's CPU time (``time.thread_time``: on a machine shared with other jobs it leaves out the time the
thread waits for a core; the backward of a CPU graph runs on the calling thread, so with ``--threads 1`` it
holds the whole step; on CUDA autograd runs the backward's host side on a device thread of its own, outside this
figure: ``kernel_trace.py`` profiles every thread). Compare a generic-path change with ``--models lem,lem-handwritten --threads 1``.

``flashrnn`` (CUDA only, where the ``flashrnn`` package installs) is FlashRNN's fused LSTM (Pöppel et al.
2024, its Triton backend in float32) behind the same input projection, the issue's second anchor; a size it
cannot run is reported and skipped.

``unicornn-reversible`` is the UnICORNN stack with the memory-saving inverse-step backward (002 eq. 3.7): its
fused engine runs the reversible kernel (no per-step state stored), its generic engine the Python
``ReversibleUnICORNN``.

``--captured`` (CUDA rows): every row's training step also recorded once as a CUDA graph (``torch.cuda.graph``:
forward and backward, the parameters' gradients included) and timed replayed, ``fwd_bwd_captured_median_s``, its
ratio to cuDNN's LSTM captured the same way ``fwd_bwd_captured_over_lstm_captured``. A replay launches the step's
recorded kernels without the host's Python, autograd or launch overhead, so at small sizes, where a step waits on its
host side (UnICORNN at (32, 1000, 16): 0.18 ms of kernels in a 0.81 ms step on the H200, 2026-12-04), it measures
the kernels; odelab's kernels are written to be captured (``tests/kernels/test_cuda_kernels.py``:
``test_a_training_step_captured_in_a_cuda_graph``). A row whose step cannot be captured records the error.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

import odelab
from odelab import cells
from odelab.models.unicornn import reversible_kernel


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


class FlashRNNLSTM(nn.Module):
    """FlashRNN's LSTM kernel (``flashrnn.flashrnn``, one head of the full hidden size) after a Linear input
    projection to the four gates, like nn.LSTM's; returns (states, last states) as the package gives them."""

    def __init__(self, input_size: int, hidden_size: int, backend: str = "triton_fused"):
        super().__init__()
        import flashrnn  # noqa: F401  (fails here, at construction, where it is not installed)

        self.hidden_size, self.backend = hidden_size, backend
        self.projection = nn.Linear(input_size, 4 * hidden_size)
        self.recurrent = nn.Parameter(torch.randn(4, 1, hidden_size, hidden_size) / hidden_size**0.5)
        self.bias = nn.Parameter(torch.zeros(4, 1, hidden_size))

    def forward(self, x: torch.Tensor):
        from flashrnn import flashrnn

        gates = self.projection(x).view(x.shape[0], x.shape[1], 4, 1, self.hidden_size)
        return flashrnn(gates, self.recurrent, self.bias, function="lstm", backend=self.backend, dtype="float32")


# name -> constructor (input_size, hidden_size); the cells with an engine run twice (fused, generic)
MODELS = {
    "lem": cells.LEM,
    "cornn": cells.CoRNN,
    "cornn-implicit": lambda m, d: cells.CoRNN(m, d, damping="implicit"),
    "unicornn": cells.UnICORNN,
    "unicornn-reversible": lambda m, d: cells.UnICORNN(m, d, reversible=True),
    "oscillator": cells.NeuralOscillator,
    "gru-ode": cells.GRUODE,
    "lrcu-a": cells.PRESETS["lrcu-a"],
    "lrcu-s": cells.PRESETS["lrcu-s"],
    "taugru": cells.PRESETS["taugru"],
    "delaygru": cells.PRESETS["delaygru"],
    "ltc": cells.LTC,
    "stc": cells.STC,
}
DEFAULT_MODELS = list(MODELS)
# on request: the delay cells training with state dropout as the τ-GRU paper's IMDB preset does (τ = 1 step, p = 0.04;
# the kernels read the factors of every step, drawn once a call; forward only: the dropout of a training-mode forward)
MODELS.update({f"{name}-dropout": (lambda make: lambda m, d: make(m, d, tau=1.0, state_dropout=0.04))(make)
               for name, make in (("taugru", cells.TauGRU), ("delaygru", cells.DelayGRU))})
# the cells whose CUDA kernels have both schedules (odelab/kernels/cuda/stepwise.py): "NAME-stepwise" and
# "NAME-persistent" run the same cell under the one asked for ("NAME": the default, "auto")
SCHEDULED = ("lem", "cornn", "cornn-implicit", "oscillator", "gru-ode", "taugru", "delaygru", "ltc", "stc", "lrcu-a",
             "lrcu-s")
MODELS.update({f"{name}-{schedule}": MODELS[name] for name in SCHEDULED for schedule in ("stepwise", "persistent")})
# the grid-synchronised schedule (odelab/kernels/cuda/grid.py) of the kernels that have it
MODELS.update({f"{name}-grid": MODELS[name] for name in SCHEDULED})
ANCHORS = {"lstm": cells.LSTM, "gru": cells.GRU, "lstm-ieee": cells.LSTM, "gru-ieee": cells.GRU,
           "lem-handwritten": HandWrittenLEM, "flashrnn": FlashRNNLSTM}
OPTIONAL = {"flashrnn"}  # anchors that may not run here: reported and skipped
CUDA_ONLY = {"flashrnn", "lstm-ieee", "gru-ieee"}  # on CPU: not run (cuDNN's precision means nothing there)


@contextlib.contextmanager
def cudnn_ieee(name: str):
    """Inside, a "…-ieee" anchor's cuDNN RNN computes float32 with IEEE products (CUDNN_FMA_MATH): torch lets cuDNN's
    RNNs use TF32 tensor cores by default (``torch.backends.cudnn.rnn.fp32_precision == "tf32"``, before torch 2.9
    ``torch.backends.cudnn.allow_tf32``), while odelab's kernels follow torch's matmul switch, IEEE by default;
    "lstm" / "gru" keep torch's default."""
    if not name.endswith("-ieee"):
        yield
        return
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    holder, field = (rnn, "fp32_precision") if hasattr(rnn, "fp32_precision") else (torch.backends.cudnn, "allow_tf32")
    before = getattr(holder, field)
    setattr(holder, field, "ieee" if field == "fp32_precision" else False)
    try:
        yield
    finally:
        setattr(holder, field, before)


def cudnn_rnn_precision() -> str:
    """What torch lets cuDNN's RNNs use for float32 outside the "…-ieee" rows."""
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if hasattr(rnn, "fp32_precision"):
        return f"torch.backends.cudnn.rnn.fp32_precision = {rnn.fp32_precision!r}"
    return f"torch.backends.cudnn.allow_tf32 = {torch.backends.cudnn.allow_tf32}"


@contextlib.contextmanager
def scheduled(name: str):
    """Inside, the CUDA kernels run the schedule that ``name`` asks for ("…-stepwise", "…-persistent", "…-grid";
    otherwise the default, "auto"), and a "…-ieee" anchor's cuDNN IEEE products (:func:`cudnn_ieee`)."""
    from odelab.kernels.cuda.stepwise import SCHEDULE_ENV

    before = os.environ.get(SCHEDULE_ENV)
    os.environ[SCHEDULE_ENV] = next((s for s in ("stepwise", "persistent", "grid") if name.endswith("-" + s)), "auto")
    try:
        with cudnn_ieee(name):
            yield
    finally:
        if before is None:
            del os.environ[SCHEDULE_ENV]
        else:
            os.environ[SCHEDULE_ENV] = before


def schedule_of(name: str, device: str, batch: int, hidden: int) -> str | None:
    """The CUDA schedule a fused row of a cell with several ran under ("persistent", "stepwise" or "grid", as
    ``grid.schedule_for`` picks it: up to hidden 32 the register-resident kernel whatever is asked; for the liquid
    cells ``liquid.liquid_schedule``: up to hidden 16); None for the others and off CUDA (the CPU kernels have one
    schedule)."""
    base = next((name[: -len(s) - 1] for s in ("stepwise", "persistent", "grid") if name.endswith("-" + s)), name)
    if base not in SCHEDULED or device != "cuda":
        return None
    from odelab.kernels.cuda import grid, liquid

    choose = liquid.liquid_schedule if base in ("ltc", "stc", "lrcu-a", "lrcu-s") else grid.schedule_for
    with scheduled(name):
        return choose(None, torch.empty(batch, 1, 1, device=device), hidden, None)


def recurrent_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if hasattr(m, "engine") and hasattr(m, "kernel")]


def set_engine(model: nn.Module, engine: str) -> bool:
    """Force ``engine`` on every Recurrent layer of ``model``; False if it has none (an anchor)."""
    layers = recurrent_layers(model)
    for layer in layers:
        layer.engine = engine
    return bool(layers)


def has_fused(model: nn.Module, x: torch.Tensor) -> bool:
    """Whether every Recurrent layer of ``model`` has a fused kernel for x's device and dtype (the reversible one
    in a reversible UnICORNN stack)."""
    layers = recurrent_layers(model)
    saved = [layer.engine for layer in layers]
    try:
        ok = True
        for layer in layers:
            layer.engine = "auto"
            fused = reversible_kernel(layer, x) if getattr(model, "reversible", False) else layer.kernel(x)
            ok = ok and fused is not None  # a layer of a stack sees its own input width, same device
        return ok and bool(layers)
    finally:
        for layer, engine in zip(layers, saved):
            layer.engine = engine


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def training_step(model: nn.Module, x: torch.Tensor) -> None:
    model(x)[0].mean().backward()


def forward_only(model: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        model(x)


def timed(fn, model, x) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the calling thread) of ``fn(model, x)``."""
    sync(x.device.type)
    tic, cpu = time.perf_counter(), time.thread_time()
    fn(model, x)
    sync(x.device.type)
    return time.perf_counter() - tic, time.thread_time() - cpu


def back_to_back(fn, model, x, steps: int) -> float:
    """Wall seconds a call of ``fn(model, x)`` over ``steps`` calls issued one after another with no synchronisation
    between them, as a training loop issues its steps: on CUDA the host queues the next step's kernels while the
    device runs the current one's, so a step whose host work exceeds its device time is timed by its host work,
    without the idle device and the synchronisation of :func:`timed`'s lone step."""
    sync(x.device.type)
    tic = time.perf_counter()
    for _ in range(steps):
        fn(model, x)
    sync(x.device.type)
    return (time.perf_counter() - tic) / steps


def captured_step(model: nn.Module, x: torch.Tensor) -> torch.cuda.CUDAGraph:
    """One :func:`training_step` of ``model`` on ``x`` recorded as a CUDA graph, after three warm-up steps on a side
    stream (the CUDA graph recipe; the stepwise schedule records its own graphs at its second call); the gradients
    are set to None first, so that the graph's backward creates them in its own memory pool and every replay
    writes them again there."""
    from odelab.solvers.cuda_graph import warm_up

    warm_up(lambda: [training_step(model, x) for _ in range(3)])
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        training_step(model, x)
    return graph


def time_captured(name: str, model: nn.Module, x: torch.Tensor, repeats: int, warm_steps: int) -> dict:
    """The median wall time of ``repeats`` replays of :func:`captured_step` (each after ``warm_steps`` untimed
    ones), or the error that stopped the capture; the graph is freed afterwards."""
    try:
        with scheduled(name):
            graph = captured_step(model, x)
    except Exception as err:  # e.g. an anchor whose step torch cannot capture
        torch.cuda.synchronize()
        return {"fwd_bwd_captured_median_s": None, "captured_error": f"{type(err).__name__}: {str(err)[:300]}"}
    samples = []
    for _ in range(repeats):
        for _ in range(warm_steps):
            graph.replay()
        torch.cuda.synchronize()
        tic = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - tic)
    del graph
    model.zero_grad(set_to_none=True)  # the graph's gradient tensors
    return {"fwd_bwd_captured_median_s": statistics.median(samples), "fwd_bwd_captured_samples_s": samples}


def peak_memory(model: nn.Module, x: torch.Tensor, step=training_step) -> int | None:
    """Peak bytes allocated during one training step (or ``step``) above the memory held before it (CUDA only)."""
    if x.device.type != "cuda":
        return None
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(model, x)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def peak_memory_in(name: str, model: nn.Module, x: torch.Tensor, step=training_step) -> int | None:
    with scheduled(name):
        return peak_memory(model, x, step)


def build(name: str, hidden: int, device: str) -> nn.Module:
    return (ANCHORS[name] if name in ANCHORS else MODELS[name])(1, hidden).to(device)


def _status_bytes(field: str) -> int:
    """A ``kB`` line of /proc/self/status (Linux), in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def peak_rss_growth(name: str, engine: str | None, batch: int, steps: int, hidden: int,
                    forward: bool = False) -> int | None:
    """Bytes by which one CPU training step raises the peak RSS above the RSS before it (Linux: the high-water mark
    VmHWM, reset to the current RSS through /proc/self/clear_refs; None where there is no /proc). Run by
    :func:`cpu_peak_memory` in a process of its own. ``forward``: of one forward under ``torch.no_grad()`` instead."""
    torch.manual_seed(0)
    model = build(name, hidden, "cpu")
    x = torch.randn(batch, steps, 1)
    if engine:
        set_engine(model, engine)
    with scheduled(name):  # loads the kernels and pages in the code of a training step, at a one-step size
        training_step(model, x[:, :1])
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_bytes("VmRSS")
    except (OSError, StopIteration):
        return None
    with scheduled(name):
        (forward_only if forward else training_step)(model, x)
    return _status_bytes("VmHWM") - before


def cpu_peak_memory(name: str, engine: str | None, batch: int, steps: int, hidden: int,
                    forward: bool = False) -> int | None:
    """:func:`peak_rss_growth` of one row in a fresh process (with this process's thread count): freed memory that
    the allocator keeps from earlier rows would hide a step's growth."""
    spec = f"{name},{engine or ''},{batch}x{steps}x{hidden}{',forward' if forward else ''}"
    out = subprocess.run([sys.executable, __file__, "--peak-rss", spec, "--threads", str(torch.get_num_threads())],
                         capture_output=True, text=True, check=True).stdout.split()[-1]
    return None if out == "None" else int(out)


def bench_size(batch: int, steps: int, hidden: int, device: str, names: list[str], repeats: int,
               forward: bool, engines: tuple[str, ...] = ("fused", "generic"), cpu_memory: bool = False,
               warm_steps: int = 0, captured: bool = False, chained: int = 0) -> list[dict]:
    """The rows of one size; every timed step follows ``warm_steps`` untimed ones of the same model and kind;
    ``captured``: on CUDA each row's step replayed from a CUDA graph too (:func:`time_captured`); ``chained``: each
    repeat also times that many training steps back to back (:func:`back_to_back`)."""
    torch.manual_seed(0)
    x = torch.randn(batch, steps, 1, device=device)
    entries = []  # (label, model, engine)
    for name in names:
        if name in CUDA_ONLY and device != "cuda":
            continue
        if name in ANCHORS:
            try:
                entries.append((name, build(name, hidden, device), None))
            except Exception as err:  # an optional anchor's package missing
                if name not in OPTIONAL:
                    raise
                print(f"  ({name}: not run: {type(err).__name__}: {err})")
            continue
        model = build(name, hidden, device)
        fused = has_fused(model, x)
        if fused and "fused" in engines:
            entries.append((name, model, "fused"))
        elif not fused:
            print(f"  ({name}: no fused kernel on {device}; generic only)")
        if "generic" in engines or not fused:
            entries.append((name, model, "generic"))
    for entry in list(entries):  # warm-up (and the one-time kernel build)
        name, model, engine = entry
        if engine:
            set_engine(model, engine)
        try:
            with scheduled(name):
                training_step(model, x)
                forward_only(model, x)
                training_step(model, x)  # a stepwise schedule records its CUDA graphs at the second call
        except Exception as err:  # an optional anchor that cannot run this size
            if name not in OPTIONAL:
                raise
            print(f"  ({name}: not run at this size: {type(err).__name__}: {str(err)[:200]})")
            entries.remove(entry)
    samples = {i: {"fwd_bwd": [], "fwd": [], "fwd_bwd_cpu": [], "chained": []} for i in range(len(entries))}
    for _ in range(repeats):
        for i, (name, model, engine) in enumerate(entries):
            if engine:
                set_engine(model, engine)
            with scheduled(name):
                for _ in range(warm_steps):
                    training_step(model, x)
                wall, cpu = timed(training_step, model, x)
                samples[i]["fwd_bwd"].append(wall)
                samples[i]["fwd_bwd_cpu"].append(cpu)
                if chained:
                    samples[i]["chained"].append(back_to_back(training_step, model, x, chained))
                if forward:
                    for _ in range(warm_steps):
                        forward_only(model, x)
                    samples[i]["fwd"].append(timed(forward_only, model, x)[0])
    rows = []
    for i, (name, model, engine) in enumerate(entries):
        if engine:
            set_engine(model, engine)
        rows.append({
            "model": name, "engine": engine or "torch", "device": device, "batch": batch, "time": steps,
            "hidden": hidden,
            "fwd_bwd_median_s": statistics.median(samples[i]["fwd_bwd"]),
            "fwd_median_s": statistics.median(samples[i]["fwd"]) if forward else None,
            "fwd_bwd_samples_s": samples[i]["fwd_bwd"], "fwd_samples_s": samples[i]["fwd"],
            "fwd_bwd_thread_cpu_median_s": statistics.median(samples[i]["fwd_bwd_cpu"]),
            "fwd_bwd_thread_cpu_samples_s": samples[i]["fwd_bwd_cpu"],
            "peak_memory_bytes": (cpu_peak_memory(name, engine, batch, steps, hidden) if device == "cpu" and cpu_memory
                                  else peak_memory_in(name, model, x)),
            "fwd_peak_memory_bytes": (cpu_peak_memory(name, engine, batch, steps, hidden, forward=True)
                                      if device == "cpu" and cpu_memory and forward else
                                      peak_memory_in(name, model, x, forward_only) if forward else None),
            "schedule": schedule_of(name, device, batch, hidden) if engine == "fused" else None,
            "warm_steps": warm_steps,
        })
        if chained:
            rows[-1].update(back_to_back_steps=chained,
                            fwd_bwd_back_to_back_median_s=statistics.median(samples[i]["chained"]),
                            fwd_bwd_back_to_back_samples_s=samples[i]["chained"])
        if captured and device == "cuda":
            rows[-1].update(time_captured(name, model, x, repeats, warm_steps))
    for anchor in ("lstm", "lstm-ieee"):  # cuDNN with torch's default (TF32 allowed) and with IEEE products
        lstm = next((r for r in rows if r["model"] == anchor), None)
        key = anchor.replace("-", "_")
        for row in rows:
            if lstm is not None:
                row[f"fwd_bwd_over_{key}"] = row["fwd_bwd_median_s"] / lstm["fwd_bwd_median_s"]
                if forward:
                    row[f"fwd_over_{key}"] = row["fwd_median_s"] / lstm["fwd_median_s"]
                if chained:
                    row[f"fwd_bwd_back_to_back_over_{key}"] = (row["fwd_bwd_back_to_back_median_s"]
                                                               / lstm["fwd_bwd_back_to_back_median_s"])
    lstm = next((r for r in rows if r["model"] == "lstm" and r.get("fwd_bwd_captured_median_s")), None)
    for row in rows:  # captured against captured
        if lstm is not None and row.get("fwd_bwd_captured_median_s"):
            row["fwd_bwd_captured_over_lstm_captured"] = (row["fwd_bwd_captured_median_s"]
                                                          / lstm["fwd_bwd_captured_median_s"])
    generic = next((r for r in rows if r["model"] == "lem" and r["engine"] == "generic"), None)
    hand = next((r for r in rows if r["model"] == "lem-handwritten"), None)
    if generic is not None and hand is not None:  # issue 13's yardstick: generic path / hand-written loop
        for key, clock in (("fwd_bwd", ""), ("fwd_bwd_thread_cpu", "_thread_cpu")):
            mine, theirs = generic[f"{key}_samples_s"], hand[f"{key}_samples_s"]
            generic[f"fwd_bwd_over_handwritten{clock}"] = statistics.median(mine) / statistics.median(theirs)
            generic[f"fwd_bwd_over_handwritten{clock}_paired"] = statistics.median(
                a / b for a, b in zip(mine, theirs))
    return rows


def print_table(rows: list[dict], repeats: int, threads: int) -> None:
    r0 = rows[0]
    print(f"\nbatch {r0['batch']}, time {r0['time']}, hidden {r0['hidden']} ({r0['device']}, {threads} thread(s), "
          f"median of {repeats})")
    ieee = any("fwd_bwd_over_lstm_ieee" in r for r in rows)  # CUDA: also against cuDNN with IEEE products
    print(f"  {'model':19s} {'engine':8s} {'fwd+bwd ms':>11s} {'/LSTM':>7s}" + (f" {'/IEEE':>7s}" if ieee else "")
          + f" {'fwd ms':>9s} {'/LSTM':>7s} {'peak MiB':>9s} {'fwd MiB':>8s}")
    for r in rows:
        fwd = f"{r['fwd_median_s'] * 1e3:9.1f}" if r["fwd_median_s"] is not None else f"{'-':>9s}"
        mem = f"{r['peak_memory_bytes'] / 2**20:9.1f}" if r["peak_memory_bytes"] is not None else f"{'n/m':>9s}"
        ratio = f"{r['fwd_bwd_over_lstm']:7.2f}" if "fwd_bwd_over_lstm" in r else f"{'-':>7s}"
        if ieee:
            ratio += f" {r['fwd_bwd_over_lstm_ieee']:7.2f}" if "fwd_bwd_over_lstm_ieee" in r else f" {'-':>7s}"
        fratio = f"{r['fwd_over_lstm']:7.2f}" if "fwd_over_lstm" in r else f"{'-':>7s}"
        fmem = f"{r['fwd_peak_memory_bytes'] / 2**20:8.1f}" if r.get("fwd_peak_memory_bytes") is not None else ""
        print(f"  {r['model']:19s} {r['engine']:8s} {r['fwd_bwd_median_s'] * 1e3:11.1f} {ratio} {fwd} {fratio} {mem} "
              f"{fmem}")
    for r in rows:
        if r.get("fwd_bwd_captured_median_s"):
            ratio = r.get("fwd_bwd_captured_over_lstm_captured")
            print(f"  {r['model']:19s} {r['engine']:8s} captured in a CUDA graph: "
                  f"{r['fwd_bwd_captured_median_s'] * 1e3:.3f} ms" + (f" ({ratio:.2f}× the captured LSTM)" if ratio
                                                                       else ""))
        elif r.get("captured_error"):
            print(f"  {r['model']:19s} {r['engine']:8s} not captured: {r['captured_error']}")
    for r in rows:
        if r.get("fwd_bwd_back_to_back_median_s"):
            ratio = r.get("fwd_bwd_back_to_back_over_lstm")
            print(f"  {r['model']:19s} {r['engine']:8s} {r['back_to_back_steps']} steps back to back: "
                  f"{r['fwd_bwd_back_to_back_median_s'] * 1e3:.3f} ms a step"
                  + (f" ({ratio:.2f}× the LSTM's)" if ratio and r["model"] != "lstm" else ""))
    for r in rows:
        if "fwd_bwd_over_handwritten" in r:
            wall, cpu = "fwd_bwd_over_handwritten", "fwd_bwd_over_handwritten_thread_cpu"
            print(f"  lem generic / hand-written LEM, fwd+bwd: {r[wall]:.3f} wall (paired {r[wall + '_paired']:.3f}), "
                  f"{r[cpu]:.3f} thread CPU (paired {r[cpu + '_paired']:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join([*DEFAULT_MODELS, *ANCHORS]),
                        help=f"comma separated, from {', '.join([*MODELS, *ANCHORS])}")
    parser.add_argument("--sizes", default="32x1000x16,128x1000x128,1024x1000x256",
                        help="batch x time x hidden, comma separated")
    parser.add_argument("--device", default="cpu,cuda" if torch.cuda.is_available() else "cpu",
                        help="comma separated: cpu, cuda")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU); default: torch's")
    parser.add_argument("--no-forward", action="store_true", help="time forward + backward only")
    parser.add_argument("--tf32", action="store_true",
                        help="float32 matmuls in TF32 (torch.backends.cuda.matmul.fp32_precision = 'tf32'): the CUDA "
                             "kernels' products and torch's GEMMs; cuDNN's LSTM/GRU follow torch.backends.cudnn "
                             "(TF32 by default)")
    parser.add_argument("--engines", default="fused,generic",
                        help="comma separated: fused, generic (a cell without a fused kernel always runs generic)")
    parser.add_argument("--cpu-memory", action="store_true",
                        help="CPU rows: the peak RSS growth of one training step (and of one forward under "
                             "torch.no_grad() where forward-only is timed), in a fresh process per row and kind")
    parser.add_argument("--warm-steps", type=int, default=None,
                        help="untimed steps of the same model right before each timed one, as in a training loop "
                             "(default: 1 on CUDA, 0 on CPU)")
    parser.add_argument("--back-to-back", type=int, default=None, metavar="K",
                        help="each repeat also times K training steps issued back to back, without a "
                             "synchronisation between them (fwd_bwd_back_to_back_*; default: 3 on CUDA, 0 on CPU)")
    parser.add_argument("--captured", action="store_true",
                        help="CUDA rows: the training step replayed from a CUDA graph too (fwd_bwd_captured_*)")
    parser.add_argument("--peak-rss", help=argparse.SUPPRESS)  # MODEL,ENGINE,BxTxH[,forward]: one row's, here
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cell_speed.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.peak_rss:
        name, engine, spec, *forward = args.peak_rss.split(",")
        print(peak_rss_growth(name, engine or None, *map(int, spec.split("x")), forward=bool(forward)))
        return
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS and n not in ANCHORS]
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from {', '.join([*MODELS, *ANCHORS])}")
    if "lstm" not in names:
        names.append("lstm")  # the anchor of every ratio
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    if args.back_to_back is not None and args.back_to_back < 0:
        parser.error(f"--back-to-back: expected a number of steps >= 0, got {args.back_to_back}")
    if "cuda" in devices and not torch.cuda.is_available():
        parser.error("--device: cuda requested but torch.cuda.is_available() is False")

    if args.tf32:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    if not engines or set(engines) - {"fused", "generic"}:
        parser.error(f"--engines: expected fused and/or generic, got {args.engines!r}")

    load_before = os.getloadavg()
    rows = []
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for device in devices:
        for spec in args.sizes.split(","):
            batch, steps, hidden = map(int, spec.split("x"))
            warm = args.warm_steps if args.warm_steps is not None else int(device == "cuda")
            chained = args.back_to_back if args.back_to_back is not None else 3 * int(device == "cuda")
            size_rows = bench_size(batch, steps, hidden, device, names, args.repeats, not args.no_forward, engines,
                                   args.cpu_memory, warm, args.captured, chained)
            print_table(size_rows, args.repeats, torch.get_num_threads())
            rows.extend(size_rows)
            write(args, devices, load_before, rows)  # after every size: a run stopped midway keeps what it measured
    print(f"\nwritten {args.out}")


def cpu_name() -> str:
    """The CPU's model, family and model number and whether it has AVX-512 (Linux's /proc/cpuinfo): ratios to
    nn.LSTM differ between hosts (on a Zen 4 core AVX-512 runs as two 256-bit halves, on a Zen 5 core at full width)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model", "flags") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break
    except OSError:
        return platform.processor() or platform.machine()
    avx512 = "avx512f" in fields.get("flags", "").split()
    return (f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}"
            f"{', AVX-512' if avx512 else ''})")


def write(args, devices: list[str], load_before: tuple, rows: list[dict]) -> None:
    meta = {"devices": devices, "torch": torch.__version__, "odelab": odelab.__version__,
            "threads": torch.get_num_threads(), "machine": platform.machine(), "cpu": cpu_name(),
            "repeats": args.repeats, "dtype": "float32", "input_size": 1,
            "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()}, "cpu_count": os.cpu_count(),
            "forward_only": "under torch.no_grad()",
            "cpu_peak_memory": ("peak RSS growth of one training step (peak_memory_bytes) and of one forward "
                                "under torch.no_grad() (fwd_peak_memory_bytes), a fresh process each"
                                if args.cpu_memory else "not measured"),
            "matmul_fp32_precision": "tf32" if args.tf32 else "ieee (torch's default)",
            "kernel_float32_products": os.environ.get("ODELAB_FLOAT32_PRODUCTS", "").strip() or "torch's switch",
            "cpu_huge_pages": os.environ.get("THP_MEM_ALLOC_ENABLE", "").strip() or "unset (torch's default: off)",
            "cudnn_rnn_float32": cudnn_rnn_precision() + " (the lstm/gru rows; lstm-ieee/gru-ieee: IEEE)",
            "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
