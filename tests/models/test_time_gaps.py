"""Irregularly sampled sequences: ``Recurrent.forward(x, dt=gaps)`` steps sample n of each sequence over its own
gap (Farsang et al. 2024, App. A.3.2), and ``SequenceRegressor(time_gaps=True)`` hands the inputs' last feature to
the cells that step by it and to the others as a feature. References: eq. 3 written out, and the ordinary forward
called one sample at a time with that sample's step."""
import math

import pytest
import torch

import odelab
from odelab.models import Recurrent, SequenceRegressor
from odelab.models.heads import takes_time_gaps


def _one_sample_at_a_time(cell, x, gaps):
    """The ordinary forward (a float dt) over one sample per call, the state carried, per sequence."""
    outputs = []
    for b in range(x.shape[0]):
        state, ys = None, []
        for n in range(x.shape[1]):
            cell.dt = float(gaps[b, n])
            y, state = cell(x[b:b + 1, n:n + 1], state)
            ys.append(y)
        outputs.append(torch.cat(ys, 1))
    return torch.cat(outputs, 0)


def test_lem_steps_each_sample_by_its_gap():
    """Eq. 3 with Δt = the sample's gap: z_n = (1 − Δ_n a) z + Δ_n a tanh(·), y likewise."""
    torch.manual_seed(0)
    cell = odelab.cells.LEM(2, 4).double()
    x = torch.randn(3, 7, 2, dtype=torch.float64)
    gaps = 2 * torch.rand(3, 7, dtype=torch.float64)
    out, (z_end, y_end) = cell(x, dt=gaps)
    S = {k: v.detach() for k, v in cell.system.symbols().items()}
    z = y = torch.zeros(3, 4, dtype=torch.float64)
    for n in range(7):
        u, d = x[:, n], gaps[:, n:n + 1]
        a = d * torch.sigmoid(y @ S["W1"].T + u @ S["V1"].T + S["b1"])
        c = d * torch.sigmoid(y @ S["W2"].T + u @ S["V2"].T + S["b2"])
        z = (1 - a) * z + a * torch.tanh(y @ S["Wz"].T + u @ S["Vz"].T + S["bz"])
        y = (1 - c) * y + c * torch.tanh(z @ S["Wy"].T + u @ S["Vy"].T + S["by"])
        assert (out[:, n] - y).abs().max() < 1e-13
    assert (z_end - z).abs().max() < 1e-13


@pytest.mark.parametrize("make", [lambda: odelab.cells.LTC(2, 3, unfolds=6), lambda: odelab.cells.LRCU(2, 3),
                                  lambda: odelab.cells.CoRNN(2, 3, damping="implicit"),
                                  lambda: odelab.cells.GRUODE(2, 3), lambda: odelab.cells.NeuralOscillator(2, 3),
                                  lambda: Recurrent(odelab.systems.LEM(2, 3), "rk4", 1.0)])
def test_every_scheme_and_unfolding_matches_one_sample_at_a_time(make):
    torch.manual_seed(1)
    cell = make().double()
    x = torch.randn(2, 6, 2, dtype=torch.float64)
    gaps = 0.1 + torch.rand(2, 6, dtype=torch.float64)
    out, _ = cell(x, dt=gaps)
    assert (out - _one_sample_at_a_time(cell, x, gaps)).abs().max() < 1e-12


def test_shared_gaps_lengths_and_padding():
    torch.manual_seed(2)
    cell = odelab.cells.LEM(2, 4).double()
    x = torch.randn(3, 8, 2, dtype=torch.float64)
    gaps = torch.rand(8, dtype=torch.float64)  # one gap sequence for the whole batch
    assert torch.equal(cell(x, dt=gaps)[0], cell(x, dt=gaps.expand(3, 8))[0])
    padded = x.clone()
    padded[1, 3:] = float("nan")  # past its length: never read into the state
    out, (z, y) = cell(padded, dt=gaps, lengths=torch.tensor([8, 3, 5]))
    alone, (z1, y1) = cell(x[1:2, :3], dt=gaps[:3])
    assert (out[1, :3] - alone[0]).abs().max() < 1e-14 and (y[1] - y1[0]).abs().max() < 1e-14
    assert torch.equal(out[1, 3:], torch.zeros_like(out[1, 3:])) and torch.isfinite(out).all()


