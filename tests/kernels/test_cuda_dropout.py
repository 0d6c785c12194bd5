"""State dropout inside the CUDA (Triton) kernels of τ-GRU and Delay GRU (``drop=``, the factors of every sub-step
``(batch, time · unfolds, 2, hidden)``): sub-step k runs from h̃ = drop[:, k, 0] ⊙ h_k and reads the delayed state as
drop[:, k, 1] ⊙ h_{k−m}, every schedule of ``kernels/cuda/delay_gru.py``.

The reference is the generic loop with the same factors replayed (``helpers.replayed_dropout``; the loop's dropout is
the definition): outputs, final state with its history, and the gradients with respect to every parameter, the input,
the initial state (and an incoming history), 1e-10 relative in float64, 1e-5 in float32.

Importing ``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` before Triton is imported (without CUDA) and skips
this module where the interpreter cannot run the kernels.
"""
from __future__ import annotations

import pytest
import torch
from helpers import replayed_dropout, state_dropout_masks
from test_cuda_kernels import DEVICE, generic, kernel, lags_of

from odelab import Recurrent, cells, systems
from odelab.kernels import chunks
from odelab.kernels.cuda import delay_gru, grid, stepwise
from odelab.solvers.recurrence import DelayedState, run_sequence
from odelab.solvers.schemes import resolve_scheme

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
P = 0.3  # the drop probability of every test at interpreter sizes (each draw has zeros: masks_for)

CELLS = {  # name -> model (input_size, hidden); lags m = ⌊τ/Δt⌋ in sub-steps
    "taugru": lambda m, d: cells.TauGRU(m, d, tau=2.0),  # m = 2
    "delaygru": lambda m, d: cells.DelayGRU(m, d, tau=1.0),  # m = 1
    "taugru-lag0": lambda m, d: cells.TauGRU(m, d, tau=0.5),  # τ < Δt: the current state, its own factor K1
    "taugru-lag1": lambda m, d: cells.TauGRU(m, d, tau=1.0),
    "taugru-lag-beyond-T": lambda m, d: cells.TauGRU(m, d, tau=7.0),
    "taugru-tau0": lambda m, d: cells.TauGRU(m, d, tau=0.0),  # no delay: z reads h̃ itself
    "taugru-beta0-alpha0.5": lambda m, d: cells.TauGRU(m, d, tau=1.0, beta=0.0, alpha=0.5),
    "taugru-no-gating-no-weighting": lambda m, d: cells.TauGRU(m, d, tau=2.0, gating=False, weighting=False),
    "taugru-alpha0": lambda m, d: cells.TauGRU(m, d, tau=2.0, alpha=0.0),  # no delayed branch
    "delaygru-lag0": lambda m, d: cells.DelayGRU(m, d, tau=0.5),
    "delaygru-lag-beyond-T": lambda m, d: cells.DelayGRU(m, d, tau=9.0),
    "delaygru-tau0": lambda m, d: cells.DelayGRU(m, d, tau=0.0),
    "taugru-2-unfolds": lambda m, d: Recurrent(systems.TauGRU(m, d, tau=1.0), "euler", 1.0, unfolds=2),  # m = 2
    "delaygru-2-unfolds": lambda m, d: Recurrent(systems.DelayGRU(m, d, tau=1.5), "euler", 1.0, unfolds=2),  # 3
}

# where -> (batch, time, hidden, block_h, schedule, the kernels launched forward and backward): the register-resident
# one-launch kernels (hidden ≤ 32), the tiled ones (block_h), the stepwise schedule, the grid schedule's tiled driver
# (block_h 32: one column tile, what the interpreter can synchronise; batch 19: two batch blocks) and the grid kernels
# with weights on chip (hidden ≤ 16 forced onto them)
SCHEDULES = {
    "resident": (3, 5, 6, None, "persistent", ["_forward_resident", "_backward_resident"]),
    "tiled": (17, 4, 17, 16, "persistent", ["_forward", "_backward"]),
    "stepwise": (3, 4, 33, 16, "stepwise", ["_step", "_step_backward"]),
    "grid": (19, 3, 17, 32, "grid", ["_grid", "_grid"]),
    "grid-weights-on-chip": (19, 4, 13, None, "grid-on-chip", ["_grid_forward", "_grid_backward"]),
}


