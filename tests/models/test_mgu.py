"""The minimal gated unit (Zhou et al. 2016) as explicit Euler with Δt = 1 of its ODE; the reference is the MGU's
update written out from the paper's equations."""
import torch

from odelab.models import SequenceRegressor, cells
from odelab.systems import MGU


def mgu_by_hand(x, W_f, U_f, b_f, W_h, U_h, b_h):
    """f_t = σ(W_f h + U_f x + b_f), h̃_t = tanh(W_h (f_t ⊙ h) + U_h x + b_h), h_t = (1 − f_t) ⊙ h + f_t ⊙ h̃_t."""
    h = x.new_zeros(x.shape[0], W_f.shape[0])
    outputs = []
    for x_t in x.unbind(1):
        f = torch.sigmoid(h @ W_f.T + x_t @ U_f.T + b_f)
        candidate = torch.tanh((f * h) @ W_h.T + x_t @ U_h.T + b_h)
        h = (1 - f) * h + f * candidate
        outputs.append(h)
    return torch.stack(outputs, 1)


def test_the_euler_step_of_the_mgu_field_is_the_mgu():
    torch.manual_seed(0)
    cell = cells.MGU(3, 5).double()
    x = torch.randn(4, 9, 3, dtype=torch.float64)
    s = cell.system.symbols()
    expected = mgu_by_hand(x, s["W_f"], s["V_f"], s["b_f"], s["W_u"], s["V_u"], s["b_u"])
    out, (h,) = cell(x)
    assert torch.allclose(out, expected, atol=1e-14) and torch.allclose(h, expected[:, -1], atol=1e-14)


def test_the_parameter_count_is_the_papers_2m_m_n_1():
    """Farsang et al. 2024's baseline count, MGU ≈ 2m(m + n + 1): 38 units on 64 inputs -> 7828 (lane keeping)."""
    assert sum(p.numel() for p in MGU(64, 38).parameters()) == 2 * 38 * (38 + 64 + 1) == 7828


def test_the_mgu_steps_by_irregular_gaps_and_trains_behind_a_readout():
    torch.manual_seed(1)
    cell = cells.MGU(2, 4).double()
    x = torch.randn(3, 6, 2, dtype=torch.float64)
    gaps = torch.rand(3, 6, dtype=torch.float64)
    out, _ = cell(x, dt=gaps)
    h = torch.zeros(3, 4, dtype=torch.float64)
    s = cell.system.symbols()
    for t in range(6):  # Euler with each sample's own step: h + Δt σ(f) (tanh(u) − h)
        f = torch.sigmoid(h @ s["W_f"].T + x[:, t] @ s["V_f"].T + s["b_f"])
        u = (f * h) @ s["W_u"].T + x[:, t] @ s["V_u"].T + s["b_u"]
        h = h + gaps[:, t:t + 1] * f * (torch.tanh(u) - h)
        assert torch.allclose(out[:, t], h, atol=1e-14)
    model = SequenceRegressor(cells.MGU(2, 4), 4, 1)
    model(torch.randn(2, 5, 2)).square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())
