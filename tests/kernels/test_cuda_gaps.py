"""Per-sample steps in the Triton kernels (``Recurrent.forward(x, dt=gaps)``, irregular sampling): every schedule of
every kernel registered with ``gaps=True`` against the generic loop stepping each sample by its own gap -- outputs,
final state, and the gradients of the input, the initial state and every parameter (none to the gaps, which are
data). The generic loop is the reference: it is the definition (the scheme applied to the system with the sample's
step), tested against eq. 3 written out in ``tests/models/test_time_gaps.py``.

Importing ``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` before Triton is imported (without CUDA) and skips
this module where the interpreter cannot run the kernels.
"""
from __future__ import annotations

import importlib

import pytest
import torch
from test_cuda_kernels import DEVICE, PRESETS, float32_at, kernel, relative_errors

from odelab import Recurrent, cells, systems
from odelab.kernels import REGISTRY, chunks
from odelab.kernels.cuda import grid

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}

# the presets of test_cuda_kernels whose CUDA kernels take the gaps, and sub-step variants of them:
# name -> (model (input_size, hidden) -> Recurrent, kernel target)
GAP_PRESETS = ("lem", "cornn", "cornn-implicit", "cornn-learned-coefficients", "cornn-implicit-learned-coefficients",
               "oscillator", "gru-ode", "gru-ode-reset-before", "ltc", "stc", "lrcu-a", "lrcu-s")  # ltc, stc: 2 unfolds
GAP_CELLS = {
    **{name: PRESETS[name] for name in GAP_PRESETS},
    "lem-3-unfolds": (lambda m, d: Recurrent(systems.LEM(m, d), "imex", 0.9, unfolds=3), ".cuda.lem:run"),
    "cornn-implicit-2-unfolds": (lambda m, d: Recurrent(systems.CoRNN(m, d, 1.0, 3.0), "imex-implicit", 0.45,
                                                        unfolds=2), ".cuda.oscillators:run_cornn_implicit"),
    "gru-ode-2-unfolds": (lambda m, d: Recurrent(systems.GRU(m, d), "euler", 1.0, unfolds=2), ".cuda.gru:run"),
    "ltc-6-unfolds": (lambda m, d: cells.LTC(m, d), ".cuda.liquid:run_ltc"),  # the preset's own L
}


def test_every_kernel_registered_with_gaps_is_tested():
    """The presets here are exactly those whose CUDA registration takes the gaps (``gaps=True``)."""
    registered = {name for name, (build, _) in PRESETS.items()
                  if REGISTRY[(type(build(2, 3).system), build(2, 3).scheme.name, "cuda", False)].gaps}
    assert registered == set(GAP_PRESETS)


# (batch, time, hidden, block_h, schedule): the register-resident one-launch kernel (hidden ≤ 32), the tiled
# one-launch kernel (block_h), the stepwise schedule (which replaces the tiled kernels: hidden > 32 or block_h given),
# the grid schedule's tiled driver (block_h 32: one column tile, what the interpreter can synchronise), and the grid
# kernels with weights on chip (hidden ≤ 16 forced onto them)
SCHEDULES = {
    "resident": (3, 5, 6, None, "persistent"),
    "resident-batch-1-T-1": (1, 1, 1, None, "persistent"),
    "tiled": (17, 4, 17, 16, "persistent"),
    "stepwise": (3, 4, 17, 16, "stepwise"),
    "grid": (19, 3, 17, 32, "grid"),
    "grid-weights-on-chip": (19, 4, 13, None, "grid-on-chip"),
}


def gap_errors(model, run, batch, time, hidden, dtype, input_size=3, seed=0):
    """``relative_errors`` of the kernel ``run`` with per-sample gaps against the generic loop with the same gaps:
    outputs, final state, every gradient."""
    return relative_errors(model, run, batch, time, hidden, dtype, input_size, seed, gaps=True)


def _runner(target, schedule, block_h, monkeypatch):
    if schedule == "grid-on-chip":
        monkeypatch.setattr(grid, "schedule_for", lambda *args: "grid")
        schedule = "grid"
    return lambda *args, **kw: kernel(target)(*args, schedule=schedule, block_h=block_h, **kw)


@pytest.mark.parametrize("where, dtype", float32_at(SCHEDULES, {"resident", "resident-batch-1-T-1"}))
@pytest.mark.parametrize("name", list(GAP_CELLS))
def test_gaps_equal_the_generic_loop(name, where, dtype, monkeypatch):
    build, target = GAP_CELLS[name]
    batch, time, hidden, block_h, schedule = SCHEDULES[where]
    if schedule == "grid-on-chip":
        assert grid.resident(batch, hidden, None, torch.device(DEVICE))
    errors = gap_errors(build(3, hidden), _runner(target, schedule, block_h, monkeypatch), batch, time, hidden, dtype)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])


@pytest.mark.parametrize("name", list(GAP_CELLS))
def test_each_row_steps_by_its_own_gaps(name):
    """Row b of a batch equals row b run alone with its own gaps (the kernels index the gaps by row: a kernel reading
    another row's gap, or the model's dt, fails), and a row whose gaps are all zero keeps its initial state."""
    build, target = GAP_CELLS[name]
    torch.manual_seed(3)
    model = build(2, 5).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(3, 6, 2, device=DEVICE, dtype=torch.float64)
    state = tuple(torch.randn(3, n, device=DEVICE, dtype=torch.float64) for n in model.system.block_sizes())
    gaps = torch.rand(3, 6, device=DEVICE, dtype=torch.float64) + 0.2
    gaps[2] = 0.0
    with torch.no_grad():
        out, final = kernel(target)(model.system, x, state, gaps, model.unfolds, ())
        for b in range(2):
            alone, alone_final = kernel(target)(model.system, x[b:b + 1], tuple(s[b:b + 1] for s in state),
                                                gaps[b:b + 1], model.unfolds, ())
            assert (out[b] - alone[0]).abs().max() < 1e-12
            assert all((f[b] - a[0]).abs().max() < 1e-12 for f, a in zip(final, alone_final))
    assert all(torch.equal(f[2], s[2]) for f, s in zip(final, state))