class _Recorded:
    """A one-launch kernel that records its name when launched."""

    def __init__(self, kernel, names):
        self.kernel, self.names = kernel, names

    def __getitem__(self, launch_grid):
        self.names.append(self.kernel.fn.__name__)
        return self.kernel[launch_grid]


@pytest.fixture
def launched(monkeypatch):
    """The names of the delay-GRU kernels launched, in order (every schedule's launcher wrapped)."""
    names = []
    for name in ("_forward", "_forward_resident", "_backward", "_backward_resident"):
        monkeypatch.setattr(delay_gru, name, _Recorded(getattr(delay_gru, name), names))
    steps = delay_gru.launch_steps
    monkeypatch.setattr(delay_gru, "launch_steps",
                        lambda tensors, launch: names.append(launch.key[0].fn.__name__) or steps(tensors, launch))
    for name in ("launch", "launch_resident"):
        monkeypatch.setattr(grid, name, lambda kernel, *args, real=getattr(grid, name), **kw:
                            names.append(kernel.fn.__name__) or real(kernel, *args, **kw))
    return names


def runner(name: str, schedule: str, block_h, monkeypatch):
    """The kernel of the cell ``name`` on ``schedule`` ("grid-on-chip": ``grid.schedule_for`` forced to "grid")."""
    if schedule == "grid-on-chip":
        monkeypatch.setattr(grid, "schedule_for", lambda *args: "grid")
        schedule = "grid"
    run = kernel(".cuda.delay_gru:run_" + ("taugru" if name.startswith("taugru") else "delaygru"))
    return lambda *args, **kw: run(*args, schedule=schedule, block_h=block_h, **kw)


def reference_drop(masks, lags):
    """The generic loop's ``drop`` replaying ``masks``; without a delay it drops only the state a step starts from
    (the field's delayed read is that dropped state), so only the factors K0 are replayed."""
    if lags:
        return replayed_dropout(masks)
    order = iter([masks[:, k, 0] for k in range(masks.shape[1])])
    return lambda block: block * next(order)


def masks_for(batch, steps, hidden, dtype, seed=0):
    """Factors (batch, steps, 2, hidden) with p = P, of the first generator seed from ``seed`` on whose draw has both
    zeros and kept entries (at 1 × 1 × 1 two draws of two entries)."""
    for s in range(seed, seed + 100):
        masks = state_dropout_masks(batch, steps, hidden, P, dtype, DEVICE, torch.Generator().manual_seed(s))
        if (masks == 0).any() and (masks != 0).any():
            return masks
    raise AssertionError("no draw with both zeros and kept entries")


def relative(a, b) -> float:
    """max |a − b| / max |b| (a floor of 1e-2, as ``test_cuda_kernels.relative_errors``)."""
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-2)).item()


