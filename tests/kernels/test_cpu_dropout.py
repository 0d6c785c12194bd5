"""State dropout inside the CPU kernels of τ-GRU and Delay GRU (the τ-GRU code's ``cell(x, dropout(h), x_delay,
dropout(h_delay))``, its IMDB preset p = 0.04): while training, ``Recurrent`` draws the factors of every sub-step
once and hands them to the kernel or to the generic loop, so the same seed gives the same masks on either engine.

The reference is the generic loop (``engine="generic"``, the definition; the loop's dropout against τ-GRU's eq. 14
written out is tested in tests/models/test_state_dropout.py): outputs, final state with its history, and the
gradients with respect to every parameter, the input and the initial state, 1e-10 (float64) and 1e-5 (float32).
"""
from __future__ import annotations

import zlib

import pytest
import torch
from helpers import replayed_dropout, state_dropout_masks
from test_cpu_kernels import CELLS, TOLERANCE, relative

from odelab.kernels.cpu import common, extension, taugru
from odelab.solvers.recurrence import delay_lags, run_sequence
from odelab.solvers.schemes import resolve_scheme

DELAY_CELLS = [name for name in CELLS if name.startswith(("taugru", "delaygru"))]
SIZES = [(1, 1, 1, 1), (3, 7, 17, 2), (4, 9, 1, 1), (6, 40, 33, 3), (2, 3, 300, 2)]  # (batch, time, hidden, input)


@pytest.fixture(scope="module", autouse=True)
def compiled():
    if not extension.available():
        pytest.skip(f"the CPU kernels do not build here: {extension.failure()}")


def dropped_run(model, x, state, engine: str, seed: int):
    """(outputs, final blocks + history, gradients) of one training step of ``model`` on ``engine``, the dropout
    factors drawn from ``seed``."""
    model.engine = engine
    xs = x.detach().clone().requires_grad_(True)
    s0 = tuple(s.detach().clone().requires_grad_(True) for s in state)
    torch.manual_seed(seed)
    out, final = model(xs, s0)
    g = torch.Generator().manual_seed(seed)
    loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum()
    loss = loss + (final[0] * torch.randn(final[0].shape, generator=g, dtype=out.dtype)).sum()
    inputs = [xs, *s0, *model.parameters()]
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    kept = [*final, *getattr(final, "history", ())]
    return out.detach(), [k.detach() for k in kept], [torch.zeros_like(i) if d is None else d
                                                      for i, d in zip(inputs, grads)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", DELAY_CELLS)
def test_dropout_on_the_kernel_equals_the_generic_loop(name, size, dtype):
    batch, steps, hidden, inputs = size
    torch.manual_seed(zlib.crc32(f"{name}{size}".encode()))
    model = CELLS[name](inputs, hidden).to(dtype)
    model.state_dropout = 0.3
    x = torch.randn(batch, steps, inputs, dtype=dtype)
    state = (0.5 * torch.randn(batch, hidden, dtype=dtype),)
    assert model.kernel(x) is not None, "training with state dropout should keep the kernel"
    fused = dropped_run(model, x, state, "fused", seed=5)
    plain = dropped_run(model, x, state, "generic", seed=5)
    errors = {"outputs": relative(fused[0], plain[0])}
    errors.update({f"final[{i}]": relative(a, b) for i, (a, b) in enumerate(zip(fused[1], plain[1], strict=True))})
    names = ["x", "h0", *(n for n, _ in model.named_parameters())]
    errors.update({f"grad {n}": relative(a, b) for n, a, b in zip(names, fused[2], plain[2], strict=True)})
    bad = {k: v for k, v in errors.items() if not v <= TOLERANCE[dtype]}
    assert not bad, f"errors above {TOLERANCE[dtype]}: {bad}"
    if steps * hidden > 1:  # the masks acted: the evaluation forward (no dropout) differs
        model.eval()
        assert not torch.allclose(model(x, state)[0], fused[0])


def kernel_run(name, model):
    return taugru.run_tau_gru if name.startswith("taugru") else taugru.run_delay_gru


@pytest.mark.parametrize("name", ["taugru", "delaygru-lag1-unfolds", "taugru-lag-beyond-T"])
def test_a_sequence_in_pieces_continues_the_masks_and_the_history(name):
    """Two calls, the second from the first's DelayedState with the rest of the factors, give one call's outputs
    and gradients; the first m reads of the second piece (into the history) are dropped by their own factors."""
    torch.manual_seed(3)
    model = CELLS[name](2, 5).double()
    x = torch.randn(3, 8, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(3, 5, dtype=torch.float64)
    L, lags = model.unfolds, delay_lags(model.system, model.dt / model.unfolds)
    K = state_dropout_masks(3, 8 * L, 5, 0.4, generator=torch.Generator().manual_seed(1))
    run = kernel_run(name, model)
    whole, _ = run(model.system, x, (h0,), model.dt, L, lags, drop=K)
    first, state = run(model.system, x[:, :3], (h0,), model.dt, L, lags, drop=K[:, :3 * L].contiguous())
    second, _ = run(model.system, x[:, 3:], state, model.dt, L, lags, drop=K[:, 3 * L:].contiguous())
    pieces = torch.cat((first, second), dim=1)
    reference, _ = run_sequence(model.system, resolve_scheme("euler"), x, (h0,), model.dt, L, lags,
                                drop=replayed_dropout(K))
    assert relative(pieces, reference) <= 1e-12 and relative(whole, reference) <= 1e-12
    w = torch.randn_like(reference)
    grads = [torch.autograd.grad((out * w).sum(), [x, *model.parameters()]) for out in (pieces, reference)]
    for a, b in zip(*grads, strict=True):
        assert relative(a, b) <= 1e-10


@pytest.mark.parametrize("name", ["taugru", "delaygru", "delaygru-lag1-unfolds"])
def test_dropout_without_backward_runs_in_chunks(name, monkeypatch):
    """A training-mode forward with nothing requiring grad runs a chunk of samples at a time, each chunk reading its
    own steps' factors: the outputs and the final state of the forward with a backward, to round-off."""
    torch.manual_seed(4)
    model = CELLS[name](2, 9).double()
    x = torch.randn(3, 7, 2, dtype=torch.float64)
    h0 = 0.5 * torch.randn(3, 9, dtype=torch.float64)
    L, lags = model.unfolds, delay_lags(model.system, model.dt / model.unfolds)
    K = state_dropout_masks(3, 7 * L, 9, 0.3)
    run = kernel_run(name, model)
    trained, trained_final = run(model.system, x.requires_grad_(True), (h0,), model.dt, L, lags, drop=K)
    width = model.system.encode(x[:1, :1]).shape[-1]
    monkeypatch.setattr(common, "CHUNK_BYTES", 2 * 3 * L * width * 8)  # 2 samples a chunk
    with torch.no_grad():
        inferred, final = run(model.system, x, (h0,), model.dt, L, lags, drop=K)
    assert relative(inferred, trained.detach()) <= 1e-14
    assert relative(final[0], trained_final[0].detach()) <= 1e-14
    assert relative(final.history[0], trained_final.history[0].detach()) <= 1e-14