@pytest.mark.parametrize("name", list(GAP_CELLS))
def test_gaps_in_chunks_without_a_backward(name, monkeypatch):
    """Under ``torch.no_grad()`` the kernels run a chunk of steps at a time (``kernels.chunks``): each chunk takes its
    own slice of the gaps -- the same values as one piece."""
    build, target = GAP_CELLS[name]
    torch.manual_seed(4)
    model = build(3, 5).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(2, 11, 3, device=DEVICE, dtype=torch.float64)
    state = tuple(torch.zeros(2, n, device=DEVICE, dtype=torch.float64) for n in model.system.block_sizes())
    gaps = 1.5 * torch.rand(2, 11, device=DEVICE, dtype=torch.float64)
    with torch.no_grad():
        whole, whole_final = kernel(target)(model.system, x, state, gaps, model.unfolds, ())
        monkeypatch.setattr(chunks, "CHUNK_STATE_BYTES", 2 * 4 * model.unfolds * 5 * 8)  # 4 steps a chunk
        assert chunks.steps_per_chunk(x, model.unfolds, 5) == 4
        pieces, pieces_final = kernel(target)(model.system, x, state, gaps, model.unfolds, ())
    assert (whole - pieces).abs().max() < 1e-13
    assert all((a - b).abs().max() < 1e-13 for a, b in zip(whole_final, pieces_final))


@pytest.mark.parametrize("name", list(GAP_CELLS))
def test_recurrent_dispatches_gaps_to_the_kernel(name, monkeypatch):
    """``Recurrent.forward(x, dt=gaps)`` runs the CUDA kernel (registered with ``gaps=True``) and matches the generic
    loop; on CPU the CUDA registration is borrowed for the device "cpu" (the interpreter runs it)."""
    build, target = GAP_CELLS[name]
    model = build(3, 5).to(DEVICE)
    key = (type(model.system), model.scheme.name, "cuda", False)
    assert REGISTRY[key].gaps
    if DEVICE == "cpu":
        monkeypatch.setitem(REGISTRY, key[:2] + ("cpu", False), REGISTRY[key])
    x = torch.randn(2, 4, 3, device=DEVICE)
    gaps = torch.rand(2, 4, device=DEVICE)
    model.engine = "fused"
    assert model.kernel(x, gaps=True) is kernel(target)
    out, final = model(x, dt=gaps)
    model.engine = "generic"
    ref, ref_final = model(x, dt=gaps)
    for a, b in zip((out, *final), (ref, *ref_final)):
        assert ((a - b).abs().max() / b.abs().max()).item() <= TOL[torch.float32]


@pytest.mark.parametrize("name", ["lem", "cornn", "gru-ode", "lrcu-a"])
def test_gaps_with_lengths_run_the_kernel_piece_by_piece(name, monkeypatch):
    """``forward(x, dt=gaps, lengths=...)``: the kernel runs each piece of ``run_lengths`` (one per distinct length)
    with its samples' gaps -- outputs, final states and gradients equal the generic loop's masked steps."""
    build, target = GAP_CELLS[name]
    model = build(3, 5).to(device=DEVICE, dtype=torch.float64)
    key = (type(model.system), model.scheme.name, "cuda", False)
    if DEVICE == "cpu":
        monkeypatch.setitem(REGISTRY, key[:2] + ("cpu", False), REGISTRY[key])
    module, _, function = target.partition(":")
    real, calls = kernel(target), []
    monkeypatch.setattr(importlib.import_module("odelab.kernels" + module), function,  # the function Recurrent loads
                        lambda *args, **kw: calls.append(args[1].shape) or real(*args, **kw))
    torch.manual_seed(7)
    x = torch.randn(3, 6, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
    gaps = 1.5 * torch.rand(3, 6, device=DEVICE, dtype=torch.float64)
    lengths = torch.tensor([2, 6, 4])
    results = []
    for engine in ("fused", "generic"):
        model.engine = engine
        out, final = model(x, dt=gaps, lengths=lengths)
        loss = (out * torch.linspace(-1, 1, 5, device=DEVICE, dtype=torch.float64)).sum() + final[0].square().sum()
        results.append([out, *final, *torch.autograd.grad(loss, [x, *model.parameters()])])
    assert [tuple(c[:2]) for c in calls] == [(3, 2), (2, 2), (1, 2)]  # three pieces: 3, 2 then 1 samples, 2 steps
    for a, b in zip(*results):
        assert (a - b).abs().max() <= 1e-10 * (1 + b.abs().max())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("schedule", ["persistent", "stepwise", "grid"])
@pytest.mark.parametrize("name", list(GAP_CELLS))
def test_gaps_on_the_gpu(name, schedule):
    """Full-size tiles compiled on a GPU: (40, 50, 96) with each schedule, float32, against the generic loop."""
    build, target = GAP_CELLS[name]
    run = lambda *args, **kw: kernel(target)(*args, schedule=schedule, **kw)
    errors = gap_errors(build(3, 96), run, 40, 50, 96, torch.float32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-4, (worst, errors[worst])
