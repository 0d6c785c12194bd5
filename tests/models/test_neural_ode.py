"""The ``node`` preset (MLP neural ODE + dopri5, the baseline of Farsang et al. 2024, §4.3) against scipy's DOP853
on the same weights, its gradients against finite differences, its size, its identity readout and one fit."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from odelab.models import SequenceRegressor, cells
from odelab.models.neural_ode import NeuralODE
from helpers import assert_matches_finite_differences


def mlp_numpy(model: NeuralODE):
    """The field y' = W3 tanh(W2 tanh(W1 y + b1) + b2) + b3 from the weights, in numpy float64."""
    (W1, b1), (W2, b2), (W3, b3) = [(m.weight.detach().double().numpy(), m.bias.detach().double().numpy())
                                    for m in model.field if isinstance(m, nn.Linear)]
    return lambda t, y: W3 @ np.tanh(W2 @ np.tanh(W1 @ y + b1) + b2) + b3


def scipy_rollout(model: NeuralODE, y0: np.ndarray, steps: int, dt: float) -> np.ndarray:
    """y(dt), …, y(steps·dt) of every row of y0 by scipy's DOP853 at rtol 1e-12: (batch, steps, d)."""
    from scipy.integrate import solve_ivp

    f, times = mlp_numpy(model), dt * np.arange(1, steps + 1)
    return np.stack([solve_ivp(f, (0.0, times[-1]), row, method="DOP853", t_eval=times, rtol=1e-12, atol=1e-12).y.T
                     for row in y0])


def lively(model: NeuralODE, scale: float = 2.0) -> NeuralODE:
    """Weights larger than at initialisation, so that the field turns and bends over the horizon."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, scale / math.sqrt(p.shape[-1]))
    return model


def initial_input(batch: int, steps: int, d: int = 2, dtype=torch.float32) -> torch.Tensor:
    """(y0, 0, …, 0): the input of the Neural-ODE tasks."""
    torch.manual_seed(1)
    x = torch.zeros(batch, steps, d, dtype=dtype)
    x[:, 0] = torch.randn(batch, d, dtype=dtype)
    return x


@pytest.mark.parametrize("dtype, rtol, atol", [(torch.float32, 1e-5, 1e-6), (torch.float64, 1e-8, 1e-10)])
def test_rollout_matches_scipy_dop853(dtype, rtol, atol):
    model = lively(cells.PRESETS["node"](2, 16, dt=0.05, rtol=rtol, atol=atol)).to(dtype)
    x = initial_input(4, 100, dtype=dtype)
    out, last = model(x)
    reference = scipy_rollout(model, x[:, 0].double().numpy(), 100, 0.05)
    assert out.shape == (4, 100, 2) and out.dtype == dtype
    assert torch.equal(last, out[:, -1])
    assert np.abs(reference - reference[:, :1]).max() > 0.5  # the trajectories do move
    error = np.abs(out.detach().double().numpy() - reference)
    # measured: 4.5 (float32) and 2.6 (float64) local tolerances over t ∈ [0, 5]
    assert error.max() <= 30 * (atol + rtol * np.abs(reference).max())
    assert int(model.stats["rejected"].sum()) >= 0 and (model.stats["nfe"] > 6).all()


def test_tighter_tolerance_is_closer_to_scipy():
    model = lively(NeuralODE(2, 16, dt=0.05)).double()
    x = initial_input(3, 80, dtype=torch.float64)
    reference = scipy_rollout(model, x[:, 0].numpy(), 80, 0.05)
    errors, nfe = [], []
    for tol in (1e-3, 1e-6, 1e-9):
        model.options.update(rtol=tol, atol=tol)
        with torch.no_grad():
            errors.append(np.abs(model(x)[0].numpy() - reference).max())
        nfe.append(float(model.stats["nfe"].double().mean()))
    assert errors[0] > 10 * errors[1] > 100 * errors[2]
    assert nfe[0] < nfe[1] < nfe[2]


def test_state_replaces_the_first_input_and_later_inputs_are_ignored():
    model = lively(NeuralODE(2, 8, dt=0.1)).double()
    x = initial_input(2, 10, dtype=torch.float64)
    noisy = x + torch.cat([torch.zeros_like(x[:, :1]), torch.randn_like(x[:, 1:])], 1)
    assert torch.equal(model(x)[0], model(noisy)[0])
    y0 = torch.randn(2, 2, dtype=torch.float64)
    reference = scipy_rollout(model, y0.numpy(), 10, 0.1)
    assert np.abs(model(x, y0)[0].detach().numpy() - reference).max() < 1e-3


def test_gradients_match_finite_differences():
    model = lively(NeuralODE(2, 4, dt=0.2, rtol=1e-10, atol=1e-10)).double()
    x = initial_input(2, 6, dtype=torch.float64).requires_grad_(True)
    target = torch.randn(2, 6, 2, dtype=torch.float64)
    loss = lambda: ((model(x)[0] - target) ** 2).sum()
    params = list(model.parameters()) + [x]
    grads = torch.autograd.grad(loss(), params)
    assert all(g.abs().sum() > 0 for g in grads)
    assert_matches_finite_differences(loss, params, grads, eps=1e-6, rtol=1e-5)


@pytest.mark.parametrize("d, width", [(2, 32), (3, 5)])
def test_parameter_count(d, width):
    # Linear(d, w) + Linear(w, w) + Linear(w, d), weights and biases
    expected = (d * width + width) + (width * width + width) + (width * d + d)
    assert sum(p.numel() for p in cells.PRESETS["node"](d, width).parameters()) == expected
    assert sum(p.numel() for p in cells.build(f"node[width={width}]", d, 7).parameters()) == expected
    assert expected == 1218 or d != 2  # the paper's (32, 32, 2) MLP: ≈1.2k parameters ("≈1k")


def test_identity_readout():
    body = NeuralODE(2, 8, dt=0.1)
    model = SequenceRegressor(body, 16, 2)
    assert isinstance(model.readout, nn.Identity)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in body.parameters())
    x = initial_input(3, 5)
    assert torch.equal(model(x), body(x)[0])
    assert torch.equal(SequenceRegressor(body, 16, 2, last=True)(x), body(x)[0][:, -1])
    with pytest.raises(ValueError, match="3 output features"):
        SequenceRegressor(body, 16, 3)
    assert isinstance(SequenceRegressor(cells.PRESETS["rnn"](2, 4), 4, 3).readout, nn.Linear)  # others keep theirs


def test_bad_options():
    with pytest.raises(ValueError, match="width"):
        NeuralODE(2, 0)
    with pytest.raises(ValueError, match="dt"):
        NeuralODE(2, 4, dt=0.0)
    with pytest.raises(ValueError, match="x: expected"):
        NeuralODE(2, 4)(torch.zeros(1, 3, 5))


def test_fit_on_a_few_spiral_windows():
    from odelab.data.neural_ode import neural_ode_task
    from odelab.training import FitSpec, run_fit

    data = neural_ode_task("spiral", sizes=(("train", 2), ("valid", 1), ("test", 1)), samples=101, train_windows=32,
                           cache=False)
    spec = FitSpec("spiral", model="node", hidden=8, epochs=2, batch_size=16, model_options={"dt": 25 / 999},
                   progress=False)
    model, result = run_fit(spec, data)
    assert isinstance(model.readout, nn.Identity)
    assert result["parameters"] == (2 * 8 + 8) + (8 * 8 + 8) + (8 * 2 + 2)
    assert np.isfinite(result["test_rmse"]) and len(result["history"]["train_rmse"]) == 2
    assert result["history"]["train_rmse"][0] != result["history"]["train_rmse"][1]
