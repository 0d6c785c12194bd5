"""The gaps' gradient (a learned Δt) in LEM's stepwise and grid schedules: each column-tile program writes its
columns' part of ∂L/∂Δt per row and step (the stepwise phases and the grid driver: the y- and z-steps' parts apart;
the weights-on-chip grid backward: both in one), summed by torch. Against the generic loop (``run_sequence`` with
autograd): outputs, final state and the gradients of every parameter, x, the initial state and the gaps. Importing
``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` without CUDA, where a grid barrier is met only by a batch block of
one column tile: the grid driver at ``block_h`` ≥ hidden, the weights-on-chip kernels at hidden ≤ 16.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_gap_grads import CELLS as ALL_CELLS
from test_cuda_gap_grads import SCHEDULES, TOL, errors_with_gap_grads, on_schedule
from test_cuda_kernels import float32_at

from odelab.kernels.cuda import lem

CELLS = {name: ALL_CELLS[name] for name in ("lem", "lem-3-unfolds")}
# the kernels each schedule launches (forward, backward)
LAUNCHED = {"stepwise": ("_lem_step", "_lem_step_backward"), "grid": ("_lem_grid", "_lem_grid"),
            "grid-weights-on-chip": ("_lem_grid_forward", "_lem_grid_backward")}
PERSISTENT = ("_lem_forward", "_lem_backward", "_lem_forward_resident", "_lem_backward_resident")


def _errors(name, size, dtype, monkeypatch):
    build, target = CELLS[name]
    batch, time, hidden, block_h, schedule = on_schedule(size, monkeypatch)
    return errors_with_gap_grads(build, target, batch, time, hidden, dtype, block_h, schedule)


@pytest.mark.parametrize("size, dtype", float32_at(SCHEDULES, {"stepwise"}))
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_equal_the_generic_loop(name, size, dtype, monkeypatch):
    errors, dgaps = _errors(name, size, dtype, monkeypatch)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    assert dgaps.abs().max() > 0


@pytest.mark.parametrize("size", list(SCHEDULES))
def test_the_schedule_asked_for_runs_its_backward_with_dhs(size, monkeypatch):
    """The launches recorded: the schedule asked for, its backward with DHS (the forward without), no persistent
    kernel; the stepwise ones a launch per phase and step (2 forward, 3 backward, T · unfolds = 9 steps)."""
    launched = []

    def recording(attr):
        fn = getattr(lem, attr)

        class Launcher:
            def __getitem__(self, programs):
                return lambda *args, **kw: launched.append((attr, kw.get("DHS"))) or fn[programs](*args, **kw)
        return Launcher()

    for attr in {*PERSISTENT, *LAUNCHED[size]}:
        monkeypatch.setattr(lem, attr, recording(attr))
    errors, _ = _errors("lem-3-unfolds", size, torch.float64, monkeypatch)
    assert max(errors.values()) <= TOL[torch.float64]
    forward, backward = LAUNCHED[size]
    if size == "stepwise":
        assert launched == [(forward, None)] * 2 * 9 + [(backward, True)] * 3 * 9, launched
    else:
        assert launched == [(forward, False if size == "grid" else None), (backward, True)], launched


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("block_h", [None, 32], ids=["auto-tiles", "block-h-32"])
@pytest.mark.parametrize("schedule", ["stepwise", "grid"])
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_on_the_gpu(name, schedule, block_h):
    """Full-size tiles compiled on a GPU, several column-tile programs a batch block: (64, 100, 128) float32 against
    the generic loop ("grid" with tiles chosen: the weights on chip; with block_h 32 the generic driver)."""
    build, target = CELLS[name]
    errors, dgaps = errors_with_gap_grads(build, target, 64, 100, 128, torch.float32, block_h, schedule)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-4, (worst, errors[worst])
    assert dgaps.abs().max() > 0
