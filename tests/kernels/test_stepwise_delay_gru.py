"""The stepwise schedule of the delay-GRU kernels (τ-GRU, Delay GRU): one launch per phase of a step over (batch
blocks × column tiles), against the generic loop with its ring buffer: outputs, final state and every gradient.

Importing ``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` before Triton is imported (without CUDA) and skips
this module where the interpreter cannot run the kernels.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_kernels import DEVICE, PRESETS, STEPWISE_SIZES, generic, kernel, lags_of, relative_errors

from odelab import cells
from odelab.kernels.cuda import delay_gru, stepwise

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])

# lag edge cases m = ⌊τ/Δt⌋ at T = 4 (the presets: τ-GRU m = 2, Delay GRU m = 1); the ablation changes the kernels'
# constexprs (no u branch: the other branches' blocks move)
LAG_CASES = {
    "taugru-lag1": lambda m, d: cells.TauGRU(m, d, tau=1.0),
    "taugru-lag0": lambda m, d: cells.TauGRU(m, d, tau=0.0),
    "taugru-lag3-dt0.5": lambda m, d: cells.TauGRU(m, d, tau=1.5, dt=0.5),
    "taugru-lag-beyond-T": lambda m, d: cells.TauGRU(m, d, tau=7.0),
    "taugru-beta0-alpha0.5": lambda m, d: cells.TauGRU(m, d, tau=1.0, beta=0.0, alpha=0.5),
    "delaygru-lag0": lambda m, d: cells.DelayGRU(m, d, tau=0.0),
    "delaygru-lag3": lambda m, d: cells.DelayGRU(m, d, tau=3.0),
    "delaygru-lag-beyond-T": lambda m, d: cells.DelayGRU(m, d, tau=9.0),
}


@pytest.fixture
def launches(monkeypatch):
    """The kernels of the stepwise launch sequences run (so a test sees that the stepwise schedule ran)."""
    kernels = []
    launch_steps = delay_gru.launch_steps
    monkeypatch.setattr(delay_gru, "launch_steps",
                        lambda tensors, launch: kernels.append(launch.key[0]) or launch_steps(tensors, launch))
    return kernels


def stepwise_run(name: str):
    """The kernel of the cell ``name`` ("taugru…" or "delaygru…") with ``schedule="stepwise"``."""
    run = kernel(".cuda.delay_gru:run_" + ("taugru" if name.startswith("taugru") else "delaygru"))
    return lambda *args, **kw: run(*args, schedule="stepwise", **kw)


def check(model, name, size, dtype, launches):
    batch, time, hidden = size
    errors = relative_errors(model, stepwise_run(name), batch, time, hidden, dtype, block_h=16)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    assert launches == [delay_gru._step, delay_gru._step_backward]


@DTYPES
@pytest.mark.parametrize("size", STEPWISE_SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["taugru", "delaygru"])
def test_stepwise_equals_generic(name, size, dtype, launches):
    """16-wide tiles: hidden 17 and 33 span two and three column programs, batch 17 two batch blocks; T = 1 puts
    the τ-GRU's lag of 2 beyond the sequence."""
    torch.manual_seed(1)
    check(PRESETS[name][0](3, size[2]), name, size, dtype, launches)


@DTYPES
@pytest.mark.parametrize("name", list(LAG_CASES))
def test_stepwise_lags(name, dtype, launches):
    torch.manual_seed(1)
    check(LAG_CASES[name](3, 17), name, (3, 4, 17), dtype, launches)


def test_stepwise_graphs_replay_with_each_calls_tensors(monkeypatch):
    """Through the graph cache (its CUDA capture stood in by re-running the recorded launches, which read the same
    address table): call 1 runs eagerly, call 2 records the forward and the backward, call 3 replays -- each call's
    values and gradients are its own inputs' -- and a fourth with another lag (same shapes) gets launches of its
    own (the lag is part of the key)."""
    graphs = stepwise.StepGraphs(capture=lambda launch: launch)
    monkeypatch.setattr(stepwise, "graphs_for", lambda device: graphs)
    torch.manual_seed(2)
    models = [generic(cells.TauGRU(3, 17, tau=2.0)).to(device=DEVICE, dtype=torch.float64)] * 3
    models.append(generic(cells.TauGRU(3, 17, tau=1.0)).to(device=DEVICE, dtype=torch.float64))
    for call, (model, captures, entries) in enumerate(zip(models, (0, 2, 2, 2), (2, 2, 2, 4))):
        torch.manual_seed(10 + call)
        x = torch.randn(17, 3, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
        h0 = torch.randn(17, 17, device=DEVICE, dtype=torch.float64, requires_grad=True)
        out, (hT,) = delay_gru.run_taugru(model.system, x, (h0,), model.dt, model.unfolds, lags_of(model), block_h=16,
                                          schedule="stepwise")
        ref, (ref_hT,) = model(x, (h0,))
        weight = torch.randn_like(ref)
        grads = torch.autograd.grad((out * weight).sum() + hT.sum(), (x, h0, model.system.W2))
        ref_grads = torch.autograd.grad((ref * weight).sum() + ref_hT.sum(), (x, h0, model.system.W2))
        assert torch.allclose(out, ref, rtol=0, atol=1e-12) and torch.allclose(hT, ref_hT, rtol=0, atol=1e-12), call
        for a, b in zip(grads, ref_grads):
            assert torch.allclose(a, b, rtol=0, atol=1e-11), call
        assert graphs.captures == captures and len(graphs.entries) == entries, call


@DTYPES
@pytest.mark.parametrize("name", list(LAG_CASES))
def test_grid_weights_on_chip_lags(name, dtype, monkeypatch):
    """The grid kernels with the weights on chip (``grid.resident``; forced at hidden 9, one column program per
    batch block, which the interpreter can run) over the lag edge cases: the delayed adjoint of a program's columns
    goes through LD and comes back to the same program m steps later (m = 0: at once; beyond T: never)."""
    from odelab.kernels.cuda import grid

    monkeypatch.setattr(grid, "schedule_for", lambda *args: "grid")
    launched = []
    real = grid.launch_resident
    monkeypatch.setattr(grid, "launch_resident", lambda kernel, *args, **kw: launched.append(kernel.fn.__name__)
                        or real(kernel, *args, **kw))
    run = kernel(".cuda.delay_gru:run_" + ("taugru" if name.startswith("taugru") else "delaygru"))
    torch.manual_seed(1)
    errors = relative_errors(LAG_CASES[name](3, 9), lambda *a, **kw: run(*a, schedule="grid", **kw), 3, 4, 9, dtype)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    assert launched == ["_grid_forward", "_grid_backward"]
