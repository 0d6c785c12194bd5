"""The oscillator bounds of Rusch's thesis (``odelab.analysis.oscillator_bounds``) against references written here
from the thesis's equations: the coRNN recursions (2.45) / (2.9) by hand, the energy bound (2.48) / (2.10), the
separation bound (2.12), the step conditions (2.47) / (2.50) with the thesis's own numbers, and the 2×2 step blocks
of UnICORNN under symplectic Euler (3.25) and explicit Euler."""
import math

import pytest
import torch

from odelab import cells
from odelab.analysis import oscillator_bounds as ob
from odelab.analysis import stability
from odelab.models import Recurrent

F64 = torch.float64


def _one_neuron_cornn(dt, gamma, epsilon, damping, V, Wc, W, b):
    """A one-neuron coRNN cell with its weights set: storage [V | 𝒲 | W] over cat(u, z, y), bias b."""
    layer = stability.single_layer(cells.CoRNN(1, 1, dt, gamma, epsilon, damping)).double()
    with torch.no_grad():
        layer.system.weight.copy_(torch.tensor([[V, Wc, W]], dtype=F64))
        layer.system.bias.fill_(b)
    return layer


def _hand_cornn(u, dt, gamma, epsilon, damping, V, Wc, W, b):
    """(z_n, y_n), n = 1 … N, of (2.3) for one neuron from zero: z first with n̄ = n − 1 (2.45) or n̄ = n, then
    y_n = y_{n−1} + Δt z_n."""
    z = y = 0.0
    out = []
    for u_n in u:
        sigma = math.tanh(W * y + Wc * z + V * u_n + b)
        if damping == "explicit":
            z = z + dt * sigma - dt * gamma * y - dt * epsilon * z
        else:
            z = (z + dt * sigma - dt * gamma * y) / (1 + dt * epsilon)
        y = y + dt * z
        out.append((z, y))
    return out


@pytest.mark.parametrize("damping", ["explicit", "implicit"])
def test_cornn_energy_is_2_48_along_the_hand_recursion(damping):
    """E_n = y_n² + z_n²/γ of the cell equals the hand recursion's, and stays below m t_n/γ = t_n/γ."""
    dt, gamma, epsilon = 0.15, 4.0, 1.0  # (2.47): 0.15 < 1/5; (2.50): 0.15 < 1/4
    weights = dict(V=0.7, Wc=0.3, W=-0.5, b=0.2)
    u = [1.0, -2.0, 0.5, 3.0, -1.0]
    layer = _one_neuron_cornn(dt, gamma, epsilon, damping, **weights)
    with torch.no_grad():
        z, y = stability.stack_states(stability.trajectory(layer, torch.tensor(u, dtype=F64).view(1, -1, 1))[1])
    energy = ob.cornn_energy(z, y, gamma)[0]
    hand = [y_n ** 2 + z_n ** 2 / gamma for z_n, y_n in _hand_cornn(u, dt, gamma, epsilon, damping, **weights)]
    assert energy.tolist() == pytest.approx(hand, rel=1e-13, abs=0)
    bound = [n * dt / gamma for n in range(1, 6)]
    assert ob.cornn_energy_bound(1, dt * torch.arange(1, 6, dtype=F64), gamma).tolist() == pytest.approx(bound)
    assert all(e <= b for e, b in zip(hand, bound))


def test_cornn_energy_first_step_with_saturated_forcing():
    """σ ≡ 1 (W = 𝒲 = V = 0, b = 100): z_1 = Δt, y_1 = Δt², so E_1 = Δt⁴ + Δt²/γ against m t_1/γ = Δt/γ."""
    dt, gamma = 0.15, 4.0
    layer = _one_neuron_cornn(dt, gamma, 1.0, "explicit", V=0.0, Wc=0.0, W=0.0, b=100.0)
    with torch.no_grad():
        z, y = stability.stack_states(stability.trajectory(layer, torch.zeros(1, 1, 1, dtype=F64))[1])
    assert float(ob.cornn_energy(z, y, gamma)) == pytest.approx(dt ** 4 + dt ** 2 / gamma, rel=1e-14)
    assert float(ob.cornn_energy_bound(1, torch.tensor(dt, dtype=F64), gamma)) == pytest.approx(0.0375, rel=1e-14)


