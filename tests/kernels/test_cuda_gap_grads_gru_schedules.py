"""Gaps requiring grad (a learned Δt) in GRU-ODE's stepwise and grid schedules (both reset conventions): each
column-tile program of the backward's gates phase writes its columns' part of ∂L/∂Δt per row and step into a (B, T,
column tiles) buffer that torch sums -- the stepwise phases, the generic grid driver running them, and the grid
kernel with the weights on chip (reset after). Against the generic loop (``run_sequence`` with autograd): outputs,
final state and the gradients of every parameter, x, the initial state and the gaps. Importing ``test_cuda_kernels``
sets ``TRITON_INTERPRET=1`` without CUDA.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_gap_grads import (CELLS, SCHEDULES, TOL, errors_with_gap_grads, expected_launches, on_schedule,
                                 record_launches)
from test_cuda_kernels import DEVICE, float32_at

from odelab.kernels.cuda import gru

GRU = ["gru-ode", "gru-ode-3-unfolds", "gru-ode-reset-before"]
CASES = [(name, where) for name in GRU for where in SCHEDULES
         if not (where == "grid-weights-on-chip" and name == "gru-ode-reset-before")]


def _errors(name, where, dtype, monkeypatch):
    batch, time, hidden, block_h, schedule = on_schedule(where, monkeypatch)
    build, target = CELLS[name]
    return errors_with_gap_grads(build, target, batch, time, hidden, dtype, block_h, schedule)


@pytest.mark.parametrize("name, where, dtype", float32_at(CASES, {"stepwise"}))
def test_gap_gradients_equal_the_generic_loop(name, where, dtype, monkeypatch):
    errors, dgaps = _errors(name, where, dtype, monkeypatch)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    assert dgaps.abs().max() > 0


@pytest.fixture
def launched(monkeypatch):
    return record_launches(monkeypatch, gru)


@pytest.mark.parametrize("name, where", [c for c in CASES if c[0] != "gru-ode-3-unfolds"])
def test_each_schedule_ran_with_the_gaps_gradient(name, where, launched, monkeypatch):
    """The schedule asked for is the one that ran, its backward with DHS and no persistent kernel."""
    errors, dgaps = _errors(name, where, torch.float64, monkeypatch)
    assert max(errors.values()) <= TOL[torch.float64]
    assert dgaps.abs().max() > 0
    assert launched == expected_launches(where, True), launched


@pytest.mark.parametrize("where", list(SCHEDULES))
def test_gaps_without_grad_run_without_the_gaps_gradient(where, launched, monkeypatch):
    """Gaps that are data: the same schedule, its backward without DHS, and no gradient to the gaps."""
    batch, time, hidden, block_h, schedule = on_schedule(where, monkeypatch)
    torch.manual_seed(0)
    build, _ = CELLS["gru-ode"]
    model = build(3, hidden).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(batch, time, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
    gaps = torch.rand(batch, time, device=DEVICE, dtype=torch.float64)
    h0 = torch.zeros(batch, hidden, device=DEVICE, dtype=torch.float64)
    out, _ = gru.run(model.system, x, (h0,), gaps, block_h=block_h, schedule=schedule)
    out.sum().backward()
    assert gaps.grad is None and x.grad is not None
    assert launched == expected_launches(where, False), launched


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("block_h", [None, 32], ids=["auto-tiles", "block-h-32"])
@pytest.mark.parametrize("schedule", ["stepwise", "grid"])
@pytest.mark.parametrize("name", GRU)
def test_gap_gradients_on_the_gpu(name, schedule, block_h):
    """Full-size tiles compiled on a GPU, several column-tile programs a batch block: (64, 100, 128) float32 against
    the generic loop ("grid" with tiles chosen: the weights on chip where reset after; with block_h 32 the generic
    driver)."""
    build, target = CELLS[name]
    errors, dgaps = errors_with_gap_grads(build, target, 64, 100, 128, torch.float32, block_h, schedule)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-4, (worst, errors[worst])
    assert dgaps.abs().max() > 0