def dropout_errors(model, run, batch, time, hidden, dtype, depth=None, seed=0):
    """Relative errors of outputs, final state (and history) and every gradient of ``run`` with the factors against
    the generic loop replaying them; ``depth``: the state a DelayedState with a (batch, depth, hidden) history."""
    torch.manual_seed(seed)
    model = generic(model).to(device=DEVICE, dtype=dtype)
    system, lags = model.system, lags_of(model)
    x = torch.randn(batch, time, 3, device=DEVICE, dtype=dtype, requires_grad=True)
    h0 = (0.5 * torch.randn(batch, hidden, device=DEVICE, dtype=dtype)).requires_grad_()
    leaves = [x, h0]
    state = (h0,)
    if depth is not None:
        history = (0.5 * torch.randn(batch, depth, hidden, device=DEVICE, dtype=dtype)).requires_grad_()
        state = DelayedState((h0,), (history,))
        leaves.append(history)
    masks = masks_for(batch, time * model.unfolds, hidden, dtype, seed)
    out, final = run(system, x, state, model.dt, model.unfolds, lags, drop=masks)
    ref, ref_final = run_sequence(system, resolve_scheme("euler"), x, state, model.dt, model.unfolds, lags,
                                  drop=reference_drop(masks, lags))
    kept = [out, *final, *getattr(final, "history", ())]
    ref_kept = [ref, *ref_final, *getattr(ref_final, "history", ())]
    assert len(kept) == len(ref_kept) == (3 if lags else 2)
    weights = [torch.randn_like(r) for r in ref_kept]
    params = [p for p in model.parameters() if p.requires_grad]
    loss = lambda values: sum((v * w).sum() for v, w in zip(values, weights))
    grads = torch.autograd.grad(loss(kept), leaves + params, allow_unused=True)
    ref_grads = torch.autograd.grad(loss(ref_kept), leaves + params, allow_unused=True)
    names = ["outputs", "final", "history"][:len(kept)] + ["grad x", "grad h0", "grad history"][:len(leaves)]
    names += [f"grad {n}" for n, p in model.named_parameters() if p.requires_grad]
    errors = {}
    for name, a, b in zip(names, kept + list(grads), ref_kept + list(ref_grads)):
        if b is None or b.numel() == 0:  # no gradient reaches it (a history beyond every read; an empty one)
            assert a is None or not a.any(), name
            continue
        errors[name] = relative(a, b)
    return errors


def assert_within(errors, dtype):
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])


def test_the_registrations_with_dropout_are_these_kernels():
    """The CUDA registrations with ``dropout=True`` are exactly the two kernels tested here."""
    from odelab.kernels import REGISTRY

    dropping = {impl.target for key, impl in REGISTRY.items() if key[2] == "cuda" and impl.dropout}
    assert dropping == {".cuda.delay_gru:run_taugru", ".cuda.delay_gru:run_delaygru"}


@DTYPES
@pytest.mark.parametrize("where", list(SCHEDULES))
@pytest.mark.parametrize("name", ["taugru", "delaygru"])
def test_dropout_in_every_schedule(name, where, dtype, launched, monkeypatch):
    batch, time, hidden, block_h, schedule, kernels = SCHEDULES[where]
    if schedule == "grid-on-chip":
        assert grid.resident(batch, hidden, None, torch.device(DEVICE))
    run = runner(name, schedule, block_h, monkeypatch)
    assert_within(dropout_errors(CELLS[name](3, hidden), run, batch, time, hidden, dtype), dtype)
    assert launched == kernels


@pytest.mark.parametrize("where", ["resident", "stepwise", "grid-weights-on-chip"])
@pytest.mark.parametrize("name", [n for n in CELLS if n not in ("taugru", "delaygru")])
def test_dropout_lags_and_ablations(name, where, launched, monkeypatch):
    """Lag 0 (τ < Δt: the current state through its own factor K1), 1, beyond T, no delay (τ = 0), the ablations
    (other constexprs) and 2 sub-steps a sample, float64, on the register-resident kernels, the tiles every tiled
    schedule shares and the grid kernels with weights on chip (each its own code)."""
    batch, time, hidden, block_h, schedule, kernels = SCHEDULES[where]
    run = runner(name, schedule, block_h, monkeypatch)
    assert_within(dropout_errors(CELLS[name](3, hidden), run, batch, time, hidden, torch.float64), torch.float64)
    assert launched == kernels


@pytest.mark.parametrize("where", ["stepwise", "grid", "grid-weights-on-chip"])
@pytest.mark.parametrize("name", list(CELLS))
def test_dropout_with_stored_branches(name, where, launched, monkeypatch):
    """``ODELAB_GRID_GATES=stored``: the stepwise and grid kernels whose backward reads the branches the forward
    stored (the maps streamed, or on chip), with dropout, lags 0, 1 and beyond T, no delay, the ablations and
    sub-steps, float64, against the generic loop."""
    monkeypatch.setenv(grid.GATES_ENV, "stored")
    batch, time, hidden, block_h, schedule, kernels = SCHEDULES[where]
    run = runner(name, schedule, block_h, monkeypatch)
    assert_within(dropout_errors(CELLS[name](3, hidden), run, batch, time, hidden, torch.float64), torch.float64)
    assert launched == kernels


