"""The compiled CPU kernels (odelab.kernels.cpu) against the generic path: outputs, final state and the
gradients with respect to every parameter, the input and the initial state, in float32 (1e-5 relative) and
float64 (1e-10), over odd sizes (hidden 1 and 17, batch 1, T = 1) and the unfold / delay edge cases.

The reference is ``Recurrent(..., engine="generic")`` (the definition; its agreement with the papers is tested
elsewhere). Errors are relative to the largest magnitude of the reference tensor.
"""
from __future__ import annotations

import ctypes
import warnings
import zlib

import pytest
import torch

from odelab import cells
from odelab.kernels.cpu import extension

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}

# name -> constructor (input_size, hidden_size) -> Recurrent; non-default steps so that dt is exercised
CELLS = {
    "lem": lambda m, d: cells.LEM(m, d, dt=0.7),
    "lem-unfolds": lambda m, d: _unfolded(cells.LEM(m, d, dt=0.9), 3),
    "cornn": lambda m, d: cells.CoRNN(m, d, dt=0.3, gamma=1.3, epsilon=2.7),
    "cornn-implicit": lambda m, d: cells.CoRNN(m, d, dt=0.4, gamma=0.8, epsilon=3.1, damping="implicit"),
    "unicornn": lambda m, d: _layer(cells.UnICORNN(m, d, dt=1.3, alpha=0.7)),
    "gru-ode": lambda m, d: cells.GRUODE(m, d, dt=0.8),
    "oscillator": lambda m, d: cells.NeuralOscillator(m, d, dt=0.3),
    "delaygru": lambda m, d: cells.DelayGRU(m, d, tau=3.0, dt=1.0),
    "delaygru-lag1-unfolds": lambda m, d: _unfolded(cells.DelayGRU(m, d, tau=0.5, dt=1.0), 2),  # m = 1 per sub-step
    "delaygru-lag-beyond-T": lambda m, d: cells.DelayGRU(m, d, tau=50.0),
    "delaygru-no-delay": lambda m, d: cells.DelayGRU(m, d, tau=0.0),  # m = 0: reads the current state
    "taugru": lambda m, d: cells.TauGRU(m, d, tau=2.0, dt=0.7),  # m = ⌊2/0.7⌋ = 2
    "taugru-lag1": lambda m, d: cells.TauGRU(m, d, tau=1.0),
    "taugru-lag-beyond-T": lambda m, d: cells.TauGRU(m, d, tau=64.0),
    "taugru-alpha-beta": lambda m, d: cells.TauGRU(m, d, tau=3.0, alpha=0.6, beta=0.3),
    "taugru-no-delay": lambda m, d: cells.TauGRU(m, d, tau=0.0),
    "ltc": lambda m, d: cells.LTC(m, d, dt=0.8, unfolds=3),
    "ltc-one-unfold": lambda m, d: cells.LTC(m, d, unfolds=1),
    "stc": lambda m, d: cells.STC(m, d, dt=1.1, unfolds=2),
    "lrcu-a": lambda m, d: cells.LRCU(m, d, "asymmetric", dt=0.9),
    "lrcu-s": lambda m, d: cells.LRCU(m, d, "symmetric"),
    # configurations the kernels hand to the generic loop (the "fused" engine must still give the same)
    "cornn-learned-coefficients": lambda m, d: cells.CoRNN(m, d, learn_coefficients=True),
    "gru-ode-reset-before": lambda m, d: cells.GRUODE(m, d, reset_after=False),
    "taugru-ablation": lambda m, d: cells.TauGRU(m, d, tau=2.0, weighting=False),
}

# (batch, time, hidden, input)
SIZES = [(1, 1, 1, 1), (3, 7, 17, 2), (1, 5, 17, 3), (4, 9, 1, 1), (6, 40, 33, 3), (2, 3, 300, 2)]


def _layer(stack):
    """The single Recurrent layer of a one-layer UnICORNN stack (the fused unit)."""
    layers = [m for m in stack.modules() if hasattr(m, "engine") and hasattr(m, "system")]
    assert len(layers) == 1
    return layers[0]


def _unfolded(model, unfolds):
    model.unfolds = unfolds
    return model


@pytest.fixture(scope="module", autouse=True)
def compiled():
    if not extension.available():
        pytest.skip(f"the CPU kernels do not build here: {extension.failure()}")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() if b.numel() else 0.0


def run_both(model, x, state, seed=0):
    """(outputs, final state, gradients) of the fused and the generic engine, for one random loss."""
    gen = torch.Generator().manual_seed(seed)
    results = []
    for engine in ("fused", "generic"):
        model.engine = engine
        if engine == "fused":
            assert model.kernel(x) is not None, "no fused kernel was selected"
        xs = x.detach().clone().requires_grad_(True)
        s0 = None if state is None else tuple(s.detach().clone().requires_grad_(True) for s in state)
        out, final = model(xs, s0)
        g = torch.Generator().manual_seed(seed)
        loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum()
        for block in final:
            loss = loss + (block * torch.randn(block.shape, generator=g, dtype=block.dtype)).sum()
        inputs = [xs, *(s0 or ()), *[p for p in model.parameters() if p.requires_grad]]
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        grads = [torch.zeros_like(i) if gr is None else gr for i, gr in zip(inputs, grads)]
        results.append((out.detach(), [f.detach() for f in final], grads))
    del gen
    return results


