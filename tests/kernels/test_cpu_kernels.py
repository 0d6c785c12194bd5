"""The compiled CPU kernels (odelab.kernels.cpu) against the generic path: outputs, final state and the
gradients with respect to every parameter, the input and the initial state, in float32 (1e-5 relative) and
float64 (1e-10), over odd sizes (hidden 1 and 17, batch 1, T = 1) and the unfold / delay edge cases.

The reference is ``Recurrent(..., engine="generic")`` (the definition; its agreement with the papers is tested
elsewhere). Errors are relative to the largest magnitude of the reference tensor.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import subprocess
import sys
import warnings
import zlib

import pytest
import torch

from odelab import cells
from odelab.kernels.cpu import common, extension

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
    # §5's ablations: branches switched off (the kernel's kind 2)
    "taugru-ablation": lambda m, d: cells.TauGRU(m, d, tau=2.0, weighting=False),
    "taugru-no-gating": lambda m, d: cells.TauGRU(m, d, tau=1.0, gating=False, alpha=0.6),
    "taugru-alpha0": lambda m, d: cells.TauGRU(m, d, tau=2.0, alpha=0.0),
    "taugru-beta0-no-delay": lambda m, d: cells.TauGRU(m, d, tau=0.0, beta=0.0, official_bias=True),
    "ltc": lambda m, d: cells.LTC(m, d, dt=0.8, unfolds=3),
    "ltc-one-unfold": lambda m, d: cells.LTC(m, d, unfolds=1),
    "stc": lambda m, d: cells.STC(m, d, dt=1.1, unfolds=2),
    "lrcu-a": lambda m, d: cells.LRCU(m, d, "asymmetric", dt=0.9),
    "lrcu-s": lambda m, d: cells.LRCU(m, d, "symmetric"),
    "lrcu-a-unfolds": lambda m, d: _unfolded(cells.LRCU(m, d, "asymmetric", dt=0.7), 3),  # dL/dO_h over sub-steps
    # configurations the kernels hand to the generic loop (the "fused" engine must still give the same)
    "cornn-learned-coefficients": lambda m, d: cells.CoRNN(m, d, learn_coefficients=True),
    "gru-ode-reset-before": lambda m, d: cells.GRUODE(m, d, reset_after=False),
}

# (batch, time, hidden, input)
# (input 9: wider than common.AFFINE_CHANNELS, encoded by torch's product; batch 19: the liquid backward's blocks of
# 16 rows and 4 rows, and their remainders)
SIZES = [(1, 1, 1, 1), (3, 7, 17, 2), (1, 5, 17, 3), (4, 9, 1, 1), (6, 40, 33, 3), (2, 3, 300, 2), (5, 3, 16, 2),
         (2, 4, 5, 9), (19, 3, 20, 2)]


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


@pytest.mark.parametrize("name", ["lem", "gru-ode", "taugru", "stc", "lrcu-a", "lrcu-s"])
def test_saturated_gates_equal_generic(name):
    """Inputs of a few hundred drive the gates' and synapses' arguments far past the kernels' exponential clamp
    (±80: a float32 sigmoid stops at e^{-80}, never subnormal): outputs and gradients still match the generic
    loop, with nothing infinite or NaN."""
    torch.manual_seed(zlib.crc32(name.encode()))
    model = CELLS[name](2, 17)
    x = 300 * torch.randn(3, 6, 2)
    state = tuple(0.5 * torch.randn(3, n) for n in model.system.block_sizes()[:len(model.system.blocks)])
    (out, final, grads), _ = run_both(model, x, state)
    assert all(t.isfinite().all() for t in (out, *final, *grads))
    check(model, x, state)


@pytest.mark.parametrize("name", ["ltc", "lrcu-s"])
def test_liquid_without_inputs(name):
    """A liquid network with no inputs (n = 0: only the neurons' synapses and the leak) runs in the kernel."""
    torch.manual_seed(3)
    model = CELLS[name](0, 6).double()
    x = torch.zeros(3, 5, 0, dtype=torch.float64)
    check(model, x, (0.5 * torch.randn(3, 6, dtype=torch.float64),))


@pytest.mark.parametrize("name", ["ltc", "lrcu-a"])
def test_liquid_threads_give_the_same_bits(name):
    """Above PARALLEL_SYNAPSES the liquid kernels split their synapse loops between torch's threads; every sum
    stays in one thread, so 1 and 3 threads give the same outputs and gradients, bit for bit. LRC's input weights
    O_x are the exception: their gradient x^T dL/dw is torch's product, whose sums may split between threads
    (compared to 1e-6 relative)."""
    torch.manual_seed(5)
    model = CELLS[name](2, 70)  # 16 x 72 x 70 synapses a sub-step: above the threshold
    model.engine = "fused"
    x = torch.randn(16, 4, 2)
    results = []
    previous = torch.get_num_threads()
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            model.zero_grad()
            xs = x.clone().requires_grad_(True)
            out, _ = model(xs)
            (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
            results.append([out.detach(), xs.grad, *[p.grad.clone() for p in model.parameters()]])
    finally:
        torch.set_num_threads(previous)
    names = ["output", "input", *[n for n, _ in model.named_parameters()]]
    for n, a, b in zip(names, *results):
        if n == "system.o_input":
            assert relative(a, b) < 1e-6, n
        else:
            assert torch.equal(a, b), n


@contextlib.contextmanager
def torch_threads(threads: int):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


ROW_THREADED = ["lem", "lem-unfolds", "cornn", "cornn-implicit", "unicornn", "gru-ode", "oscillator", "taugru",
                "delaygru", "taugru-lag-beyond-T", "taugru-ablation", "delaygru-lag1-unfolds"]


@pytest.mark.parametrize("name", ROW_THREADED)
def test_batch_rows_split_between_threads(name):
    """With AVX-512 float32 products the kernels split the batch rows between torch's threads (8 rows or more a
    thread): 3 threads over 43 rows (ranges of 14 and 15 rows, not multiples of the 6-row product blocks) give the
    generic loop's results, and the bits of one thread, over a delay ring and per-sample steps too."""
    if not extension.has_simd():
        pytest.skip("the rows are split only where the float32 products are the AVX-512 blocks")
    torch.manual_seed(11)
    model = CELLS[name](2, 19)
    x = torch.randn(43, 9, 2)
    with torch_threads(3):
        check(model, x, None)
    gaps = torch.rand(43, 9) + 0.5
    results = []
    for threads in (1, 3):
        with torch_threads(threads):
            model.engine = "fused"
            model.zero_grad()
            xs = x.clone().requires_grad_(True)
            out, final = model(xs, dt=gaps) if name.startswith(("lem", "cornn", "gru", "osc")) else model(xs)
            (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
            results.append([out.detach(), *(f.detach() for f in final), xs.grad,
                            *[p.grad.clone() for p in model.parameters()]])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_reversible_unicornn_rows_split_between_threads():
    """The reversible UnICORNN kernels split the rows too: 3 threads give one thread's results and the stored-state
    kernel's, to round-off (its encoding is torch's product, whose bits may depend on the thread count)."""
    if not extension.has_simd():
        pytest.skip("the rows are split only where the float32 products are the AVX-512 blocks")
    torch.manual_seed(12)
    model = cells.UnICORNN(2, 19, reversible=True)
    x = torch.randn(43, 9, 2)
    results = []
    for threads, reversible in ((1, True), (3, True), (1, False)):
        with torch_threads(threads):
            model.reversible = reversible
            model.zero_grad()
            xs = x.clone().requires_grad_(True)
            out, _ = model(xs)
            (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
            results.append([out.detach(), xs.grad, *[p.grad.clone() for p in model.parameters()]])
    for one, three, stored in zip(*results):
        assert relative(three, one) < 1e-6
        assert relative(stored, one) < 1e-5


FORKED_CHILD = """
import os, torch
from odelab import cells
torch.set_num_threads(2)
model = cells.LEM(1, 32)
model.engine = "fused"
x = torch.randn(64, 50, 1)
model(x)[0].sum().backward()  # the rows split between 2 threads: libgomp's pool exists
pid = os.fork()
if pid == 0:
    with torch.no_grad():
        model(x)
    os._exit(0)
print("child status", os.waitpid(pid, 0)[1])
"""


def test_kernels_in_a_forked_child_run_on_one_thread():
    """A child forked after the kernels ran on 2 threads runs them on one: GNU libgomp would wait forever for the
    parent's pool threads, which the child does not have."""
    if not extension.has_simd():
        pytest.skip("the rows are split only where the float32 products are the AVX-512 blocks")
    run = subprocess.run([sys.executable, "-c", FORKED_CHILD], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["child", "status", "0"]


@pytest.mark.parametrize("name", ["ltc", "stc", "lrcu-a", "lrcu-s"])
def test_liquid_without_backward_keeps_sample_states_only(name):
    """With no gradient wanted, the liquid kernels run the sub-steps in scratch rows and store the sample states
    only; the outputs are the same bits as the training forward's."""
    torch.manual_seed(7)
    model = CELLS[name](2, 17)
    model.engine = "fused"
    x = torch.randn(3, 7, 2)
    trained, _ = model(x)
    with torch.no_grad():
        inferred, (final,) = model(x)
    assert torch.equal(inferred, trained.detach())
    assert torch.equal(final, inferred[:, -1])


@pytest.mark.parametrize("name", ["lem", "lem-unfolds", "cornn", "cornn-implicit", "unicornn", "gru-ode",
                                  "oscillator", "taugru", "delaygru", "delaygru-lag1-unfolds", "taugru-ablation",
                                  "taugru-alpha0"])
def test_without_backward_runs_in_chunks(name, monkeypatch):
    """With no gradient wanted, the kernels encode and run the sequence a chunk of samples at a time (here 2 samples
    a chunk, the last one ragged; the delay cells' delayed reads reach into earlier chunks), never the whole
    sequence's encoding at once: the outputs and the final state are the training forward's (checked against the
    generic loop above) to round-off (1e-16 here: the BLAS may round a chunk's encoding GEMM differently from the
    whole sequence's)."""
    torch.manual_seed(11)
    model = CELLS[name](2, 9).double()
    model.engine = "fused"
    x = torch.randn(3, 7, 2, dtype=torch.float64)
    state = tuple(0.5 * torch.randn(3, n, dtype=torch.float64) for n in model.system.block_sizes())
    trained, trained_final = model(x, state)
    width = model.system.encode(x[:1, :1]).shape[-1]
    unfolds = model.unfolds
    monkeypatch.setattr(common, "CHUNK_BYTES", 2 * 3 * unfolds * width * 8)
    encoded = []  # rows of each encoding: batch × samples (a sample's encoding is copied to its sub-steps)
    encode = model.system.encode
    monkeypatch.setattr(model.system, "encode", lambda u: encoded.append(u.shape[0]) or encode(u))
    with torch.no_grad():
        inferred, final = model(x, state)
    assert encoded == [3 * n for n in (2, 2, 2, 1)]
    assert relative(inferred, trained.detach()) <= 1e-14
    for a, b in zip(final, trained_final, strict=True):
        assert relative(a, b.detach()) <= 1e-14


@pytest.mark.parametrize("name", ["lem-unfolds", "delaygru-lag1-unfolds"])
def test_unfolds_encode_each_sample_once(name, monkeypatch):
    """With L sub-steps a sample, the training forward encodes each sample once (B·T rows, not B·T·L: the
    encoding is row-wise, and a sample's is copied to its sub-steps); the gradient of the input and of the
    encoding's weights sums over the copies, as the generic loop's (compared in test_fused_equals_generic)."""
    torch.manual_seed(13)
    model = CELLS[name](2, 5).double()
    model.engine = "fused"
    encoded = []
    encode = model.system.encode
    monkeypatch.setattr(model.system, "encode", lambda u: encoded.append(u.shape[:-1].numel()) or encode(u))
    x = torch.randn(3, 7, 2, dtype=torch.float64, requires_grad=True)
    out, _ = model(x)
    out.sum().backward()
    assert model.unfolds > 1 and encoded == [3 * 7]
    assert x.grad is not None and bool(x.grad.abs().gt(0).any())


def test_reversible_unicornn_without_backward_runs_in_chunks(monkeypatch):
    """The reversible UnICORNN layer's forward with no gradient wanted: in chunks too, the training forward's
    outputs and final state to round-off."""
    torch.manual_seed(12)
    model = cells.UnICORNN(2, 9, dt=1.3, alpha=0.7, reversible=True).double()
    x = torch.randn(3, 7, 2, dtype=torch.float64)
    trained, trained_states = model(x)
    system = _layer(model).system
    monkeypatch.setattr(common, "CHUNK_BYTES", 2 * 3 * 9 * 8)
    encoded = []
    encode = system.encode
    monkeypatch.setattr(system, "encode", lambda u: encoded.append(u.shape[0]) or encode(u))
    with torch.no_grad():
        inferred, states = model(x)
    assert encoded == [3 * n for n in (2, 2, 2, 1)]
    assert relative(inferred, trained.detach()) <= 1e-14
    for a, b in zip([t for s in states for t in s], [t for s in trained_states for t in s], strict=True):
        assert relative(a, b.detach()) <= 1e-14


FROZEN = [("lem", ("W2",)), ("lem", ("Wy",)), ("lem", ("weight_y", "W2")), ("lem", ("weight_y", "W2", "Wy")),
          *((cell, frozen) for cell in ("taugru", "delaygru", "taugru-ablation")
            for frozen in (("weight_h",), ("W2",), ("weight_h", "W2")))]


@pytest.mark.parametrize("cell, frozen", FROZEN, ids=lambda v: v if isinstance(v, str) else "+".join(v))
def test_no_grad_and_frozen_parameters(cell, frozen):
    """Frozen recurrent weights: the backwards add the weight gradients step by step only where one is asked for
    (LEM's three or the delay cells' two frozen: none), and the others' still match the generic loop."""
    model = CELLS[cell](2, 5)
    for name in frozen:
        getattr(model.system, name).requires_grad_(False)
    x = torch.randn(3, 6, 2)
    check(model, x, None)
    with torch.no_grad():
        model.engine = "fused"
        fused = model(x)[0]
        model.engine = "generic"
        assert relative(fused, model(x)[0]) < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("rows, channels, width", [(1, 1, 1), (7, 2, 17), (600, 1, 40), (300, 8, 64), (257, 5, 3)])
def test_affine_encoding(rows, channels, width, bias, dtype):
    """The one-pass encoding X Vᵀ + b and its gradients against the closed forms in float64: dX = G V, dV = Gᵀ X,
    db = Σ_r G_r; V a column slice of a wider weight (coRNN's [V | 𝒲 | W]); rows past one block of partial sums."""
    torch.manual_seed(rows * 31 + channels)
    weight = torch.randn(width, channels + 3, dtype=dtype, requires_grad=True)
    V = weight[:, :channels]
    b = torch.randn(width, dtype=dtype, requires_grad=True) if bias else None
    X = torch.randn(rows, channels, dtype=dtype, requires_grad=True)
    A = common.AffineEncoding.apply(X, V, b)
    G = torch.randn(rows, width, dtype=dtype) + 0.5  # a mean away from zero: the sums over rows grow with them
    dX, dweight, *db = torch.autograd.grad((A * G).sum(), [X, weight, *([b] if bias else [])])
    X64, V64, G64 = X.detach().double(), V.detach().double(), G.double()
    expected = X64 @ V64.T + (b.detach().double() if bias else 0.0)
    tol = TOLERANCE[dtype]
    assert A.is_contiguous() and A.dtype == dtype
    assert relative(A.double(), expected) < tol
    assert relative(dX.double(), G64 @ V64) < tol
    assert relative(dweight[:, :channels].double(), G64.T @ X64) < tol
    assert not dweight[:, channels:].any()
    if bias:
        assert relative(db[0].double(), G64.sum(0)) < tol


@pytest.mark.parametrize("width", [24, 77])
def test_affine_gradient_blocks_split_between_threads(width):
    """With AVX-512 float32 products the encoding's backward splits its blocks of 256 rows between the threads (8
    blocks or more a thread): 3 threads over 31 blocks (the last of 77 rows) give one thread's dV and db bit for bit,
    and the closed forms Gᵀ X and Σ_r G_r in float64."""
    if not extension.has_simd():
        pytest.skip("the blocks are split only where the float32 products are the AVX-512 blocks")
    torch.manual_seed(width)
    rows = 30 * 256 + 77
    X, V, b = torch.randn(rows, 3), torch.randn(width, 3, requires_grad=True), torch.randn(width, requires_grad=True)
    G = torch.randn(rows, width) + 0.5
    grads = []
    for threads in (1, 3):
        with torch_threads(threads):
            grads.append(torch.autograd.grad((common.AffineEncoding.apply(X, V, b) * G).sum(), [V, b]))
    for one, three in zip(*grads):
        assert torch.equal(one, three)
    assert relative(grads[1][0].double(), G.double().T @ X.double()) < TOLERANCE[torch.float32]
    assert relative(grads[1][1].double(), G.double().sum(0)) < TOLERANCE[torch.float32]


def test_encoding_declared_or_overridden():
    """The kernels encode by the system's declared affine map (few channels) or call its encode: an encode a
    subclass overrides, or more than AFFINE_CHANNELS channels."""
    model = cells.LEM(2, 5)
    narrow, wide = torch.randn(4, 2), torch.randn(4, common.AFFINE_CHANNELS + 1)
    assert type(common.encode(model.system, narrow).grad_fn).__name__ == "AffineEncodingBackward"
    wide_model = cells.LEM(wide.shape[1], 5)
    assert type(common.encode(wide_model.system, wide).grad_fn).__name__ != "AffineEncodingBackward"

    class Doubled(type(model.system)):
        def encode(self, u):
            return 2 * super().encode(u)

    system = model.system
    system.__class__ = Doubled
    assert relative(common.encode(system, narrow), 2 * torch.nn.functional.linear(narrow, *system.encoding())) == 0


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


def test_synapse_openings_match_float64():
    """The liquid synapses' σ(a y + b) (on AVX-512 their own exponential from prescaled a and b), against float64 of
    the same float32 a, y, b: absolute error ~ 1 ulp of 1 over the whole range; where σ is small, relative error
    within a few roundings of a y + b to float32 (torch's float32 sigmoid of a y + b: 2.2 of them), NaN kept, the
    saturated ends."""
    y = torch.cat([torch.linspace(-100, 100, 400001), torch.logspace(-30, 2, 10000), -torch.logspace(-30, 2, 10000),
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")])])
    g = torch.Generator().manual_seed(0)
    a = torch.where(torch.rand(y.shape, generator=g) < 0.5, 1.0, -3.0 + 6 * torch.rand(y.shape, generator=g))
    b = torch.where(torch.rand(y.shape, generator=g) < 0.5, 0.0, torch.randn(y.shape, generator=g))
    a[-5:], b[-5:] = 1.0, 0.0
    o = torch.empty_like(y)
    extension.library().odelab_opening_f32(ctypes.c_int64(y.numel()), *(ctypes.c_void_p(t.data_ptr()) for t in (a, y, b, o)))
    t = a.double() * y.double() + b.double()
    ref = torch.sigmoid(t)
    finite = t.isfinite()
    assert (o.double() - ref)[finite].abs().max() < 1.2e-7
    tail = finite & (t > -80) & (t < 0)  # σ(t) ≈ e^t, down to 1e-35
    roundings = (o.double() - ref)[tail].abs() / ref[tail] / ((t[tail].abs() + 1) * 2.0**-24)
    assert roundings.max() < 4
    assert o[-3] == 1.0 and o[-1].isnan()
    assert math.isclose(o[-2].item(), math.exp(-80), rel_tol=1e-6)  # clamped as the kernels' exp: never subnormal


def test_failed_build_falls_back(monkeypatch):
    """A failed build warns once with the reason, makes the kernels unavailable, and 'auto' runs the generic
    loop (the state of the module is restored afterwards by monkeypatch)."""
    from odelab.solvers import native

    monkeypatch.setattr(extension.LIBRARY, "_done", False)
    monkeypatch.setattr(extension.LIBRARY, "_library", None)
    monkeypatch.setattr(extension.LIBRARY, "_failure", None)
    monkeypatch.setattr(native, "compiler", lambda: None)
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


PRODUCTS = {"simd": (True, 2**62), "blas": (False, 0), "loops": (False, 2**62)}  # (AVX-512 blocks, BLAS threshold)


@contextlib.contextmanager
def products(kind):
    """Every float32 product of the kernels on one implementation: the AVX-512 register blocks, the BLAS or the loops."""
    simd, threshold = PRODUCTS[kind]
    if kind == "simd" and not extension.has_simd():
        pytest.skip("the kernels were compiled without AVX-512")
    if kind == "blas" and not extension.library().odelab_has_blas():
        pytest.skip("this torch exports no sgemm_/dgemm_")
    try:
        extension.set_simd(simd)
        extension.set_blas_threshold(threshold)
        yield
    finally:
        extension.set_simd(True)
        extension.set_blas_threshold(32 * 32 * 32)


@pytest.mark.parametrize("kind", list(PRODUCTS))
@pytest.mark.parametrize("name", ["lem", "cornn", "gru-ode", "taugru", "lrcu-a"])
def test_float32_products(name, kind):
    """In float32 each implementation of the products gives the generic result, at hidden 20 (the register blocks'
    16-lane vectors: one whole and one masked to 4 lanes; 3 d = 60 columns: three whole and one of 12)."""
    torch.manual_seed(2)
    model = CELLS[name](3, 20)
    x = torch.randn(7, 6, 3)
    with products(kind):
        check(model, x, None)


def _product(M, N, K, transposed, beta, strides=(0, 0, 0)):
    """The kernels' float32 product mm (C = beta C + A B) or mm_tn (C += A^T B) on random operands whose rows are
    ``strides`` floats longer than their width, against torch's product in float64."""
    g = torch.Generator().manual_seed(M * 10007 + N * 101 + K)
    a_rows, a_cols = (K, M) if transposed else (M, K)
    A = torch.randn(a_rows, a_cols + strides[0], generator=g)
    B = torch.randn(K, N + strides[1], generator=g)
    C = torch.randn(M, N + strides[2], generator=g)
    a, b, c0, pad = A[:, :a_cols], B[:, :N], C[:, :N].clone(), C[:, N:].clone()
    expected = (a.double().T if transposed else a.double()) @ b.double() + (1.0 if transposed else beta) * c0.double()
    ptr = ctypes.c_void_p
    extension.library().odelab_product_f32(
        ctypes.c_int64(M), ctypes.c_int64(N), ctypes.c_int64(K), ptr(A.data_ptr()), ctypes.c_int64(A.shape[1]),
        ptr(B.data_ptr()), ctypes.c_int64(B.shape[1]), ctypes.c_float(beta), ptr(C.data_ptr()),
        ctypes.c_int64(C.shape[1]), ctypes.c_int(int(transposed)))
    assert torch.equal(C[:, N:], pad), "a product wrote beyond its columns"
    scale = (a.abs().double().T if transposed else a.abs().double()) @ b.abs().double() + c0.abs().double()
    return ((C[:, :N].double() - expected).abs() / scale.clamp_min(1e-30)).max().item() if M * N else 0.0


@pytest.mark.parametrize("kind", list(PRODUCTS))
@pytest.mark.parametrize("transposed", [False, True], ids=["mm", "mm_tn"])
def test_products_at_block_edges(kind, transposed):
    """Row counts around the 6-row blocks, column counts around the 16-lane vectors and the 64-column panels, K from
    0 to past the 64-step (AᵀB) and 256-step (AB) slices, strided rows, beta 0, 1 and 0.5: every entry within float32
    round-off of the float64 product (relative to Σ |a| |b| + |c|), and nothing written beyond the N columns of a
    row."""
    with products(kind):
        for M, N, K in [(1, 1, 1), (5, 17, 3), (6, 16, 8), (7, 64, 9), (13, 65, 2), (12, 130, 33), (19, 200, 0),
                        (9, 33, 64), (4, 20, 65), (3, 15, 128), (8, 70, 600)]:
            for beta in (0.0, 1.0, 0.5):
                error = _product(M, N, K, transposed, beta, strides=(3, 5, 7))
                assert error <= 1e-6 * max(K, 1) ** 0.5 + 1e-7, (M, N, K, beta, error)


# -- the reversible UnICORNN layer (002 eq. 3.7): kernel vs ReversibleUnICORNN vs autograd through the generic loop

LAYER_STEPS = {"one-layer": [1.3], "three-layers": [0.7, 1.3, 0.4]}  # per-layer Δt


def stack_run(model, x, states, reversible: bool, engine: str):
    """Outputs, final states and the gradients of one random loss w.r.t. x, every initial state and every
    parameter (V, b, w, c of each layer) of a UnICORNN stack run with (``reversible``, ``engine``)."""
    model.reversible, model.engine = reversible, engine
    xs = x.detach().clone().requires_grad_(True)
    s0 = [tuple(s.detach().clone().requires_grad_(True) for s in layer) for layer in states]
    out, finals = model(xs, s0)
    g = torch.Generator().manual_seed(7)
    loss = (out * torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)).sum()
    for block in (b for final in finals for b in final):
        loss = loss + (block * torch.randn(block.shape, generator=g, dtype=torch.float64).to(block.dtype)).sum()
    names = ["x", *(f"state[{i}][{j}]" for i in range(len(s0)) for j in range(2)),
             *(n for n, _ in model.named_parameters())]
    inputs = [xs, *(s for layer in s0 for s in layer), *model.parameters()]
    values = {"outputs": out, **{f"final[{i}][{j}]": b for i, f in enumerate(finals) for j, b in enumerate(f)}}
    values.update(zip((f"grad {n}" for n in names), torch.autograd.grad(loss, inputs)))
    return {k: v.detach() for k, v in values.items()}


def reversible_errors(size, dtype, steps):
    """Max relative error of the fused reversible stack against the Python ReversibleUnICORNN and against
    plain autograd through the generic loop (the definition), per tensor."""
    batch, time, hidden, inputs = size
    torch.manual_seed(zlib.crc32(f"reversible{size}{steps}".encode()))
    model = cells.UnICORNN(inputs, hidden, dt=steps, alpha=0.7, num_layers=len(steps), reversible=True).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.3)
    x = torch.randn(batch, time, inputs, dtype=dtype)
    states = [tuple(0.5 * torch.randn(batch, hidden, dtype=dtype) for _ in range(2)) for _ in steps]
    fused = stack_run(model, x, states, True, "fused")
    python = stack_run(model, x, states, True, "generic")
    plain = stack_run(model, x, states, False, "generic")
    return ({k: relative(fused[k], python[k]) for k in plain}, {k: relative(fused[k], plain[k]) for k in plain})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layers", list(LAYER_STEPS))
def test_reversible_fused_equals_references(layers, size, dtype):
    from odelab.kernels.cpu.unicornn import run_reversible
    from odelab.models.unicornn import reversible_kernel

    model = cells.UnICORNN(size[3], size[2], reversible=True).to(dtype)
    model.engine = "fused"
    assert reversible_kernel(model.layers[0], torch.zeros(1, 1, size[3], dtype=dtype)) is run_reversible
    tol = TOLERANCE[dtype]
    for reference, errors in zip(("ReversibleUnICORNN", "generic autograd"), reversible_errors(size, dtype,
                                                                                               LAYER_STEPS[layers])):
        bad = {k: v for k, v in errors.items() if not v <= tol}
        assert not bad, f"against {reference}, errors above {tol}: {bad}"


def test_reversible_fused_unfolds_and_zero_state():
    """Sub-steps (unfolds = 2 on each layer: Δt/2 with the sample held) and the default zero initial state."""
    torch.manual_seed(5)
    model = cells.UnICORNN(2, 6, dt=[0.9, 0.5], num_layers=2, reversible=True).double()
    for layer in model.layers:
        layer.unfolds = 2
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    zero = [tuple(torch.zeros(3, 6, dtype=torch.float64) for _ in range(2)) for _ in range(2)]
    fused = stack_run(model, x, zero, True, "fused")
    for reference in (stack_run(model, x, zero, True, "generic"), stack_run(model, x, zero, False, "generic")):
        errors = {k: relative(fused[k], reference[k]) for k in reference}
        assert max(errors.values()) <= TOLERANCE[torch.float64], errors
    model.reversible, model.engine = True, "fused"
    assert relative(model(x)[0], model(x, zero)[0]) == 0.0


def test_reversible_fused_saves_the_input_once_with_unfolds():
    """With sub-steps (L = 3) the fused reversible layer keeps u as it came (B, T, m), not held over its sub-steps
    (B, T·L, m), and its encoding only for the length of a call: u, V, b, w, c and the final (z, y)."""
    model = cells.UnICORNN(3, 6, reversible=True)
    model.engine = "fused"
    model.layers[0].unfolds = 3
    x = torch.randn(2, 5, 3, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        model(x)
    assert sorted(tuple(t.shape) for t in saved) == sorted([(2, 5, 3), (6, 3), (6,), (6,), (6,), (2, 6), (2, 6)])