ODD_SIZES = [  # (batch, time, hidden, block_h, schedule)
    (1, 1, 1, None, "persistent"),
    (1, 1, 1, 16, "persistent"),
    (2, 3, 17, None, "persistent"),
    (1, 2, 33, None, "persistent"),  # hidden 33 > 32: the tiled kernels (two 32-wide tiles)
    (1, 1, 33, 16, "stepwise"),
]


@pytest.mark.parametrize("size", ODD_SIZES, ids=lambda s: "x".join(map(str, s[:3])) + f"-{s[4]}-{s[3]}")
@pytest.mark.parametrize("name", ["taugru", "delaygru"])
def test_dropout_odd_sizes(name, size, monkeypatch):
    """Hidden 1, 17, 33, batch 1, T = 1 (the τ-GRU's lag of 2 beyond the sequence), float32."""
    batch, time, hidden, block_h, schedule = size
    run = runner(name, schedule, block_h, monkeypatch)
    assert_within(dropout_errors(CELLS[name](3, hidden), run, batch, time, hidden, torch.float32), torch.float32)


@pytest.mark.parametrize("where", ["resident", "stepwise", "grid-weights-on-chip"])
@pytest.mark.parametrize("name", ["taugru-lag-beyond-T", "delaygru-2-unfolds"])
def test_dropout_with_a_delayed_state_history(name, where, monkeypatch):
    """A DelayedState whose history is longer than the piece (m = 7 over 3 samples; Delay GRU with 2 sub-steps: m = 3
    over 2 sub-steps): its reads enter through ``chunks.add_history`` with the factors K1 of the steps that read
    them; the gradient reaches the history."""
    batch, _, hidden, block_h, schedule, _ = SCHEDULES[where]
    time = 3 if name.startswith("taugru") else 1
    model = CELLS[name](3, hidden)
    depth = lags_of(model)[0]
    assert depth > time * model.unfolds
    run = runner(name, schedule, block_h, monkeypatch)
    assert_within(dropout_errors(model, run, batch, time, hidden, torch.float64, depth=depth), torch.float64)


@pytest.mark.parametrize("schedule", ["persistent", "stepwise"])
@pytest.mark.parametrize("name, tau, history", [("taugru", 2.0, False), ("taugru", 5.0, True), ("delaygru", 1.0, True)])
def test_dropout_without_backward_runs_in_chunks(name, tau, history, schedule, monkeypatch):
    """Under ``torch.no_grad()`` the sequence runs 2 samples a chunk (``chunks.CHUNK_STATE_BYTES`` shrunk), each chunk
    its own slice of the factors, its first reads from the states before it (lag 5 > a chunk: from several chunks
    back and from the incoming history): the generic loop's outputs, final state and history."""
    torch.manual_seed(4)
    build = cells.TauGRU if name == "taugru" else cells.DelayGRU
    model = generic(build(3, 5, tau=tau)).to(device=DEVICE, dtype=torch.float64)
    lags = lags_of(model)
    x = torch.randn(3, 7, 3, device=DEVICE, dtype=torch.float64)
    state = (0.5 * torch.randn(3, 5, device=DEVICE, dtype=torch.float64),)
    if history:
        state = DelayedState(state, (torch.randn(3, lags[0], 5, device=DEVICE, dtype=torch.float64),))
    masks = masks_for(3, 7, 5, torch.float64)
    monkeypatch.setattr(chunks, "CHUNK_STATE_BYTES", 2 * 3 * 5 * 8)
    assert chunks.steps_per_chunk(x, 1, 5) == 2
    pieces = []
    apply = grid.apply
    monkeypatch.setattr(grid, "apply", lambda *args: pieces.append(args[1].shape[1]) or apply(*args))
    run = runner(name, schedule, 16 if schedule == "stepwise" else None, monkeypatch)
    with torch.no_grad():
        out, final = run(model.system, x, state, model.dt, 1, lags, drop=masks)
        ref, ref_final = run_sequence(model.system, resolve_scheme("euler"), x, state, model.dt, 1, lags,
                                      drop=replayed_dropout(masks))
    assert pieces == [2, 2, 2, 1]
    for a, b in zip((out, final[0], final.history[0]), (ref, ref_final[0], ref_final.history[0])):
        assert relative(a, b) <= 1e-12


