"""Gaps requiring grad (a learned Δt) in the Triton kernels of coRNN (explicit and implicit damping, fixed and learned
γ, ε) and the neural oscillator: the persistent kernels' backward returns ∂L/∂gaps (the stepwise and grid schedules':
test_cuda_gap_grads_oscillators_schedules.py), against the generic loop
(``run_sequence``) with autograd -- outputs, final state, and the gradients of every parameter, x, the initial state
and the gaps. Importing ``test_cuda_kernels`` sets ``TRITON_INTERPRET=1`` (without CUDA) before Triton is imported.
"""
from __future__ import annotations

import pytest
import torch
from test_cuda_kernels import DEVICE, float32_at, kernel

from odelab import systems
from odelab.solvers.recurrence import run_sequence
from odelab.solvers.schemes import resolve_scheme

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
CELLS = {  # name -> (system (input, hidden) -> System, scheme, kernel target)
    "cornn": (lambda m, d: systems.CoRNN(m, d, 1.3, 0.7), "imex", ".cuda.oscillators:run_cornn_explicit"),
    "cornn-implicit": (lambda m, d: systems.CoRNN(m, d, 1.3, 2.5), "imex-implicit",
                       ".cuda.oscillators:run_cornn_implicit"),
    "cornn-learned-coefficients": (lambda m, d: systems.CoRNN(m, d, 0.8, 1.1, learn_coefficients=True), "imex",
                                   ".cuda.oscillators:run_cornn_explicit"),
    "cornn-implicit-learned-coefficients": (
        lambda m, d: systems.CoRNN(m, d, 0.8, 2.0, learn_coefficients=True), "imex-implicit",
        ".cuda.oscillators:run_cornn_implicit"),
    "oscillator": (lambda m, d: systems.NeuralOscillator(m, d), "symplectic-euler", ".cuda.oscillators:run_oscillator"),
}
SIZES = {  # (batch, time, hidden, block_h): register-resident (hidden ≤ 32), tiled (block_h 16: 2 and 3 tiles)
    "resident": (3, 4, 6, None),
    "resident-batch-1-T-1": (1, 1, 1, None),
    "tiled-17": (3, 3, 17, 16),
    "tiled-33": (2, 2, 33, 16),
}
FULL_SIZE = (64, 200, 128)  # (batch, time, hidden) of the gpu test


def draw(name, batch, time, hidden, dtype, seed=0, input_size=3):
    """(system, x, state, gaps), drawn in float64, every one requiring grad; gaps from U[0, 1.5), every third one
    exactly 0 (unless there is one gap)."""
    torch.manual_seed(seed)
    build = CELLS[name][0]
    system = build(input_size, hidden).to(device=DEVICE, dtype=dtype)
    x = torch.randn(batch, time, input_size, device=DEVICE, dtype=torch.float64)
    state = [0.5 * torch.randn(batch, hidden, device=DEVICE, dtype=torch.float64) for _ in range(2)]
    gaps = 1.5 * torch.rand(batch, time, device=DEVICE, dtype=torch.float64)
    if batch * time > 1:
        b, t = torch.meshgrid(torch.arange(batch), torch.arange(time), indexing="ij")
        gaps[((b + t) % 3 == 1).to(DEVICE)] = 0.0
    x, gaps, *state = (v.to(dtype).requires_grad_() for v in (x, gaps, *state))
    return system, x, tuple(state), gaps


def results(system, x, state, gaps, out, final):
    """Outputs, final state and the gradients of a fixed random loss w.r.t. every parameter, x, state and gaps."""
    torch.manual_seed(7)  # the same weights in every dtype
    weights = [torch.randn_like(v, dtype=torch.float64).to(v.dtype) for v in (out, *final)]
    loss = sum((a * w).sum() for a, w in zip((out, *final), weights))
    names = [n for n, p in system.named_parameters() if p.requires_grad]
    inputs = [x, *state, gaps, *(p for p in system.parameters() if p.requires_grad)]
    grads = torch.autograd.grad(loss, inputs)
    keys = ["outputs", "final z", "final y", "grad x", "grad z0", "grad y0", "grad gaps", *(f"grad {n}" for n in names)]
    return dict(zip(keys, (out, *final, *grads)))


def errors(name, size, dtype, unfolds, seed=0, **options):
    """Max relative error (max |a − b| / max(max |b|, 1e-2)) of the kernel against the generic loop, per tensor."""
    batch, time, hidden, block_h = size
    _, scheme, target = CELLS[name]
    system, x, state, gaps = draw(name, batch, time, hidden, dtype, seed)
    out, final = kernel(target)(system, x, state, gaps, unfolds, (), block_h=block_h, **options)
    fused = results(system, x, state, gaps, out, final)
    ref_out, ref_final = run_sequence(system, resolve_scheme(scheme), x, state, gaps, unfolds)
    reference = results(system, x, state, gaps, ref_out, tuple(ref_final))
    assert reference["grad gaps"].abs().max() > 0
    return {n: ((fused[n] - b).abs().max() / b.abs().max().clamp_min(1e-2)).item() for n, b in reference.items()}


@pytest.mark.parametrize("unfolds", [1, 2])
@pytest.mark.parametrize("where, dtype", float32_at(SIZES, {"resident", "resident-batch-1-T-1"}))
@pytest.mark.parametrize("name", list(CELLS))
def test_gap_gradients_equal_the_generic_loop(name, where, unfolds, dtype):
    errs = errors(name, SIZES[where], dtype, unfolds)
    worst = max(errs, key=errs.get)
    assert errs[worst] <= TOL[dtype], (worst, errs[worst])


def test_two_batch_blocks():
    """batch 17 = two programs of 16 rows (the last one masked), both persistent kernels."""
    for block_h in (None, 16):
        errs = errors("cornn-implicit", (17, 2, 17, block_h), torch.float64, 1)
        worst = max(errs, key=errs.get)
        assert errs[worst] <= TOL[torch.float64], (block_h, worst, errs[worst])


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CELLS))
def test_full_size_gap_gradients_cuda(name):
    """:data:`FULL_SIZE` float32 on the GPU: the kernel's deviation from the float64 generic loop ≤ 10 × the float32
    generic loop's + 1e-5, per tensor (the gaps' gradient included)."""
    _, scheme, target = CELLS[name]
    batch, time, hidden = FULL_SIZE

    def evaluate(dtype, fused):
        system, x, state, gaps = draw(name, batch, time, hidden, dtype, input_size=4)
        if name == "oscillator":  # a restoring W: the default random one runs away over 200 steps
            with torch.no_grad():
                W = system.weight[:, 4:]
                W.copy_(-torch.eye(hidden, dtype=dtype, device=DEVICE) + 0.01 * (W + W.t()))
                system.weight[:, :4].mul_(0.1)
        gaps.data.mul_(0.2)
        if fused:
            out, final = kernel(target)(system, x, state, gaps, 1, ())
        else:
            out, final = run_sequence(system, resolve_scheme(scheme), x, state, gaps, 1)
        return {n: v.detach().double() for n, v in results(system, x, state, gaps, out, tuple(final)).items()}

    reference = evaluate(torch.float64, False)
    plain, fused = evaluate(torch.float32, False), evaluate(torch.float32, True)

    def deviation(a):
        return {n: ((a[n] - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for n, b in reference.items()}

    plain, fused = deviation(plain), deviation(fused)
    excess = {n: fused[n] - (10 * plain[n] + 1e-5) for n in fused}
    worst = max(excess, key=excess.get)
    assert excess[worst] <= 0, (worst, fused[worst], plain[worst])
