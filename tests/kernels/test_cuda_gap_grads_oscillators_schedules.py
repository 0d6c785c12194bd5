"""Gaps requiring grad (a learned Δt) in the stepwise and grid schedules of coRNN (explicit and implicit damping, fixed
and learned γ, ε) and the neural oscillator: each column-tile program of the backward's first phase writes its
columns' part of ∂L/∂h per row and step into a (B, T, column tiles) buffer that torch sums -- the stepwise phases,
the generic grid driver running them, and the grid kernel with the weights on chip. Against the generic loop
(``run_sequence`` with autograd): outputs, final state and the gradients of every parameter (γ, ε where learned), x,
the initial state and the gaps. Importing ``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` without CUDA.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_gap_grads import SCHEDULES, expected_launches, on_schedule, record_launches
from test_cuda_gap_grads_oscillators import CELLS, TOL, draw, errors
from test_cuda_kernels import float32_at, kernel

from odelab.kernels.cuda import oscillators


def _errors(name, where, dtype, monkeypatch, unfolds=1):
    batch, time, hidden, block_h, schedule = on_schedule(where, monkeypatch)
    return errors(name, (batch, time, hidden, block_h), dtype, unfolds, schedule=schedule)


@pytest.mark.parametrize("where, dtype", float32_at(SCHEDULES, {"stepwise"}))
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_equal_the_generic_loop(name, where, dtype, monkeypatch):
    errs = _errors(name, where, dtype, monkeypatch)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= TOL[dtype], (worst, errs[worst])


@pytest.mark.parametrize("where", list(SCHEDULES))
def test_two_unfolds(where, monkeypatch):
    """L = 2 sub-steps a sample: each sub-step's part reaches its gap (implicit damping, learned γ, ε)."""
    errs = _errors("cornn-implicit-learned-coefficients", where, torch.float64, monkeypatch, unfolds=2)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= TOL[torch.float64], (worst, errs[worst])


@pytest.fixture
def launched(monkeypatch):
    return record_launches(monkeypatch, oscillators)


@pytest.mark.parametrize("where", list(SCHEDULES))
@pytest.mark.parametrize("name", ["cornn", "oscillator"])
def test_each_schedule_ran_with_the_gaps_gradient(name, where, launched, monkeypatch):
    """The schedule asked for is the one that ran, its backward with DHS and no persistent kernel."""
    errs = _errors(name, where, torch.float64, monkeypatch)
    assert max(errs.values()) <= TOL[torch.float64], errs
    assert launched == expected_launches(where, True), launched


@pytest.mark.parametrize("where", list(SCHEDULES))
def test_gaps_without_grad_run_without_the_gaps_gradient(where, launched, monkeypatch):
    """Gaps that are data: the same schedule, its backward without DHS, and no gradient to the gaps."""
    batch, time, hidden, block_h, schedule = on_schedule(where, monkeypatch)
    system, x, state, gaps = draw("cornn-learned-coefficients", batch, time, hidden, torch.float64)
    gaps = gaps.detach()
    out, _ = kernel(CELLS["cornn-learned-coefficients"][2])(system, x, state, gaps, 1, (), block_h=block_h,
                                                            schedule=schedule)
    out.sum().backward()
    assert gaps.grad is None and x.grad is not None
    assert launched == expected_launches(where, False), launched


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("block_h", [None, 32], ids=["auto-tiles", "block-h-32"])
@pytest.mark.parametrize("schedule", ["stepwise", "grid"])
@pytest.mark.parametrize("name", [name for name in CELLS if name.startswith("cornn")])
def test_gap_gradients_on_the_gpu(name, schedule, block_h):
    """Full-size tiles compiled on a GPU, several column-tile programs a batch block: (64, 100, 128) float32 against
    the generic loop in float32 ("grid" with tiles chosen: the weights on chip; with block_h 32 the generic driver).
    coRNN only: the oscillator's random W runs away over long sequences (its full-size test, with a restoring W, is
    test_cuda_gap_grads_oscillators.py's, now under the default grid schedule)."""
    errs = errors(name, (64, 100, 128, block_h), torch.float32, 1, schedule=schedule)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= 1e-4, (worst, errs[worst])
