"""The Triton kernels of ``odelab.kernels.cuda`` against the generic loop (``Recurrent`` / the delay ring buffer):
outputs, final state, and gradients w.r.t. every parameter, the input and the initial state.

Without CUDA the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, CPU tensors, tiny shapes; set
before Triton is imported); with CUDA the same tiny cases run compiled on the GPU, and the ``gpu`` tests add
full-size sequences. The kernel modules are called directly (the registry keys on the device "cuda").
"""
from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]  # the compile checks' working directory: benchmarks/shared_banks.py

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from helpers import speed_up_the_interpreter  # noqa: E402

if not torch.cuda.is_available():
    speed_up_the_interpreter()


@triton.jit
def _loop_probe(X, n):
    acc = tl.load(X)
    for _ in range(n):  # a loop bounded by a runtime argument, as every recurrence kernel has
        acc = acc + 1.0
    tl.store(X, acc)


def _interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run the kernels here, or None. Triton 3.6 (torch 2.11's pin) hands a
    runtime int to ``range`` as a 1-element array, which NumPy ≥ 2.4 no longer converts to an int."""
    if torch.cuda.is_available():
        return None
    x = torch.zeros(1)
    try:
        _loop_probe[(1,)](x, 3)
    except Exception as err:  # noqa: BLE001 -- any failure of the probe means: the interpreter is unusable
        return f"Triton {triton.__version__}'s interpreter cannot run a loop over a runtime bound: {err!r}"
    return None if float(x) == 3.0 else f"Triton {triton.__version__}'s interpreter computed {float(x)} for 3"


_PROBLEM = _interpreter_problem()
if _PROBLEM is not None:
    pytest.skip(_PROBLEM, allow_module_level=True)

from odelab import Recurrent, cells, systems  # noqa: E402
from odelab.kernels.cuda._common import bf16_rounded  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def float32_at(cases, float32: set) -> list:
    """pytest params (*case, dtype) for the gap tests: float64 at every case, float32 at the cases whose last entry
    (the schedule or size) is in ``float32``. Every schedule's float32 code is checked
    without gaps (test_float32, test_stepwise_equals_generic, test_grid_equals_stepwise_and_generic) and the gaps add
    the same arithmetic in either dtype (float64 is the stricter check of it), so float32 is re-run on a few schedules
    only: the interpreter's time is most of the suite's."""
    params = []
    for case in cases:
        case = case if isinstance(case, tuple) else (case,)
        for dtype, name in ((torch.float64, "f64"), (torch.float32, "f32")):
            if dtype is torch.float64 or case[-1] in float32:
                params.append(pytest.param(*case, dtype, id="-".join(map(str, (*case, name)))))
    return params


def kernel(target: str):
    """``".cuda.lem:run"``-style target -> the function (the same string the registry holds)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module("odelab.kernels" + module), name)


# name -> (preset constructor (input_size, hidden_size) -> model, kernel target)
PRESETS = {
    "lem": (lambda m, d: cells.LEM(m, d, dt=0.7), ".cuda.lem:run"),
    "cornn": (lambda m, d: cells.CoRNN(m, d, dt=0.45), ".cuda.oscillators:run_cornn_explicit"),
    "cornn-implicit": (lambda m, d: cells.CoRNN(m, d, dt=0.45, damping="implicit"),
                       ".cuda.oscillators:run_cornn_implicit"),
    "cornn-learned-coefficients": (lambda m, d: cells.CoRNN(m, d, dt=0.3, learn_coefficients=True),
                                   ".cuda.oscillators:run_cornn_explicit"),
    "cornn-implicit-learned-coefficients": (
        lambda m, d: cells.CoRNN(m, d, dt=0.3, damping="implicit", learn_coefficients=True),
        ".cuda.oscillators:run_cornn_implicit"),
    "oscillator": (lambda m, d: cells.NeuralOscillator(m, d, dt=0.3), ".cuda.oscillators:run_oscillator"),
    "unicornn": (lambda m, d: cells.UnICORNN(m, d, dt=0.9, alpha=0.4).layers[0], ".cuda.unicornn:run"),
    "unicornn-reversible": (lambda m, d: cells.UnICORNN(m, d, dt=0.9, alpha=0.4).layers[0],
                            ".cuda.unicornn:run_reversible"),  # eq. 3.7: no per-step state stored
    "gru-ode": (lambda m, d: cells.GRUODE(m, d, dt=0.8), ".cuda.gru:run"),
    "taugru": (lambda m, d: cells.TauGRU(m, d, tau=2.0), ".cuda.delay_gru:run_taugru"),
    "delaygru": (lambda m, d: cells.DelayGRU(m, d, tau=1.0), ".cuda.delay_gru:run_delaygru"),
    "ltc": (lambda m, d: cells.LTC(m, d, dt=1.0, unfolds=2), ".cuda.liquid:run_ltc"),  # 6: test_unfolds
    "stc": (lambda m, d: cells.STC(m, d, dt=1.0, unfolds=2), ".cuda.liquid:run_stc"),
    "lrcu-a": (lambda m, d: cells.LRCU(m, d, "asymmetric"), ".cuda.liquid:run_lrc"),
    "lrcu-s": (lambda m, d: cells.LRCU(m, d, "symmetric"), ".cuda.liquid:run_lrc"),
    "gru-ode-reset-before": (lambda m, d: cells.GRUODE(m, d, dt=0.8, reset_after=False), ".cuda.gru:run"),
}


def generic(model):
    if hasattr(model, "engine"):  # the fused-engine switch, where Recurrent has it
        model.engine = "generic"
    return model


def lags_of(model) -> tuple[int, ...]:
    system = model.system
    if not system.delays:
        return ()
    try:
        from odelab.solvers.recurrence import delay_steps
    except ImportError:  # the layout before the solvers split
        from odelab.solvers.delay import delay_steps

    return tuple(delay_steps(float(tau), model.dt / model.unfolds) for tau in system.delays)


def recorded_counters(monkeypatch) -> list:
    """The barrier counters (``grid.counters``) of every grid launch from here on, in launch order."""
    from odelab.kernels.cuda import grid

    made = []
    real = grid.counters
    monkeypatch.setattr(grid, "counters", lambda *args: made.append(real(*args)) or made[-1])
    return made


def relative_errors(model, run, batch, time, hidden, dtype, input_size=3, seed=0, block_h=None, gaps=False):
    """Max relative error (max |a − b| / max |b|, per tensor) of outputs, final state and every gradient; ``gaps``:
    both with per-sample steps (``dt`` a (batch, time) draw from U[0, 1.5): short, long and near-zero steps)."""
    torch.manual_seed(seed)
    model = generic(model).to(device=DEVICE, dtype=dtype)
    x = torch.randn(batch, time, input_size, device=DEVICE, dtype=dtype, requires_grad=True)
    state = tuple((0.5 * torch.randn(batch, n, device=DEVICE, dtype=dtype)).requires_grad_()
                  for n in model.system.block_sizes())
    extra = {} if block_h is None else {"block_h": block_h}
    if gaps:
        dt = 1.5 * torch.rand(batch, time, device=DEVICE, dtype=dtype)
        out, final = run(model.system, x, state, dt, model.unfolds, lags_of(model), **extra)
        ref, ref_final = model(x, state, dt=dt)
    else:
        out, final = run(model.system, x, state, model.dt, model.unfolds, lags_of(model), **extra)
        ref, ref_final = model(x, state)
    weights = [torch.randn_like(ref)] + [torch.randn_like(f) for f in ref_final]

    def loss(o, f):
        return (o * weights[0]).sum() + sum((a * w).sum() for a, w in zip(f, weights[1:]))

    inputs = [x, *state, *(p for p in model.parameters() if p.requires_grad)]
    grads = torch.autograd.grad(loss(out, final), inputs, allow_unused=True)
    ref_grads = torch.autograd.grad(loss(ref, ref_final), inputs, allow_unused=True)
    errors = {}
    pairs = [("outputs", out, ref), *((f"final[{i}]", a, b) for i, (a, b) in enumerate(zip(final, ref_final)))]
    names = ["x", *(f"state[{i}]" for i in range(len(state))), *(n for n, p in model.named_parameters() if p.requires_grad)]
    pairs += [(f"grad {n}", a, b) for n, a, b in zip(names, grads, ref_grads)]
    for name, a, b in pairs:
        if b is None:
            assert a is None or a.abs().max() == 0, name
            continue
        assert a is not None and a.shape == b.shape, name
        if b.numel() == 0:  # the gradient of an input of size 0
            continue
        # relative to the tensor's largest entry, with a floor of 1e-2: a 1-element gradient that cancels to
        # ~1e-4 (LEM, hidden 1, some draws) carries the round-off of its O(0.1) summands, not its own magnitude
        errors[name] = ((a - b).abs().max() / b.abs().max().clamp_min(1e-2)).item()
    return errors


@pytest.fixture(autouse=True)
def _seeded():
    """Models are built before relative_errors seeds the data: seed them too, so no test depends on the order."""
    torch.manual_seed(1)


SIZES = [  # (batch, time, hidden, block_h): hidden 1 and 17, batch 1, T = 1; block_h=None runs the
    (1, 1, 1, None),  # register-resident variant where a kernel has one (hidden <= 32), block_h=16 the tiled
    (3, 3, 17, None),  # one with two hidden tiles
    (3, 2, 17, 16),
]
MULTI_PROGRAM = ["lem", "cornn-learned-coefficients", "unicornn", "taugru", "ltc", "lrcu-s"]  # per-program sums


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(str(v) for v in s[:3]) + ("t" if s[3] else ""))
def test_float32(name, size):
    build, target = PRESETS[name]
    batch, time, hidden, block_h = size
    errors = relative_errors(build(3, hidden), kernel(target), batch, time, hidden, torch.float32, block_h=block_h)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float32], (worst, errors[worst])


@pytest.mark.parametrize("name", MULTI_PROGRAM)
@pytest.mark.parametrize("block_h", [None, 16])
def test_two_batch_tiles(name, block_h):
    """batch 17 = two programs of 16 rows (the last one masked), both variants."""
    build, target = PRESETS[name]
    errors = relative_errors(build(3, 5), kernel(target), 17, 2, 5, torch.float32, block_h=block_h)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float32], (worst, errors[worst])


@pytest.mark.parametrize("name", list(PRESETS))
def test_float64(name):
    build, target = PRESETS[name]
    errors = relative_errors(build(2, 5), kernel(target), 2, 3, 5, torch.float64, input_size=2)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float64], (worst, errors[worst])


DELAY_CASES = {  # ring-buffer edge cases: lag 1, lag 0 (τ = 0), lag > T, a fractional τ, the ablations
    "taugru-lag1": lambda m, d: cells.TauGRU(m, d, tau=1.0),
    "taugru-tau0": lambda m, d: cells.TauGRU(m, d, tau=0.0),
    "taugru-lag-beyond-T": lambda m, d: cells.TauGRU(m, d, tau=7.0),
    "taugru-tau2.5-dt0.5": lambda m, d: cells.TauGRU(m, d, tau=1.25, dt=0.5),
    "taugru-no-gating-no-weighting": lambda m, d: cells.TauGRU(m, d, tau=2.0, gating=False, weighting=False),
    "taugru-alpha0": lambda m, d: cells.TauGRU(m, d, tau=2.0, alpha=0.0),
    "taugru-beta0-alpha0.5": lambda m, d: cells.TauGRU(m, d, tau=1.0, beta=0.0, alpha=0.5),
    "delaygru-lag-beyond-T": lambda m, d: cells.DelayGRU(m, d, tau=9.0),
    "delaygru-tau0": lambda m, d: cells.DelayGRU(m, d, tau=0.0),
}


TILED = {"taugru-tau0", "taugru-lag-beyond-T", "delaygru-lag-beyond-T", "delaygru-tau0"}


@pytest.mark.parametrize("name,block_h", [(n, None) for n in DELAY_CASES] + [(n, 16) for n in sorted(TILED)])
def test_delay_edge_cases(name, block_h):
    """block_h=None: the register-resident kernels (hidden 6); 16: the tiled ones on the same cases."""
    target = ".cuda.delay_gru:run_" + ("taugru" if name.startswith("taugru") else "delaygru")
    errors = relative_errors(DELAY_CASES[name](3, 6), kernel(target), 2, 4, 6, torch.float32, block_h=block_h)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float32], (worst, errors[worst])


UNFOLDS = {  # sub-steps inside the kernel: the presets' L = 6, and L > 1 on cells that default to one
    "ltc-6": (lambda m, d: cells.LTC(m, d, dt=1.0, unfolds=6), ".cuda.liquid:run_ltc"),
    "stc-6": (lambda m, d: cells.STC(m, d, dt=0.5, unfolds=6), ".cuda.liquid:run_stc"),
    "lem-3": (lambda m, d: Recurrent(systems.LEM(m, d), "imex", 0.9, unfolds=3), ".cuda.lem:run"),
    "taugru-2": (lambda m, d: Recurrent(systems.TauGRU(m, d, tau=1.0), "euler", 1.0, unfolds=2),
                 ".cuda.delay_gru:run_taugru"),
    "unicornn-reversible-3": (lambda m, d: Recurrent(systems.UnICORNN(m, d, alpha=0.4), "symplectic-euler", 0.9,
                                                     unfolds=3), ".cuda.unicornn:run_reversible"),
}


@pytest.mark.parametrize("time", [8, 19, 22])
@pytest.mark.parametrize("name", ["unicornn", "unicornn-reversible"])
def test_unicornn_longer_sequences(name, time):
    """UnICORNN's diagonal recurrence (eight steps a trip, the next eight loaded ahead) over one whole trip and over
    three whose last stops in its first or its second half (the other cases stop at 3), float64 against the generic
    loop."""
    build, target = PRESETS[name]
    errors = relative_errors(build(3, 5), kernel(target), 3, time, 5, torch.float64)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float64], (worst, errors[worst])


@pytest.mark.parametrize("name", list(UNFOLDS))
def test_unfolds(name):
    build, target = UNFOLDS[name]
    errors = relative_errors(build(2, 4), kernel(target), 2, 2, 4, torch.float32, input_size=2)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float32], (worst, errors[worst])


@pytest.mark.parametrize("name", ["lem", "taugru"])
def test_dispatch_through_recurrent(name, monkeypatch):
    """``Recurrent(engine="fused")`` runs the registered kernel (lags from the model) and matches "generic";
    on CPU the CUDA registration is borrowed for the device "cpu" (the interpreter runs it)."""
    from odelab.kernels import REGISTRY

    build, target = PRESETS[name]
    model = build(3, 5).to(DEVICE)
    key = (type(model.system), model.scheme.name, "cuda", False)
    if DEVICE == "cpu":
        monkeypatch.setitem(REGISTRY, key[:2] + ("cpu", False), REGISTRY[key])
    x = torch.randn(2, 4, 3, device=DEVICE)
    model.engine = "fused"
    assert model.kernel(x) is kernel(target)
    out, final = model(x)
    model.engine = "generic"
    ref, ref_final = model(x)
    for a, b in zip((out, *final), (ref, *ref_final)):
        assert ((a - b).abs().max() / b.abs().max()).item() <= TOL[torch.float32]


@pytest.mark.parametrize("name", ["lem", "oscillator", "gru-ode", "taugru", "ltc", "unicornn"])
def test_a_second_derivative_through_a_cuda_kernel_raises(name, monkeypatch):
    """Under ``create_graph=True`` the kernels' gradients are the first-order ones; differentiating them raises
    ``SecondDerivativeError`` (``kernels.derivatives``; before: torch's once_differentiable, whose error node
    ``torch.autograd.grad`` with given inputs never visits)."""
    from odelab.kernels import REGISTRY
    from odelab.solvers.derivatives import SecondDerivativeError

    build, target = PRESETS[name]
    model = build(3, 5).to(DEVICE)
    key = (type(model.system), model.scheme.name, "cuda", False)
    if DEVICE == "cpu":
        monkeypatch.setitem(REGISTRY, key[:2] + ("cpu", False), REGISTRY[key])
    model.engine = "fused"
    x = torch.randn(2, 4, 3, device=DEVICE)
    assert model.kernel(x) is kernel(target)
    params = list(model.parameters())
    loss = lambda: (model(x)[0] ** 2).sum()
    plain = torch.autograd.grad(loss(), params)
    first = torch.autograd.grad(loss(), params, create_graph=True)
    for a, b in zip(first, plain):  # (on a GPU the weight gradients' sums may be ordered differently)
        assert torch.allclose(a.detach(), b, rtol=1e-6, atol=1e-7)
    with pytest.raises(SecondDerivativeError, match="engine='generic'"):
        torch.autograd.grad(sum((g**2).sum() for g in first), params)


@pytest.mark.parametrize("name", ["lem", "gru-ode", "taugru", "ltc", "unicornn"])
def test_autocast_through_recurrent(name, monkeypatch):
    """Under ``torch.autocast`` (bfloat16) the kernel still computes in float32, its input encoding included (an
    encoding lowered by autocast would reach it as bfloat16): outputs and gradients equal the generic float32
    loop's to float32 accuracy."""
    from odelab.kernels import REGISTRY

    build, target = PRESETS[name]
    model = build(3, 5).to(DEVICE)
    key = (type(model.system), model.scheme.name, "cuda", False)
    if DEVICE == "cpu":
        monkeypatch.setitem(REGISTRY, key[:2] + ("cpu", False), REGISTRY[key])
    x = torch.randn(2, 4, 3, device=DEVICE, requires_grad=True)
    inputs = [x, *model.parameters()]
    results = {}
    for engine, autocast in [("fused", True), ("generic", False)]:
        model.engine = engine
        assert (model.kernel(x) is kernel(target)) == (engine == "fused")
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=autocast):
            out, final = model(x)
        loss = (out * torch.linspace(-1, 1, out.shape[-1], device=DEVICE)).sum() + sum(f.sum() for f in final)
        results[engine] = (out, *final, *torch.autograd.grad(loss, inputs))
    for a, b in zip(results["fused"], results["generic"]):
        assert a.dtype == b.dtype == torch.float32
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="autocast on CUDA: the kernels' backward keeps the forward's state")
@pytest.mark.parametrize("name", ["lem", "taugru", "unicornn"])
def test_backward_inside_autocast_on_the_gpu(name):
    """A backward inside ``torch.autocast("cuda")`` (torch advises against it) runs the kernels' backward with
    autocast off, as their forward ran (``kernels.autocast``): the gradients of the parameters outside the input
    encoding equal the generic float32 loop's to 1e-4; the encoding's follow autocast (bfloat16, 2e-2)."""
    build, _ = PRESETS[name]
    model = build(3, 40).to(DEVICE)
    x = torch.randn(8, 50, 3, device=DEVICE)
    params = list(model.parameters())
    encoding = torch.autograd.grad(model.system.encode(x).sum(), params, allow_unused=True)
    grads = {}
    for engine, autocast in [("fused", True), ("generic", False)]:
        model.engine = engine
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=autocast):
            out, final = model(x)
            grads[engine] = torch.autograd.grad(out.square().sum() + sum(f.sum() for f in final), params)
    for a, b, lowered in zip(grads["fused"], grads["generic"], (g is not None for g in encoding)):
        assert ((a - b).abs().max() / b.abs().max()).item() <= (2e-2 if lowered else 1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PRESETS))
