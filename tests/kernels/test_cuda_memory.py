"""What a fused CUDA training step holds at its peak, counted on ``meta`` tensors (no GPU, no kernel launch):
``benchmarks/cuda_memory_model.py``, which reproduced the H200's ``torch.cuda.max_memory_allocated`` of the fused
cells to 2.5 % in 56 of 60 rows. Each preset's budget is the buffers its backward needs at once, in units of one
(B, T, H) state sequence W, plus the batch chunks that its weight gradients copy: issue 13 asks for a training
step's peak to stay at or below nn.LSTM's (12 W with cuDNN at (1024, 1000, 256) on the H200)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: it loads without a driver
pytest.importorskip("triton")

from odelab import cells  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
B, T, H, INPUTS = 16, 120, 40, 4  # hidden > 32: the grid-synchronised schedule's Functions, as at hidden 128 or 256
W = B * T * H * 4  # one float32 (B, T, H) tensor

# preset -> (constructor, budget in W: what its backward holds at once)
BUDGETS = {
    # the encoding (4 blocks) and its gradient, the states z and y, the loss gradient
    "lem": (lambda: cells.LEM(INPUTS, H), 4 + 4 + 2 + 1),
    # the encoding (1 block) and its gradient, z and y, the loss gradient
    "cornn": (lambda: cells.CoRNN(INPUTS, H), 1 + 1 + 2 + 1),
    "cornn-implicit": (lambda: cells.CoRNN(INPUTS, H, damping="implicit"), 1 + 1 + 2 + 1),
    "oscillator": (lambda: cells.NeuralOscillator(INPUTS, H), 1 + 1 + 2 + 1),
    "unicornn": (lambda: cells.UnICORNN(INPUTS, H), 1 + 1 + 2 + 1),
    "unicornn-reversible": (lambda: cells.UnICORNN(INPUTS, H, reversible=True), 2),
    # the encoding (3 blocks), its gradient (4 blocks: the reset-after candidate's hidden part too), h, the loss's
    "gru-ode": (lambda: cells.GRUODE(INPUTS, H), 3 + 4 + 1 + 1),
    # the encoding (4 blocks) and its gradient, h, the delayed adjoints, the loss gradient
    "taugru": (lambda: cells.PRESETS["taugru"](INPUTS, H), 4 + 4 + 1 + 1 + 1),
    "delaygru": (lambda: cells.PRESETS["delaygru"](INPUTS, H), 2 + 2 + 1 + 1 + 1),
    # every sub-step's state (6 unfolds), f_in and u_in and their gradients, the loss gradient
    "ltc": (lambda: cells.LTC(INPUTS, H), 6 + 2 + 2 + 1),
    "stc": (lambda: cells.STC(INPUTS, H), 6 + 2 + 2 + 1),
    # h, f_in and u_in and their gradients, O_xᵀ x + p and its gradient, the loss gradient
    "lrcu-a": (lambda: cells.PRESETS["lrcu-a"](INPUTS, H), 1 + 2 + 2 + 2 + 1),
    "lrcu-s": (lambda: cells.PRESETS["lrcu-s"](INPUTS, H), 1 + 2 + 2 + 2 + 1),
}


def memory_model():
    spec = importlib.util.spec_from_file_location("cuda_memory_model", ROOT / "benchmarks" / "cuda_memory_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_of_memory():
    return memory_model()


@pytest.mark.parametrize("name", list(BUDGETS))
def test_training_step_peak_within_budget(name, model_of_memory, monkeypatch):
    """The modelled peak ≤ the budget + W / 2, with the weight gradients' copies made one batch row at a time
    (W / 16 each), as the chunks are small beside the whole at (1024, 1000, 256); the rest of the margin is the
    (H, H) weight gradients, large beside W at this size. A whole copy of a state sequence, or the input synapses'
    openings (n, H) of every row (n = 4 here: 4 W), breaks it."""
    from odelab.kernels.cuda import _common

    monkeypatch.setattr(_common.outer_sum, "__defaults__", (T * H * 4,))
    build, budget = BUDGETS[name]
    torch.manual_seed(0)
    model = build().to("meta")
    peak = model_of_memory.modelled_peak(model, torch.empty(B, T, INPUTS, device="meta"))
    assert peak.peak <= (budget + 0.5) * W, (peak.peak / W, [(n / W, op, shape) for n, op, shape in peak.at_peak])


def test_the_model_counts_what_a_step_allocates(model_of_memory):
    """The counter itself: two (B, T, H) buffers live at once and a third after one is released peak at 2 W, and a
    view adds nothing."""
    with model_of_memory.PeakStorage() as tracker:
        a = torch.empty(B, T, H, device="meta")
        b = torch.zeros(B, T, H, device="meta")
        view = a[:, 1:]  # noqa: F841
        del b
        c = torch.ones(B, T, H, device="meta")  # noqa: F841
    assert tracker.peak == 2 * W


@pytest.mark.parametrize("name", [n for n in BUDGETS if n not in ("taugru", "delaygru")])
def test_forward_without_backward_holds_its_outputs_and_a_chunk(name, model_of_memory, monkeypatch):
    """Under ``torch.no_grad()`` the cells without delays run in chunks of steps (``odelab/kernels/chunks.py``;
    here 8 of the 120, as 64 of 1000 at (1024, 1000, 256)): the modelled peak is the outputs (W) and one chunk's buffers, ≤ 1.6 W -- LEM's, the
    widest: its encoding (4 chunks of state sequence, 8/120 W each), its states z and y (2), the previous chunk's
    outputs (1), 1.47 W, and (B, H) states -- where LEM in one piece holds its encoding and both states, 6 W; LEM's
    kernels read a transposed copy of its four H × H weights besides (``lem.transposed_weights``; 0.08 W at these
    sizes, 0.001 W at (1024, 1000, 256))."""
    from odelab.kernels import chunks

    monkeypatch.setattr(chunks, "CHUNK_STATE_BYTES", B * 8 * H * 4)
    build, _ = BUDGETS[name]
    torch.manual_seed(0)
    model = build().to("meta")
    x = torch.empty(B, T, INPUTS, device="meta")
    peak = model_of_memory.modelled_forward_peak(model, x)
    transposed = 4 * H * H * 4 if name == "lem" else 0
    assert peak.peak <= 1.6 * W + transposed, (peak.peak / W, [(n / W, op, shape) for n, op, shape in peak.at_peak])
    if name == "lem":
        monkeypatch.setattr(chunks, "CHUNK_STATE_BYTES", 1 << 40)
        assert model_of_memory.modelled_forward_peak(model, x).peak >= 6 * W
