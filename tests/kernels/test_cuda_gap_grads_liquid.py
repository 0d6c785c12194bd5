"""Gaps requiring grad (a learned Δt, time gaps to train) in the liquid cells' Triton kernels (LTC, STC, LRCU-A/S):
every schedule's backward returns ∂L/∂δ of each sample's sub-step length δ = gap / L -- the register-resident and
tiled one-launch kernels summed over a sample's sub-steps in registers, the synapse tiles' stepwise and grid
schedules per element into a (B, T, H) buffer summed by torch. Against the generic loop (``run_sequence`` with
autograd): outputs, final state and the gradients of every parameter, x, the initial state and the gaps. Importing
``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` without CUDA.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_gap_grads import TOL, errors_with_gap_grads
from test_cuda_gaps_liquid import CELLS  # the liquid presets, their sub-steps and kernels
from test_cuda_kernels import DEVICE, float32_at

from odelab.kernels.cuda import liquid


# (batch, time, hidden, block_h, schedule): the register-resident kernels (hidden ≤ 16), batch 1 and T = 1, the
# tiled one-launch kernels over two and three 16-wide column tiles, the synapse tiles' stepwise and grid schedules
SIZES = {
    "resident": (3, 4, 6, None, "persistent"),
    "resident-batch-1-T-1": (1, 1, 4, None, "persistent"),
    "tiled-17": (3, 3, 17, 16, "persistent"),
    "tiled-33": (2, 2, 33, 16, "persistent"),
    "stepwise-20": (3, 3, 20, None, "stepwise"),
    "grid-17": (3, 3, 17, None, "grid"),
}


def _errors(name, size, dtype):
    build, target = CELLS[name]
    batch, time, hidden, block_h, schedule = SIZES[size]
    return errors_with_gap_grads(build, target, batch, time, hidden, dtype, block_h, schedule)


@pytest.mark.parametrize("size, dtype", float32_at(SIZES, {"resident", "resident-batch-1-T-1", "stepwise-20"}))
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_equal_the_generic_loop(name, size, dtype):
    errors, dgaps = _errors(name, size, dtype)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    assert dgaps.abs().max() > 0


@pytest.mark.parametrize("size", ["resident", "tiled-17", "stepwise-20", "grid-17"])
def test_each_schedule_ran(size, monkeypatch):
    """The schedule asked for is the one that ran, its backward with the lengths' gradient: the launches recorded."""
    launched = []

    def recording(attr):
        fn = getattr(liquid, attr)

        class Launcher:
            def __getitem__(self, programs):
                return lambda *args, **kw: launched.append((attr, kw.get("DHS"))) or fn[programs](*args, **kw)
        return Launcher()

    for attr in ("_forward", "_backward", "_forward_resident", "_backward_resident", "_grid", "_element_step"):
        monkeypatch.setattr(liquid, attr, recording(attr))
    errors, _ = _errors("ltc", size, torch.float64)
    assert max(errors.values()) <= TOL[torch.float64]
    schedule = SIZES[size][4]
    if schedule == "persistent":
        kind = "_resident" if size == "resident" else ""
        assert launched == [(f"_forward{kind}", None), (f"_backward{kind}", True)], launched
    elif schedule == "grid":
        assert launched == [("_grid", False), ("_grid", True)], launched
    else:  # a forward element phase a sub-step (2 × 3), then the backward's (sub-steps 6 … 0)
        assert launched == [("_element_step", False)] * 6 + [("_element_step", True)] * 7, launched


def test_gaps_without_grad_leave_the_length_gradient_out():
    """Gaps that are data: no ∂L/∂gaps, and the backward kernels run without DHS (the gradient of every other input
    as before, tested in test_cuda_gaps and test_cuda_gaps_liquid)."""
    torch.manual_seed(0)
    build, target = CELLS["ltc"]
    model = build(3, 6).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(2, 3, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
    gaps = torch.rand(2, 3, device=DEVICE, dtype=torch.float64)
    out, _ = model(x, dt=gaps)
    out.sum().backward()
    assert gaps.grad is None and x.grad is not None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("schedule", ["persistent", "stepwise", "grid"])
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_on_the_gpu(name, schedule):
    """Full-size tiles compiled on a GPU: (64, 100, 128) float32 against the generic loop, every schedule."""
    build, target = CELLS[name]
    errors, dgaps = errors_with_gap_grads(build, target, 64, 100, 128, torch.float32, schedule=schedule)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-4, (worst, errors[worst])
    assert dgaps.abs().max() > 0