def test_hidden_300(name):
    """hidden 300: ten 32-wide tiles (the tiled variant, masked tail); 10–40 s per preset interpreted."""
    build, target = PRESETS[name]
    errors = relative_errors(build(3, 300), kernel(target), 1, 1 if name in ("ltc", "stc") else 2, 300,
                             torch.float32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float32], (worst, errors[worst])


def test_registry_targets_resolve():
    """Every registered CUDA kernel points at a function of this package (module paths only until used)."""
    from odelab.kernels import REGISTRY

    cuda = {key: impl for key, impl in REGISTRY.items() if key[2] == "cuda"}
    assert len(cuda) == 12 and sum(impl.reversible for impl in cuda.values()) == 1
    for impl in cuda.values():
        assert callable(impl.load())


# -- the reversible UnICORNN stack (eq. 3.7): the kernel vs ReversibleUnICORNN vs autograd through the generic loop

REVERSIBLE_STEPS = {"one-layer": [0.9], "two-layers": [0.7, 1.3]}  # per-layer Δt


def reversible_stack(steps, hidden, dtype, monkeypatch):
    """A reversible UnICORNN stack whose engine "fused" runs the Triton kernel (on CPU: the CUDA registration
    borrowed for the device "cpu", run by the interpreter)."""
    from odelab.kernels import REGISTRY
    from odelab.models.unicornn import reversible_kernel

    key = (systems.UnICORNN, "symplectic-euler", "cuda", True)
    if DEVICE == "cpu":
        monkeypatch.setitem(REGISTRY, key[:2] + ("cpu", True), REGISTRY[key])
    model = cells.UnICORNN(3, hidden, dt=steps, alpha=0.4, num_layers=len(steps), reversible=True)
    model = model.to(device=DEVICE, dtype=dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.3)
    model.engine = "fused"
    assert reversible_kernel(model.layers[0], torch.zeros(1, 1, 3, device=DEVICE, dtype=dtype)) is kernel(
        ".cuda.unicornn:run_reversible")
    return model


