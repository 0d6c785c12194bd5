"""Per-sample steps (``Recurrent.forward(x, dt=gaps)``) in the liquid cells' Triton kernels (``cuda/liquid.py``) on
the schedules that ``test_cuda_gaps``' generic ones do not reach: the one-launch kernels with fewer batch rows a
program (``ODELAB_LIQUID_ROWS``), several column tiles, the synapse tiles' stepwise schedule over several row slabs
and tiles, their grid schedule with several element blocks, its stepwise rerun, LRC with sub-steps, and the
input-synapse kernels in small blocks -- each against the generic loop with the same gaps (float64 to 1e-10,
float32 to 1e-5): outputs, final state, every gradient (none to the gaps).

Importing ``test_cuda_gaps`` (through ``test_cuda_kernels``) sets ``TRITON_INTERPRET=1`` without CUDA.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_gaps import TOL, gap_errors
from test_cuda_kernels import DEVICE, _RecordGrid, float32_at, kernel, recorded_counters

from odelab import Recurrent, cells, systems
from odelab.kernels import chunks
from odelab.kernels.cuda import grid, liquid

DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])

# name -> (model (input_size, hidden) -> Recurrent, kernel target)
CELLS = {
    "ltc": (lambda m, d: cells.LTC(m, d, dt=1.0, unfolds=2), ".cuda.liquid:run_ltc"),
    "stc": (lambda m, d: cells.STC(m, d, dt=1.0, unfolds=2), ".cuda.liquid:run_stc"),
    "lrcu-a": (lambda m, d: cells.LRCU(m, d, "asymmetric"), ".cuda.liquid:run_lrc"),
    "lrcu-s": (lambda m, d: cells.LRCU(m, d, "symmetric"), ".cuda.liquid:run_lrc"),
    "lrcu-s-3-unfolds": (lambda m, d: Recurrent(systems.LRC(m, d, "symmetric"), "euler", 1.0, unfolds=3),
                         ".cuda.liquid:run_lrc"),  # the gap split into Euler sub-steps
}


def _run(name, schedule, **fixed):
    return lambda *args, **kw: kernel(CELLS[name][1])(*args, schedule=schedule, **fixed, **kw)


def _check(errors, dtype):
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])


@pytest.mark.parametrize("rows", ["1", "4"])
@pytest.mark.parametrize("hidden, block_h", [(5, None), (17, 16)])
@pytest.mark.parametrize("name", ["ltc", "stc", "lrcu-a", "lrcu-s-3-unfolds"])
def test_one_launch_with_fewer_rows(name, hidden, block_h, rows, monkeypatch):
    """``ODELAB_LIQUID_ROWS`` 1 and 4 (batch 5: a ragged last program), in registers (hidden 5) and in 16-wide tiles
    (hidden 17; LRC's keep 16 rows): each program reads its own rows' gaps."""
    monkeypatch.setenv(liquid.ROWS_ENV, rows)
    launched = []
    for kernel_name in ("_forward", "_forward_resident", "_backward", "_backward_resident"):
        monkeypatch.setattr(liquid, kernel_name, _RecordGrid(getattr(liquid, kernel_name), launched))
    run = _run(name, "persistent", block_h=block_h)
    _check(gap_errors(CELLS[name][0](3, hidden), run, 5, 3, hidden, torch.float64), torch.float64)
    expected = 1 if name.startswith("lrcu") and hidden > 16 else -(-5 // int(rows))
    assert len(launched) == 2 and all(programs == expected for programs in launched), launched


@pytest.mark.parametrize("name, dtype", float32_at(CELLS, {"ltc", "lrcu-s"}))
def test_one_launch_tiles(name, dtype):
    """The tiled one-launch kernels over three 16-wide column tiles (hidden 40, ragged) and two batch blocks (float32:
    LTC's and LRC's updates)."""
    _check(gap_errors(CELLS[name][0](3, 40), _run(name, "persistent", block_h=16), 18, 3, 40, dtype), dtype)


@pytest.mark.parametrize("name", ["ltc", "lrcu-s", "lrcu-s-3-unfolds"])
def test_stepwise_with_row_slabs(name):
    """The stepwise synapse phases over five row slabs (batch 70) and 2 × 2 tiles of 16 × 16 (hidden 20); the
    element phases over 6 blocks of 256 (row, neuron) elements, each reading its rows' gaps."""
    assert liquid.synapse_tiles(20, "stepwise", torch.device(DEVICE)) == (16, 16)
    assert liquid.slab_rows(16, 16, 70) == 16
    _check(gap_errors(CELLS[name][0](3, 20), _run(name, "stepwise"), 70, 3, 20, torch.float64), torch.float64)


@DTYPES
@pytest.mark.parametrize("size", [(1, 1, 17), (19, 4, 17), (40, 3, 30)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["ltc", "stc", "lrcu-a", "lrcu-s"])
def test_grid(name, size, dtype, monkeypatch):
    """The synapse tiles' grid schedule (under the interpreter one tile of the whole matrix; element phases in
    blocks of 256 to 1024, two of 1024 at 40 × 30), its barriers as without gaps: two a sub-step forward, two a
    sub-step T … 0 backward."""
    made = recorded_counters(monkeypatch)
    batch, time, hidden = size
    model = CELLS[name][0](3, hidden)
    assert liquid.liquid_schedule("grid", torch.empty(batch, time, 3, device=DEVICE), hidden, None) == "grid"
    _check(gap_errors(model, _run(name, "grid"), batch, time, hidden, dtype), dtype)
    steps = time * model.unfolds
    assert [m.tolist() for m in made] == [[2 * steps, 0], [2 * (steps + 1), 0]]


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the abandoned grid forward read stale rows
def test_grid_barrier_never_met_reruns_stepwise_with_the_gaps(monkeypatch):
    """A grid forward whose barrier is not met (8 × 4 tiles at hidden 17: 15 programs the interpreter runs one after
    another) reruns stepwise with the same gaps (``grid.apply`` replaces the schedule, the last argument): the
    values of asking for stepwise."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's sequential programs are the stand-in for non-resident ones")
    monkeypatch.setattr(grid, "SPIN_LIMIT", 3)
    monkeypatch.setattr(grid, "_NOT_RESIDENT", set())
    monkeypatch.setattr(liquid, "synapse_tiles", lambda m, schedule, device: (8, 4) if schedule == "grid" else (16, 16))
    model = CELLS["ltc"][0](3, 17).double()
    x = torch.randn(2, 2, 3, dtype=torch.float64)
    state = (torch.zeros(2, 17, dtype=torch.float64),)
    gaps = torch.tensor([[0.3, 1.4], [0.9, 0.0]], dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="reran with the stepwise schedule"):
        out, final = liquid.run_ltc(model.system, x, state, gaps, model.unfolds, schedule="grid")
    ref, ref_final = liquid.run_ltc(model.system, x, state, gaps, model.unfolds, schedule="stepwise")
    assert torch.equal(out, ref) and torch.equal(final[0], ref_final[0])
    model.engine = "generic"
    expected, _ = model(x, state, dt=gaps)
    assert (out - expected).abs().max() < 1e-12


@pytest.mark.parametrize("schedule", ["stepwise", "grid"])
@pytest.mark.parametrize("name", ["ltc", "lrcu-s"])
def test_synapse_tiles_in_chunks_without_a_backward(name, schedule, monkeypatch):
    """Under ``torch.no_grad()`` the synapse-tile schedules run chunks of 4 samples, each with its slice of the gaps:
    the values of one piece."""
    torch.manual_seed(4)
    model = CELLS[name][0](3, 17).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(2, 9, 3, device=DEVICE, dtype=torch.float64)
    state = (torch.zeros(2, 17, device=DEVICE, dtype=torch.float64),)
    gaps = 1.5 * torch.rand(2, 9, device=DEVICE, dtype=torch.float64)
    run = _run(name, schedule)
    with torch.no_grad():
        whole, whole_final = run(model.system, x, state, gaps, model.unfolds, ())
        monkeypatch.setattr(chunks, "CHUNK_STATE_BYTES", 2 * 4 * model.unfolds * 17 * 8)
        assert chunks.steps_per_chunk(x, model.unfolds, 17) == 4
        pieces, pieces_final = run(model.system, x, state, gaps, model.unfolds, ())
    assert (whole - pieces).abs().max() < 1e-13 and (whole_final[0] - pieces_final[0]).abs().max() < 1e-13


def test_stepwise_graphs_keyed_by_gaps(monkeypatch):
    """The stepwise launches (a CUDA graph per key on a GPU) of a call with gaps and of one without have different
    keys: their element kernels and address tables differ."""
    keys = []
    real = liquid.launch_steps
    monkeypatch.setattr(liquid, "launch_steps", lambda tensors, launch: keys.append(launch.key) or real(tensors, launch))
    model = CELLS["ltc"][0](3, 17)
    x = torch.randn(2, 2, 3, device=DEVICE)
    state = (torch.zeros(2, 17, device=DEVICE),)
    with torch.no_grad():
        liquid.run_ltc(model.system, x, state, 1.0, model.unfolds, schedule="stepwise")
        liquid.run_ltc(model.system, x, state, torch.ones(2, 2, device=DEVICE), model.unfolds, schedule="stepwise")
    assert len(keys) == 2 and keys[0] != keys[1]


@pytest.mark.parametrize("name", ["ltc", "lrcu-s"])
def test_input_synapse_blocks(name, monkeypatch):
    """The input-synapse kernels in blocks of 4 rows (of B·T = 23: ragged) and 4 columns (hidden 5), the backward's 3
    row groups, under gaps (their per-sample sums of ∂L/∂f_in, ∂L/∂u_in over a sample's sub-steps)."""
    monkeypatch.setattr(liquid, "INPUT_ROWS", 4)
    monkeypatch.setattr(liquid, "INPUT_COLUMNS", 4)
    monkeypatch.setattr(liquid, "input_groups", lambda rows, inputs, device: 3)
    _check(gap_errors(CELLS[name][0](2, 5), _run(name, "persistent"), 1, 23, 5, torch.float64, input_size=2),
           torch.float64)