def test_dropout_is_part_of_the_stepwise_graph_key(monkeypatch):
    """Through the graph cache (its CUDA capture stood in by re-running the recorded launches): a call with the factors
    and one without at the same shapes get launches of their own (DROP is part of the key), each its own values."""
    graphs = stepwise.StepGraphs(capture=lambda launch: launch)
    monkeypatch.setattr(stepwise, "graphs_for", lambda device: graphs)
    torch.manual_seed(2)
    model = generic(cells.TauGRU(3, 17, tau=2.0)).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(3, 4, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(3, 17, device=DEVICE, dtype=torch.float64)
    masks = masks_for(3, 4, 17, torch.float64)
    for call, (drop, entries) in enumerate([(masks, 2), (None, 4), (masks, 4), (None, 4)]):
        out, _ = delay_gru.run_taugru(model.system, x, (h0,), model.dt, 1, lags_of(model), block_h=16,
                                      schedule="stepwise", drop=drop)
        ref, _ = run_sequence(model.system, resolve_scheme("euler"), x, (h0,), model.dt, 1, lags_of(model),
                              drop=None if drop is None else replayed_dropout(drop))
        (grad,) = torch.autograd.grad(out.sum(), x)
        (ref_grad,) = torch.autograd.grad(ref.sum(), x)
        assert relative(out, ref) <= 1e-12 and relative(grad, ref_grad) <= 1e-11, call
        assert len(graphs.entries) == entries, call


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="the default CUDA schedule at a realistic size")
@pytest.mark.parametrize("name", ["taugru", "delaygru"])
def test_dropout_full_size_on_the_gpu(name):
    """(64, 256, 128) with p = 0.04 (the τ-GRU paper's IMDB preset), the default schedule: the float32 kernel's
    deviation from the generic float64 loop ≤ 10 × the generic float32 loop's + 1e-5, every tensor."""
    batch, time, hidden = 64, 256, 128
    torch.manual_seed(0)
    model = generic(CELLS[name](4, hidden)).to(DEVICE)
    lags = lags_of(model)
    x = torch.randn(batch, time, 4, device=DEVICE, dtype=torch.float64)
    h0 = 0.5 * torch.randn(batch, hidden, device=DEVICE, dtype=torch.float64)
    masks = state_dropout_masks(batch, time, hidden, 0.04, torch.float64, DEVICE, torch.Generator().manual_seed(1))
    weights = [torch.randn(batch, time, hidden, device=DEVICE, dtype=torch.float64)]
    weights += [torch.randn(batch, hidden, device=DEVICE, dtype=torch.float64)]

    def evaluate(dtype, fused):
        m = model.to(dtype)
        xs, s0, k = x.to(dtype).requires_grad_(), h0.to(dtype).requires_grad_(), masks.to(dtype)
        if fused:
            out, final = kernel(".cuda.delay_gru:run_" + name)(m.system, xs, (s0,), m.dt, 1, lags, drop=k)
        else:
            out, final = run_sequence(m.system, resolve_scheme("euler"), xs, (s0,), m.dt, 1, lags,
                                      drop=replayed_dropout(k))
        loss = (out * weights[0].to(dtype)).sum() + (final[0] * weights[1].to(dtype)).sum()
        grads = torch.autograd.grad(loss, [xs, s0, *m.parameters()])
        return [v.detach().double() for v in (out, final[0], *grads)]

    reference = evaluate(torch.float64, False)
    plain = [relative(a, b) for a, b in zip(evaluate(torch.float32, False), reference)]
    fused = [relative(a, b) for a, b in zip(evaluate(torch.float32, True), reference)]
    assert all(f <= 10 * p + 1e-5 for f, p in zip(fused, plain)), (fused, plain)