def test_step_conditions_with_the_thesis_numbers():
    """(2.47) and (2.50): γ = ε = 1 gives Δt < ½ (explicit) and Δt < 1 (implicit) (thesis, after (2.50)); the
    adding defaults (γ, ε) = (66, 15) give 29/291 ≈ 0.0997 (thesis_oscillators.md §2.4(g)) and 29/66."""
    assert ob.step_limit(1.0, 1.0, "explicit") == pytest.approx(0.5)
    assert ob.step_limit(1.0, 1.0, "implicit") == pytest.approx(1.0)
    assert ob.step_limit(66.0, 15.0, "explicit") == pytest.approx(29 / 291)
    assert ob.step_limit(66.0, 15.0, "implicit") == pytest.approx(29 / 66)
    with pytest.raises(ValueError, match="damping"):
        ob.step_limit(1.0, 1.0, "semi")


def test_cornn_energy_study_holds_inside_the_conditions_and_fails_past_them():
    """The adding defaults keep (2.48) for both dampings; at Δt = 0.12 the explicit step (outside (2.47), and
    linearly unstable: 4 − γΔt² − 2εΔt < 0) breaks it, the implicit one (inside (2.50)) does not."""
    settings = {"adding": (0.06, 66.0, 15.0), "unstable": (0.12, 66.0, 15.0)}
    rows = ob.cornn_energy_study(settings, steps=60, hidden_size=3, batch=2, seeds=(0,))
    by = {(r["setting"], r["damping"]): r for r in rows}
    for key in [("adding", "explicit"), ("adding", "implicit"), ("unstable", "implicit")]:
        assert by[key]["condition_holds"] and by[key]["bound_holds"], key
        assert 0 < by[key]["max_ratio_to_bound"] < 1
    failed = by[("unstable", "explicit")]
    assert not failed["condition_holds"] and not failed["bound_holds"]
    assert failed["first_violation_step"] is not None and failed["max_ratio_to_bound"] > 1
    assert by[("adding", "explicit")]["bound_curve"] == pytest.approx([3 * 0.06 * n / 66 for n in range(1, 61)])


def test_separation_with_opposite_saturated_inputs_against_2_12():
    """(2.9) (γ = ε = 1, implicit damping), one neuron, W = 𝒲 = 0, V = 100: u = +1 and ū = −1 give σ − σ̄ = 2 at
    every step, the largest difference the proof of (2.12) allows. The separation equals the hand recursion
    (first step: (2Δt/(1 + Δt))² (1 + Δt²)) and stays below 4 m t_n = 4 t_n."""
    dt, steps = 0.9, 40
    weights = dict(V=100.0, Wc=0.0, W=0.0, b=0.0)
    layer = _one_neuron_cornn(dt, 1.0, 1.0, "implicit", **weights)
    u = torch.ones(1, steps, 1, dtype=F64)
    curve = ob.separation_curve(lambda x: ob.cornn_states(layer, x), u, -u)
    plus = _hand_cornn([1.0] * steps, dt, 1.0, 1.0, "implicit", **weights)
    minus = _hand_cornn([-1.0] * steps, dt, 1.0, 1.0, "implicit", **weights)
    hand = [(z - zb) ** 2 + (y - yb) ** 2 for (z, y), (zb, yb) in zip(plus, minus)]
    assert curve.tolist() == pytest.approx(hand, rel=1e-12)
    assert hand[0] == pytest.approx((2 * dt / (1 + dt)) ** 2 * (1 + dt ** 2))
    bound = ob.separation_bound(1, dt * torch.arange(1, steps + 1, dtype=F64))
    assert bound.tolist() == pytest.approx([4 * dt * n for n in range(1, steps + 1)])
    assert bool((curve <= bound).all())


def test_perturbation_study_bounds_the_cornn_rows():
    """Small perturbations: every coRNN row keeps (2.12); at initialisation no model amplifies the perturbation
    by two decades, with recurrent weights × 10 the tanh RNN does by more than four."""
    result = ob.perturbation_study(steps=150, hidden_size=4, batch=2, seeds=(0,))
    rows = {(r["model"], r["gain"]): r for r in result["rows"]}
    assert all(r["bound_holds"] for r in result["rows"] if r["bound_applies"])
    assert all(r["log10_amplification"] < 2 for r in result["rows"] if r["gain"] == 1.0)
    assert rows[("rnn", 10.0)]["log10_amplification"] > 4
    assert result["bound"][-1] == pytest.approx(4 * 4 * 0.4 * 150)


