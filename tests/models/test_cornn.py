"""coRNN (thesis eq. 2.3): the generic cell (CoRNN field + partitioned Euler + Δt) against an independent
reference written from the paper's discrete equations; outputs and every parameter gradient."""
import pytest
import torch

from odelab import cells
from odelab.models import Recurrent
from odelab.systems import CoRNN

BATCH, STEPS, INPUTS, HIDDEN = 4, 30, 3, 6


def reference_cornn(x, W, Wc, V, b, gamma, epsilon, dt, implicit):
    """Eq. 2.3: z_n = z + Δt tanh(W y + 𝒲 z + V u_n + b) − Δt γ y − Δt ε z_{n̄}; y_n = y + Δt z_n.
    Explicit damping (n̄ = n−1) is written as the official cell, tanh of one affine map over cat(u, z, y)."""
    z = torch.zeros(x.shape[0], W.shape[0], dtype=x.dtype)
    y = torch.zeros_like(z)
    i2h = torch.cat((V, Wc, W), dim=1)
    outputs = []
    for n in range(x.shape[1]):
        drive = torch.tanh(torch.cat((x[:, n], z, y), dim=1) @ i2h.T + b)
        if implicit:
            z = (z + dt * drive - dt * gamma * y) / (1 + dt * epsilon)
        else:
            z = z + dt * (drive - gamma * y - epsilon * z)
        y = y + dt * z
        outputs.append(y)
    return torch.stack(outputs, dim=1), (z, y)


def leaf_symbols(system):
    return {k: v.detach().clone().requires_grad_(v.requires_grad) for k, v in system.symbols().items()}


def loss_of(outputs, final, weights):
    return (outputs * weights[0]).sum() + (final[0] * weights[1]).sum() + (final[1] * weights[2]).sum()


@pytest.mark.parametrize("damping", ["explicit", "implicit"])
@pytest.mark.parametrize("learn", [False, True])
def test_cell_matches_paper_equations(damping, learn):
    torch.manual_seed(0)
    model = cells.CoRNN(INPUTS, HIDDEN, dt=0.07, gamma=2.7, epsilon=4.7, damping=damping, learn_coefficients=learn)
    system = model.system
    x = torch.randn(BATCH, STEPS, INPUTS)
    weights = [torch.randn(BATCH, STEPS, HIDDEN), torch.randn(BATCH, HIDDEN), torch.randn(BATCH, HIDDEN)]

    outputs, final = model(x)
    loss_of(outputs, final, weights).backward()

    s = leaf_symbols(system)
    ref_out, ref_final = reference_cornn(x, s["W"], s["𝒲"], s["V"], s["b"], s["γ"], s["ε"], 0.07,
                                         implicit=damping == "implicit")
    loss_of(ref_out, ref_final, weights).backward()

    assert (outputs - ref_out).abs().max() <= 1e-6
    for a, b in zip(final, ref_final):
        assert (a - b).abs().max() <= 1e-6
    m, d = INPUTS, HIDDEN
    grad = system.weight.grad
    assert (grad[:, :m] - s["V"].grad).abs().max() <= 1e-6
    assert (grad[:, m:m + d] - s["𝒲"].grad).abs().max() <= 1e-6
    assert (grad[:, m + d:] - s["W"].grad).abs().max() <= 1e-6
    assert (system.bias.grad - s["b"].grad).abs().max() <= 1e-6
    if learn:
        assert (system.coefficients.grad[0] - s["γ"].grad).abs() <= 1e-5 * max(1.0, s["γ"].grad.abs().item())
        assert (system.coefficients.grad[1] - s["ε"].grad).abs() <= 1e-5 * max(1.0, s["ε"].grad.abs().item())
    else:
        assert system.coefficients.grad is None


def test_implicit_and_explicit_damping_differ_on_the_same_system():
    torch.manual_seed(1)
    system = CoRNN(2, 5, gamma=1.0, epsilon=5.0)
    x = torch.randn(3, 10, 2)
    explicit, _ = Recurrent(system, "imex", 0.1)(x)
    implicit, _ = Recurrent(system, "imex-implicit", 0.1)(x)
    symplectic, _ = Recurrent(system, "symplectic-euler", 0.1)(x)
    assert (explicit - implicit).abs().max() > 1e-4  # ε z_{n−1} vs ε z_n
    assert torch.allclose(explicit, symplectic, atol=1e-7)  # explicit damping is symplectic Euler of (2.2)


def test_symbols_are_views_and_field_is_eq_2_2():
    torch.manual_seed(2)
    system = CoRNN(2, 4, gamma=0.4, epsilon=8.0).double()
    s = system.symbols()
    with torch.no_grad():
        s["W"].fill_(0.0)
    assert system.weight[:, 2 + 4:].abs().max() == 0
    s = system.symbols()
    z, y = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    u = torch.randn(3, 2, dtype=torch.float64)
    dz, dy = system.derivative(0.0, (z, y), system.encode(u))
    expected = torch.tanh(s["W"] @ y.T + s["𝒲"] @ z.T + s["V"] @ u.T + s["b"][:, None]).T - 0.4 * y - 8.0 * z
    assert torch.allclose(dz, expected) and torch.equal(dy, z)


def test_official_initialisation_bounds():
    system = CoRNN(3, 10)
    bound = 1 / (3 + 20) ** 0.5
    assert system.weight.abs().max() <= bound and system.bias.abs().max() <= bound
    assert system.weight.abs().max() > 0.8 * bound


@pytest.mark.parametrize("kwargs, name", [(dict(gamma=-1.0), "gamma"), (dict(epsilon=float("nan")), "epsilon"),
                                          (dict(hidden_size=0), "hidden_size")])
def test_bad_arguments_name_the_argument(kwargs, name):
    args = dict(input_size=2, hidden_size=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        CoRNN(**args)


def test_bad_damping_names_the_argument():
    with pytest.raises(ValueError, match="damping"):
        cells.CoRNN(1, 2, damping="semi")


def test_official_readout_initialisation():
    """``cornn-official``: the readout keeps nn.Linear's U(−1/√d, 1/√d) initialisation (official coRNN code);
    every other preset's readout is Kaiming-normal, std √(2/d) (official LEM code), so some of its 24 weights pass
    1/√d (each does with probability 0.48); the same field, scheme and Δt; a bad ``readout_init`` is refused."""
    from odelab.models import SequenceRegressor
    from odelab.models.cells import build

    hidden = 24
    torch.manual_seed(0)
    official = SequenceRegressor(build("cornn-official", 2, hidden), hidden, 1)
    torch.manual_seed(0)
    ours = SequenceRegressor(build("cornn", 2, hidden), hidden, 1)
    bound = 1 / hidden ** 0.5
    assert official.readout.weight.abs().max() <= bound and official.readout.bias.abs().max() <= bound
    assert ours.readout.weight.abs().max() > bound
    assert abs(float(ours.readout.weight.detach().std()) - (2 / hidden) ** 0.5) < 0.15
    assert type(official.body.system) is type(ours.body.system) and official.body.dt == ours.body.dt
    assert official.body.scheme.name == ours.body.scheme.name
    body = build("cornn", 2, 3)
    body.readout_init = "xavier"
    with pytest.raises(ValueError, match="readout_init"):
        SequenceRegressor(body, 3, 1)