def stack_results(model, x, states, reversible, engine):
    """Outputs, final states and the gradients of a fixed random loss w.r.t. x, the initial states and every
    parameter (V, b, w, c per layer), with (``reversible``, ``engine``)."""
    model.reversible, model.engine = reversible, engine
    xs = x.detach().clone().requires_grad_()
    s0 = [tuple(s.detach().clone().requires_grad_() for s in layer) for layer in states]
    out, finals = model(xs, s0)
    g = torch.Generator().manual_seed(3)
    blocks = [out, *(b for final in finals for b in final)]
    loss = sum((b * torch.randn(b.shape, generator=g, dtype=torch.float64).to(b)).sum() for b in blocks)
    names = ["x", *(f"state[{i}][{j}]" for i in range(len(s0)) for j in range(2)),
             *(n for n, _ in model.named_parameters())]
    grads = torch.autograd.grad(loss, [xs, *(s for layer in s0 for s in layer), *model.parameters()])
    values = {"outputs": out, **{f"final[{i}]": b for i, b in enumerate(blocks[1:])}}
    values.update(zip((f"grad {n}" for n in names), grads))
    return {k: v.detach() for k, v in values.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("size", [(1, 1, 1), (3, 4, 17), (2, 5, 5)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layers", list(REVERSIBLE_STEPS))
def test_reversible_stack(layers, size, dtype, monkeypatch):
    batch, time, hidden = size
    model = reversible_stack(REVERSIBLE_STEPS[layers], hidden, dtype, monkeypatch)
    x = torch.randn(batch, time, 3, device=DEVICE, dtype=dtype)
    states = [tuple(0.5 * torch.randn(batch, hidden, device=DEVICE, dtype=dtype) for _ in range(2))
              for _ in model.layers]
    fused = stack_results(model, x, states, True, "fused")
    for reference, ref in (("ReversibleUnICORNN", stack_results(model, x, states, True, "generic")),
                           ("generic autograd", stack_results(model, x, states, False, "generic"))):
        errors = {k: ((fused[k] - ref[k]).abs().max() / ref[k].abs().max().clamp_min(1e-30)).item() for k in ref}
        worst = max(errors, key=errors.get)
        assert errors[worst] <= TOL[dtype], (reference, worst, errors[worst])


def graph_path(out):
    """The names of the autograd nodes from ``out`` along each node's first input."""
    names, node = [], out.grad_fn
    while node is not None:
        names.append(type(node).__name__)
        node = node.next_functions[0][0] if node.next_functions else None
    return names


@pytest.mark.parametrize("unfolds", [1, 3])
def test_reversible_kernel_saves_no_per_step_state(unfolds, monkeypatch):
    """What autograd keeps for the reversible kernel: u, V, b, w, c and the final (z, y), nothing (B, T, H); with
    sub-steps, u as it came (B, T, m), not held over them (B, T·L, m)."""
    model = reversible_stack([0.9], 6, torch.float32, monkeypatch)
    model.layers[0].unfolds = unfolds
    x = torch.randn(2, 5, 3, device=DEVICE, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out, _ = model(x)
    assert "ReversibleUnICORNNSequenceBackward" in graph_path(out)
    expected = [(2, 5, 3), (6, 3), (6,), (6,), (6,), (2, 6), (2, 6)]
    assert sorted(tuple(t.shape) for t in saved) == sorted(expected)


# -- TF32 products ---------------------------------------------------------------------------------------------

# the TF32 option's tolerance: emulated TF32 (below) against the generic loop in IEEE float32 at (4, 40, 20), worst
# measured 3.2e-3 (coRNN's learned coefficients' gradient; outputs ≤ 1.1e-3 for every preset)
TF32_TOL = 1e-2
# the bfloat16 option's: operands rounded to bfloat16 (emulated under the interpreter, below) against the generic loop
# in IEEE float32 at (4, 40, 20), worst measured 2.9e-3 (Delay GRU's initial-state gradient; outputs ≤ 1.9e-3)
BF16_TOL = 1e-2


# -- the stepwise schedule (LEM): one launch per phase of a step, recorded as CUDA graphs ----------------------

STEPWISE_SIZES = [(1, 1, 1), (3, 3, 17), (17, 4, 33)]  # 2 batch blocks × 3 column tiles at the last


# the presets whose kernels have the stepwise schedule here (GRU-ODE and the delay GRUs, with their edge cases:
# tests/kernels/test_stepwise_*.py)
WITH_STEPWISE = ["lem", "cornn-learned-coefficients", "cornn-implicit-learned-coefficients", "oscillator",  # coRNN with
                 "ltc", "lrcu-s"]  # learned γ, ε: every path of the fixed-coefficient kernels and the γ, ε sums
# besides; LTC with 2 sub-steps per sample and LRCU-S: both families of the liquid kernels (STC's and LRCU-A's update
# is the same helper in every schedule, tested through the one-launch kernels)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("size", STEPWISE_SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", WITH_STEPWISE)
def test_stepwise_equals_generic(name, size, dtype):
    """Outputs, final state and every gradient of the stepwise schedule against the generic loop: 1e-10 in
    float64, 1e-5 in float32 (16-wide tiles, so hidden 17 and 33 span two and three column programs)."""
    build, target = PRESETS[name]
    batch, time, hidden = size
    run = lambda *args, **kw: kernel(target)(*args, schedule="stepwise", **kw)
    errors = relative_errors(build(3, hidden), run, batch, time, hidden, dtype, block_h=16)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= (1e-10 if dtype == torch.float64 else 1e-5), (worst, errors[worst])


@pytest.mark.parametrize("rows", ["1", "4"])
@pytest.mark.parametrize("hidden, block_h", [(5, None), (17, 16)])
@pytest.mark.parametrize("name", ["ltc", "stc", "lrcu-a"])
def test_liquid_one_launch_with_fewer_rows(name, hidden, block_h, rows, monkeypatch):
    """``ODELAB_LIQUID_ROWS`` (batch rows a program of the one-launch kernels; LRC's tiled ones keep 16): outputs,
    final state and every gradient against the generic loop in float64 to 1e-10, batch 5 (a ragged last program
    with 4 rows), in registers (hidden 5) and in 16-wide tiles (hidden 17)."""
    from odelab.kernels.cuda import liquid

    monkeypatch.setenv(liquid.ROWS_ENV, rows)
    launched = []
    for kernel_name in ("_forward", "_forward_resident", "_backward", "_backward_resident"):
        original = getattr(liquid, kernel_name)
        monkeypatch.setattr(liquid, kernel_name, _RecordGrid(original, launched))
    build, target = PRESETS[name]
    run = lambda *args, **kw: kernel(target)(*args, schedule="persistent", **kw)
    errors = relative_errors(build(3, hidden), run, 5, 3, hidden, torch.float64, block_h=block_h)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-10, (worst, errors[worst])
    expected = 1 if name == "lrcu-a" and hidden > 16 else -(-5 // int(rows))  # ⌈5 / rows⌉; LRC tiled: 16 rows
    assert launched and all(programs == expected for programs in launched), launched


class _RecordGrid:
    """A Triton kernel whose launches record their number of programs on axis 0."""

    def __init__(self, kernel, launched):
        self.kernel, self.launched = kernel, launched

    def __getitem__(self, grid):
        self.launched.append(grid[0])
        return self.kernel[grid]


def test_liquid_rows_choice(monkeypatch):
    """``ODELAB_LIQUID_ROWS``: 16 unless set; 1, 2, 4, 8 or 16 for every kernel but LRC's tiled ones (16); anything
    else is a clear error. The resident kernels' warps: a thread per (row, neuron)."""
    from odelab.kernels.cuda import liquid

    monkeypatch.delenv(liquid.ROWS_ENV, raising=False)
    assert liquid.persistent_rows(liquid.LTC) == liquid.persistent_rows(liquid.LRC_SYMMETRIC, True) == 16
    monkeypatch.setenv(liquid.ROWS_ENV, " 2 ")
    assert (liquid.persistent_rows(liquid.STC), liquid.persistent_rows(liquid.LRC_SYMMETRIC)) == (2, 16)
    assert liquid.persistent_rows(liquid.LRC_SYMMETRIC, True) == 2
    assert [liquid.resident_warps(rows) for rows in (1, 2, 4, 16)] == [1, 1, 2, 8]
    monkeypatch.setenv(liquid.ROWS_ENV, "3")
    with pytest.raises(ValueError, match="ODELAB_LIQUID_ROWS"):
        liquid.persistent_rows(liquid.LTC)


@pytest.mark.parametrize("inputs, m", [(1, 5), (3, 5), (2, 11)])
def test_input_synapse_kernels(inputs, m, monkeypatch):
    """The input synapses of eq. 1 with the leak, f_in = Σ_j g_ji σ(a_ji x_j + b_ji) + g_l (u_in with k_ji), the
    inputs' rows j the last of the (m + n) × m synapse matrices, over 23 rows of x in blocks of 4 rows (a ragged last
    one) and 4 columns (m = 5, 11: ragged, several), the backward's 3 row groups each walking 2 blocks: values, and
    the vector-Jacobian products with two random cotangents w.r.t. x, the inputs' rows of a, b, g, k (the neurons'
    rows of the gradient buffer left alone) and g_l, against autograd through the formula (float64, 1e-12)."""
    from odelab.kernels.cuda import liquid

    monkeypatch.setattr(liquid, "INPUT_ROWS", 4)
    monkeypatch.setattr(liquid, "INPUT_COLUMNS", 4)
    monkeypatch.setattr(liquid, "input_groups", lambda rows, inputs, device: 3)
    torch.manual_seed(0)
    x = torch.randn(23, inputs, dtype=torch.float64, requires_grad=True)
    a, b, k = (torch.randn(m + inputs, m, dtype=torch.float64, requires_grad=True) for _ in range(3))
    g = torch.rand(m + inputs, m, dtype=torch.float64, requires_grad=True)
    g_leak = torch.rand(m, dtype=torch.float64, requires_grad=True)
    wf, wu = torch.randn(23, m, dtype=torch.float64), torch.randn(23, m, dtype=torch.float64)

    opening = torch.sigmoid(a[m:] * x[:, :, None] + b[m:])  # (rows, j, i)
    f, u = (opening * g[m:]).sum(1) + g_leak, (opening * k[m:]).sum(1) + g_leak
    expected = torch.autograd.grad((f, u), (x, g, k, a, b, g_leak), (wf, wu))

    got_f, got_u = liquid.input_conductances(x.detach(), a.detach(), b.detach(), g.detach(), k.detach(),
                                             g_leak.detach())
    torch.testing.assert_close(got_f, f.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_u, u.detach(), rtol=1e-12, atol=1e-12)
    d_synapses = torch.full((4, m + inputs, m), 7.0, dtype=torch.float64)
    d_x, d_leak = liquid.input_gradients(x.detach(), a.detach(), b.detach(), g.detach(), k.detach(), wf, wu,
                                         d_synapses)
    torch.testing.assert_close(d_x, expected[0], rtol=1e-12, atol=1e-12)
    for q in range(4):
        torch.testing.assert_close(d_synapses[q, m:], expected[1 + q][m:], rtol=1e-12, atol=1e-12)
    assert (d_synapses[:, :m] == 7.0).all()
    torch.testing.assert_close(d_leak, expected[5], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["lem", "cornn-learned-coefficients", "ltc"])
def test_stepwise_graphs_replay_with_each_calls_tensors(name, monkeypatch):
    """Through the graph cache (its CUDA capture stood in by re-running the recorded launches, which read the
    same address table): call 1 runs eagerly, call 2 records the forward and the backward and replays them,
    call 3 only replays -- and every call's values and input gradient are its own inputs' (the table rewritten
    each time: stale addresses would read the earlier calls' inputs, kept alive, or freed buffers)."""
    from odelab.kernels.cuda import stepwise

    graphs = stepwise.StepGraphs(capture=lambda launch: launch)
    monkeypatch.setattr(stepwise, "graphs_for", lambda device: graphs)
    build, target = PRESETS[name]
    model = generic(build(3, 33)).to(device=DEVICE, dtype=torch.float64)
    kept = []
    for call, captures in enumerate((0, 2, 2)):
        torch.manual_seed(10 + call)
        x = torch.randn(17, 3, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
        state = tuple(torch.randn(17, n, device=DEVICE, dtype=torch.float64) for n in model.system.block_sizes())
        kept.append((x, state))
        out, final = kernel(target)(model.system, x, state, model.dt, model.unfolds, block_h=16,
                                    schedule="stepwise")
        ref, ref_final = model(x, state)
        weight = torch.randn_like(ref)
        grad, = torch.autograd.grad((out * weight).sum(), x)
        ref_grad, = torch.autograd.grad((ref * weight).sum(), x)
        assert torch.allclose(out, ref, rtol=0, atol=1e-12) and torch.allclose(final[-1], ref_final[-1], atol=1e-12)
        assert torch.allclose(grad, ref_grad, rtol=0, atol=1e-12), call
        assert graphs.captures == captures and len(graphs.entries) == 2


def test_stepwise_graphs_hold_several_models_in_turn(monkeypatch):
    """The graph cache's default size holds the keys of several models used in turn (each model: a training
    forward, its backward and a no-grad forward): cycling through them records each key's graph once, then only
    replays. With 8 keys, the size before 2026-12-04, such a cycle evicted the training steps' keys before their next
    use, so those steps launched one at a time (here 15 captures for 10 keys; LEM's stepwise training step at (128,
    1000, 128) on the H200: 113 ms in ``cell_speed.py``'s cycle over the presets, 64.6 ms replayed in
    ``kernel_trace.py``)."""
    from odelab.kernels.cuda import stepwise

    graphs = stepwise.StepGraphs(capture=lambda launch: launch)  # the default size
    keys = set()
    record = graphs.run
    monkeypatch.setattr(graphs, "run", lambda key, *args: (keys.add(key), record(key, *args)))
    monkeypatch.setattr(stepwise, "graphs_for", lambda device: graphs)
    build, target = PRESETS["lem"]
    run = kernel(target)
    models = [build(1, hidden).to(DEVICE) for hidden in (17, 18, 19, 20, 21)]
    x = torch.randn(2, 2, 1, device=DEVICE)
    for _ in range(3):
        for model in models:
            state = tuple(torch.zeros(2, n, device=DEVICE) for n in model.system.block_sizes())
            out, _ = run(model.system, x, state, model.dt, model.unfolds, block_h=16, schedule="stepwise")
            out.sum().backward()
            with torch.no_grad():
                run(model.system, x, state, model.dt, model.unfolds, block_h=16, schedule="stepwise")
    assert len(keys) > 8  # more than the old size
    assert graphs.captures == len(keys) and len(graphs.entries) == len(keys)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["lem", "cornn", "gru-ode", "taugru", "ltc", "lrcu-s"])
def test_stepwise_on_the_gpu(name):
    """Real CUDA graphs: three calls at (40, 200, 96) under the stepwise schedule (eager, recorded, replayed), each
    equal to the generic loop in float64 to 1e-10 (outputs, final state, input gradient)."""
    from odelab.kernels.cuda import stepwise

    build, target = PRESETS[name]
    model = generic(build(3, 96)).to(device=DEVICE, dtype=torch.float64)
    before = stepwise.GRAPHS.captures
    for call in range(3):
        torch.manual_seed(20 + call)
        x = torch.randn(40, 200, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
        state = tuple(torch.randn(40, n, device=DEVICE, dtype=torch.float64) for n in model.system.block_sizes())
        out, final = kernel(target)(model.system, x, state, model.dt, model.unfolds, lags_of(model),
                                    schedule="stepwise")
        ref, ref_final = model(x, state)
        weight = torch.randn_like(ref)
        grad, = torch.autograd.grad((out * weight).sum(), x)
        ref_grad, = torch.autograd.grad((ref * weight).sum(), x)
        for a, b in ((out, ref), *zip(final, ref_final), (grad, ref_grad)):
            assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-10, call
    assert stepwise.GRAPHS.captures - before == 2


def test_stepwise_failed_capture_runs_eagerly(monkeypatch):
    """A capture that raises: one warning, and the launches run eagerly with the right values."""
    from odelab.kernels.cuda import lem, stepwise

    def broken(launch):
        raise RuntimeError("capture refused")

    graphs = stepwise.StepGraphs(capture=broken)
    monkeypatch.setattr(stepwise, "graphs_for", lambda device: graphs)
    build, _ = PRESETS["lem"]
    run = lambda *args, **kw: lem.run(*args, schedule="stepwise", **kw)
    model = build(3, 17)
    relative_errors(model, run, 3, 2, 17, torch.float64, block_h=16)
    with pytest.warns(RuntimeWarning, match="capture refused"):
        errors = relative_errors(model, run, 3, 2, 17, torch.float64, seed=1, block_h=16)
    assert max(errors.values()) <= 1e-10 and graphs.captures == 0


def test_stepwise_choice(monkeypatch):
    """$ODELAB_CUDA_SCHEDULE picks the schedule (an unknown value is an error; "auto", the default, is the grid
    schedule on CUDA only); the register-resident sizes keep their one-launch kernel whatever is asked."""
    from odelab.kernels.cuda import lem, stepwise

    monkeypatch.delenv(stepwise.SCHEDULE_ENV, raising=False)
    assert stepwise.chosen_schedule(device=torch.device("cuda", 0)) == "grid"
    assert stepwise.chosen_schedule(device=torch.device("cpu")) == "persistent"
    assert stepwise.chosen_schedule() == "persistent"
    monkeypatch.setenv(stepwise.SCHEDULE_ENV, "Stepwise")
    assert stepwise.chosen_schedule() == "stepwise"
    assert stepwise.chosen_schedule("persistent", torch.device("cuda")) == "persistent"
    monkeypatch.setenv(stepwise.SCHEDULE_ENV, "fast")
    with pytest.raises(ValueError,
                       match="ODELAB_CUDA_SCHEDULE: expected one of auto, persistent, stepwise, grid, got 'fast'"):
        stepwise.chosen_schedule()
    monkeypatch.setenv(stepwise.SCHEDULE_ENV, "stepwise")
    calls = []
    monkeypatch.setattr(lem, "launch_steps", lambda *args: calls.append(args))
    build, _ = PRESETS["lem"]
    system = build(3, 5).system.to(DEVICE)
    x = torch.randn(2, 2, 3, device=DEVICE)
    state = (torch.zeros(2, 5, device=DEVICE), torch.zeros(2, 5, device=DEVICE))
    lem.run(system, x, state, 0.5)  # hidden 5: the register-resident kernel
    assert calls == []
    lem.run(system, x, state, 0.5, block_h=16)  # tiles asked for: the stepwise launches (a no-op stand-in here)
    assert len(calls) == 1 and calls[0][1].key[0] is lem._lem_step


@contextlib.contextmanager
def matmul_precision(value: str):
    """torch's float32 matmul switch set to ``value`` ("tf32": as ``torch.set_float32_matmul_precision("high")``)."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = value
    try:
        yield
    finally:
        matmul.fp32_precision = before


@pytest.fixture
def tf32():
    with matmul_precision("tf32"):
        yield


def _to_tf32(x, nearest: bool):
    """float32 values (numpy) with their mantissas cut to TF32's 10 bits: truncated (the tensor cores' reading of a
    float32 operand, the conservative one), or rounded to nearest, ties away from zero (PTX's cvt.rna.tf32.f32)."""
    import numpy as np

    bits = x.view(np.uint32)
    if nearest:
        bits = bits + np.uint32(0x1000)  # half of the 13 dropped bits: carries into the magnitude, sign untouched
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


class _Dots:
    """Patches the interpreter's matrix product: records the input precision of every ``tl.dot`` and, with
    ``emulate``, computes float32 products as the tensor cores would. TF32: the operands' mantissas cut to 10 bits
    (truncated), summed in float32. TF32x3: each operand split into a high part rounded to TF32 and the rest
    rounded to TF32, then a_lo b_hi + a_hi b_lo, + a_hi b_hi, + the accumulator, each product summed in float32 --
    written here from the decomposition's definition, not from Triton's lowering."""

    def __init__(self, monkeypatch, emulate: bool = False):
        import numpy as np
        from triton.runtime import interpreter

        self.precisions = []
        original = interpreter.InterpreterBuilder.create_dot

        def create_dot(builder, a, b, d, input_precision, max_num_imprecise_acc):
            name = str(input_precision).rsplit(".", 1)[-1]
            self.precisions.append(name)
            if not (emulate and name in ("TF32", "TF32x3") and a.data.dtype == np.float32):
                return original(builder, a, b, d, input_precision, max_num_imprecise_acc)
            handle = lambda x, like: interpreter.TensorHandle(x, like.dtype.scalar)
            if name == "TF32":
                return original(builder, handle(_to_tf32(a.data, False), a), handle(_to_tf32(b.data, False), b), d,
                                input_precision, max_num_imprecise_acc)
            a_hi, b_hi = _to_tf32(a.data, True), _to_tf32(b.data, True)
            a_lo, b_lo = _to_tf32(a.data - a_hi, True), _to_tf32(b.data - b_hi, True)
            small = np.matmul(a_lo, b_hi) + np.matmul(a_hi, b_lo)
            return handle(((small + np.matmul(a_hi, b_hi)) + d.data).astype(d.data.dtype), d)

        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", create_dot)


def test_dot_precision_follows_torch():
    """TF32 for float32 exactly where torch's float32 matmuls may use it, whichever of its switches said so."""
    from odelab.kernels.cuda._common import dot_precision

    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        for switch, expected in [(lambda: torch.set_float32_matmul_precision("high"), "tf32"),
                                 (lambda: torch.set_float32_matmul_precision("highest"), "ieee"),
                                 (lambda: setattr(matmul, "allow_tf32", True), "tf32"),
                                 (lambda: setattr(matmul, "allow_tf32", False), "ieee"),
                                 (lambda: setattr(matmul, "fp32_precision", "tf32"), "tf32")]:
            switch()
            assert dot_precision(torch.float32) == expected
            assert dot_precision(torch.float64) == "ieee"
    finally:
        matmul.fp32_precision = before


# UnICORNN's recurrence is diagonal, LTC's and STC's synapses elementwise: no matrix products in their kernels.
# The neural oscillator's products stay IEEE (its gradients at T = 1000 do not survive TF32: see oscillators.py).
WITH_DOTS = [n for n in PRESETS if not n.startswith("unicornn") and n not in ("ltc", "stc", "oscillator")]
interpreted = pytest.mark.skipif(torch.cuda.is_available(), reason="patches Triton's interpreter")


@interpreted
@pytest.mark.parametrize("name", WITH_DOTS)
def test_tf32_reaches_every_product(name, monkeypatch):
    """Every ``tl.dot`` of the forward and the backward, both variants: IEEE by default, TF32 in float32 where torch
    allows it, IEEE in float64 even then."""
    build, target = PRESETS[name]
    for switch, dtype, expected in [("ieee", torch.float32, "IEEE"), ("tf32", torch.float32, "TF32"),
                                    ("tf32", torch.float64, "IEEE")]:
        with pytest.MonkeyPatch.context() as patch, matmul_precision(switch):
            dots = _Dots(patch)
            for block_h in (None, 16):
                relative_errors(build(3, 17), kernel(target), 3, 2, 17, dtype, block_h=block_h)
        assert dots.precisions and set(dots.precisions) == {expected}, (switch, dtype, set(dots.precisions))


@interpreted
def test_oscillator_keeps_ieee_products(monkeypatch):
    """The neural oscillator ignores torch's TF32 switch: every product of both variants stays IEEE."""
    build, target = PRESETS["oscillator"]
    with matmul_precision("tf32"):
        dots = _Dots(monkeypatch)
        for block_h in (None, 16):
            relative_errors(build(3, 17), kernel(target), 3, 2, 17, torch.float32, block_h=block_h)
    assert dots.precisions and set(dots.precisions) == {"IEEE"}, set(dots.precisions)


@interpreted
@pytest.mark.parametrize("name", WITH_DOTS)
def test_tf32_tolerance(name, tf32, monkeypatch):
    """The kernels with emulated TF32 products against the generic loop in IEEE float32 (outputs, final state, every
    gradient): within TF32_TOL (the documented tolerance of the option) over 40 steps, hidden 20 (the tiled variant
    gives the same errors to 1 %: measured)."""
    build, target = PRESETS[name]
    _Dots(monkeypatch, emulate=True)
    errors = relative_errors(build(3, 20), kernel(target), 4, 40, 20, torch.float32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TF32_TOL, (worst, errors[worst])


@contextlib.contextmanager
def float32_products(value: str):
    """``$ODELAB_FLOAT32_PRODUCTS`` set to ``value`` (read at each forward)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ODELAB_FLOAT32_PRODUCTS", value)
        yield


def test_float32_products_switch(monkeypatch):
    """``$ODELAB_FLOAT32_PRODUCTS`` chooses float32's products whatever torch's switch says; float64 stays IEEE;
    anything else is refused by name."""
    from odelab.kernels.cuda._common import dot_precision

    for torch_switch in ("ieee", "tf32"):
        with matmul_precision(torch_switch):
            for value, expected in [("tf32x3", "tf32x3"), (" TF32x3 ", "tf32x3"), ("ieee", "ieee"), ("tf32", "tf32"),
                                    ("", torch_switch)]:
                monkeypatch.setenv("ODELAB_FLOAT32_PRODUCTS", value)
                assert dot_precision(torch.float32) == expected, (torch_switch, value)
                assert dot_precision(torch.float64) == "ieee"
    monkeypatch.setenv("ODELAB_FLOAT32_PRODUCTS", "BF16")
    assert dot_precision(torch.float32) == ("bf16-rounded" if os.environ.get("TRITON_INTERPRET") == "1" else "bf16")
    assert dot_precision(torch.float64) == "ieee"
    monkeypatch.setenv("ODELAB_FLOAT32_PRODUCTS", "fp16")
    with pytest.raises(ValueError, match="ODELAB_FLOAT32_PRODUCTS.*tf32x3, bf16, got 'fp16'"):
        dot_precision(torch.float32)


@interpreted
@pytest.mark.parametrize("name", WITH_DOTS + ["oscillator"])
def test_tf32x3_reaches_every_product(name, monkeypatch):
    """With three TF32 products asked for, every ``tl.dot`` of the forward and the backward, both variants, takes
    them in float32 (the neural oscillator too: they keep float32's accuracy), IEEE in float64."""
    build, target = PRESETS[name]
    for dtype, expected in [(torch.float32, "TF32x3"), (torch.float64, "IEEE")]:
        with pytest.MonkeyPatch.context() as patch, float32_products("tf32x3"):
            dots = _Dots(patch)
            for block_h in (None, 16):
                relative_errors(build(3, 17), kernel(target), 3, 2, 17, dtype, block_h=block_h)
        assert dots.precisions and set(dots.precisions) == {expected}, (dtype, set(dots.precisions))


@interpreted
@pytest.mark.parametrize("name", WITH_DOTS + ["oscillator"])
def test_tf32x3_keeps_float32_tolerance(name, monkeypatch):
    """Three emulated TF32 products against the generic loop in IEEE float32 (outputs, final state, every gradient)
    over 40 steps at hidden 20: within the fused kernels' float32 tolerance, 1e-5, as with IEEE products."""
    build, target = PRESETS[name]
    _Dots(monkeypatch, emulate=True)
    with float32_products("tf32x3"):
        errors = relative_errors(build(3, 20), kernel(target), 4, 40, 20, torch.float32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float32], (worst, errors[worst])


@interpreted
def test_tf32x3_emulation_changes_the_products(monkeypatch):
    """The emulation of three TF32 products is not a no-op, and it keeps what one TF32 product loses: LEM's
    outputs against the IEEE kernel's move by round-off with three (within 1e-5), by more than 1e-4 with one."""
    build, target = PRESETS["lem"]
    model = generic(build(3, 20))
    torch.manual_seed(0)
    x = torch.randn(4, 40, 3)
    state = tuple(0.5 * torch.randn(4, n) for n in model.system.block_sizes())
    run = kernel(target)

    def outputs(products=None):
        if products is None:
            return run(model.system, x, state, model.dt, model.unfolds, lags_of(model))[0]
        with pytest.MonkeyPatch.context() as patch, float32_products(products):
            _Dots(patch, emulate=True)
            return outputs()

    ieee = outputs()
    scale = ieee.abs().max()
    assert 0 < (outputs("tf32x3") - ieee).abs().max() / scale <= TOL[torch.float32]
    assert (outputs("tf32") - ieee).abs().max() / scale > 1e-4


@interpreted
def test_tf32_emulation_changes_the_products(tf32, monkeypatch):
    """The emulation is not a no-op: LEM's outputs move by more than IEEE float32 round-off."""
    build, target = PRESETS["lem"]
    _Dots(monkeypatch, emulate=True)
    errors = relative_errors(build(3, 20), kernel(target), 4, 40, 20, torch.float32)
    assert errors["outputs"] > 1e-4


@interpreted
@pytest.mark.parametrize("name", WITH_DOTS)
def test_bf16_tolerance(name):
    """Products of bfloat16-rounded operands (``ODELAB_FLOAT32_PRODUCTS=bf16``; under the interpreter the roundings
    are done in float32 bits) against the generic loop in IEEE float32 (outputs, final state, every gradient):
    within BF16_TOL, the option's documented tolerance, over 40 steps at hidden 20."""
    build, target = PRESETS[name]
    with float32_products("bf16"):
        errors = relative_errors(build(3, 20), kernel(target), 4, 40, 20, torch.float32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= BF16_TOL, (worst, errors[worst])


@triton.jit
def _bf16_rounding(X, Y, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, bf16_rounded(tl.load(X + i)))


@interpreted
def test_bf16_products_round_the_operands():
    """The bfloat16 option changes LEM's products (outputs move by more than 1e-4 against the IEEE kernel) and rounds
    as the conversion to bfloat16 does (to nearest, ties to even: torch's ``.bfloat16()``), in float32 and float64
    kept IEEE; the neural oscillator ignores it (IEEE products, the same bits)."""
    x = torch.cat([torch.randn(1000), torch.tensor([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -(1 + 2.0 ** -8), 0.0])])
    x = torch.cat([x, torch.zeros(1024 - len(x))])
    y = torch.empty_like(x)
    _bf16_rounding[(1,)](x, y, 1024)
    assert torch.equal(y, x.bfloat16().float())
    for name, moves in (("lem", True), ("oscillator", False)):
        build, target = PRESETS[name]
        model = generic(build(3, 20))
        torch.manual_seed(0)
        x = torch.randn(4, 40, 3)
        state = tuple(0.5 * torch.randn(4, n) for n in model.system.block_sizes())
        outputs = {}
        for products in ("ieee", "bf16"):
            with float32_products(products):
                outputs[products] = kernel(target)(model.system, x, state, model.dt, model.unfolds)[0]
        change = ((outputs["bf16"] - outputs["ieee"]).abs().max() / outputs["ieee"].abs().max()).item()
        assert change > 1e-4 if moves else change == 0, (name, change)


# -- full size, on a GPU -----------------------------------------------------------------------------------

FULL_SIZES = [(32, 1000, 16), (8, 100, 300)]  # the benchmark's small size; hidden 300 = ten 32-wide tiles
# UnICORNN's reversible backward rebuilds each state by inverting its step in float32: that round-off, amplified
# over 1000 steps (gradients ~1e5 at these settings), costs up to 7 % of a gradient whatever the generic loop's own
# error (an H200: 0.069 on the initial state's gradient, the generic fp32 loop 0.003; the interpreter: 0.052 on
# c's, the generic 0.027)
REVERSIBLE_TOL = 0.1


def evaluate(model, run, dtype, x, state, weights):
    """Outputs, final state and the gradients of a fixed random loss w.r.t. x, the initial state and every
    parameter, in float64, from ``run`` (a kernel) or the generic loop (``run=None``), computed in ``dtype``."""
    model = generic(model).to(dtype)
    x = x.to(dtype).requires_grad_()
    state = tuple(s.to(dtype).requires_grad_() for s in state)
    if run is None:
        out, final = model(x, state)
    else:
        out, final = run(model.system, x, state, model.dt, model.unfolds, lags_of(model))
    loss = sum((a * w.to(dtype)).sum() for a, w in zip((out, *final), weights))
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [x, *state, *params], allow_unused=True)
    names = ["outputs", *(f"final[{i}]" for i in range(len(final))), "grad x",
             *(f"grad state[{i}]" for i in range(len(state))),
             *(f"grad {n}" for n, p in model.named_parameters() if p.requires_grad)]
    values = (out, *final, *grads)
    return {n: v.detach().double() for n, v in zip(names, values) if v is not None}


def restoring_oscillator(system) -> None:
    """The neural oscillator with a restoring W (−I + a weak symmetric coupling) and a weak input V. With its
    default random W, ÿ = tanh(W y + V u + b) runs away (|W y| ≈ 4600 by step 300 of the full-size case): tanh
    saturates, and 1 − tanh² there is rounding noise of whichever tanh computed it (an ulp of tanh ≈ 1 is O(1)
    relative in 1 − tanh²), so the kernel's and torch's gradients part by 1e-2 in float64 (an H200 and the
    interpreter alike) while both are equally right. With a coupling of 0.05 the units stay bounded but chaotic
    (a few ulps of input move the fp64 gradients by 2e-8, fp32's by O(1)); with 0.01, by 3e-12 and 6e-4."""
    hidden = system.hidden_size
    with torch.no_grad():
        R = torch.randn(hidden, hidden, dtype=system.weight.dtype, device=system.weight.device)
        W = -torch.eye(hidden, dtype=R.dtype, device=R.device) + 0.01 * (R + R.T) / hidden ** 0.5
        system.weight[:, system.input_size:] = W
        system.weight[:, : system.input_size] *= 0.1


def full_size_case(name: str, size: tuple) -> tuple:
    """(model, kernel, x, initial state, loss weights) of a full-size comparison, data in float64."""
    build, target = PRESETS[name]
    batch, time, hidden = size
    torch.manual_seed(0)
    model = build(4, hidden).to(DEVICE)
    if name == "oscillator":
        restoring_oscillator(model.system)
    x = torch.randn(batch, time, 4, device=DEVICE, dtype=torch.float64)
    state = tuple(0.5 * torch.randn(batch, n, device=DEVICE, dtype=torch.float64) for n in model.system.block_sizes())
    with torch.no_grad():
        out, final = generic(model).double()(x, state)
    weights = [torch.randn_like(out), *(torch.randn_like(f) for f in final)]
    return model, kernel(target), x, state, weights


def deviation(a: dict, b: dict) -> dict:
    return {n: ((a[n] - b[n]).abs().max() / b[n].abs().max().clamp_min(1e-30)).item() for n in b}


def roundoff_sensitivity(model, x, state, weights, reference: dict) -> dict:
    """How far the generic float64 loop's own results move when its input moves by a few ulps (x·(1 + 2⁻⁵⁰)): below
    this, two correct float64 implementations that round differently cannot be told apart."""
    return deviation(evaluate(model, None, torch.float64, x * (1 + 2.0 ** -50), state, weights), reference)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("size", FULL_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_full_size_cuda(name, size):
    """fp64: the kernel equals the generic loop to 1e-10 (relative, per tensor) + 10 × the generic loop's own
    round-off sensitivity (:func:`roundoff_sensitivity`: ~2e-15 for coRNN, 3e-12 for the undamped oscillator over
    1000 steps). fp32: over 1000 steps both
    accumulate round-off, amplified by the cell's conditioning (UnICORNN at these settings: gradients ~1e5,
    fp32 generic vs fp64 ~1e-2 at T = 1000, measured under the interpreter), so the fp32 kernel must be as
    accurate as the fp32 generic loop: deviation from the fp64 reference ≤ 10 × the generic's + 1e-5
    (+ REVERSIBLE_TOL for UnICORNN's reversible backward)."""
    model, run, x, state, weights = full_size_case(name, size)
    reference = evaluate(model, None, torch.float64, x, state, weights)
    exact = deviation(evaluate(model, run, torch.float64, x, state, weights), reference)
    sensitivity = roundoff_sensitivity(model, x, state, weights, reference)
    excess = {n: exact[n] - (1e-10 + 10 * sensitivity[n]) for n in exact}
    worst = max(excess, key=excess.get)
    assert excess[worst] <= 0, ("float64", worst, exact[worst], sensitivity[worst])
    fused = deviation(evaluate(model, run, torch.float32, x, state, weights), reference)
    plain = deviation(evaluate(model, None, torch.float32, x, state, weights), reference)
    slack = REVERSIBLE_TOL if name == "unicornn-reversible" else 1e-5
    excess = {n: fused[n] - (10 * plain[n] + slack) for n in fused}
    worst = max(excess, key=excess.get)
    assert excess[worst] <= 0, ("float32", worst, fused[worst], plain[worst])


@pytest.mark.gpu
@pytest.mark.parametrize("name", WITH_DOTS)
@pytest.mark.parametrize("size", FULL_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_full_size_cuda_tf32(name, size, tf32):
    """TF32 products on the GPU: the fp32 kernel's deviation from the fp64 reference ≤ 10 × the IEEE fp32 generic
    loop's + TF32_TOL (the generic loop's own matmuls kept in IEEE)."""
    model, run, x, state, weights = full_size_case(name, size)
    reference = evaluate(model, None, torch.float64, x, state, weights)
    fused = deviation(evaluate(model, run, torch.float32, x, state, weights), reference)
    with matmul_precision("ieee"):
        plain = deviation(evaluate(model, None, torch.float32, x, state, weights), reference)
    excess = {n: fused[n] - (10 * plain[n] + TF32_TOL) for n in fused}
    worst = max(excess, key=excess.get)
    assert excess[worst] <= 0, (worst, fused[worst], plain[worst])


@pytest.mark.gpu
@pytest.mark.parametrize("name, products", [(n, "tf32x3") for n in WITH_DOTS + ["oscillator"]]
                         + [(n, "bf16") for n in WITH_DOTS])
@pytest.mark.parametrize("size", FULL_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_full_size_cuda_products(name, products, size):
    """``ODELAB_FLOAT32_PRODUCTS`` on the GPU, the fp32 kernel's deviation from the fp64 reference ≤ 10 × the IEEE
    fp32 generic loop's + the option's tolerance: three TF32 products meet the IEEE float32 kernels' criterion of
    :func:`test_full_size_cuda` (1e-5), bfloat16-rounded operands BF16_TOL."""
    model, run, x, state, weights = full_size_case(name, size)
    reference = evaluate(model, None, torch.float64, x, state, weights)
    plain = deviation(evaluate(model, None, torch.float32, x, state, weights), reference)
    with float32_products(products):
        fused = deviation(evaluate(model, run, torch.float32, x, state, weights), reference)
    tolerance = {"tf32x3": 1e-5, "bf16": BF16_TOL}[products]
    excess = {n: fused[n] - (10 * plain[n] + tolerance) for n in fused}
    worst = max(excess, key=excess.get)
    assert excess[worst] <= 0, (worst, fused[worst], plain[worst])


# -- compilation for a GPU without one -----------------------------------------------------------------------

COMPILE_CHECK = r"""
import os
import sys
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, "benchmarks")
from shared_banks import compile_ptx as compile_  # the sm_90 compile (fn, constexprs, dtype)
from odelab.kernels.cuda import lem, oscillators, unicornn, gru, delay_gru, liquid
from odelab.kernels.cuda._common import warps

names = ("NE", "HAS_U", "HAS_Z", "HAS_G", "HAS_A", "U_DELAYED", "EU", "EZ", "EG", "EA", "WU", "WG", "WA")
tau = dict(zip(names, (4, True, True, True, True, False, 0, 1, 2, 3, 0, 1, 2)))
dgru = dict(zip(names, (2, True, False, True, False, True, 0, 0, 1, 0, 0, 1, 0)))
# per-sample steps (irregular sampling) or not; the backward kernels with the steps' gradient (DHS)
gap_grads = [(False, False), (True, False), (True, True)]  # (GAPS, DHS)
jobs = [(k, dict(BLOCK=128)) for k in (unicornn._forward, unicornn._backward, unicornn._reversible_forward,
                                     unicornn._reversible_backward)]
jobs += [(k, dict(HP=128, BB=16, BH=16, LIMIT=1 << 22, GAPS=gaps, num_warps=8))  # LEM's weights-on-chip grid kernels
         for k in (lem._lem_grid_forward, lem._lem_grid_forward_one_barrier) for gaps in (False, True)]
jobs += [(lem._lem_grid_forward, dict(HP=128, BB=16, BH=16, LIMIT=1 << 22, GAPS=gaps, STORE=True, num_warps=8))
         for gaps in (False, True)]  # ODELAB_GRID_GATES=stored
jobs += [(lem._lem_grid_backward, dict(HP=128, BB=16, BH=16, LIMIT=1 << 22, GAPS=gaps, DHS=dhs, STORED=stored,
                                       num_warps=8)) for gaps, dhs in gap_grads for stored in (False, True)]
jobs += [(lem._lem_grid, dict(BACKWARD=bw, BB=16, BH=32, LIMIT=1 << 22, GAPS=gaps, DHS=dhs, num_warps=8))
         for bw in (False, True) for gaps, dhs in gap_grads if bw or not dhs]
jobs += [(oscillators._grid_forward, dict(MODE=mode, HP=128, BB=16, BH=16, LIMIT=1 << 22, GAPS=gaps, STORE=store,
                                          num_warps=8))
         for mode in (0, 1, 2) for gaps in (False, True) for store in (False, True)]  # oscillators' on chip
jobs += [(oscillators._grid_backward, dict(MODE=mode, HP=128, BB=16, BH=16, LIMIT=1 << 22, GAPS=gaps, DHS=dhs,
                                           STORED=stored, num_warps=8))
         for mode in (0, 1, 2) for gaps, dhs in gap_grads for stored in (False, True)]
jobs += [(oscillators._grid, dict(BACKWARD=bw, MODE=mode, BB=16, BH=32, LIMIT=1 << 22, GAPS=gaps, DHS=dhs,
                                  num_warps=8))
         for bw in (False, True) for mode in (0, 1, 2) for gaps, dhs in gap_grads if bw or not dhs]
jobs += [(delay_gru._grid_forward, dict(c, HP=128, BB=16, BH=16, LIMIT=1 << 22, DROP=drop, STORE=store,
                                        num_warps=8))  # on chip
         for c in (tau, dgru) for drop in (False, True) for store in (False, True)]
jobs += [(delay_gru._grid_backward, dict(c, ED=ed, HAS_D=True, HP=128, BB=16, BH=16, LIMIT=1 << 22, DROP=drop,
                                         STORED=stored, num_warps=8))
         for c, ed in ((tau, 1), (dgru, 0)) for drop in (False, True) for stored in (False, True)]
jobs += [(delay_gru._grid, dict(c, BACKWARD=bw, ED=ed, HAS_D=True, BB=16, BH=32, LIMIT=1 << 22, DROP=drop,
                                num_warps=8))
         for c, ed in ((tau, 1), (dgru, 0)) for bw in (False, True) for drop in (False, True)]
jobs += [(gru._grid_forward, dict(HP=128, BB=16, BH=16, LIMIT=1 << 22, GAPS=gaps, STORE=store, num_warps=8))
         for gaps in (False, True) for store in (False, True)]  # GRU-ODE's on chip
jobs += [(gru._grid_backward, dict(HP=128, BB=16, BH=16, LIMIT=1 << 22, GAPS=gaps, DHS=dhs, STORED=stored,
                                   num_warps=8)) for gaps, dhs in gap_grads for stored in (False, True)]
jobs += [(gru._grid, dict(BACKWARD=bw, PHASES=(2 if bw else 1) * (1 if ra else 2), RESET_AFTER=ra, BB=16, BH=32,
                          LIMIT=1 << 22, GAPS=gaps, DHS=dhs, num_warps=8))
         for bw in (False, True) for ra in (True, False) for gaps, dhs in gap_grads if bw or not dhs]
# compiled with IEEE float32 products only: ODELAB_GRID_WARPS=4 on chip, and
ieee_only = [(fn, dict(c, num_warps=4)) for fn, c in jobs
             if c.get("HP") == 128 and not any(c.get(k) for k in ("GAPS", "DROP"))]
# ODELAB_GRID_GATES=stored where the weights stream (the step kernels and grid drivers)
ieee_only += [(lem._lem_grid, dict(BACKWARD=bw, BB=16, BH=32, LIMIT=1 << 22, GAPS=gaps, DHS=gaps and bw, STORED=True,
                                   num_warps=8)) for bw in (False, True) for gaps in (False, True)]
ieee_only += [(lem._lem_step, dict(PHASE=phase, BB=16, BH=bh, GAPS=False, STORE=True, num_warps=warps(bh)))
              for phase in (0, 1) for bh in (16, 32)]
ieee_only += [(lem._lem_step_backward, dict(PHASE=phase, BB=16, BH=bh, GAPS=False, DHS=False, STORED=True,
                                            num_warps=warps(bh))) for phase in (0, 1) for bh in (16, 32)]
ieee_only += [(delay_gru._grid, dict(c, BACKWARD=bw, ED=ed, HAS_D=True, BB=16, BH=32, LIMIT=1 << 22, DROP=drop,
                                     STORED=True, num_warps=8))
              for c, ed in ((tau, 1), (dgru, 0)) for bw in (False, True) for drop in (False, True)]
ieee_only += [(delay_gru._step, dict(c, PHASE=0, BB=16, BH=16, DROP=False, STORE=True, num_warps=warps(16)))
              for c in (tau, dgru)]
ieee_only += [(delay_gru._step_backward, dict(c, ED=ed, HAS_D=True, PHASE=0, BB=16, BH=16, DROP=False, STORED=True,
                                              num_warps=warps(16))) for c, ed in ((tau, 1), (dgru, 0))]
ieee_only += [(oscillators._grid, dict(BACKWARD=bw, MODE=mode, BB=16, BH=32, LIMIT=1 << 22, GAPS=False, DHS=False,
                                       STORED=True, num_warps=8)) for bw in (False, True) for mode in (0, 1, 2)]
ieee_only += [(gru._grid, dict(BACKWARD=bw, PHASES=2 if bw else 1, RESET_AFTER=True, BB=16, BH=32, LIMIT=1 << 22,
                               GAPS=False, DHS=False, STORED=True, num_warps=8)) for bw in (False, True)]
for bh in (16, 32):
    tile = dict(BB=16, BH=bh)
    dense = [(k, dict(GAPS=gaps, **tile)) for gaps in (False, True)
             for k in (lem._lem_forward, lem._lem_forward_resident, gru._forward_resident)]
    dense += [(k, dict(GAPS=gaps, DHS=dhs, **tile)) for gaps, dhs in gap_grads
              for k in (lem._lem_backward, lem._lem_backward_resident, gru._backward_resident)]
    dense += [(lem._lem_step, dict(PHASE=phase, GAPS=gaps, **tile)) for phase in (0, 1) for gaps in (False, True)]
    dense += [(lem._lem_step_backward, dict(PHASE=phase, GAPS=gaps, DHS=dhs, **tile)) for phase in (0, 1, 2)
              for gaps, dhs in gap_grads]
    dense += [(oscillators._step, dict(PHASE=0, MODE=mode, GAPS=gaps, **tile)) for mode in (0, 1, 2)
              for gaps in (False, True)]
    dense += [(oscillators._step_backward, dict(PHASE=phase, MODE=mode, GAPS=gaps, DHS=dhs, **tile))
              for mode in (0, 1, 2) for phase in (0, 1) for gaps, dhs in gap_grads]
    dense += [(gru._step, dict(PHASE=phase, RESET_AFTER=ra, GAPS=gaps, **tile)) for ra in (True, False)
              for phase in range(1 if ra else 2) for gaps in (False, True)]
    dense += [(gru._step_backward, dict(PHASE=phase, RESET_AFTER=ra, GAPS=gaps, DHS=dhs, **tile))
              for ra in (True, False) for phase in range(2 if ra else 4) for gaps, dhs in gap_grads]
    for drop in (False, True):  # the delay cells with state dropout (DROP) or without
        dense += [(delay_gru._step, dict(constexprs, PHASE=0, DROP=drop, **tile)) for constexprs in (tau, dgru)]
        dense += [(delay_gru._step_backward, dict(constexprs, ED=ed, HAS_D=True, PHASE=phase, DROP=drop, **tile))
                  for constexprs, ed in ((tau, 1), (dgru, 0)) for phase in (0, 1)]
        dense += [(k, dict(c, DROP=drop, **tile)) for c in (tau, dgru)
                  for k in (delay_gru._forward, delay_gru._forward_resident)]
        dense += [(k, dict(c, ED=ed, HAS_D=True, DROP=drop, **tile)) for c, ed in ((tau, 1), (dgru, 0))
                  for k in (delay_gru._backward, delay_gru._backward_resident)]
    dense += [(k, dict(MODE=mode, GAPS=gaps, **tile)) for mode in (0, 1, 2) for gaps in (False, True)
              for k in (oscillators._forward, oscillators._forward_resident)]
    dense += [(k, dict(MODE=mode, GAPS=gaps, DHS=dhs, **tile)) for mode in (0, 1, 2) for gaps, dhs in gap_grads
              for k in (oscillators._backward, oscillators._backward_resident)]
    dense += [(gru._forward, dict(RESET_AFTER=ra, GAPS=gaps, **tile)) for ra in (True, False) for gaps in (False, True)]
    dense += [(gru._backward, dict(RESET_AFTER=ra, GAPS=gaps, DHS=dhs, **tile)) for ra in (True, False)
              for gaps, dhs in gap_grads]
    liquid_modes = [dict(MODE=mode, BJ=liquid.block_j(bh), L=6 if mode < 2 else 1, **tile) for mode in (0, 1, 2, 3)]
    dense += [(liquid._forward, dict(c, GAPS=gaps)) for c in liquid_modes for gaps in (False, True)]
    dense += [(liquid._backward, dict(c, GAPS=gaps, DHS=dhs)) for c in liquid_modes for gaps, dhs in gap_grads]
    if bh == liquid.RESIDENT_H:
        resident = [dict(c, BB=rows, num_warps=liquid.resident_warps(rows)) for c in liquid_modes
                    for rows in (1, 4, 16)]
        dense += [(liquid._forward_resident, dict(c, GAPS=gaps)) for c in resident for gaps in (False, True)]
        dense += [(liquid._backward_resident, dict(c, GAPS=gaps, DHS=dhs)) for c in resident for gaps, dhs in gap_grads]
    fewer = [dict(MODE=mode, BB=rows, BH=bh, BJ=liquid.block_j(bh, rows), L=6) for mode in (0, 1) for rows in (1, 4)]
    dense += [(liquid._forward, dict(c, GAPS=gaps)) for c in fewer for gaps in (False, True)]  # ODELAB_LIQUID_ROWS
    dense += [(liquid._backward, dict(c, GAPS=gaps, DHS=dhs)) for c in fewer for gaps, dhs in gap_grads]
    jobs += [(fn, dict(dict(num_warps=warps(bh)), **constexprs)) for fn, constexprs in dense]
for bj, bi in liquid.SYNAPSE_TILES:  # the synapse-tile phases, every mode, forward and backward
    ra, rc = liquid.phase_rows(bj, bi, 1 << 20)
    tiles = dict(BJ=bj, BI=bi, num_warps=liquid.THREADS // 32)
    jobs += [(liquid._grid, dict(tiles, BACKWARD=bw, MODE=mode, RA=ra, RC=rc, L=6, E=e, LIMIT=1 << 22, GAPS=gaps,
                                 DHS=dhs, STORED=stored))
             for mode in (0, 1, 2, 3) for bw in (False, True) for gaps, dhs in gap_grads if bw or not dhs
             for e in (liquid.ELEMENTS,) + ((4 * liquid.ELEMENTS,) if (bj, bi) == liquid.SYNAPSE_TILES[-1] else ())
             for stored in ((False, True) if not gaps and e == liquid.ELEMENTS else (False,))]  # the conductances
    # stored (ODELAB_GRID_GATES=stored), without per-sample steps: they only change which lengths the elements read
bj, bi = liquid.STEPWISE_TILE
ra, rc = liquid.phase_rows(bj, bi, 1 << 20)
jobs += [(liquid._synapse_step, dict(BJ=bj, BI=bi, BACKWARD=bw, MODE=mode, RA=ra, RC=rc, RS=max(ra, rc),
                                     STORED=stored, num_warps=liquid.THREADS // 32))
         for mode in (0, 1, 2, 3) for bw in (False, True) for stored in (False, True)]
jobs += [(liquid._element_step, dict(BACKWARD=bw, MODE=mode, BJ=bj, BI=bi, L=6, E=liquid.ELEMENTS, GAPS=gaps, DHS=dhs,
                                     STORED=stored))
         for mode in (0, 1, 2, 3) for bw in (False, True) for gaps, dhs in gap_grads if bw or not dhs
         for stored in ((False, True) if not gaps else (False,))]
for bj, rs in ((16, 8), (32, 64)):  # the row slabs (ODELAB_LIQUID_LAYOUT=rows) at hidden 128 and 256
    hb, rc, re_ = liquid.slab_chunks(bj, 8 * bj, rs)
    rd = min(rs, max(1, liquid.THREADS * 8 // (bj * hb)))
    slab = dict(BJ=bj, HB=hb, RC=rc, RE=re_, num_warps=liquid.THREADS // 32, ints={"B", "T", "H", "RS", "n"})
    jobs += [(liquid._slab_grid, dict(slab, MODE=mode, L=6, LIMIT=1 << 22, GAPS=gaps, STORED=stored))
             for mode in (0, 1, 2, 3) for gaps in (False, True) for stored in (False, True)]
    jobs += [(liquid._slab_backward_grid, dict(slab, MODE=mode, RD=rd, L=6, LIMIT=1 << 22, GAPS=gaps, DHS=dhs,
                                               STORED=stored, KEEP=bj == 16))
             for mode in (0, 1, 2, 3) for gaps, dhs in gap_grads for stored in (False, True)]
    jobs += [(liquid._slab_step, dict(slab, PHASE=phase, MODE=mode, L=6, GAPS=False, STORED=False))
             for phase in (0, 1) for mode in (0, 2)]
    jobs += [(liquid._slab_backward_step, dict(slab, PHASE=phase, MODE=mode, RD=rd, L=6, GAPS=False, DHS=False,
                                               STORED=False)) for phase in (0, 1, 2) for mode in (0, 2)]
jobs += [(k, dict(BR=liquid.INPUT_ROWS, BM=liquid.INPUT_COLUMNS, ints={"R", "N", "M", "J0"}))
         for k in (liquid._input_forward, liquid._input_backward)]
count = 0
for fn, constexprs in jobs:
    for dtype in DTYPES:
        # the products' precisions in every variant without per-sample steps or dropout; with them (GAPS, DROP), IEEE
        # only: they change no product
        every = dtype == "fp32" and not any(constexprs.get(k) for k in ("GAPS", "DROP", "DHS"))
        precisions = ("ieee", "tf32", "tf32x3", "bf16") if every else ("ieee",)
        for precision in precisions if "PRECISION" in fn.arg_names else (None,):
            compile_(fn, constexprs if precision is None else dict(constexprs, PRECISION=precision), dtype)
            count += 1
for fn, constexprs in ieee_only:
    compile_(fn, dict(constexprs, PRECISION="ieee"), "fp32")
    count += 1
print("compiled", count)
"""


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """Every kernel variant compiles to a cubin for sm_90 (Triton's bundled ptxas; no GPU needed), fp32 (IEEE, TF32
    and three-TF32 products) and fp64: the interpreter does not check what only the compiler rejects. Five minutes on two
    cores with Triton's cache warm from an earlier run; from a cold cache more than fifteen (2026-12-01)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    code = "DTYPES = ('fp32', 'fp64')\n" + COMPILE_CHECK
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=2400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "compiled" in result.stdout


LIQUID_PTX = r"""
import os
import sys
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, "benchmarks")
from shared_banks import compile_ptx
from odelab.kernels.cuda import liquid

fn = liquid._synapse_step
for bj, bi in liquid.SYNAPSE_TILES + (liquid.STEPWISE_TILE,):
    ra, rc = liquid.phase_rows(bj, bi, 1 << 20)
    for mode in (0, 2):
        ptx = compile_ptx(fn, dict(BACKWARD=False, MODE=mode, BJ=bj, BI=bi, RA=ra, RC=rc, RS=max(ra, rc), num_warps=8))
        print(bj, bi, mode, ptx.count("shfl"), ptx.count("ex2.approx"))
"""


@pytest.mark.slow
def test_liquid_forward_sums_stay_in_threads():
    """The synapse tiles' premise: Triton keeps the summed first axis of a (BJ, rows, BI) block of openings in each
    thread, so the forward's synapse phase compiles (sm_90 PTX, float32) without a shuffle, and with one exponential
    per presynaptic neuron of a thread's (row, neuron) -- BJ in the unrolled loop -- for every tile size and mode."""
    import subprocess
    import sys

    from odelab.kernels.cuda import liquid

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", LIQUID_PTX], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [tuple(map(int, line.split())) for line in result.stdout.split("\n") if line.strip()]
    assert len(rows) == 2 * (len(liquid.SYNAPSE_TILES) + 1)
    for bj, bi, mode, shuffles, exponentials in rows:
        assert shuffles == 0, (bj, bi, mode)
        assert exponentials == bj, (bj, bi, mode, exponentials)


# -- the grid-synchronised schedule: one launch, a barrier of a batch block's column programs per phase ------------

# the presets with a grid driver -> (forward, backward) phases a step (a liquid cell's: a sub-step's)
WITH_GRID = {"lem": (2, 3), "cornn-learned-coefficients": (1, 2), "cornn-implicit-learned-coefficients": (1, 2),
             "oscillator": (1, 2), "gru-ode": (1, 2), "gru-ode-reset-before": (2, 4), "taugru": (1, 2),
             "delaygru": (1, 2)}
# (the liquid cells' grid schedule has its own programs, synapse tiles: below)


def _grid_and_stepwise(name, batch, time, hidden, dtype, block_h, seed=0):
    """A preset's outputs, final state and gradients (input, initial state, every trained parameter) under "grid"
    and under "stepwise", each from the same model and inputs."""
    build, target = PRESETS[name]
    torch.manual_seed(seed)
    model = build(3, hidden).to(device=DEVICE, dtype=dtype)
    x = torch.randn(batch, time, 3, device=DEVICE, dtype=dtype, requires_grad=True)
    state = tuple((0.5 * torch.randn(batch, n, device=DEVICE, dtype=dtype)).requires_grad_()
                  for n in model.system.block_sizes())
    weights = torch.randn(batch, time, hidden, device=DEVICE, dtype=dtype)
    inputs = [x, *state, *(p for p in model.parameters() if p.requires_grad)]
    results = {}
    for schedule in ("grid", "stepwise"):
        out, final = kernel(target)(model.system, x, state, model.dt, model.unfolds, lags_of(model), block_h=block_h,
                                    schedule=schedule)
        loss = (out * weights).sum() + sum((i - 0.5) * f.sum() for i, f in enumerate(final))
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        results[schedule] = [out, *final, *(g for g in grads if g is not None)]
    return results, model


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("size", [(1, 1, 17), (19, 4, 17), (40, 3, 30)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(WITH_GRID))
def test_grid_equals_stepwise_and_generic(name, size, dtype, monkeypatch):
    """The grid schedule runs the stepwise schedule's phase functions, so its values are the same bits; against the
    generic loop 1e-10 / 1e-5. One 32-wide column tile per batch block (the interpreter runs programs one after
    another, so only a one-program barrier can be met there; the gpu test below has six), 1-3 batch blocks; every
    batch block's counter ends at phases × steps."""
    from odelab.kernels.cuda import grid

    made = recorded_counters(monkeypatch)
    batch, time, hidden = size
    assert grid.schedule_for("grid", torch.empty(batch, time, 3, device=DEVICE), hidden, 32) == "grid"
    results, model = _grid_and_stepwise(name, batch, time, hidden, dtype, block_h=32)
    assert len(results["grid"]) == len(results["stepwise"])
    for a, b in zip(results["grid"], results["stepwise"]):
        assert torch.equal(a, b)
    blocks = -(-batch // 16)
    steps = time * model.unfolds
    assert [m.tolist() for m in made] == [[phases * steps] * blocks + [0] for phases in WITH_GRID[name]]
    run = lambda *args, **kw: kernel(PRESETS[name][1])(*args, schedule="grid", **kw)
    errors = relative_errors(PRESETS[name][0](3, hidden), run, batch, time, hidden, dtype, block_h=32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])


@pytest.mark.parametrize("name", list(WITH_GRID))
def test_grid_with_64_row_batch_blocks(name, monkeypatch):
    """The batch blocks the grid schedule grows to where 16-row ones would not all be resident (64 rows: 2 blocks at
    batch 70, the second partly masked), against the generic loop in float64 to 1e-10."""
    from odelab.kernels.cuda import grid

    made = recorded_counters(monkeypatch)
    monkeypatch.setattr(grid, "rows_per_block", lambda *args: 64)
    run = lambda *args, **kw: kernel(PRESETS[name][1])(*args, schedule="grid", **kw)
    errors = relative_errors(PRESETS[name][0](3, 20), run, 70, 3, 20, torch.float64, block_h=32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-10, (worst, errors[worst])
    assert [len(m) for m in made] == [3, 3]  # two batch blocks' counters and the flag, forward and backward


# -- the liquid cells' synapse tiles (stepwise and grid schedules) -------------------------------------------------

LIQUID = ["ltc", "lrcu-s"]  # LTC with 2 sub-steps per sample; LRCU-S: O_h's sums and the elastance shift besides


def _liquid_run(name, schedule):
    return lambda *args, **kw: kernel(PRESETS[name][1])(*args, schedule=schedule, **kw)


@pytest.mark.parametrize("name", LIQUID)
def test_liquid_stepwise_with_row_slabs(name):
    """The stepwise synapse phases over several row slabs (batch 70: five slabs of 16 rows, the last partly masked;
    each slab's parameter sums in their own slot) and 16 × 16 synapse tiles at hidden 20 (2 × 2 tiles, masked
    edges): outputs, final state and every gradient against the generic loop in float64 to 1e-10."""
    from odelab.kernels.cuda import liquid

    assert liquid.synapse_tiles(20, "stepwise", torch.device(DEVICE)) == (16, 16)
    assert liquid.slab_rows(16, 16, 70) == 16
    errors = relative_errors(PRESETS[name][0](3, 20), _liquid_run(name, "stepwise"), 70, 3, 20, torch.float64)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-10, (worst, errors[worst])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("size", [(1, 1, 17), (19, 4, 17), (40, 3, 30)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", LIQUID)
def test_liquid_grid_equals_generic(name, size, dtype, monkeypatch):
    """The liquid cells' grid schedule (the default on CUDA from hidden 17; under the interpreter one tile of the
    whole synapse matrix, so one program, whose barriers it can meet; element phases in blocks of the elements'
    power of two, 256 to 1024: two blocks of 1024 at 40 × 30): outputs, final state and every gradient against the generic loop, 1e-10 / 1e-5; its one counter ends
    at two barriers a sub-step forward and two a sub-step, sub-steps T … 0, backward."""
    from odelab.kernels.cuda import liquid

    made = recorded_counters(monkeypatch)
    batch, time, hidden = size
    model = PRESETS[name][0](3, hidden)
    assert liquid.liquid_schedule("grid", torch.empty(batch, time, 3, device=DEVICE), hidden, None) == "grid"
    errors = relative_errors(model, _liquid_run(name, "grid"), batch, time, hidden, dtype)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    steps = time * model.unfolds
    assert [m.tolist() for m in made] == [[2 * steps, 0], [2 * (steps + 1), 0]]


def test_liquid_schedule_choice(monkeypatch):
    """The liquid cells keep their register-resident kernels up to hidden 16 (unless tiles are asked for), take the
    synapse tiles from hidden 17 under "stepwise" and "grid", and fall back to "stepwise" where the grid's tiles do
    not fit at once or a grid barrier failed on the device; grid tiles on a GPU of 132 multiprocessors: the smallest
    whose count fits."""
    from odelab.kernels.cuda import grid, liquid

    x = torch.empty(4, 2, 3, device=DEVICE)
    assert liquid.liquid_schedule("grid", x, 16, None) == "persistent"
    assert liquid.liquid_schedule("grid", x, 16, 16) == "grid"
    assert liquid.liquid_schedule("stepwise", x, 17, None) == "stepwise"
    assert liquid.liquid_schedule("persistent", x, 300, None) == "persistent"
    monkeypatch.setattr(liquid, "synapse_tiles", lambda *args: None)
    assert liquid.liquid_schedule("grid", x, 17, None) == "stepwise"
    monkeypatch.undo()
    monkeypatch.setattr(grid, "_NOT_RESIDENT", {x.device})
    assert liquid.liquid_schedule("grid", x, 17, None) == "stepwise"
    monkeypatch.undo()

    class H200:
        multi_processor_count = 132

    monkeypatch.setattr(grid, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: H200)
    cuda = torch.device("cuda")
    tiles = {m: liquid.synapse_tiles(m, "grid", cuda) for m in (17, 64, 128, 256, 300)}
    assert tiles == {17: (8, 4), 64: (8, 4), 128: (16, 8), 256: (32, 16), 300: None}
    assert liquid.synapse_tiles(300, "stepwise", cuda) == (16, 16)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the abandoned grid forward read stale rows
def test_liquid_grid_barrier_never_met_reruns_the_forward_stepwise(monkeypatch):
    """Synapse-tile programs that are not all resident (under the interpreter, which runs them one after another: 8
    × 4 tiles at hidden 17, 15 programs): the barrier gives up after its spin limit, the call warns and reruns its
    forward with the stepwise schedule (the same values as asking for it), and the device keeps that schedule."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's sequential programs are the stand-in for non-resident ones")
    from odelab.kernels.cuda import grid, liquid

    monkeypatch.setattr(grid, "SPIN_LIMIT", 3)
    monkeypatch.setattr(grid, "_NOT_RESIDENT", set())
    monkeypatch.setattr(liquid, "synapse_tiles", lambda m, schedule, device: (8, 4) if schedule == "grid" else (16, 16))
    model = PRESETS["ltc"][0](3, 17)
    x = torch.randn(2, 2, 3, dtype=torch.float64)
    state = (torch.zeros(2, 17, dtype=torch.float64),)
    model = model.double()
    with pytest.warns(RuntimeWarning, match="grid barrier .* was not met .* reran with the stepwise schedule"):
        out, final = liquid.run_ltc(model.system, x, state, model.dt, model.unfolds, schedule="grid")
    ref, ref_final = liquid.run_ltc(model.system, x, state, model.dt, model.unfolds, schedule="stepwise")
    assert torch.equal(out, ref) and torch.equal(final[0], ref_final[0])
    assert liquid.liquid_schedule("grid", x, 17, None) == "stepwise"


def _liquid_training_step(name, schedule, dtype, gaps, size=(5, 4, 20)):
    """A liquid preset's outputs, final state and every gradient (input, initial state, trained parameters and,
    with ``gaps``, the per-sample gaps') at ``size`` (batch, time, hidden; hidden 20: 2 × 2 stepwise tiles of 16),
    and the bytes its autograd Function saved (each storage once)."""
    batch, time, hidden = size
    torch.manual_seed(3)
    model = PRESETS[name][0](3, hidden).to(device=DEVICE, dtype=dtype)
    x = torch.randn(batch, time, 3, device=DEVICE, dtype=dtype, requires_grad=True)
    state = ((0.5 * torch.randn(batch, hidden, device=DEVICE, dtype=dtype)).requires_grad_(),)
    dt = (0.4 + torch.rand(batch, time, device=DEVICE, dtype=dtype)).requires_grad_() if gaps else model.dt
    inputs = [x, *state, *(p for p in model.parameters() if p.requires_grad)] + ([dt] if gaps else [])
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out, final = kernel(PRESETS[name][1])(model.system, x, state, dt, model.unfolds, (), schedule=schedule)
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum() + 0.3 * final[0].sum(), inputs)
    return [out, final[0], *grads], sum(saved.values())


@pytest.mark.parametrize("gaps", [False, True], ids=["dt", "gaps"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("schedule", ["grid", "stepwise"])
@pytest.mark.parametrize("name", ["ltc", "stc", "lrcu-a", "lrcu-s"])
def test_liquid_stored_conductances_give_the_same_bits(name, schedule, dtype, gaps, monkeypatch):
    """``ODELAB_GRID_GATES=stored`` on the liquid cells' synapse tiles: the forward stores every sub-step's
    conductances (f, u; LRC's w too) and the backward's synapse phases compute only the adjoints' openings; outputs,
    final state and every gradient (the gaps' too) are the default's bits. Saved: LRCU (one sub-step a sample) as
    many bytes as the default, LTC and STC (2 sub-steps here) 2 (L − 1) = 2 (B, T, H) sequences more; the forward is
    told to store and the backward to read, and under no_grad nothing is stored."""
    from odelab.kernels.cuda import grid, liquid

    flags = []
    launch = liquid._launch_phases

    def recorded(*args, **kw):
        flags.append(kw.get("stored", False))
        return launch(*args, **kw)

    monkeypatch.setattr(liquid, "_launch_phases", recorded)
    results, saved = {}, {}
    for gates in ("", "stored"):
        monkeypatch.setenv(grid.GATES_ENV, gates)
        results[gates], saved[gates] = _liquid_training_step(name, schedule, dtype, gaps)
    assert flags == [False, False, True, True]
    for a, b in zip(results[""], results["stored"], strict=True):
        assert torch.equal(a, b)
    unfolds = PRESETS[name][0](3, 20).unfolds
    sequence = 5 * 4 * 20 * torch.finfo(dtype).bits // 8  # one (B, T, H) sequence
    extra = saved["stored"] - saved[""] - 2 * (unfolds - 1) * sequence
    assert 0 <= extra <= torch.finfo(dtype).bits // 8  # up to one element: the inputs' conductances' placeholder
    with torch.no_grad():
        kernel(PRESETS[name][1])(PRESETS[name][0](3, 20).to(device=DEVICE, dtype=dtype).system,
                                 torch.randn(5, 4, 3, device=DEVICE, dtype=dtype),
                                 (torch.zeros(5, 20, device=DEVICE, dtype=dtype),), 1.0, unfolds, (),
                                 schedule=schedule)
    assert flags[-1] is False


@pytest.mark.parametrize("stored", [False, True], ids=["recomputed", "stored"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("schedule", ["grid", "stepwise"])
@pytest.mark.parametrize("name", ["ltc", "stc", "lrcu-a", "lrcu-s"])
def test_liquid_row_slabs_equal_generic(name, schedule, dtype, stored, monkeypatch):
    """``ODELAB_LIQUID_LAYOUT=rows``: the row slabs, forward and backward, with the conductances recomputed or
    stored, against the generic loop, 1e-10 / 1e-5; batch 37 (3 slabs of 16 rows, the last partly masked), hidden 20
    (stepwise: 2 j-tiles of 16, masked; grid under the interpreter: one j-tile, each slab's barrier group one
    program). Grid: each slab's counter ends at one barrier a sub-step forward and one a sub-step backward, one more
    where the backward recomputes the conductances (its first sub-step's partials)."""
    from odelab.kernels.cuda import grid, liquid

    made = recorded_counters(monkeypatch)
    launched = []
    launch = liquid._launch_slabs
    monkeypatch.setattr(liquid, "_launch_slabs", lambda *args, **kw: launched.append(args[1]) or launch(*args, **kw))
    monkeypatch.setenv(liquid.LAYOUT_ENV, "rows")
    monkeypatch.setenv(grid.GATES_ENV, "stored" if stored else "")
    model = PRESETS[name][0](3, 20)
    errors = relative_errors(model, _liquid_run(name, schedule), 37, 3, 20, dtype)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    assert launched == [False, True]  # the forward and the backward both on the row slabs
    steps = 3 * model.unfolds
    if schedule == "grid":
        assert [m.tolist() for m in made] == [[steps] * 3 + [0], [steps + (not stored)] * 3 + [0]]


def test_liquid_row_slabs_with_per_sample_gaps(monkeypatch):
    """The row slabs (stepwise: 2 j-tiles, 3 slabs) with per-sample gaps that require grad: their gradient (DE) and
    every other one as the generic loop's, float64, 1e-10; LTC with 2 sub-steps a sample and LRCU-S."""
    from odelab.kernels.cuda import liquid

    monkeypatch.setenv(liquid.LAYOUT_ENV, "rows")
    for name in ("ltc", "lrcu-s"):
        model = generic(PRESETS[name][0](3, 20)).double()
        torch.manual_seed(2)
        x = torch.randn(37, 3, 3, dtype=torch.float64, device=DEVICE)
        state = ((0.5 * torch.randn(37, 20, dtype=torch.float64, device=DEVICE)).requires_grad_(),)
        gaps = (1.5 * torch.rand(37, 3, dtype=torch.float64, device=DEVICE)).requires_grad_()
        out, final = _liquid_run(name, "stepwise")(model.system, x, state, gaps, model.unfolds, ())
        ref, ref_final = model(x, state, dt=gaps)
        w = torch.randn_like(ref)
        got = torch.autograd.grad((out * w).sum() + final[0].sum(), [gaps, state[0]])
        want = torch.autograd.grad((ref * w).sum() + ref_final[0].sum(), [gaps, state[0]])
        assert (out - ref).abs().max() < 1e-10 * ref.abs().max()
        for a, b in zip(got, want):
            assert (a - b).abs().max() <= 1e-10 * b.abs().max(), name


def test_liquid_row_slabs_choice(monkeypatch):
    """The row slabs' programs on a GPU of 132 multiprocessors: 16 presynaptic neurons a program up to hidden 128
    (32 above), the fewest rows a slab that fit; stepwise 16 × 16; a misspelt layout is an error."""
    from odelab.kernels.cuda import grid, liquid

    class H200:
        multi_processor_count = 132

    monkeypatch.setattr(grid, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: H200)
    cuda = torch.device("cuda")
    got = {(m, b): liquid.row_slabs(m, b, "grid", cuda) for m, b in ((128, 128), (256, 1024), (128, 32), (17, 5))}
    assert got == {(128, 128): (16, 8), (256, 1024): (32, 64), (128, 32): (16, 2), (17, 5): (16, 1)}
    assert liquid.row_slabs(8000, 4, "grid", cuda) is None
    assert liquid.row_slabs(300, 4, "stepwise", cuda) == (16, 16)
    assert liquid.slab_chunks(16, 128, 8) == (128, 4, 8) and liquid.slab_chunks(32, 256, 64) == (128, 2, 8)
    monkeypatch.delenv(liquid.LAYOUT_ENV, raising=False)
    assert liquid.liquid_layout() == "tiles"
    monkeypatch.setenv(liquid.LAYOUT_ENV, "row")
    with pytest.raises(ValueError, match="tiles or rows"):
        liquid.liquid_layout()


def test_liquid_stored_conductances_are_eq1(monkeypatch):
    """What the LTC forward stores under ``ODELAB_GRID_GATES=stored``: for every sub-step n and batch row, eq. 1
    over y = [h_{n−1}, x of the sample], f_i = Σ_j g_ji σ(a_ji y_j + b_ji) + g_l and u_i with k_ji, written out
    here (g = softplus(raw g), g_l = softplus(raw g_l)), 1e-12; 2 sub-steps a sample."""
    from odelab.kernels.cuda import grid, liquid

    kept = []
    launch = liquid._launch_phases

    def recorded(tensors, backward, *args, **kw):
        launch(tensors, backward, *args, **kw)
        if not backward:
            kept.append((tensors[11].clone(), tensors[14].clone()))  # S (B, TS + 1, H) and CS (2, B, TS, H)

    monkeypatch.setattr(liquid, "_launch_phases", recorded)
    monkeypatch.setenv(grid.GATES_ENV, "stored")
    torch.manual_seed(5)
    model = PRESETS["ltc"][0](3, 20).to(device=DEVICE, dtype=torch.float64)
    x = torch.randn(4, 3, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
    kernel(PRESETS["ltc"][1])(model.system, x, (torch.zeros(4, 20, device=DEVICE, dtype=torch.float64),), model.dt,
                              model.unfolds, (), schedule="grid")
    (S, CS), = kept
    p = model.system
    with torch.no_grad():
        g, k, g_l = torch.nn.functional.softplus(p.raw_g), p.k, torch.nn.functional.softplus(p.raw_g_leak)
        for n in range(1, 3 * model.unfolds + 1):
            y = torch.cat((S[:, n - 1], x[:, (n - 1) // model.unfolds]), dim=1)  # (B, m + n)
            opening = 1.0 / (1.0 + torch.exp(-(p.a[None] * y[:, :, None] + p.b[None])))
            f = (opening * g[None]).sum(1) + g_l
            u = (opening * k[None]).sum(1) + g_l
            assert (CS[0, :, n - 1] - f).abs().max() < 1e-12 and (CS[1, :, n - 1] - u).abs().max() < 1e-12


# the presets with grid kernels that keep their weights on chip -> barriers a step (forward, backward)
WEIGHTS_ON_CHIP = {"lem": (2, 2), "cornn-learned-coefficients": (1, 1), "cornn-implicit-learned-coefficients": (1, 1),
                   "oscillator": (1, 1), "gru-ode": (1, 1), "taugru": (1, 1), "delaygru": (1, 1)}
# (GRU-ODE: reset after; reset before runs the step kernels)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("size", [(1, 1, 1), (19, 5, 16), (3, 4, 9)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(WEIGHTS_ON_CHIP))
def test_grid_with_weights_on_chip(name, size, dtype, monkeypatch):
    """The grid kernels that keep each program's weight tiles in registers (the schedule's choice from hidden 33 to
    128 on a GPU; here hidden ≤ 16 is forced onto them, one 16-wide column tile per batch block, what the
    interpreter can run): outputs, final state and every gradient against the generic loop, 1e-10 / 1e-5; every
    batch block's counter ends at barriers × steps."""
    from odelab.kernels.cuda import grid

    made = recorded_counters(monkeypatch)
    monkeypatch.setattr(grid, "schedule_for", lambda *args: "grid")
    batch, time, hidden = size
    assert grid.resident(batch, hidden, None, torch.device(DEVICE))
    build, target = PRESETS[name]
    run = lambda *args, **kw: kernel(target)(*args, schedule="grid", **kw)
    errors = relative_errors(build(3, hidden), run, batch, time, hidden, dtype)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    blocks = -(-batch // 16)
    assert [m.tolist() for m in made] == [[count * time] * blocks + [0] for count in WEIGHTS_ON_CHIP[name]]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_lem_grid_variants_give_the_same_bits(dtype, monkeypatch):
    """``ODELAB_LEM_GRID`` and ``ODELAB_GRID_GATES``: LEM's weights-on-chip grid kernels with one barrier a step
    forward (every column program computes z_n's whole rows) or with the forward's pre-activations stored for the
    backward (which then computes no gate) give the two-barrier kernels' bits -- outputs, final state and every
    gradient -- and their counters count one barrier a step forward (two otherwise) and two backward; the one-barrier
    forward does not store, so both asked at once is an error."""
    from odelab.kernels.cuda import grid, lem

    made = recorded_counters(monkeypatch)
    monkeypatch.setattr(grid, "schedule_for", lambda schedule, *args: schedule)  # hidden ≤ 16 forced onto the grid
    launched = []
    launch = grid.launch_resident

    def recorded(kernel, *args, **meta):
        launched.append((kernel.fn.__name__, bool(meta.get("STORE") or meta.get("STORED"))))
        return launch(kernel, *args, **meta)

    monkeypatch.setattr(grid, "launch_resident", recorded)
    results = {}
    for choice, gates in (("", ""), ("One-Barrier", ""), ("", " Stored")):
        monkeypatch.setenv(lem.GRID_ENV, choice)
        monkeypatch.setenv(grid.GATES_ENV, gates)
        assert lem.grid_variant() == (choice.strip().lower() or "two-barriers")
        results[choice + gates], _ = _grid_and_stepwise("lem", 19, 5, 13, dtype, None)
    assert launched == [("_lem_grid_forward", False), ("_lem_grid_backward", False),
                        ("_lem_grid_forward_one_barrier", False), ("_lem_grid_backward", False),
                        ("_lem_grid_forward", True), ("_lem_grid_backward", True)]
    for choice in ("One-Barrier", " Stored"):
        for a, b in zip(results[""]["grid"], results[choice]["grid"], strict=True):
            assert torch.equal(a, b)
    blocks = 2  # 19 rows: two 16-row batch blocks; each choice's grid forward and backward
    assert [m.tolist() for m in made] == [[2 * 5] * blocks + [0], [2 * 5] * blocks + [0],
                                          [1 * 5] * blocks + [0], [2 * 5] * blocks + [0],
                                          [2 * 5] * blocks + [0], [2 * 5] * blocks + [0]]
    model = cells.LEM(3, 13).to(device=DEVICE, dtype=dtype)
    with torch.no_grad():  # no backward to come: nothing stored
        kernel(PRESETS["lem"][1])(model.system, torch.randn(19, 5, 3, device=DEVICE, dtype=dtype),
                                  model.system.initial_state(19), model.dt, schedule="grid")
    assert launched[-1] == ("_lem_grid_forward", False)
    monkeypatch.setenv(lem.GRID_ENV, "one-barrier")
    with pytest.raises(ValueError, match="does not store"):
        _grid_and_stepwise("lem", 19, 5, 13, dtype, None)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", [n for n in WEIGHTS_ON_CHIP if n != "lem"])
def test_stored_gates_give_the_same_bits(name, dtype, monkeypatch):
    """``ODELAB_GRID_GATES=stored`` (LEM above): a weights-on-chip grid forward that stores what its backward would
    recompute from the states (coRNN's and the oscillator's tanh(a_n), the GRUs' gates) gives the default's bits --
    outputs, final state and every gradient, the gaps' too -- with the same barriers; the forward is told to store,
    the backward to read, and under no_grad nothing is stored."""
    from odelab.kernels.cuda import grid

    made = recorded_counters(monkeypatch)
    monkeypatch.setattr(grid, "schedule_for", lambda schedule, *args: schedule)  # hidden ≤ 16 forced onto the grid
    launched = []
    launch = grid.launch_resident

    def recorded(kernel, *args, **meta):
        launched.append(bool(meta.get("STORE") or meta.get("STORED")))
        return launch(kernel, *args, **meta)

    monkeypatch.setattr(grid, "launch_resident", recorded)
    results = {}
    for gates in ("", "stored"):
        monkeypatch.setenv(grid.GATES_ENV, gates)
        results[gates], _ = _grid_and_stepwise(name, 19, 5, 13, dtype, None)
    assert launched == [False, False, True, True]
    for a, b in zip(results[""]["grid"], results["stored"]["grid"], strict=True):
        assert torch.equal(a, b)
    assert [m.tolist() for m in made[:2]] == [m.tolist() for m in made[2:]]
    build, target = PRESETS[name]
    model = build(3, 13).to(device=DEVICE, dtype=dtype)
    with torch.no_grad():
        kernel(target)(model.system, torch.randn(19, 5, 3, device=DEVICE, dtype=dtype),
                       model.system.initial_state(19), model.dt, model.unfolds, lags_of(model), schedule="grid")
    assert launched[-1] is False


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", [n for n in WEIGHTS_ON_CHIP if n != "lem"] + ["gru-ode-reset-before"])
def test_stored_gates_where_the_weights_stream(name, dtype, monkeypatch):
    """``ODELAB_GRID_GATES=stored`` on the step kernels (stepwise, and the grid's where the weights stream; LEM
    below): the forward stores what the backward's gate phase reads (coRNN's and the oscillator's tanh(a_n), GRU-ODE's
    gates, reset after; the delay cells' branches), with the default's bits; GRU-ODE with the reset before its
    product stores nothing and gives the same bits too."""
    from odelab.kernels.cuda import grid

    monkeypatch.setattr(grid, "schedule_for", lambda schedule, *args: schedule)
    results = {}
    for gates in ("", "stored"):
        monkeypatch.setenv(grid.GATES_ENV, gates)
        results[gates], _ = _grid_and_stepwise(name, 19, 5, 13, dtype, 16)
    for schedule in ("grid", "stepwise"):
        for a, b in zip(results[""][schedule], results["stored"][schedule], strict=True):
            assert torch.equal(a, b), schedule


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_lem_stored_gates_where_the_weights_stream(dtype, monkeypatch):
    """``ODELAB_GRID_GATES=stored`` on LEM's step kernels (the stepwise schedule, and the grid's where the weights do
    not stay on chip: a tile width asked for here, hidden > 128 on a GPU): the forward's phases store [p1, q, p2, r]
    and the backward's y- and z-steps read them (four products a step instead of eight), with the default's bits,
    the gaps' gradient included."""
    from odelab.kernels.cuda import grid, lem

    monkeypatch.setattr(grid, "schedule_for", lambda schedule, *args: schedule)
    flags = []
    launch, steps = grid.launch, lem.step_launches

    def launched(driver, *args, **meta):
        flags.append(meta.get("STORED"))
        return launch(driver, *args, **meta)

    def stepped(kernel, *args, **meta):
        flags.append(meta.get("STORE", meta.get("STORED")))
        return steps(kernel, *args, **meta)

    monkeypatch.setattr(grid, "launch", launched)
    monkeypatch.setattr(lem, "step_launches", stepped)
    results = {}
    for gates in ("", "stored"):
        monkeypatch.setenv(grid.GATES_ENV, gates)
        results[gates], _ = _grid_and_stepwise("lem", 19, 5, 13, dtype, 16)
    for schedule in ("grid", "stepwise"):
        for a, b in zip(results[""][schedule], results["stored"][schedule], strict=True):
            assert torch.equal(a, b), schedule
    assert flags == [False] * 4 + [True] * 4  # grid forward, backward, stepwise forward, backward; then stored
    torch.manual_seed(1)
    model = cells.LEM(3, 13).to(device=DEVICE, dtype=dtype)
    x = torch.randn(4, 6, 3, device=DEVICE, dtype=dtype)
    gaps = (0.2 + torch.rand(4, 6, device=DEVICE, dtype=dtype)).requires_grad_()
    grads = {}
    for gates in ("", "stored"):
        monkeypatch.setenv(grid.GATES_ENV, gates)
        out, _ = kernel(PRESETS["lem"][1])(model.system, x, model.system.initial_state(4), gaps, block_h=16,
                                           schedule="stepwise")
        grads[gates] = torch.autograd.grad(out.sum(), [gaps, *model.parameters()])
    for a, b in zip(grads[""], grads["stored"], strict=True):
        assert torch.equal(a, b)


def test_grid_knobs_are_checked(monkeypatch):
    """A misspelt ``ODELAB_LEM_GRID``, ``ODELAB_GRID_GATES`` or ``ODELAB_GRID_WARPS`` is an error that names the
    choices, not a silent default; unset, each gives the default (``ODELAB_LIQUID_LAYOUT``: in
    ``test_liquid_row_slabs_choice``)."""
    from odelab.kernels.cuda import grid, lem

    for env in (lem.GRID_ENV, grid.GATES_ENV, grid.WARPS_ENV):
        monkeypatch.delenv(env, raising=False)
    assert (lem.grid_variant(), grid.stored_gates(True), grid.resident_warps()) == ("two-barriers", False, 8)
    monkeypatch.setenv(grid.GATES_ENV, "stored")
    assert grid.stored_gates(True) and not grid.stored_gates(False)  # only where a backward follows
    monkeypatch.setenv(grid.WARPS_ENV, " 4")
    assert grid.resident_warps() == 4
    for env, value, choices, call in ((lem.GRID_ENV, "one_barrier", "two-barriers, one-barrier", lem.grid_variant),
                                      (grid.GATES_ENV, "store", "recomputed or stored", lambda: grid.stored_gates(True)),
                                      (grid.WARPS_ENV, "2", "4 or 8", grid.resident_warps)):
        monkeypatch.setenv(env, value)
        with pytest.raises(ValueError, match=choices):
            call()


def test_lem_stored_gates_forward_stores_eq3_pre_activations():
    """The grid forward with STORE, one program of a 16-wide column tile at hidden 13, float64: its P holds each
    step's p1 = W1 y_{n−1} + a1, q, p2 and r = Wy z_n + ay (eq. 3 written out), its states as without STORE."""
    from odelab.kernels.cuda import grid, lem

    B, T, H, dt = 5, 3, 13, 0.7
    g = torch.Generator().manual_seed(4)
    E = torch.randn(B, T, 4 * H, generator=g, dtype=torch.float64).to(DEVICE)
    W1, Wz, W2, Wy = (torch.randn(H, H, generator=g, dtype=torch.float64).to(DEVICE) / H ** 0.5 for _ in range(4))
    Z, Y = (torch.zeros(B, T + 1, H, dtype=torch.float64, device=DEVICE) for _ in range(2))
    Z[:, 0], Y[:, 0] = (torch.randn(B, H, generator=g, dtype=torch.float64).to(DEVICE) for _ in range(2))
    P = torch.full_like(E, float("nan"))
    consts = torch.tensor([dt], dtype=torch.float64, device=DEVICE)
    transposed = torch.cat([W1.T, Wz.T]), W2.T.contiguous(), Wy.T.contiguous()  # the forward kernels' weights
    lem._lem_grid_forward[(1, 1)](E, *transposed, Z, Y, consts, consts, grid.counters(B, 16, torch.device(DEVICE)),
                                  B, T, H, HP=16, BB=16, BH=16, PRECISION="ieee", LIMIT=4, GAPS=False, PRE=P,
                                  STORE=True)
    z, y = Z[:, 0], Y[:, 0]
    for n in range(T):
        e = E[:, n]
        p1, q, p2 = y @ W1.T + e[:, :H], y @ Wz.T + e[:, H:2 * H], y @ W2.T + e[:, 2 * H:3 * H]
        z = z + dt * (torch.sigmoid(p1) * torch.tanh(q) - torch.sigmoid(p1) * z)
        r = z @ Wy.T + e[:, 3 * H:]
        y = y + dt * (torch.sigmoid(p2) * torch.tanh(r) - torch.sigmoid(p2) * y)
        torch.testing.assert_close(P[:, n], torch.cat([p1, q, p2, r], 1), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(Z[:, n + 1], z, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(Y[:, n + 1], y, rtol=1e-12, atol=1e-12)


def test_lem_one_barrier_kernel_computes_whole_rows_of_z():
    """The one-barrier kernel alone, one program of a 16-wide column tile at hidden 40 (tiles of 16: three, the
    last one half masked, and a fourth beyond H): z_1's whole rows and y_1's first 16 columns against LEM eq. 3
    written out, float64; the rest of the state buffers untouched."""
    from odelab.kernels.cuda import grid, lem

    B, H, dt = 5, 40, 0.7
    g = torch.Generator().manual_seed(3)
    E = torch.randn(B, 1, 4 * H, generator=g, dtype=torch.float64).to(DEVICE)
    W1, Wz, W2, Wy = (torch.randn(H, H, generator=g, dtype=torch.float64).to(DEVICE) / H ** 0.5 for _ in range(4))
    Z = torch.randn(B, 2, H, generator=g, dtype=torch.float64).to(DEVICE)
    Y = torch.randn(B, 2, H, generator=g, dtype=torch.float64).to(DEVICE)
    before = Z.clone(), Y.clone()
    sync = grid.counters(B, 16, torch.device(DEVICE))
    consts = torch.tensor([dt], dtype=torch.float64, device=DEVICE)
    transposed = torch.cat([W1.T, Wz.T]), W2.T.contiguous(), Wy.T.contiguous()  # the forward kernels' weights
    lem._lem_grid_forward_one_barrier[(1, 1)](E, *transposed, Z, Y, consts, consts, sync, B, 1, H, HP=64, BB=16,
                                              BH=16, PRECISION="ieee", LIMIT=4, GAPS=False)
    z0, y0, e = before[0][:, 0], before[1][:, 0], E[:, 0]
    s1 = torch.sigmoid(y0 @ W1.T + e[:, :H])
    z1 = z0 + dt * (s1 * torch.tanh(y0 @ Wz.T + e[:, H:2 * H]) - s1 * z0)  # eq. 3, z first (IMEX)
    s2 = torch.sigmoid(y0 @ W2.T + e[:, 2 * H:3 * H])
    y1 = y0 + dt * (s2 * torch.tanh(z1 @ Wy.T + e[:, 3 * H:]) - s2 * y0)
    torch.testing.assert_close(Z[:, 1], z1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(Y[:, 1, :16], y1[:, :16], rtol=1e-12, atol=1e-12)
    assert torch.equal(Y[:, 1, 16:], before[1][:, 1, 16:]) and torch.equal(Z[:, 0], before[0][:, 0])
    assert sync.tolist() == [1, 0]


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the abandoned grid forward read stale rows
def test_grid_barrier_never_met_reruns_the_forward_stepwise(monkeypatch):
    """Programs that are not all resident: a barrier whose other column program never arrives (under the
    interpreter, which runs them one after another) gives up after its spin limit and sets the flag; nothing hangs.
    The call then warns and reruns its forward with the stepwise schedule (the same values as asking for it), and
    the device takes the stepwise schedule from then on; the gradients are the stepwise ones."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's sequential programs are the stand-in for non-resident ones")
    from odelab.kernels.cuda import grid, lem

    monkeypatch.setattr(grid, "SPIN_LIMIT", 3)
    monkeypatch.setattr(grid, "_NOT_RESIDENT", set())
    monkeypatch.setattr(grid, "rows_per_block", lambda *args: 16)  # let two column programs share a batch block
    model = PRESETS["lem"][0](3, 17)
    x = torch.randn(2, 2, 3, requires_grad=True)
    state = (torch.zeros(2, 17), torch.zeros(2, 17))
    assert grid.schedule_for("grid", x, 17, 16) == "grid"
    with pytest.warns(RuntimeWarning, match="grid barrier .* was not met .* reran with the stepwise schedule"):
        out, final = lem.run(model.system, x, state, 0.5, block_h=16, schedule="grid")
    grad, = torch.autograd.grad(out.sum() + final[1].sum(), x)
    ref, ref_final = lem.run(model.system, x, state, 0.5, block_h=16, schedule="stepwise")
    ref_grad, = torch.autograd.grad(ref.sum() + ref_final[1].sum(), x)
    assert torch.equal(out, ref) and torch.equal(final[1], ref_final[1]) and torch.equal(grad, ref_grad)
    assert grid.schedule_for("grid", x, 17, 16) == "stepwise"


def test_a_barrier_flag_raises_and_retires_the_grid_on_its_device(monkeypatch):
    from odelab.kernels.cuda import grid

    monkeypatch.setattr(grid, "_NOT_RESIDENT", set())
    grid.check(grid.counters(40, 16, torch.device(DEVICE)))  # a launch whose barriers were met: no error
    sync = grid.counters(40, 16, torch.device(DEVICE))
    sync[-1] = 1
    with pytest.raises(grid.BarrierNotMet, match="later calls on this device take the stepwise schedule"):
        grid.check(sync)
    assert grid._NOT_RESIDENT == {sync.device}


def test_grid_choice(monkeypatch):
    """Where "grid" runs: only the tiled sizes (register-resident ones keep their one-launch kernel), only where
    every program can be resident at once (one per multiprocessor: the batch block grows 16 → 32 → 64 rows to fit,
    else the stepwise schedule), and under the interpreter only with one column program per batch block. The other
    kernels run "grid" as "stepwise"."""
    from odelab.kernels.cuda import grid, stepwise

    cpu = torch.device("cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert grid.rows_per_block(100, 17, 32, cpu) == 16
    assert grid.rows_per_block(100, 33, 32, cpu) is None
    assert grid.schedule_for("grid", torch.empty(4, 2, 3), 5, None) == "persistent"
    assert grid.schedule_for("grid", torch.empty(4, 2, 3), 33, None) == "stepwise"
    assert stepwise.use_stepwise("grid", cpu, 33, None) and not stepwise.use_stepwise("grid", cpu, 5, None)

    class Properties:
        multi_processor_count = 132

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Properties())
    gpu = torch.device("cuda", 0)
    assert grid.rows_per_block(128, 128, 32, gpu) == 16  # 8 × 4 programs
    assert grid.rows_per_block(1024, 256, 32, gpu) == 64  # 64 × 8 = 512 > 132 with 16 rows, 16 × 8 with 64
    assert grid.rows_per_block(4096, 256, 32, gpu) is None  # 64 × 8 with 64 rows: stepwise
    assert grid.rows_per_block(4096, 300, 32, gpu) is None
    assert grid.resident(128, 128, None, gpu) and grid.resident(256, 100, None, gpu)  # 16 × 7 programs
    assert not grid.resident(512, 128, None, gpu)  # 16-row blocks do not fit: the weights stream (64-row ones)
    assert not grid.resident(128, 129, None, gpu) and not grid.resident(128, 128, 16, gpu)
    # three TF32 products would hold each weight tile twice (spills): the weights stream
    assert grid.resident(128, 128, None, gpu, "tf32") and not grid.resident(128, 128, None, gpu, "tf32x3")


ROUNDED_IN_THE_GRID = {"lrcu-s"}  # compiled on a GPU, its grid kernel rounds a product differently (not a race)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(WITH_GRID))
def test_grid_on_the_gpu(name):
    """Real concurrent programs, float64: (40, 200, 96) with 16-wide tiles (3 batch blocks × 6 column programs) gives
    the same bits twice and the stepwise schedule's bits (before the barrier's arrival acquired, LTC's input
    gradient and GRU-ODE reset-before's forward differed from them on an H200: the last program to arrive read stale
    values of buffers rewritten every step; LRCU-S: 1e-14, its product O_h h rounds differently in the grid kernel's
    code, 7e-16 relative and the same bits run to run on an H200); a preset with weights on chip matches the generic loop to 1e-10 at (128, 60, 128) (8 × 8
    programs), and LEM at (1024, 40, 256) with 64-row blocks (16 × 8 programs) too."""
    from odelab.kernels.cuda import grid

    results, _ = _grid_and_stepwise(name, 40, 200, 96, torch.float64, block_h=16)
    again, _ = _grid_and_stepwise(name, 40, 200, 96, torch.float64, block_h=16)
    for a, b, c in zip(results["grid"], again["grid"], results["stepwise"]):
        assert torch.equal(a, b)
        if name in ROUNDED_IN_THE_GRID:
            assert ((a - c).abs().max() / c.abs().max()).item() <= 1e-14
        else:
            assert torch.equal(a, c)
    run = lambda *args, **kw: kernel(PRESETS[name][1])(*args, schedule="grid", **kw)
    sizes = [(128, 60, 128)] if name in WEIGHTS_ON_CHIP else []
    if name == "lem":
        assert grid.resident(128, 128, None, torch.device(DEVICE)) and not grid.resident(1024, 256, None,
                                                                                           torch.device(DEVICE))
        assert grid.schedule_for("grid", torch.empty(1024, 1, 1, device=DEVICE), 256, None) == "grid"
        sizes.append((1024, 40, 256))
    for batch, time, hidden in sizes:
        errors = relative_errors(PRESETS[name][0](3, hidden), run, batch, time, hidden, torch.float64)
        worst = max(errors, key=errors.get)
        assert errors[worst] <= 1e-10, (batch, time, hidden, worst, errors[worst])


@pytest.mark.gpu
@pytest.mark.parametrize("size", [(40, 200, 96), (128, 60, 128), (300, 20, 256)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", LIQUID)
def test_liquid_grid_on_the_gpu(name, size):
    """Real concurrent synapse-tile programs, float64 (on an H200's 132 multiprocessors: hidden 96 in 16 × 8 tiles, 72
    programs; 128 in 16 × 8, 128; 256 in 32 × 16, 128): the same bits twice, the generic loop to 1e-10, the stepwise
    schedule (other tiles, other sums) to 1e-12."""
    from odelab.kernels.cuda import liquid

    batch, time, hidden = size
    assert liquid.liquid_schedule("grid", torch.empty(batch, 1, 3, device=DEVICE), hidden, None) == "grid"
    results = {}
    for schedule in ("grid", "grid again", "stepwise"):
        torch.manual_seed(0)
        model = PRESETS[name][0](3, hidden).to(device=DEVICE, dtype=torch.float64)
        x = torch.randn(batch, time, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
        out, final = _liquid_run(name, schedule.split()[0])(model.system, x, (torch.zeros(batch, hidden,
                                                                                           device=DEVICE,
                                                                                           dtype=torch.float64),),
                                                            model.dt, model.unfolds)
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.shape[-1], device=DEVICE,
                                                          dtype=out.dtype)).sum() + final[0].sum(),
                                    [x, *model.parameters()], allow_unused=True)
        results[schedule] = [out, final[0], *(g for g in grads if g is not None)]
    for a, b, c in zip(results["grid"], results["grid again"], results["stepwise"]):
        assert torch.equal(a, b)
        assert ((a - c).abs().max() / c.abs().max().clamp_min(1e-300)).item() <= 1e-12
    errors = relative_errors(PRESETS[name][0](3, hidden), _liquid_run(name, "grid"), batch, time, hidden,
                             torch.float64)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-10, (worst, errors[worst])


@pytest.mark.gpu
@pytest.mark.parametrize("name, size", [(name, (128, 60, 128)) for name in WEIGHTS_ON_CHIP] + [("lem", (40, 200, 96))],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_grid_variants_on_the_gpu(name, size, monkeypatch):
    """The opt-in variants of the weights-on-chip grid kernels with real concurrent programs (8 × 8, and 3 × 6 for
    LEM), float64: ``ODELAB_GRID_GATES=stored``, ``ODELAB_GRID_WARPS=4`` and (LEM) ``ODELAB_LEM_GRID=one-barrier`` give
    the default kernels' outputs and gradients to 1e-12 (the same sums; the interpreter gives the same bits, a
    compiler may contract a product into an FMA in one kernel and not in another)."""
    from odelab.kernels.cuda import grid, lem

    variants = {"": {}, "stored": {grid.GATES_ENV: "stored"}, "4 warps": {grid.WARPS_ENV: "4"}}
    if name == "lem":
        variants["one-barrier"] = {lem.GRID_ENV: "one-barrier"}
    results = {}
    for variant, env in variants.items():
        for key in (grid.GATES_ENV, grid.WARPS_ENV, lem.GRID_ENV):
            monkeypatch.setenv(key, env.get(key, ""))
        results[variant], _ = _grid_and_stepwise(name, *size, torch.float64, None)
    for variant in variants:
        for a, b in zip(results[""]["grid"], results[variant]["grid"], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=variant)


@pytest.mark.gpu
@pytest.mark.parametrize("name", LIQUID)
def test_liquid_stored_conductances_on_the_gpu(name, monkeypatch):
    """``ODELAB_GRID_GATES=stored`` on the liquid cells' synapse tiles with real concurrent programs (hidden 128:
    16 × 8 tiles, 128 programs on an H100/H200), float32 at (64, 40, 128) and both schedules: the default's outputs
    and gradients to 1e-6 relative (the same sums; a compiler may contract a product into an FMA in one kernel and
    not in another)."""
    from odelab.kernels.cuda import grid

    results = {}
    for gates in ("", "stored"):
        monkeypatch.setenv(grid.GATES_ENV, gates)
        results[gates] = {schedule: _liquid_training_step(name, schedule, torch.float32, False, (64, 40, 128))[0]
                          for schedule in ("grid", "stepwise")}
    for schedule in ("grid", "stepwise"):
        for a, b in zip(results[""][schedule], results["stored"][schedule], strict=True):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6 * a.abs().max().item(), msg=schedule)



@pytest.mark.gpu
@pytest.mark.parametrize("size", [(64, 40, 128), (200, 8, 256)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", LIQUID)
def test_liquid_row_slabs_on_the_gpu(name, size, monkeypatch):
    """``ODELAB_LIQUID_LAYOUT=rows`` with real concurrent programs (hidden 128: 8 j-tiles a slab, 8 rows a slab at
    batch 64; 256: 8 j-tiles of 32), float32, both schedules, conductances recomputed and stored: the synapse
    tiles' outputs and gradients to 1e-5 relative (the sums over j and i in other orders)."""
    from odelab.kernels.cuda import grid, liquid

    monkeypatch.setenv(grid.GATES_ENV, "")
    monkeypatch.setenv(liquid.LAYOUT_ENV, "tiles")
    want = {schedule: _liquid_training_step(name, schedule, torch.float32, False, size)[0]
            for schedule in ("grid", "stepwise")}
    monkeypatch.setenv(liquid.LAYOUT_ENV, "rows")
    for gates in ("", "stored"):
        monkeypatch.setenv(grid.GATES_ENV, gates)
        for schedule in ("grid", "stepwise"):
            got = _liquid_training_step(name, schedule, torch.float32, False, size)[0]
            for a, b in zip(want[schedule], got, strict=True):
                assert (a - b).abs().max() <= 1e-5 * a.abs().max(), (schedule, gates)

# -- inside a caller's CUDA graph capture (torch.cuda.graph) ---------------------------------------------------

def _outputs_and_gradients(name, batch, time, hidden, schedule, seed=0):
    """A preset's outputs, final state and gradients (input, initial state, every trained parameter) under
    ``schedule``, from inputs drawn with ``seed``."""
    build, target = PRESETS[name]
    torch.manual_seed(seed)
    model = build(3, hidden).to(device=DEVICE, dtype=torch.float32)
    x = torch.randn(batch, time, 3, device=DEVICE, requires_grad=True)
    state = tuple((0.5 * torch.randn(batch, n, device=DEVICE)).requires_grad_() for n in model.system.block_sizes())
    out, final = kernel(target)(model.system, x, state, model.dt, model.unfolds, lags_of(model), schedule=schedule)
    loss = (out * torch.randn_like(out)).sum() + sum((i - 0.5) * f.sum() for i, f in enumerate(final))
    inputs = [x, *state, *(p for p in model.parameters() if p.requires_grad)]
    return [out, *final, *(g for g in torch.autograd.grad(loss, inputs, allow_unused=True) if g is not None)]


@pytest.mark.parametrize("schedule", ["persistent", "stepwise", "grid"])
@pytest.mark.parametrize("name", ["lem", "cornn", "oscillator", "gru-ode", "gru-ode-reset-before", "taugru", "delaygru",
                                  "ltc", "lrcu-s", "unicornn", "unicornn-reversible"])
def test_inside_a_capture_values_enter_as_kernel_arguments(name, schedule, monkeypatch):
    """While a CUDA graph is being captured nothing may be copied from the host: the kernels' constants and the
    stepwise / grid address tables are then filled on the device (one fill per value, recorded in the graph) and
    the stepwise launches bypass their own graph cache. The capture is pretended here (the interpreter has none):
    no ``torch.tensor(..., device=...)`` nor ``.to(...)`` in the kernel modules, the stepwise graph cache untouched,
    and the same bits as outside a capture (hidden 40: the tiled schedules run; UnICORNN has one kernel)."""
    import inspect

    from odelab.kernels.cuda import _common, grid, stepwise

    if name.startswith("unicornn") and schedule != "persistent":
        pytest.skip("one kernel for every schedule here")
    expected = _outputs_and_gradients(name, 19, 4, 40, schedule)
    copies = []
    real_tensor, real_to = torch.tensor, torch.Tensor.to

    def caller() -> str:
        return inspect.currentframe().f_back.f_back.f_globals.get("__name__", "")

    def spy_tensor(*args, **kwargs):
        if kwargs.get("device") is not None and caller().startswith("odelab.kernels.cuda"):
            copies.append(("torch.tensor", caller()))
        return real_tensor(*args, **kwargs)

    def spy_to(self, *args, **kwargs):
        if caller().startswith("odelab.kernels.cuda") and any(
                isinstance(a, (torch.device, str, torch.Tensor)) for a in (*args, *kwargs.values())):
            copies.append(("Tensor.to", caller()))
        return real_to(self, *args, **kwargs)

    class NoGraphs:
        def run(self, *args):
            raise AssertionError("the stepwise graph cache was used inside a capture")

    for module in (_common, stepwise, grid):
        monkeypatch.setattr(module, "capturing", lambda device: True)
    monkeypatch.setattr(stepwise, "graphs_for", lambda device: NoGraphs())
    monkeypatch.setattr(torch, "tensor", spy_tensor)
    monkeypatch.setattr(torch.Tensor, "to", spy_to)
    captured = _outputs_and_gradients(name, 19, 4, 40, schedule)
    assert copies == []
    assert len(captured) == len(expected)
    for a, b in zip(captured, expected):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["auto", "stepwise"])
@pytest.mark.parametrize("hidden", [16, 48])
@pytest.mark.parametrize("name", ["lem", "cornn", "oscillator", "gru-ode", "taugru", "delaygru", "lrcu-s", "unicornn",
                                  "unicornn-reversible"])
def test_a_training_step_captured_in_a_cuda_graph(name, hidden, schedule):
    """A user's own CUDA graph of forward + backward (``torch.cuda.graph``), replayed on a new input, gives the
    eager step's outputs and gradients (hidden 16: the register-resident kernels; 48: the grid schedule, the default,
    or the stepwise one). The same kernels run in the same order; 1e-6 relative leaves
    room for cuBLAS choosing another algorithm for the weight-gradient products on the capture's stream."""
    if schedule == "stepwise" and (hidden == 16 or name.startswith("unicornn")):
        pytest.skip("one kernel for both schedules here")
    build, target = PRESETS[name]
    torch.manual_seed(0)
    model = build(3, hidden).to(DEVICE)
    x = torch.randn(24, 30, 3, device=DEVICE, requires_grad=True)
    state = tuple((0.5 * torch.randn(24, n, device=DEVICE)).requires_grad_() for n in model.system.block_sizes())
    weight = torch.randn(24, 30, hidden, device=DEVICE)
    inputs = [x, *state, *(p for p in model.parameters() if p.requires_grad)]

    def step():
        out, final = kernel(target)(model.system, x, state, model.dt, model.unfolds, lags_of(model),
                                    schedule=schedule)
        loss = (out * weight).sum() + sum((i - 0.5) * f.sum() for i, f in enumerate(final))
        return [out, *final, *(g for g in torch.autograd.grad(loss, inputs, allow_unused=True) if g is not None)]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: Triton compiles, the stepwise schedule records its own graphs
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    eager = step()
    assert len(captured) == len(eager)
    for a, b in zip(captured, eager):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-6


def test_constants_are_copied_once_and_filled_inside_a_capture(monkeypatch):
    """A kernel's constants: one tensor per distinct (values, dtype, device), reused by later calls (a pageable copy
    to the GPU would wait for the stream at every call); inside a capture a new tensor filled on the device."""
    from odelab.kernels.cuda import _common

    monkeypatch.setattr(_common, "_CONSTANTS", {})
    a = _common.on_device([0.7, 0.25], torch.float32, DEVICE)
    assert a is _common.on_device([0.7, 0.25], torch.float32, DEVICE)
    assert a.tolist() == [torch.tensor(0.7).item(), 0.25] and a.dtype == torch.float32
    b = _common.on_device([0.7, 0.25], torch.float64, DEVICE)
    assert b is not a and b.tolist() == [0.7, 0.25]
    monkeypatch.setattr(_common, "capturing", lambda device: True)
    c = _common.on_device([0.7, 0.25], torch.float64, DEVICE)
    assert c is not b and torch.equal(c, b)
    big = [2 ** 47 + 3, 2 ** 40 + 16]  # addresses survive the fill exactly
    assert _common.filled(big, torch.int64, DEVICE).tolist() == big


@triton.jit
def _tanh_of(X, Y, N, BLOCK: tl.constexpr):
    from odelab.kernels.cuda._common import tanh

    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + i, tanh(tl.load(X + i, mask=i < N, other=0.0)), mask=i < N)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_kernel_tanh(dtype):
    """The kernels' tanh against float64 ``torch.tanh``: relative error ≤ 12 float32 ulp (float32's rational
    function, through its clamp at ±9.5) or 1e-15 (float64), odd bit for bit, within [−1, 1], ±1 at ±∞, NaN."""
    x = torch.cat([torch.linspace(-12, 12, 24001, dtype=torch.float64), torch.linspace(9.4, 9.6, 2001,
                   dtype=torch.float64), torch.logspace(-30, 0, 301, dtype=torch.float64)]).to(dtype)
    x = torch.cat([x, -x, torch.tensor([float("inf"), -float("inf"), float("nan")], dtype=dtype)]).to(DEVICE)
    y = torch.empty_like(x)
    _tanh_of[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    ref = torch.tanh(x.double())
    finite = x.isfinite()
    rel = ((y.double() - ref).abs() / ref.abs().clamp_min(1e-300))[finite & (x != 0)]
    assert rel.max().item() <= (12 * 2.0 ** -24 if dtype == torch.float32 else 1e-15), rel.max().item()
    n = (x.numel() - 3) // 2
    assert torch.equal(y[:n], -y[n:2 * n])
    assert y[:-1].abs().max().item() <= 1.0
    assert y[-3].item() == 1.0 and y[-2].item() == -1.0 and y[-1].isnan()


@pytest.mark.parametrize("chunk_bytes", [1, 2 * 5 * 4 * 8, 1 << 30], ids=["row", "two-rows", "whole"])
def test_outer_sum_over_batch_chunks(chunk_bytes):
    """The kernels' weight gradients Σ_{b,t} g[b,t]ᵀ s[b,t] with a column slice of g and a state buffer without its
    last step as s (rows that do not merge): equal to the sum of outer products, whatever the chunk of s copied at
    once (one batch row, two, all of it)."""
    from odelab.kernels.cuda._common import outer_sum

    torch.manual_seed(0)
    g = torch.randn(7, 5, 12, dtype=torch.float64)[..., 3:9]
    s = torch.randn(7, 6, 4, dtype=torch.float64)[:, :-1]
    expected = (g.unsqueeze(-1) * s.unsqueeze(-2)).sum((0, 1))
    out = outer_sum(g, s, chunk_bytes=chunk_bytes)
    assert out.shape == (6, 4)
    assert torch.allclose(out, expected, rtol=1e-13, atol=1e-13)


def test_a_cell_trains_after_running_under_inference_mode(monkeypatch):
    """The constants first made under ``torch.inference_mode`` (an evaluation) are kept for later calls: they must
    not be inference tensors, which a training call could not save for its backward."""
    from odelab.kernels.cuda import _common

    monkeypatch.setattr(_common, "_CONSTANTS", {})
    build, target = PRESETS["lem"]
    model = build(3, 8)
    x = torch.randn(2, 3, 3, device=DEVICE)
    state = tuple(torch.zeros(2, n, device=DEVICE) for n in model.system.block_sizes())
    with torch.inference_mode():
        kernel(target)(model.system, x, state, model.dt)
    assert _common._CONSTANTS and not any(t.is_inference() for t in _common._CONSTANTS.values())
    out, _ = kernel(target)(model.system, x, state, model.dt)
    out.sum().backward()
    assert model.system.Wy.grad is not None


# -- a forward with no backward to come, in chunks of steps (odelab/kernels/chunks.py) ----------------------------

@pytest.mark.parametrize("name", list(PRESETS))
def test_forward_without_backward_in_chunks(name, monkeypatch):
    """Under ``torch.no_grad()`` the kernels run 10 samples as chunks of 3, 3, 3 and 1, each from the previous one's
    final state: the outputs and the final state equal those of one piece (float64, 1e-12; the input projection is
    then a GEMM a chunk) and of the generic loop (1e-10); with gradients the sequence stays one piece."""
    from odelab.kernels import chunks

    build, target = PRESETS[name]
    torch.manual_seed(0)
    model = generic(build(3, 17)).to(DEVICE, torch.float64)
    x = torch.randn(2, 10, 3, device=DEVICE, dtype=torch.float64)
    state = tuple(0.5 * torch.randn(2, n, device=DEVICE, dtype=torch.float64) for n in model.system.block_sizes())
    run = kernel(target)
    calls = []

    def piece(steps):
        def spy(*args):
            calls.append(steps)
            return steps
        return spy

    with torch.no_grad():
        monkeypatch.setattr(chunks, "steps_per_chunk", piece(10))
        whole, whole_final = run(model.system, x, state, model.dt, model.unfolds, lags_of(model))
        monkeypatch.setattr(chunks, "steps_per_chunk", piece(3))
        out, final = run(model.system, x, state, model.dt, model.unfolds, lags_of(model))
        ref, ref_final = model(x, state)
    assert calls == [10, 3] and out.shape == ref.shape
    for a, b, tol in [(out, whole, 1e-12), (out, ref, 1e-10), *zip(final, whole_final, [1e-12] * 2),
                      *zip(final, ref_final, [1e-10] * 2)]:
        assert ((a - b).abs().max() / b.abs().max()).item() <= tol
    x.requires_grad_()
    assert run(model.system, x, state, model.dt, model.unfolds, lags_of(model))[0].grad_fn is not None  # one piece: not chunked
    assert calls == [10, 3, 3]


@pytest.mark.parametrize("tau", [0.5, 2.0, 5.0])
@pytest.mark.parametrize("name", ["taugru", "delaygru"])
def test_delay_forward_in_chunks(name, tau, monkeypatch):
    """The delay cells in chunks of 3 steps under ``torch.no_grad()``, lag m = ⌊τ/Δt⌋ = 0 (the current state), 2
    (a chunk's first two steps read states before it) and 5 (every step of a chunk does): 11 steps equal the generic
    loop (float64, 1e-10) and one piece (1e-12)."""
    from odelab.kernels import chunks

    torch.manual_seed(0)
    ctor = cells.TauGRU if name == "taugru" else cells.DelayGRU
    model = generic(ctor(3, 6, tau=tau)).to(DEVICE, torch.float64)
    assert lags_of(model) == (int(tau),)
    x = torch.randn(2, 11, 3, device=DEVICE, dtype=torch.float64)
    state = (0.5 * torch.randn(2, 6, device=DEVICE, dtype=torch.float64),)
    run = kernel(PRESETS[name][1])
    with torch.no_grad():
        whole, (whole_final,) = run(model.system, x, state, model.dt, model.unfolds, lags_of(model))
        monkeypatch.setattr(chunks, "steps_per_chunk", lambda *args: 3)
        out, (final,) = run(model.system, x, state, model.dt, model.unfolds, lags_of(model))
        ref, (ref_final,) = model(x, state)
    for a, b, tol in [(out, whole, 1e-12), (out, ref, 1e-10), (final, whole_final, 1e-12), (final, ref_final, 1e-10)]:
        assert ((a - b).abs().max() / b.abs().max()).item() <= tol


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("tau", [2.0, 5.0])
@pytest.mark.parametrize("name", ["taugru", "delaygru"])
def test_delay_kernels_continue_a_sequence(name, tau, chunked, monkeypatch):
    """A sequence of 9 steps run as 4 + 5 through the kernel, the second part from the first's DelayedState (its
    history: the states before, which the second part's first m steps read): the outputs, the final state and its
    history equal one call's (float64, 1e-12), with a backward (one piece; the gradients of x, h0 and the parameters
    too) and without one in chunks of 3 steps; lag 5 reaches past the 4 steps before, into the zero history."""
    from odelab.kernels import chunks

    torch.manual_seed(0)
    ctor = cells.TauGRU if name == "taugru" else cells.DelayGRU
    model = generic(ctor(3, 6, tau=tau)).to(DEVICE, torch.float64)
    x = torch.randn(2, 9, 3, device=DEVICE, dtype=torch.float64, requires_grad=not chunked)
    h0 = (0.5 * torch.randn(2, 6, device=DEVICE, dtype=torch.float64)).requires_grad_(not chunked)
    run, lags = kernel(PRESETS[name][1]), lags_of(model)
    if chunked:
        monkeypatch.setattr(chunks, "steps_per_chunk", lambda *args: 3)
    with torch.set_grad_enabled(not chunked):
        whole, final = run(model.system, x, (h0,), model.dt, model.unfolds, lags)
        first, middle = run(model.system, x[:, :4], (h0,), model.dt, model.unfolds, lags)
        second, last = run(model.system, x[:, 4:], middle, model.dt, model.unfolds, lags)
    pieces = torch.cat((first, second), dim=1)
    pairs = [(pieces, whole), (last[0], final[0]), (last.history[0], final.history[0])]
    if not chunked:
        inputs = [x, h0, *model.parameters()]
        loss = lambda out, state: (out * out.sin()).sum() + (state[0] ** 2).sum()
        pairs += zip(torch.autograd.grad(loss(pieces, last), inputs), torch.autograd.grad(loss(whole, final), inputs))
    for a, b in pairs:
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-12


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["taugru", "delaygru", "lem"])
def test_pieces_and_lengths_on_the_gpu(name):
    """On the GPU at hidden 128 (the grid schedule): a sequence of 60 steps run as 25 + 35 from the first part's
    state equals one call, and ``lengths`` equal each sample run alone (outputs, final states and the parameters'
    gradients, float32, 1e-4 relative: the pieces' products may be ordered differently)."""
    build, _ = PRESETS[name]
    torch.manual_seed(0)
    model = build(3, 128).to(DEVICE)
    x = torch.randn(16, 60, 3, device=DEVICE)
    whole, final = model(x)
    first, middle = model(x[:, :25])
    second, last = model(x[:, 25:], middle)
    pairs = [(torch.cat((first, second), dim=1), whole), (last[0], final[0])]
    if hasattr(final, "history"):
        pairs.append((last.history[0], final.history[0]))
    lengths = torch.randint(1, 61, (16,))
    out, ends = model(x, lengths=lengths)
    params = list(model.parameters())
    got = torch.autograd.grad(out.square().sum() + ends[0].square().sum(), params)
    want = [torch.zeros_like(p) for p in params]
    for b, n in enumerate(lengths.tolist()):
        o, f = model(x[b:b + 1, :n])
        pairs += [(out[b, :n], o[0]), (ends[0][b], f[0][0])]
        for w, g in zip(want, torch.autograd.grad(o.square().sum() + f[0].square().sum(), params)):
            w += g
    pairs += zip(got, want)
    for a, b in pairs:
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["lem", "gru-ode", "ltc", "unicornn", "taugru"])
def test_forward_in_chunks_on_the_gpu(name, monkeypatch):
    """On the GPU (the grid schedule at hidden 128, its barrier checked after every chunk's launch): under
    ``torch.no_grad()`` 16 chunks of 20 steps give one piece's outputs and final state (float32, 1e-5: the input
    projection a chunk at a time may round differently), and the
    forward's peak allocation stays below 2 state sequences (one piece: LEM 6, GRU-ODE 4, LTC 4 with 2 unfolds,
    UnICORNN 3, τ-GRU 5)."""
    from odelab.kernels import chunks

    build, target = PRESETS[name]
    batch, steps, hidden = 64, 320, 128
    torch.manual_seed(0)
    model = generic(build(3, hidden)).to(DEVICE)
    x = torch.randn(batch, steps, 3, device=DEVICE)
    state = tuple(0.5 * torch.randn(batch, n, device=DEVICE) for n in model.system.block_sizes())
    run = kernel(target)
    unit = batch * steps * hidden * 4
    with torch.no_grad():
        whole, whole_final = run(model.system, x, state, model.dt, model.unfolds, lags_of(model))
        monkeypatch.setattr(chunks, "CHUNK_STATE_BYTES", batch * 20 * model.unfolds * hidden * 4)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out, final = run(model.system, x, state, model.dt, model.unfolds, lags_of(model))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    for a, b in [(out, whole), *zip(final, whole_final)]:
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-5
    assert peak < 2 * unit, peak / unit


@pytest.mark.parametrize("gaps", [False, True], ids=["dt", "gaps"])
@pytest.mark.parametrize("name", ["ltc", "lrcu-a"])
def test_liquid_without_inputs(name, gaps):
    """A liquid network with no inputs (n = 0: the input-synapse kernel adds only the leak g_l, its backward gives
    g_l's gradient without a launch) matches the generic loop to 1e-10 (float64), under one launch (hidden 6) and
    over synapse tiles (hidden 20), with the model's dt or per-sample gaps."""
    for hidden, schedule in ((6, "persistent"), (20, "stepwise")):
        run = lambda *args, **kw: kernel(PRESETS[name][1])(*args, schedule=schedule, **kw)
        errors = relative_errors(PRESETS[name][0](0, hidden), run, 3, 5, hidden, torch.float64, input_size=0,
                                 gaps=gaps)
        worst = max(errors, key=errors.get)
        assert errors[worst] <= 1e-10, (hidden, worst, errors[worst])


@pytest.mark.parametrize("used", ["outputs", "final y"])
@pytest.mark.parametrize("name", ["unicornn", "unicornn-reversible"])
def test_unicornn_gradients_when_outputs_go_unused(name, used):
    """UnICORNN's backwards where autograd passes no gradient for what the loss does not use (the final state, or the
    outputs): every gradient matches the generic loop's to 1e-10 (float64)."""
    torch.manual_seed(4)
    model = generic(PRESETS[name][0](3, 5)).double()
    run = kernel(PRESETS[name][1])
    x = torch.randn(4, 9, 3, dtype=torch.float64, requires_grad=True)
    state = tuple((0.5 * torch.randn(4, 5, dtype=torch.float64)).requires_grad_() for _ in range(2))
    inputs = [x, *state, *model.parameters()]
    weights = torch.randn(4, 9, 5, dtype=torch.float64)

    def loss(out, final):
        return (out * weights).sum() if used == "outputs" else (final[1] * weights[:, 0]).sum()

    got = torch.autograd.grad(loss(*run(model.system, x, state, model.dt, model.unfolds, ())), inputs)
    expected = torch.autograd.grad(loss(*model(x, state)), inputs)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
