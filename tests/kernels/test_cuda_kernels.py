"""The Triton kernels of ``odelab.kernels.cuda`` against the generic loop (``Recurrent`` / the delay ring buffer):
outputs, final state, and gradients w.r.t. every parameter, the input and the initial state.

Without CUDA the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, CPU tensors, tiny shapes; set
before Triton is imported); with CUDA the same tiny cases run compiled on the GPU, and the ``gpu`` tests add
full-size sequences. The kernel modules are called directly (the registry keys on the device "cuda").
"""
from __future__ import annotations

import importlib
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
pytest.importorskip("triton")

from odelab import cells  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


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
    "oscillator": (lambda m, d: cells.NeuralOscillator(m, d, dt=0.3), ".cuda.oscillators:run_oscillator"),
    "unicornn": (lambda m, d: cells.UnICORNN(m, d, dt=0.9, alpha=0.4).layers[0], ".cuda.unicornn:run"),
    "gru-ode": (lambda m, d: cells.GRUODE(m, d, dt=0.8), ".cuda.gru:run"),
    "taugru": (lambda m, d: cells.TauGRU(m, d, tau=2.0), ".cuda.delay_gru:run_taugru"),
    "delaygru": (lambda m, d: cells.DelayGRU(m, d, tau=1.0), ".cuda.delay_gru:run_delaygru"),
    "ltc": (lambda m, d: cells.LTC(m, d, dt=1.0, unfolds=6), ".cuda.liquid:run_ltc"),
    "stc": (lambda m, d: cells.STC(m, d, dt=1.0, unfolds=6), ".cuda.liquid:run_stc"),
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


def relative_errors(model, run, batch, time, hidden, dtype, input_size=3, seed=0, block_h=None):
    """Max relative error (max |a − b| / max |b|, per tensor) of outputs, final state and every gradient."""
    torch.manual_seed(seed)
    model = generic(model).to(device=DEVICE, dtype=dtype)
    x = torch.randn(batch, time, input_size, device=DEVICE, dtype=dtype, requires_grad=True)
    state = tuple((0.5 * torch.randn(batch, n, device=DEVICE, dtype=dtype)).requires_grad_()
                  for n in model.system.block_sizes())
    extra = {} if block_h is None else {"block_h": block_h}
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
        errors[name] = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
    return errors


SIZES = [  # (batch, time, hidden, block_h): hidden 1 and 17, batch 1, T = 1, two hidden tiles
    (1, 1, 1, None),
    (3, 4, 17, None),
    (17, 3, 17, 16),
]


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(str(v) for v in s[:3]) + ("t" if s[3] else ""))
def test_float32(name, size):
    build, target = PRESETS[name]
    batch, time, hidden, block_h = size
    errors = relative_errors(build(3, hidden), kernel(target), batch, time, hidden, torch.float32, block_h=block_h)
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


@pytest.mark.parametrize("name", list(DELAY_CASES))
def test_delay_edge_cases(name):
    target = ".cuda.delay_gru:run_" + ("taugru" if name.startswith("taugru") else "delaygru")
    errors = relative_errors(DELAY_CASES[name](3, 6), kernel(target), 2, 4, 6, torch.float32)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[torch.float32], (worst, errors[worst])