def check(model, x, state):
    (out_f, fin_f, g_f), (out_g, fin_g, g_g) = run_both(model, x, state)
    tol = TOLERANCE[x.dtype]
    errors = {"outputs": relative(out_f, out_g)}
    errors.update({f"final[{i}]": relative(a, b) for i, (a, b) in enumerate(zip(fin_f, fin_g))})
    names = ["x", *(f"state[{i}]" for i in range(len(state or ()))),
             *[n for n, p in model.named_parameters() if p.requires_grad]]
    errors.update({f"grad {n}": relative(a, b) for n, a, b in zip(names, g_f, g_g)})
    assert out_f.shape == out_g.shape and out_f.is_contiguous()
    bad = {k: v for k, v in errors.items() if not v <= tol}
    assert not bad, f"errors above {tol}: {bad}"
    return max(errors.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(CELLS))
def test_fused_equals_generic(name, size, dtype):
    batch, steps, hidden, inputs = size
    torch.manual_seed(zlib.crc32(f"{name}{size}".encode()))
    model = CELLS[name](inputs, hidden).to(dtype)
    x = torch.randn(batch, steps, inputs, dtype=dtype)
    blocks = len(model.system.blocks)
    state = tuple(0.5 * torch.randn(batch, n, dtype=dtype) for n in model.system.block_sizes()[:blocks])
    check(model, x, state)
    if size == SIZES[1]:
        check(model, x, None)  # the default zero initial state


def test_no_grad_and_frozen_parameters():
    model = cells.LEM(2, 5)
    model.system.W2.requires_grad_(False)
    x = torch.randn(3, 6, 2)
    check(model, x, None)
    with torch.no_grad():
        model.engine = "fused"
        fused = model(x)[0]
        model.engine = "generic"
        assert relative(fused, model(x)[0]) < 1e-6


def test_fast_math_matches_torch():
    """The vectorised float32 sigmoid/tanh of the C++ source, over the whole range (abs error ~ 1 ulp of 1)."""
    x = torch.cat([torch.linspace(-100, 100, 200001), torch.logspace(-30, 2, 10000), -torch.logspace(-30, 2, 10000),
                   torch.tensor([0.0, -0.0, 0.625, -0.625])])
    sig, th = torch.empty_like(x), torch.empty_like(x)
    extension.library().odelab_math_f32(ctypes.c_int64(x.numel()), ctypes.c_void_p(x.data_ptr()),
                                        ctypes.c_void_p(sig.data_ptr()), ctypes.c_void_p(th.data_ptr()))
    ref = x.double()
    assert (sig.double() - torch.sigmoid(ref)).abs().max() < 2e-7
    assert (th.double() - torch.tanh(ref)).abs().max() < 2e-7
    small = x.abs() < 0.5  # tanh keeps its relative accuracy near 0
    assert ((th.double() - torch.tanh(ref))[small].abs() / torch.tanh(ref)[small].abs().clamp_min(1e-38)).max() < 5e-7


def test_failed_build_falls_back(monkeypatch):
    """A failed build warns once with the reason, makes the kernels unavailable, and 'auto' runs the generic
    loop (the state of the module is restored afterwards by monkeypatch)."""
    monkeypatch.setattr(extension, "_done", False)
    monkeypatch.setattr(extension, "_library", None)
    monkeypatch.setattr(extension, "_failure", None)
    monkeypatch.setattr(extension, "_compiler", lambda: None)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
        assert not extension.available()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not extension.available()  # once only
    model = cells.LEM(1, 4)
    x = torch.randn(2, 3, 1)
    assert model.kernel(x) is None
    model(x)


@pytest.mark.parametrize("threshold", [0, 2**62], ids=["all-blas", "all-loops"])
@pytest.mark.parametrize("name", ["lem", "cornn", "gru-ode", "taugru", "lrcu-a"])
def test_blas_and_loop_products(name, threshold):
    """Both implementations of the matrix products (the BLAS and the plain loops) give the generic result."""
    if threshold == 0 and not extension.library().odelab_has_blas():
        pytest.skip("this torch exports no sgemm_/dgemm_")
    torch.manual_seed(1)
    model = CELLS[name](3, 20).double()
    x = torch.randn(5, 6, 3, dtype=torch.float64)
    try:
        extension.set_blas_threshold(threshold)
        check(model, x, None)
    finally:
        extension.set_blas_threshold(32 * 32 * 32)
