"""LRCODE (the LRC as the vector field of a neural ODE in observation space, Farsang et al. 2024 §4.3, the authors'
``neuralODE/ode_model.py`` wiring): the derivative against the LRC equations written out from the symbols, the
Euler rollout, unfolds, sizes, the identity readout, errors, and a short fit of a linear spiral."""
import math

import pytest
import torch

from odelab.models import SequenceRegressor
from odelab.models.lrc_ode import LRCODE, lrc_ode


def initial_input(batch: int, steps: int, d: int = 2, dtype=torch.float32) -> torch.Tensor:
    torch.manual_seed(1)
    x = torch.zeros(batch, steps, d, dtype=dtype)
    x[:, 0] = torch.randn(batch, d, dtype=dtype)
    return x


def field_by_hand(model: LRCODE, y: torch.Tensor) -> torch.Tensor:
    """W_out ε(w)(−σ(f) z + tanh(u) e_l) + b_out, z = W_in y + b_in, from the LRC symbols (eqs. 1, 3–5)."""
    s = model.system.symbols()
    z = y @ model.encoder.weight.T + model.encoder.bias
    opening = torch.sigmoid(s["a"] * z.unsqueeze(-1) + s["b"])  # (batch, j, i)
    f = (opening * s["g"]).sum(1) + s["g_l"]
    u = (opening * s["k"]).sum(1) + s["g_l"]
    w = z @ s["o_hidden"] + s["p"]
    if model.system.elastance == "asymmetric":
        eps = torch.sigmoid(w)
    else:
        eps = torch.sigmoid(w + s["k_shift"]) - torch.sigmoid(w - s["k_shift"])
    dz = eps * (-torch.sigmoid(f) * z + torch.tanh(u) * s["e_l"])
    return dz @ model.decoder.weight.T + model.decoder.bias


@pytest.mark.parametrize("elastance", ["asymmetric", "symmetric"])
def test_derivative_is_the_mapped_lrc_field(elastance):
    torch.manual_seed(0)
    model = LRCODE(2, 16, elastance).double()
    y = torch.randn(5, 2, dtype=torch.float64)
    assert torch.allclose(model.derivative(0.0, y), field_by_hand(model, y), rtol=1e-12, atol=1e-14)


def test_rollout_is_explicit_euler_from_the_first_input():
    torch.manual_seed(0)
    model = LRCODE(2, 16, dt=0.1).double()
    x = initial_input(3, 7, dtype=torch.float64)
    x[:, 1:] = 5.0  # inputs after the first are ignored
    out, last = model(x)
    y, expected = x[:, 0], []
    for _ in range(7):
        y = y + 0.1 * field_by_hand(model, y)
        expected.append(y)
    assert out.shape == (3, 7, 2) and torch.equal(last, out[:, -1])
    assert torch.allclose(out, torch.stack(expected, 1), rtol=1e-12, atol=1e-14)
    state = torch.randn(3, 2, dtype=torch.float64)
    assert torch.allclose(model(x, state)[0][:, 0], state + 0.1 * field_by_hand(model, state))


def test_unfolds_are_substeps_of_dt_over_l():
    torch.manual_seed(0)
    fine = LRCODE(2, 8, dt=0.2, unfolds=4).double()
    coarse = LRCODE(2, 8, dt=0.05).double()
    coarse.load_state_dict(fine.state_dict())
    x = initial_input(2, 5, dtype=torch.float64)
    x_fine = torch.zeros(2, 20, 2, dtype=torch.float64)
    x_fine[:, 0] = x[:, 0]
    assert torch.allclose(fine(x)[0], coarse(x_fine)[0][:, 3::4], rtol=1e-12, atol=1e-14)


def test_sizes_and_identity_readout():
    model = lrc_ode(2, 16)
    # encoder 2·16+16, LRC(0, 16): g, a, b, k, O 5·16·16 + g_l, e_l, p 3·16, decoder 16·2+2
    assert sum(p.numel() for p in model.parameters()) == 48 + 5 * 256 + 48 + 34 == 1410
    assert sum(p.numel() for p in lrc_ode(2, 16, "symmetric").parameters()) == 1410 + 16
    regressor = SequenceRegressor(model, 16, 2)
    assert isinstance(regressor.readout, torch.nn.Identity)
    assert regressor(initial_input(2, 4)).shape == (2, 4, 2)
    with pytest.raises(ValueError):
        SequenceRegressor(model, 16, 3)


@pytest.mark.parametrize("keywords", [dict(dt=0.0), dict(dt=-1.0), dict(unfolds=0), dict(unfolds=1.5),
                                      dict(elastance="cubic")])
def test_bad_arguments(keywords):
    with pytest.raises(ValueError):
        LRCODE(2, 4, **keywords)


def test_bad_input_shape():
    with pytest.raises(ValueError):
        LRCODE(2, 4)(torch.zeros(3, 5, 3))


def test_fits_a_linear_spiral_from_short_windows():
    """Windows of 6 steps of y' = yA; the rollout of 100 steps from a new start must be within 10 % of the
    mean predictor's MSE (measured 0.2–1.5 % over seeds 0–3, 60 Adam steps)."""
    torch.manual_seed(0)
    A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])
    dt, steps = 0.05, 100

    step = torch.linalg.matrix_exp(A * dt)

    def rollout(y0, n):
        ys, y = [], y0
        for _ in range(n):
            y = y @ step
            ys.append(y)
        return torch.stack(ys, 1)

    angle = 2 * math.pi * torch.rand(32)
    starts = (1.0 + torch.rand(32)).unsqueeze(1) * torch.stack([angle.cos(), angle.sin()], 1)
    targets = rollout(starts, 6)
    x = torch.zeros(32, 6, 2)
    x[:, 0] = starts
    model = LRCODE(2, 16, dt=dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(60):
        optimizer.zero_grad()
        loss = ((model(x)[0] - targets) ** 2).mean()
        loss.backward()
        optimizer.step()
    y0 = torch.tensor([[1.5, 0.0]])
    truth = rollout(y0, steps)
    x_test = torch.zeros(1, steps, 2)
    x_test[:, 0] = y0
    with torch.no_grad():
        mse = float(((model(x_test)[0] - truth) ** 2).mean())
    assert mse < 0.1 * float(((truth - truth.mean(1, keepdim=True)) ** 2).mean())
