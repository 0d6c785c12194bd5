"""The GRU as an ODE (LRC paper App. A.2.2, eqs. 53–54): Euler with Δt = 1 of dh/dt = σ(f)(tanh(u) − h)
reproduces torch.nn.GRU / GRUCell after GRU.from_torch, and the cell matches an independent eq. 53 loop."""
import pytest
import torch
from torch import nn

from odelab import cells
from odelab.models import Recurrent
from odelab.systems import GRU

BATCH, STEPS, INPUTS, HIDDEN = 4, 25, 3, 6


@pytest.mark.parametrize("bias", [True, False])
def test_from_torch_gru_reproduces_outputs_and_gradients(bias):
    torch.manual_seed(0)
    gru = nn.GRU(INPUTS, HIDDEN, batch_first=True, bias=bias)
    model = Recurrent(GRU.from_torch(gru), "euler", 1.0)
    x = torch.randn(BATCH, STEPS, INPUTS, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    weights = torch.randn(BATCH, STEPS, HIDDEN) / STEPS
    out, (h,) = model(x)
    ref, h_ref = gru(x_ref)
    assert (out - ref).abs().max() <= 1e-6 and (h - h_ref[0]).abs().max() <= 1e-6
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    assert (x.grad - x_ref.grad).abs().max() <= 1e-6
    # parameter gradients map back: torch's z rows are f's rows negated
    d = HIDDEN
    sign = torch.ones(3 * d, 1)
    sign[d:2 * d] = -1
    assert (model.system.weight_hidden.grad - sign * gru.weight_hh_l0.grad).abs().max() <= 1e-6
    assert (model.system.weight_input.grad - sign * gru.weight_ih_l0.grad).abs().max() <= 1e-6
    if bias:
        assert (model.system.bias.grad[:2 * d] - sign[:2 * d, 0] * gru.bias_ih_l0.grad[:2 * d]).abs().max() <= 1e-6
        assert (model.system.bias.grad[2 * d:] - gru.bias_ih_l0.grad[2 * d:]).abs().max() <= 1e-6
        assert (model.system.bias_hidden_candidate.grad - gru.bias_hh_l0.grad[2 * d:]).abs().max() <= 1e-6


def test_from_torch_gru_cell():
    torch.manual_seed(1)
    cell = nn.GRUCell(INPUTS, HIDDEN)
    x = torch.randn(BATCH, STEPS, INPUTS)
    h = torch.randn(BATCH, HIDDEN)
    out, _ = Recurrent(GRU.from_torch(cell), "euler", 1.0)(x, (h,))
    expected = []
    for n in range(STEPS):
        h = cell(x[:, n], h)
        expected.append(h)
    assert (out - torch.stack(expected, dim=1)).abs().max() <= 1e-6


def reference_eq_53(x, p, reset_after):
    """Eq. 53: h_t = (1 − σ(f_t)) h_{t−1} + σ(f_t) tanh(u_t); f, r affine in y_t = [h_{t−1}, x_t];
    u affine in [σ(r) ⊙ h, x] (Cho, reset_after=False) or σ(r) ⊙ (W_u h + b_hu) + V_u x + b_u (torch)."""
    h = torch.zeros(x.shape[0], HIDDEN)
    outputs = []
    for n in range(x.shape[1]):
        xn = x[:, n]
        r = torch.sigmoid(h @ p["W_r"].T + xn @ p["V_r"].T + p["b_r"])
        f = torch.sigmoid(h @ p["W_f"].T + xn @ p["V_f"].T + p["b_f"])
        if reset_after:
            u = r * (h @ p["W_u"].T + p["b_hu"]) + xn @ p["V_u"].T + p["b_u"]
        else:
            u = (r * h) @ p["W_u"].T + xn @ p["V_u"].T + p["b_u"]
        h = (1 - f) * h + f * torch.tanh(u)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


@pytest.mark.parametrize("reset_after", [True, False])
def test_cell_matches_eq_53(reset_after):
    torch.manual_seed(2)
    model = cells.GRUODE(INPUTS, HIDDEN, reset_after=reset_after)
    x = torch.randn(BATCH, STEPS, INPUTS)
    weights = torch.randn(BATCH, STEPS, HIDDEN) / STEPS
    out, _ = model(x)
    (out * weights).sum().backward()
    p = {k: v.detach().clone().requires_grad_() for k, v in model.system.symbols().items()}
    ref = reference_eq_53(x, p, reset_after)
    (ref * weights).sum().backward()
    assert (out - ref).abs().max() <= 1e-6
    system, d = model.system, HIDDEN
    grads = {f"{prefix}_{gate}": param.grad[i * d:(i + 1) * d]  # gradient slices of the stored parameters
             for prefix, param in (("W", system.weight_hidden), ("V", system.weight_input), ("b", system.bias))
             for i, gate in enumerate("rfu")}
    if reset_after:
        grads["b_hu"] = system.bias_hidden_candidate.grad
    assert grads.keys() == p.keys()
    for name, grad in grads.items():
        assert (grad - p[name].grad).abs().max() <= 1e-6, name


def test_from_torch_rejects_unsupported_modules():
    with pytest.raises(ValueError, match="module"):
        GRU.from_torch(nn.GRU(2, 3, num_layers=2))
    with pytest.raises(ValueError, match="module"):
        GRU.from_torch(nn.GRU(2, 3, bidirectional=True))
    with pytest.raises(TypeError, match="module"):
        GRU.from_torch(nn.LSTM(2, 3))
