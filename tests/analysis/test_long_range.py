"""Long-range gradient contributions (``stability.loss_gradient_terms``, ``contributions_of_step``,
``long_range_study``): the split ∂E_n/∂θ = Σ_k ∂E_n^(k)/∂θ of Rusch et al. 2022, eqs. 5/25, checked against the total
gradient and against eq. 3 written out with W_y perturbed in one step only; Prop. 4.3 / E.2 measured."""
import pytest
import torch

from odelab import cells
from odelab.analysis import stability

F64 = torch.float64


def _model(name: str):
    return (cells.LTC(1, 3, unfolds=3) if name == "ltc" else cells.build(name, 1, 3)).double()


def _recurrent_module(model):
    """The module whose ``named_parameters()`` name the terms: the Recurrent, or the torch RNN of a baseline."""
    return getattr(model, "rnn", model)


@pytest.mark.parametrize("name", ["lem[dt=0.3]", "ltc", "lstm", "rnn"])
def test_terms_sum_to_the_total_gradient(name):
    """Σ_k ∂E_n^(k)/∂θ = ∂E_n/∂θ from one ordinary backward (the fused CPU kernel's hand-written BPTT where there is
    one), for every parameter; LTC with 3 unfolds: a sample's term holds all its sub-steps."""
    torch.manual_seed(0)
    model = _model(name)
    x = torch.randn(2, 12, 1, dtype=F64)
    target = 2 * torch.rand(3, dtype=F64) - 1
    n = 8
    terms = stability.loss_gradient_terms(model, x, target, n)
    outputs, _ = model(x)
    loss = 0.5 * (outputs[:, n] - target).square().sum(-1).mean()
    parameters = dict(_recurrent_module(model).named_parameters())
    assert list(terms) == list(parameters)
    for key, total in zip(parameters, torch.autograd.grad(loss, list(parameters.values()))):
        assert terms[key].shape == (n + 1, *total.shape)
        assert (terms[key].sum(0) - total).abs().max() <= 1e-10 * total.abs().max(), key


def _lem_eq3(S: dict, x: torch.Tensor, dt: float, k: int, delta: torch.Tensor) -> list[torch.Tensor]:
    """y_n of eq. 3 for every n, with W_y replaced by W_y + δ in step k only (σ̂ the sigmoid, σ = tanh)."""
    batch, d = x.shape[0], S["Wy"].shape[0]
    z = y = torch.zeros(batch, d, dtype=x.dtype)
    ys = []
    for n, u in enumerate(x.unbind(1)):
        Wy = S["Wy"] + delta if n == k else S["Wy"]
        a = dt * torch.sigmoid(y @ S["W1"].T + u @ S["V1"].T + S["b1"])
        b = dt * torch.sigmoid(y @ S["W2"].T + u @ S["V2"].T + S["b2"])
        z = (1 - a) * z + a * torch.tanh(y @ S["Wz"].T + u @ S["Vz"].T + S["bz"])
        y = (1 - b) * y + b * torch.tanh(z @ Wy.T + u @ S["Vy"].T + S["by"])
        ys.append(y)
    return ys


def test_lem_contribution_is_the_gradient_through_one_step_of_eq3():
    """∂E_n^(k)/∂W_y = ∂E_n/∂δ for W_y + δ used in step k alone, δ = 0: the term of k from the reverse split (signed),
    and its max over entries from the forward route (all n for the one k) and the reverse one (all k for the one n)."""
    torch.manual_seed(1)
    model = cells.LEM(2, 4, dt=0.3).double()
    x = torch.randn(3, 12, 2, dtype=F64)
    target = 2 * torch.rand(4, dtype=F64) - 1
    k, n = 3, 9
    S = {key: value.detach() for key, value in model.system.symbols().items()}
    delta = torch.zeros(4, 4, dtype=F64, requires_grad=True)
    y_n = _lem_eq3(S, x, 0.3, k, delta)[n]
    expected, = torch.autograd.grad(0.5 * (y_n - target).square().sum(-1).mean(), delta)
    scale = expected.abs().max()
    assert scale > 1e-6
    term = stability.loss_gradient_terms(model, x, target, n)["system.Wy"][k]
    assert (term - expected).abs().max() <= 1e-10 * scale
    assert float(stability.contributions_of_step(model, x, target, k)["system.Wy"][n - k]) == pytest.approx(
        float(scale), rel=1e-10)
    assert float(stability.contributions_to_loss(model, x, target, n)["system.Wy"][k]) == pytest.approx(
        float(scale), rel=1e-10)


@pytest.mark.parametrize("name", ["lem", "ltc", "lstm"])
def test_forward_and_reverse_routes_agree(name):
    """contributions_of_step (forward mode from X_k, every n) = contributions_to_loss (reverse, every k) at (n, k)."""
    torch.manual_seed(2)
    model = _model(name)
    x = torch.randn(2, 8, 1, dtype=F64)
    target = 2 * torch.rand(3, dtype=F64) - 1
    k = 2
    forward = stability.contributions_of_step(model, x, target, k)
    for n in range(k, 8):
        reverse = stability.contributions_to_loss(model, x, target, n)
        for key in forward:
            assert float(forward[key][n - k]) == pytest.approx(float(reverse[key][k]), rel=1e-10, abs=1e-300)


def test_delay_cells_and_bad_indices_are_refused():
    x = torch.randn(1, 5, 1, dtype=F64)
    target = torch.zeros(3, dtype=F64)
    with pytest.raises(ValueError, match="delay system"):
        stability.contributions_of_step(cells.build("taugru", 1, 3).double(), x, target, 1)
    with pytest.raises(ValueError, match="k: expected a sample index"):
        stability.contributions_of_step(_model("lem"), x, target, 5)
    with pytest.raises(ValueError, match="n: expected a sample index"):
        stability.loss_gradient_terms(_model("lem"), x, target, -6)


def test_long_range_contribution_vanishes_for_tanh_rnn_not_for_lem_with_small_step():
    """Prop. 4.3 against the generic RNN picture: over 300 steps the contribution of step 10 to E_n decays by
    ~61 decades for a tanh RNN (8 units), by ~0.6 for LEM at Δt = 0.01."""
    result = stability.long_range_study(("lem[dt=0.01]", "rnn"), steps=300, k=10, lag=10, hidden_size=8, batch=2,
                                        seeds=(0,))
    lem, rnn = result["models"]["lem[dt=0.01]"], result["models"]["rnn"]
    assert len(lem["median_contribution"]) == 290 and lem["dt"] == 0.01 and rnn["dt"] is None
    assert rnn["log10_ratio_last_to_lag0"] < -20
    assert lem["log10_ratio_last_to_lag0"] > -2
    assert result["dt_scaling"]["slopes"] == {key: None for key in lem["at_lag"]}  # one LEM: no Δt fit


def test_lem_dt_scaling_of_the_long_range_contribution():
    """Δt ∈ {0.01, 0.001} at n − k = 10, k = 10: the W_y contribution scales like Δt² -- within the paper's
    O(Δt^(3/2)), whose √(t_k) is the bound on |z_k| (from a zero start z_k grows like t_k); a bias's like Δt (its
    direct dependence carries no state factor)."""
    result = stability.long_range_study(("lem[dt=0.01]", "lem[dt=0.001]"), steps=30, k=10, lag=10, hidden_size=8,
                                        batch=2, seeds=(0,))
    slopes = result["dt_scaling"]["slopes"]
    assert result["dt_scaling"]["dts"] == [0.01, 0.001]
    assert 1.8 < slopes["system.Wy"] < 2.1
    assert 0.9 < slopes["system.bias"] < 1.1
