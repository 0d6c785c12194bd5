"""The gaps' gradient in the Triton kernels of LEM and GRU-ODE (per-sample steps requiring grad: a learned Δt, time
gaps to train): the persistent schedule's backward kernels (register-resident and tiled) return ∂L/∂Δt per row and
step, which reaches the gaps through ``kernels.gaps.per_step_lengths`` (the stepwise and grid schedules' backward:
test_cuda_gap_grads_lem_schedules.py and test_cuda_gap_grads_gru_schedules.py). Against the generic loop
(``solvers.recurrence.run_sequence`` with autograd): outputs, final state and the gradients of every parameter, the
input, the initial state and the gaps. Importing ``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` without CUDA.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_kernels import DEVICE, float32_at, kernel

from odelab import Recurrent, cells, systems
from odelab.kernels.cuda import grid, gru, lem
from odelab.solvers.recurrence import run_sequence
from odelab.solvers.schemes import resolve_scheme

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}

# name -> (model (input_size, hidden) -> Recurrent, kernel target)
CELLS = {
    "lem": (lambda m, d: cells.LEM(m, d, dt=0.7), ".cuda.lem:run"),
    "lem-3-unfolds": (lambda m, d: Recurrent(systems.LEM(m, d), "imex", 0.9, unfolds=3), ".cuda.lem:run"),
    "gru-ode": (lambda m, d: cells.GRUODE(m, d, dt=0.8), ".cuda.gru:run"),
    "gru-ode-3-unfolds": (lambda m, d: Recurrent(systems.GRU(m, d), "euler", 1.0, unfolds=3), ".cuda.gru:run"),
    "gru-ode-reset-before": (lambda m, d: cells.GRUODE(m, d, dt=0.8, reset_after=False), ".cuda.gru:run"),
}
# (batch, time, hidden, block_h): register-resident (hidden ≤ 32), batch 1 and T = 1, tiled (two and three tiles)
SIZES = {
    "resident": (3, 5, 6, None),
    "resident-batch-1-T-1": (1, 1, 4, None),
    "tiled-17": (3, 4, 17, 16),
    "tiled-33": (2, 3, 33, 16),
}


def errors_with_gap_grads(build, target, batch, time, hidden, dtype, block_h=None, schedule=None, seed=0):
    """Max relative error per tensor (max |a − b| / max |b|, floor 1e-2) of the kernel against ``run_sequence`` with
    the same gaps (a U[0, 1.5) draw, every third one from the second exactly 0) requiring grad; and the gaps'
    gradient."""
    torch.manual_seed(seed)
    model = build(3, hidden).to(device=DEVICE, dtype=dtype)
    system = model.system
    x = torch.randn(batch, time, 3, device=DEVICE, dtype=dtype, requires_grad=True)
    state = tuple((0.5 * torch.randn(batch, n, device=DEVICE, dtype=dtype)).requires_grad_()
                  for n in system.block_sizes())
    gaps = 1.5 * torch.rand(batch, time, device=DEVICE, dtype=dtype)
    gaps.view(-1)[1::3] = 0.0
    gaps.requires_grad_()
    extra = {} if block_h is None else {"block_h": block_h}
    out, final = kernel(target)(system, x, state, gaps, model.unfolds, (), schedule=schedule, **extra)
    ref, ref_final = run_sequence(system, resolve_scheme(model.scheme.name), x, state, gaps, model.unfolds)
    weights = [torch.randn_like(ref)] + [torch.randn_like(f) for f in ref_final]

    def loss(o, f):
        return (o * weights[0]).sum() + sum((a * w).sum() for a, w in zip(f, weights[1:]))

    params = dict(system.named_parameters())
    inputs = [x, *state, gaps, *params.values()]
    names = ["x", *(f"state[{i}]" for i in range(len(state))), "gaps", *params]
    grads = torch.autograd.grad(loss(out, final), inputs)
    ref_grads = torch.autograd.grad(loss(ref, ref_final), inputs)
    pairs = [("outputs", out, ref), *((f"final[{i}]", a, b) for i, (a, b) in enumerate(zip(final, ref_final)))]
    pairs += [(f"grad {n}", a, b) for n, a, b in zip(names, grads, ref_grads)]
    errors = {name: ((a - b).abs().max() / b.abs().max().clamp_min(1e-2)).item() for name, a, b in pairs}
    return errors, grads[names.index("gaps")]


# where -> (batch, time, hidden, block_h, schedule) of the stepwise and grid schedules that Triton's interpreter
# reaches: the stepwise phases over two batch blocks and two 16-wide column tiles (the second masked), the generic
# grid driver over two batch blocks of one 32-wide tile (the interpreter meets a barrier of one column program only),
# the grid kernels with the weights on chip (hidden ≤ 16 forced onto them: a GPU's choice from hidden 33)
SCHEDULES = {
    "stepwise": (17, 3, 20, 16, "stepwise"),
    "grid": (19, 3, 17, 32, "grid"),
    "grid-weights-on-chip": (19, 3, 13, None, "grid"),
}


def on_schedule(where, monkeypatch):
    """:data:`SCHEDULES`[where], checked to be the schedule ``grid.schedule_for`` takes there (forced onto it for the
    weights on chip, whose kernels the sizes admit)."""
    batch, time, hidden, block_h, schedule = SCHEDULES[where]
    if where == "grid-weights-on-chip":
        monkeypatch.setattr(grid, "schedule_for", lambda schedule, *args: schedule)
        assert grid.resident(batch, hidden, None, torch.device(DEVICE))
    else:
        assert grid.schedule_for(schedule, torch.empty(batch, time, 3, device=DEVICE), hidden, block_h) == schedule
    return batch, time, hidden, block_h, schedule

def record_launches(monkeypatch, module):
    """The launches of ``module``'s kernels, in order, as (kernel name, DHS): its persistent kernels (recorded, not
    run), the stepwise ones by their graph key, the grid ones by their launcher."""
    names = []

    def persistent(attr):
        class Launcher:
            def __getitem__(self, programs):
                return lambda *args, **kw: names.append((attr, kw.get("DHS")))
        return Launcher()

    for attr in ("_forward", "_backward", "_forward_resident", "_backward_resident"):
        monkeypatch.setattr(module, attr, persistent(attr))
    steps = module.launch_steps
    monkeypatch.setattr(module, "launch_steps", lambda tensors, launch: names.append(
        (launch.key[0].fn.__name__, dict(launch.key[-1]).get("DHS"))) or steps(tensors, launch))
    for attr in ("launch", "launch_resident"):
        monkeypatch.setattr(grid, attr, lambda kernel, *args, real=getattr(grid, attr), **kw: names.append(
            (kernel.fn.__name__, kw.get("DHS"))) or real(kernel, *args, **kw))
    return names


def expected_launches(where, dhs):
    """What :func:`record_launches` sees of a forward and backward under schedule ``where`` of GRU-ODE's or the
    oscillators' kernels (the backward with DHS ``dhs``)."""
    return {"stepwise": [("_step", None), ("_step_backward", dhs)],
            "grid": [("_grid", False), ("_grid", dhs)],
            "grid-weights-on-chip": [("_grid_forward", None), ("_grid_backward", dhs)]}[where]