def test_gradient_with_respect_to_the_gaps():
    """The outputs are differentiable in the gaps (central differences, float64)."""
    torch.manual_seed(3)
    cell = odelab.cells.LEM(1, 3).double()
    x = torch.randn(2, 5, 1, dtype=torch.float64)
    gaps = (0.2 + torch.rand(2, 5, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda g: cell(x, dt=g)[0], (gaps,))


def test_bad_gaps_are_refused():
    cell = odelab.cells.LEM(1, 3)
    x = torch.randn(2, 5, 1)
    with pytest.raises(ValueError, match=r"expected shape \(2, 5\)"):
        cell(x, dt=torch.ones(2, 4))
    with pytest.raises(ValueError, match="finite time gaps >= 0"):
        cell(x, dt=-torch.ones(5))
    with pytest.raises(ValueError, match="finite time gaps >= 0"):
        cell(x, dt=torch.full((5,), math.nan))
    with pytest.raises(ValueError, match="delay system"):
        odelab.cells.TauGRU(1, 3, tau=2.0)(x, dt=torch.ones(5))
    unicornn = odelab.cells.UnICORNN(1, 3).layers[0]
    unicornn.engine = "fused"  # its kernels step every sample by one dt
    with pytest.raises(ValueError, match="per-sample steps run the generic loop"):
        unicornn(x, dt=torch.ones(5))
    cell.engine = "cuda-graph"
    with pytest.raises(ValueError, match="engine='cuda-graph' steps every sample by the model's dt"):
        cell(x, dt=torch.ones(5))


CELLS_WITH_GAP_KERNELS = {
    "lem": lambda: Recurrent(odelab.systems.LEM(3, 5), "imex", 1.0),
    "lem, 3 unfolds": lambda: Recurrent(odelab.systems.LEM(3, 5), "imex", 1.0, unfolds=3),
    "ltc, 6 unfolds": lambda: odelab.cells.LTC(3, 5),
    "stc, 6 unfolds": lambda: odelab.cells.STC(3, 5),
    "lrcu-a": lambda: odelab.cells.LRCU(3, 5),
    "lrcu-s": lambda: odelab.cells.LRCU(3, 5, elastance="symmetric"),
    "gru-ode, 2 unfolds": lambda: Recurrent(odelab.systems.GRU(3, 5), "euler", 1.0, unfolds=2),
    "cornn, explicit damping": lambda: odelab.cells.CoRNN(3, 5),
    "cornn, implicit damping, 2 unfolds": lambda: Recurrent(odelab.systems.CoRNN(3, 5, 1.0, 3.0), "imex-implicit", 0.45,
                                                            unfolds=2),
    "neural oscillator, 2 unfolds": lambda: Recurrent(odelab.systems.NeuralOscillator(3, 5), "symplectic-euler", 0.3,
                                                      unfolds=2),
}


def _fused_and_generic(cell, x, state, gaps, lengths=None):
    """(outputs, first final block, gradients of x, the state, every parameter and the gaps where they require
    grad) with engine "fused", then "generic" (float64); skips where the CPU kernel cannot run."""
    cell.engine = "auto"
    if cell.kernel(x, gaps=True, gap_grads=gaps.requires_grad) is None:
        pytest.skip("no CPU kernel here (no C++ compiler)")
    leaves = [x, *state, *cell.parameters(), *([gaps] if gaps.requires_grad else [])]
    results = []
    for engine in ("fused", "generic"):
        cell.engine = engine
        out, final = cell(x, state, dt=gaps, lengths=lengths)
        loss = (out * torch.linspace(-1, 1, out.shape[-1], dtype=torch.float64)).sum() + final[0].square().sum()
        results.append((out, final[0], torch.autograd.grad(loss, leaves)))
    (out_f, s_f, g_f), (out_g, s_g, g_g) = results
    assert (out_f - out_g).abs().max() <= 1e-12 * (1 + out_g.abs().max())
    assert (s_f - s_g).abs().max() <= 1e-12 * (1 + s_g.abs().max())
    assert all((a - b).abs().max() <= 1e-10 * (1 + b.abs().max()) for a, b in zip(g_f, g_g))
    return results


@pytest.mark.parametrize("name", list(CELLS_WITH_GAP_KERNELS))
def test_cpu_kernels_take_the_gaps(name):
    """The fused CPU kernels with per-sample steps = the generic loop: outputs, final state, and the gradients of
    every parameter, the input and the initial state (float64, 1e-10)."""
    torch.manual_seed(5)
    cell = CELLS_WITH_GAP_KERNELS[name]().double()
    x = torch.randn(4, 9, 3, dtype=torch.float64, requires_grad=True)
    state = tuple(torch.randn(4, 5, dtype=torch.float64, requires_grad=True) for _ in cell.system.blocks)
    _fused_and_generic(cell, x, state, 1.5 * torch.rand(4, 9, dtype=torch.float64))


@pytest.mark.parametrize("name", ["lem, 3 unfolds", "ltc, 6 unfolds", "cornn, explicit damping"])
def test_cpu_kernels_take_the_gaps_with_lengths(name):
    """Gaps and lengths together: the kernel runs each piece of ``run_lengths`` with its samples' gaps; outputs (zero
    past each length), final states at each length and every gradient equal the generic loop's masked steps
    (float64, 1e-10); what is padded past a length (NaN here) is never read, and enters no gradient either way."""
    torch.manual_seed(6)
    cell = CELLS_WITH_GAP_KERNELS[name]().double()
    x = torch.randn(4, 9, 3, dtype=torch.float64)
    x[2, 4:] = float("nan")
    x.requires_grad_()
    state = tuple(torch.randn(4, 5, dtype=torch.float64, requires_grad=True) for _ in cell.system.blocks)
    (out, _, grads), (_, _, generic_grads) = _fused_and_generic(
        cell, x, state, 1.5 * torch.rand(4, 9, dtype=torch.float64), torch.tensor([9, 2, 4, 7]))
    assert torch.isfinite(out).all() and torch.equal(out[1, 2:], torch.zeros_like(out[1, 2:]))
    assert all(torch.isfinite(g).all() for g in grads + generic_grads)
    assert torch.equal(grads[0][2, 4:], torch.zeros_like(grads[0][2, 4:]))


@pytest.mark.parametrize("name", list(CELLS_WITH_GAP_KERNELS))
def test_cpu_kernels_give_the_gradient_of_the_gaps(name):
    """Gaps that require grad run the CPU kernels, whose backward gives dL/dgap (a sum over each sample's sub-steps
    of the gradient of their length): equal to the generic loop's autograd, with every other gradient (1e-10)."""
    torch.manual_seed(7)
    cell = CELLS_WITH_GAP_KERNELS[name]().double()
    x = torch.randn(3, 8, 3, dtype=torch.float64, requires_grad=True)
    state = tuple(torch.randn(3, 5, dtype=torch.float64, requires_grad=True) for _ in cell.system.blocks)
    gaps = (1.5 * torch.rand(3, 8, dtype=torch.float64)).requires_grad_()
    gaps.data[1, 2] = 0.0  # a gap of zero: the sample's step leaves the state as it is
    (_, _, grads), _ = _fused_and_generic(cell, x, state, gaps)
    assert grads[-1].abs().max() > 0
    _fused_and_generic(cell, x, state, gaps, torch.tensor([8, 3, 5]))  # with lengths: piece by piece


@pytest.mark.parametrize("build", [lambda: odelab.cells.CoRNN(3, 5, dt=0.3, learn_dt=True),
                                   lambda: Recurrent(odelab.systems.LEM(3, 5), "imex", 0.5, unfolds=2, learn_dt=True,
                                                     dt_max=2.0),
                                   lambda: Recurrent(odelab.systems.LTC(3, 5), "imex-implicit", 1.0, unfolds=6,
                                                     learn_dt=True, dt_max=2.0)],
                         ids=["cornn", "lem, 2 unfolds", "ltc"])
def test_a_learned_step_trains_on_the_cpu_kernel(build):
    """``learn_dt=True`` runs the kernel (its steps require grad), to the generic loop's outputs and gradients,
    Δt's logit's among them (float64, 1e-10; float32, 1e-5)."""
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        torch.manual_seed(8)
        cell = build().to(dtype)
        x = torch.randn(4, 9, 3, dtype=dtype)
        if cell.kernel(x, gaps=True, gap_grads=True) is None:
            pytest.skip("no CPU kernel here (no C++ compiler)")
        results = []
        for engine in ("fused", "generic"):
            cell.engine = engine
            out = cell(x)[0]
            results.append((out, torch.autograd.grad(out.square().sum(), list(cell.parameters()))))
        (out_f, g_f), (out_g, g_g) = results
        assert (out_f - out_g).abs().max() <= tol * out_g.abs().max()
        for (name, _), a, b in zip(cell.named_parameters(), g_f, g_g, strict=True):
            assert (a - b).abs().max() <= tol * b.abs().max().clamp_min(1e-30), name


def test_regressor_hands_the_gap_to_cells_that_step_by_it_and_to_the_others_as_a_feature():
    torch.manual_seed(4)
    x = torch.randn(2, 6, 3)
    x[..., -1] = torch.rand(2, 6)
    lem = SequenceRegressor(odelab.cells.LEM(2, 4), 4, 1, time_gaps=True)
    expected = lem.readout(lem.body(x[..., :2], dt=x[..., 2])[0])
    assert torch.equal(lem(x), expected)
    lstm = SequenceRegressor(odelab.models.baselines.LSTM(3, 4), 4, 1, time_gaps=True)
    assert torch.equal(lstm(x), lstm.readout(lstm.body(x)[0]))
    assert not takes_time_gaps(odelab.cells.TauGRU(3, 4, tau=2.0)) and not takes_time_gaps(lstm.body)
    assert takes_time_gaps(lem.body)