def test_torch_rnn_states_are_the_lstm_h_and_c():
    torch.manual_seed(3)
    lstm = torch.nn.LSTM(2, 3, batch_first=True).double()
    x = torch.randn(2, 5, 2, dtype=F64)
    states = ob.torch_rnn_states(lstm, x)
    outputs, (h, c) = lstm(x)
    assert torch.allclose(states[..., :3], outputs, rtol=0, atol=1e-14)
    assert torch.allclose(states[:, -1, 3:], c[0], rtol=0, atol=1e-14)


def _hand_blocks(system, x, states, dt, symplectic):
    """(batch, T, m, 2, 2) blocks (rows/columns z_i, y_i) of one step of z' = −s[tanh(w y + a) + α y], y' = s z,
    s = σ̂(c), a = V u_n + b, from the state before step n; k = w tanh'(w y + a) + α:
    symplectic Euler (3.25): [[1, −sΔt k], [sΔt, 1 − s²Δt² k]]; explicit Euler: [[1, −sΔt k], [sΔt, 1]]."""
    s, w, alpha = torch.sigmoid(system.c), system.w, system.alpha
    encoded = system.encode(x)
    y_before = torch.cat([torch.zeros_like(states[1][:, :1]), states[1][:, :-1]], 1)
    k = w * (1 - torch.tanh(w * y_before + encoded) ** 2) + alpha
    h = s * dt
    ones = torch.ones_like(k)
    last = ones - h ** 2 * k if symplectic else ones
    return torch.stack([torch.stack([ones, -h * k], -1), torch.stack([h * ones, last], -1)], -2)


@pytest.mark.parametrize("scheme", ["symplectic-euler", "euler"])
def test_unicornn_step_blocks_against_3_25(scheme):
    """The step Jacobian is block diagonal, its blocks are (3.25) (symplectic Euler) or explicit Euler's, and
    det B^i = 1 exactly vs 1 + s²Δt²k > 1; the whole step's determinant is their product."""
    torch.manual_seed(4)
    dt = 0.8
    system = stability.single_layer(cells.UnICORNN(2, 3, dt, alpha=0.6)).system.double()
    layer = Recurrent(system, scheme, dt)
    x = torch.randn(2, 6, 2, dtype=F64)
    with torch.no_grad():
        states = stability.stack_states(stability.trajectory(layer, x)[1])
        hand = _hand_blocks(system, x, states, dt, scheme == "symplectic-euler")
        jacobians = stability.step_jacobians(layer, x)
        det = ob.volume_change(layer, x)
    assert torch.allclose(ob.neuron_blocks(jacobians), hand, rtol=0, atol=1e-13)
    assert float(det["off_block"]) == 0.0
    hand_det = hand[..., 0, 0] * hand[..., 1, 1] - hand[..., 0, 1] * hand[..., 1, 0]
    assert torch.allclose(det["block"], hand_det, rtol=0, atol=1e-13)
    assert torch.allclose(det["map"], hand_det.prod(-1), rtol=1e-12, atol=0)
    if scheme == "symplectic-euler":
        assert float((det["block"] - 1).abs().max()) < 1e-13
    else:
        h = torch.sigmoid(system.c).detach() * dt
        assert float((det["block"] - 1).abs().min()) > 0.6 * float(h.min() ** 2)  # k ≥ α = 0.6


def test_symplectic_study_separates_the_schemes():
    result = ob.symplectic_study(steps=8, hidden_size=3, batch=1)
    schemes = result["schemes"]
    assert schemes["symplectic-euler"]["max_block_error"] < 1e-13
    assert schemes["symplectic-euler"]["max_map_error"] < 1e-13
    assert schemes["euler"]["max_block_error"] > 1e-2 and schemes["rk4"]["max_block_error"] > 1e-4
    assert all(row["off_block"] == 0.0 for row in schemes.values())