@pytest.mark.parametrize("size, dtype", float32_at(SIZES, {"resident", "resident-batch-1-T-1"}))
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_equal_the_generic_loop(name, size, dtype):
    build, target = CELLS[name]
    batch, time, hidden, block_h = SIZES[size]
    errors, dgaps = errors_with_gap_grads(build, target, batch, time, hidden, dtype, block_h)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    assert dgaps.abs().max() > 0


@pytest.mark.parametrize("name", ["lem", "gru-ode"])
def test_gaps_without_grad_keep_the_chosen_schedule(name, monkeypatch):
    """Gaps that are data (no gradient) still run the schedule asked for (here stepwise), the backward without DHS."""
    module = lem if name == "lem" else gru
    real, calls = module.launch_steps, []
    monkeypatch.setattr(module, "launch_steps", lambda *args: calls.append(1) or real(*args))
    build, target = CELLS[name]
    torch.manual_seed(0)
    model = build(3, 17).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(2, 3, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
    state = tuple(torch.zeros(2, n, device=DEVICE, dtype=torch.float64) for n in model.system.block_sizes())
    gaps = torch.rand(2, 3, device=DEVICE, dtype=torch.float64)
    out, _ = kernel(target)(model.system, x, state, gaps, model.unfolds, (), schedule="stepwise", block_h=16)
    out.sum().backward()
    assert len(calls) == 2  # forward and backward


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_on_the_gpu(name):
    """Full-size tiles compiled on a GPU: (64, 200, 128) float32 (the tiled kernels: hidden > 32), against the
    generic loop."""
    build, target = CELLS[name]
    errors, dgaps = errors_with_gap_grads(build, target, 64, 200, 128, torch.float32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-4, (worst, errors[worst])
    assert dgaps.abs().max() > 0


def test_the_registrations_with_gap_gradients_are_the_tested_kernels():
    """The CUDA registrations with ``gap_grads=True`` are exactly the kernels tested here and in
    test_cuda_gap_grads_oscillators.py and test_cuda_gap_grads_liquid.py."""
    from odelab.kernels import REGISTRY

    with_grads = {impl.target for key, impl in REGISTRY.items() if key[2] == "cuda" and impl.gap_grads}
    assert with_grads == {".cuda.lem:run", ".cuda.gru:run", ".cuda.oscillators:run_cornn_explicit",
                          ".cuda.oscillators:run_cornn_implicit", ".cuda.oscillators:run_oscillator",
                          ".cuda.liquid:run_ltc", ".cuda.liquid:run_stc", ".cuda.liquid:run_lrc"}
