"""The stepwise schedule (``odelab.kernels.cuda.stepwise``) of the GRU-ODE kernel, both reset conventions, against
the generic loop: outputs, final state and every gradient (``relative_errors``), with 16-wide column tiles so that
hidden 17 and 33 span two and three column programs and batch 17 two batch blocks."""
from __future__ import annotations

import pytest
import torch
from test_cuda_kernels import DEVICE, PRESETS, STEPWISE_SIZES, generic, kernel, relative_errors

from odelab import Recurrent, systems

GRU = ["gru-ode", "gru-ode-reset-before"]


def stepwise(run):
    return lambda *args, **kw: run(*args, schedule="stepwise", **kw)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("size", STEPWISE_SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", GRU)
def test_gru_stepwise_equals_generic(name, size, dtype):
    """1e-10 in float64, 1e-5 in float32."""
    build, target = PRESETS[name]
    batch, time, hidden = size
    errors = relative_errors(build(3, hidden), stepwise(kernel(target)), batch, time, hidden, dtype, block_h=16)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= (1e-10 if dtype == torch.float64 else 1e-5), (worst, errors[worst])


@pytest.mark.parametrize("reset_after", [True, False], ids=["after", "before"])
def test_gru_stepwise_unfolds(reset_after):
    """Three Euler sub-steps of Δt/3 per sample (the input held) at hidden 33, float64."""
    model = Recurrent(systems.GRU(3, 33, reset_after=reset_after), "euler", 0.9, unfolds=3)
    errors = relative_errors(model, stepwise(kernel(".cuda.gru:run")), 17, 2, 33, torch.float64, block_h=16)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-10, (worst, errors[worst])


@pytest.mark.parametrize("name", GRU)
def test_gru_stepwise_graphs_replay_with_each_calls_tensors(name, monkeypatch):
    """Through the graph cache, its CUDA capture stood in by re-running the recorded launches (which read the same
    address table): call 1 runs eagerly, call 2 records the forward and the backward, call 3 replays -- and each
    call's outputs, final state and input and initial-state gradients are those of its own inputs."""
    from odelab.kernels.cuda import gru, stepwise as schedule

    graphs = schedule.StepGraphs(capture=lambda launch: launch)
    monkeypatch.setattr(schedule, "graphs_for", lambda device: graphs)
    build, _ = PRESETS[name]
    model = generic(build(3, 33)).to(device=DEVICE, dtype=torch.float64)
    kept = []  # earlier calls' tensors stay alive: stale addresses would read them
    for call, captures in enumerate((0, 2, 2)):
        torch.manual_seed(10 + call)
        x = torch.randn(17, 3, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
        state = (torch.randn(17, 33, device=DEVICE, dtype=torch.float64, requires_grad=True),)
        kept.append((x, state))
        out, final = gru.run(model.system, x, state, model.dt, block_h=16, schedule="stepwise")
        ref, ref_final = model(x, state)
        weight = torch.randn_like(ref)
        grads = torch.autograd.grad((out * weight).sum() + final[0].sum(), (x, state[0]))
        ref_grads = torch.autograd.grad((ref * weight).sum() + ref_final[0].sum(), (x, state[0]))
        for a, b in ((out, ref), (final[0], ref_final[0]), *zip(grads, ref_grads)):
            assert torch.allclose(a, b, rtol=0, atol=1e-12), call
        assert graphs.captures == captures and len(graphs.entries) == 2
