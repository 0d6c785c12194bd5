"""Scheme comparison and stability studies: each in a tiny configuration, asserting the numerics and the physics.

Independent references are written here from the papers' equations: the LEM cell (000 eq. 3), the tanh-RNN
backward recursion, central finite differences, and the lrc.md §5.1 tables (computed there with scipy)."""
import json
import math
from fractions import Fraction

import pytest
import torch
from torch import nn

from odelab import Recurrent, cells, systems
from odelab.analysis import schemes, stability
from odelab.cli import main
from odelab.cli import stability as stability_command
from odelab.models import SequenceRegressor

from helpers import lem_eq3


def random_lem_regressor(dt: float = 0.5, hidden: int = 6, seed: int = 0) -> SequenceRegressor:
    torch.manual_seed(seed)
    return SequenceRegressor(cells.LEM(2, hidden, dt=dt), hidden, 1).double()


# ------------------------------------------------------------------------------------------------ compare-schemes


def test_empirical_order_exact_on_power_law():
    steps = [1.0, 0.5, 0.25, 0.125]
    assert schemes.empirical_order(steps, [3.0 * h ** 2.5 for h in steps]) == pytest.approx(2.5, abs=1e-12)
    assert math.isnan(schemes.empirical_order([1.0, 0.5], [1e-3, float("inf")]))


def test_imex_first_order_and_rk4_fourth_order_in_part_a_float64():
    model = random_lem_regressor(dt=0.5)
    torch.manual_seed(1)
    x, y = torch.randn(4, 24, 2, dtype=torch.float64), torch.randn(4, 24, 1, dtype=torch.float64)
    evaluation = schemes.evaluate_trained(model, x, y, schemes=["imex", "rk4"], finest=8)
    assert evaluation["trained_scheme"] == "imex"
    assert evaluation["orders"]["imex"] == pytest.approx(1.0, abs=0.3)
    assert evaluation["orders"]["rk4"] == pytest.approx(4.0, abs=0.3)
    rows = evaluation["rows"]
    for scheme in ("imex", "rk4"):  # errors fall monotonically as h halves
        errors = [r["trajectory_error"] for r in rows if r["scheme"] == scheme]
        assert all(a > b for a, b in zip(errors, errors[1:]))
    # the test RMSE column is the readout of the same outputs
    imex_1 = next(r for r in rows if r["scheme"] == "imex" and r["factor"] == "1")
    with torch.no_grad():
        expected = float((model(x) - y).pow(2).mean().sqrt())
    assert imex_1["test_rmse"] == pytest.approx(expected, rel=1e-12, abs=0)


def test_discretized_swaps_scheme_and_substeps_then_restores():
    model = random_lem_regressor(dt=0.5)
    body = model.body
    x = torch.randn(3, 10, 2, dtype=torch.float64)
    with schemes.discretized(body, "imex", 2):
        two = body(x)[0]
    z, y = lem_eq3(x.repeat_interleave(2, dim=1), body.system.symbols(), 0.25)  # 2 sub-steps of Δt/2 per sample
    assert torch.allclose(two, y[:, 1::2], atol=1e-12)
    with pytest.raises(ValueError):
        with schemes.discretized(body, "symplectic-euler"):  # LEM has no (velocity, position) pair
            pass
    assert body.scheme.name == "imex" and body.unfolds == 1
    assert torch.allclose(body(x)[0], lem_eq3(x, body.system.symbols(), 0.5)[1], atol=1e-12)


def test_applicable_schemes_and_factors():
    assert "symplectic-euler" not in schemes.applicable_schemes(cells.LEM(1, 4))
    assert "symplectic-euler" in schemes.applicable_schemes(cells.UnICORNN(1, 4))
    assert "imex-implicit" not in schemes.applicable_schemes(cells.UnICORNN(1, 4))
    assert schemes.step_factors(cells.LEM(1, 4), finest=8) == [Fraction(1), Fraction(2), Fraction(4), Fraction(8)]
    ltc = schemes.step_factors(cells.LTC(1, 4, unfolds=6), finest=2)
    assert ltc == [Fraction(1, 6), Fraction(1, 3), Fraction(1, 2), Fraction(1), Fraction(2)]
    with pytest.raises(TypeError):
        schemes.recurrent_layers(cells.LSTM(1, 4))


# ------------------------------------------------------------------------------------------------ gradients


def test_trajectory_records_the_lem_cell_states():
    torch.manual_seed(0)
    layer = cells.LEM(2, 5, dt=0.7).double()
    x = torch.randn(3, 12, 2, dtype=torch.float64)
    z, y = stability.stack_states(stability.trajectory(layer, x)[1])
    z_ref, y_ref = lem_eq3(x, layer.system.symbols(), 0.7)
    assert torch.allclose(z, z_ref, atol=1e-12) and torch.allclose(y, y_ref, atol=1e-12)


def tanh_rnn_state_gradient_norms(rnn: nn.RNN, x, direction):
    """Backward recursion: g_T = r, g_k = W_hhᵀ[(1 − h_{k+1}²) ⊙ g_{k+1}]."""
    h = torch.zeros(x.shape[0], rnn.hidden_size, dtype=x.dtype)
    hs = []
    for n in range(x.shape[1]):
        h = torch.tanh(x[:, n] @ rnn.weight_ih_l0.T + rnn.bias_ih_l0 + h @ rnn.weight_hh_l0.T + rnn.bias_hh_l0)
        hs.append(h)
    g = direction.expand_as(h)
    norms = [g.norm(dim=-1)]
    for n in range(x.shape[1] - 1, 0, -1):
        g = ((1 - hs[n] ** 2) * g) @ rnn.weight_hh_l0
        norms.append(g.norm(dim=-1))
    return torch.stack(norms[::-1], 1)


def test_state_gradients_of_tanh_rnn_match_backward_recursion():
    torch.manual_seed(0)
    rnn = nn.RNN(2, 5, batch_first=True).double()
    x = torch.randn(3, 15, 2, dtype=torch.float64)
    direction = torch.nn.functional.normalize(torch.randn(5, dtype=torch.float64), dim=0)
    with torch.no_grad():
        expected = tanh_rnn_state_gradient_norms(rnn, x, direction)
    got = stability.state_gradients(rnn, x, direction)
    assert torch.allclose(got, expected, atol=1e-10)


@pytest.mark.parametrize("name", ["lem", "unicornn", "lstm"])
def test_state_gradients_match_finite_differences(name):
    """‖∂L/∂h_k‖ against central differences of L = r·o_T, restarting the model from a perturbed state at step k."""
    torch.manual_seed(0)
    model = cells.build(name, 1, 3).double()
    x = torch.randn(1, 8, 1, dtype=torch.float64)
    direction = torch.nn.functional.normalize(torch.randn(3, dtype=torch.float64), dim=0)
    norms = stability.state_gradients(model, x, direction)[0]
    k, eps = 3, 1e-6
    with torch.no_grad():
        if name == "lstm":
            _, (h, c) = model.rnn(x[:, :k + 1])
            flat = torch.cat([h[0, 0], c[0, 0]])

            def loss(v):
                _, (h_t, _) = model.rnn(x[:, k + 1:], (v[:3].view(1, 1, 3), v[3:].view(1, 1, 3)))
                return float(h_t[0, 0] @ direction)
        else:
            layer = stability.single_layer(model)
            states = stability.trajectory(layer, x)[1]
            flat = torch.cat(states[k], -1)[0]

            def loss(v):
                # the rest of the sequence from the perturbed state; time origin shifted (autonomous in t)
                out, _ = layer(x[:, k + 1:], tuple(v.view(1, -1).split(3, -1)))
                return float(out[0, -1] @ direction)
        grad = torch.stack([torch.tensor((loss(flat + eps * e) - loss(flat - eps * e)) / (2 * eps))
                            for e in torch.eye(flat.numel(), dtype=torch.float64)])
    assert float(norms[k]) == pytest.approx(float(grad.norm()), rel=1e-6)


def test_gradients_vs_lag_shapes_and_lag_zero():
    result = stability.gradients_vs_lag(["lem", "rnn"], steps=12, hidden_size=4, batch=2, seeds=(0, 1))
    for row in result.values():
        assert len(row["median_norm"]) == 12
        assert row["norm_lag0"] == pytest.approx(1.0)  # ∂L/∂o_T = r, a unit vector; h_T contains o_T
    assert result["rnn"]["norm_last"] < result["rnn"]["norm_lag0"]


def test_model_specs_carry_keywords_into_the_studies():
    assert cells.split_specs("lem,lem[dt=0.01,alpha=1], rnn") == ["lem", "lem[dt=0.01,alpha=1]", "rnn"]
    assert cells.parse_spec("cornn[dt=0.1,damping=implicit]") == ("cornn", {"dt": 0.1, "damping": "implicit"})
    for bad in ("unicornn[foo=1]", "lem[dt=0.1", "nope"):
        with pytest.raises(ValueError):
            cells.parse_spec(bad)
    cell = cells.build("lem[dt=0.25]", 1, 3)
    assert cell.dt == 0.25
    result = stability.gradients_vs_lag(["lem", "lem[dt=0.01]"], steps=50, hidden_size=4, batch=2, seeds=(0,))
    # a smaller step moves the state less per step: the gradient decays more slowly with the lag (000 §4)
    assert result["lem[dt=0.01]"]["norm_last"] > result["lem"]["norm_last"]


def test_scaled_norm_does_not_underflow_before_the_entries():
    v = torch.tensor([[3e-200, 4e-200], [0.0, 0.0]], dtype=torch.float64)
    assert v.norm(dim=-1)[0] == 0  # the plain norm squares the entries
    assert stability.scaled_norm(v).tolist() == pytest.approx([5e-200, 0.0], rel=1e-12, abs=0)


def test_decay_summary_rate_and_underflow():
    norms = torch.tensor([10.0 ** (-0.01 * k) for k in range(50)] + [0.0] * 5, dtype=torch.float64)
    summary = stability.decay_summary(norms)
    assert summary["decades_per_1000_steps"] == pytest.approx(-10.0)  # 0.01 decades per step
    assert summary["underflow_lag"] == 50 and summary["log10_ratio_last_to_lag0"] is None
    stalled = torch.tensor([1.0, 1e-200, 1e-310, 5e-324, 5e-324], dtype=torch.float64)  # subnormal tail
    assert stability.decay_summary(stalled)["underflow_lag"] == 2
    growing = stability.decay_summary(torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))
    assert growing["log10_ratio_last_to_lag0"] == pytest.approx(math.log10(4.0))
    assert growing["underflow_lag"] is None and growing["decades_per_1000_steps"] > 0


# ------------------------------------------------------------------------------------------------ LEM bound


def test_lem_state_bound_prop_4_1_holds_for_dt_at_most_one():
    rows = stability.lem_state_bound(dts=(0.2, 1.0), steps=200, hidden_size=8, batch=4, input_scale=20.0, seeds=(0,))
    for row in rows:
        assert row["bound_holds"] and row["max_ratio_to_bound"] <= 1.0
        assert 0 < row["max_state"] <= 1.0
    # the √t part binds early: at n = 1 the bound is Δ̄√Δt < 1 for Δt = 0.2
    first = rows[0]
    assert first["bound_curve"][0] == pytest.approx(1.2 / math.sqrt(1.8) * math.sqrt(0.2))
    # and it is tight in the sense that the states get close to 1 with large inputs
    assert rows[1]["max_state"] > 0.9


# ------------------------------------------------------------------------------------------------ UnICORNN


def test_unicornn_inverse_reconstructs_initial_state():
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-10)):
        torch.manual_seed(0)
        layer = Recurrent(systems.UnICORNN(2, 8, alpha=0.5), "symplectic-euler", 0.5).to(dtype)
        x = torch.randn(4, 100, 2, dtype=dtype)
        initial = tuple(torch.randn(4, 8, dtype=dtype) for _ in range(2))
        assert stability.reconstruction_error(layer, x, initial) < tol
    # not an identity by accident: the forward moved the state
    with torch.no_grad():
        _, final = layer(x, initial)
    assert float((final[1] - initial[1]).abs().max()) > 0.1


def test_unicornn_energy_conserved_by_the_flow_and_symplectic_beats_euler():
    torch.manual_seed(0)
    system = systems.UnICORNN(2, 6, alpha=0.5).double()
    with torch.no_grad():
        system.w[0] = 0.0  # the w → 0 limit of the potential
    # the exact flow (rk4, tiny step) conserves H: the formula is the Hamiltonian of the field
    fine = stability.energy_drift(system, schemes=("rk4",), dt=0.01, steps=300)
    assert fine["rk4"]["max_drift"] < 1e-8
    drift = stability.energy_drift(system, schemes=("symplectic-euler", "euler"), dt=0.3, steps=400)
    assert drift["symplectic-euler"]["max_drift"] < 0.1 * drift["euler"]["max_drift"]
    assert drift["symplectic-euler"]["final_drift"] < drift["euler"]["final_drift"]


# ------------------------------------------------------------------------------------------------ eigenvalues


@pytest.mark.parametrize("name", ["lem", "cornn", "ltc", "lrcu-s"])
def test_field_jacobian_matches_finite_differences(name):
    torch.manual_seed(0)
    system = stability.single_layer(cells.PRESETS[name](2, 3)).system.double()
    state = tuple(0.5 * torch.randn(2, n, dtype=torch.float64) for n in system.block_sizes())
    inp = system.encode(torch.randn(2, 2, dtype=torch.float64)).detach()
    jac = stability.field_jacobian(system, 0.0, state, inp)
    eps = 1e-6
    sizes = list(system.block_sizes())
    for b in range(2):
        flat = torch.cat([s[b] for s in state])

        def f(v):
            blocks = tuple(p.unsqueeze(0) for p in v.split(sizes))
            with torch.no_grad():
                return torch.cat(system.derivative(0.0, blocks, inp[b:b + 1]), -1)[0]

        columns = [(f(flat + eps * e) - f(flat - eps * e)) / (2 * eps) for e in torch.eye(flat.numel(), dtype=torch.float64)]
        assert torch.allclose(jac[b], torch.stack(columns, 1), atol=1e-8)


def test_stability_regions_on_known_points():
    inside = lambda z, region: stability.inside_fraction(torch.tensor([z], dtype=torch.complex128), region)  # noqa: E731
    assert inside(-1.0, "euler") == 1.0 and inside(-2.5, "euler") == 0.0
    assert inside(-2.5, "rk4") == 1.0 and inside(-2.9, "rk4") == 0.0  # real interval ≈ [−2.785, 0]
    assert inside(2.5j, "rk4") == 1.0 and inside(1j, "euler") == 0.0  # imaginary interval ≈ ±2.828
    assert inside(-1.9, "rk2 (midpoint, heun)") == 1.0 and inside(-2.1, "rk2 (midpoint, heun)") == 0.0
    assert inside(3.0, "implicit euler") == 1.0 and inside(0.5, "implicit euler") == 0.0


def test_eigen_study_fractions():
    result = stability.eigen_study(["lem", "unicornn"], steps=20, points=3, hidden_size=4, batch=1)
    for row in result.values():
        assert all(0.0 <= f <= 1.0 for f in row["inside"].values())
        assert len(row["eigenvalues_real"]) == 3 * 8
    # UnICORNN: uncoupled undamped oscillators, purely imaginary hλ -- never inside explicit Euler's disc
    uni = result["unicornn"]
    assert max(abs(r) for r in uni["eigenvalues_real"]) < 1e-12
    assert uni["inside"]["euler"] == 0.0 and uni["inside"]["implicit euler"] == 1.0


# ------------------------------------------------------------------------------------------------ LRC damping


def test_sign_changes():
    values = torch.tensor([1.0, -1.0, 1e-12, -2.0, 3.0])
    assert stability.sign_changes(values, 1e-9) == 2  # the tiny entry is ignored
    assert stability.sign_changes(values, 0.0) == 4


def test_damping_reproduces_lrc_md_tables():
    """lrc.md §5.1 S1 (E1 sign changes 40/40/0/0, h*) and S2 (zero crossings 12/6/0/0/1, E1 18/7/0/0/1, |eig(I+J)|)."""
    result = stability.damping_study()
    s1, s2 = result["S1"]["models"], result["S2"]["models"]
    assert [s1[m]["sign_changes_e1"] for m in ("LTC", "STC", "LRC-A", "LRC-S")] == [40, 40, 0, 0]
    assert all(s1[m]["zero_crossings_fine"] == 0 for m in s1)
    assert s1["LTC"]["equilibrium"][0] == pytest.approx(0.015607, abs=1e-6)
    assert s1["STC"]["equilibrium"][0] == pytest.approx(0.016669, abs=1e-6)
    assert s1["LRC-A"]["e1_amplification"][0] == pytest.approx(0.552450, abs=1e-6)
    names = ["STC", "LRC-A uniform", "LRC-A non-uniform", "LRC-S non-uniform", "LRC-A state-dependent"]
    assert [s2[m]["zero_crossings_fine"] for m in names] == [12, 6, 0, 0, 1]
    assert [s2[m]["sign_changes_e1"] for m in names] == [18, 7, 0, 0, 1]
    assert s2["STC"]["equilibrium"] == pytest.approx([-0.028962, 0.060310], abs=1e-6)
    assert s2["STC"]["eig_real"][0] == pytest.approx(-0.7022, abs=1e-4)
    assert abs(s2["STC"]["eig_imag"][0]) == pytest.approx(1.9887, abs=1e-4)
    assert sorted(s2["LRC-A non-uniform"]["e1_amplification"]) == pytest.approx([0.5196, 0.8533], abs=1e-4)


# ------------------------------------------------------------------------------------------------ CLI


def _strict_json(path):
    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(path.read_text(), parse_constant=reject)


def test_cli_compare_schemes_writes_json_and_png(tmp_path):
    out = tmp_path / "cmp"
    code = main(["compare-schemes", "--task", "fhn", "--model", "lem", "--quick", "--length", "16", "--sequences", "8",
                 "--epochs", "1", "--retrain-epochs", "1", "--schemes", "imex,rk4", "--finest", "2", "--out", str(out)])
    assert code == 0
    result = _strict_json(out / "compare_schemes.json")
    assert {r["scheme"] for r in result["evaluation"]["rows"]} == {"imex", "rk4"}
    assert [r["scheme"] for r in result["training"]] == ["imex", "rk4"]
    assert (out / "compare_schemes.png").stat().st_size > 0


def test_cli_compare_schemes_loads_a_fit_run(tmp_path):
    run = tmp_path / "run"
    assert main(["fit", "fhn", "--model", "lem", "--epochs", "1", "--hidden", "4", "--out", str(run),
                 "--no-progress"]) == 0
    out = tmp_path / "cmp"
    assert main(["compare-schemes", "--run", str(run), "--quick", "--length", "16", "--sequences", "4",
                 "--no-retrain", "--schemes", "imex", "--finest", "2", "--out", str(out)]) == 0
    result = _strict_json(out / "compare_schemes.json")
    assert result["hidden_size"] == 4 and result["training"] is None
    assert result["trained"]["source"] == str(run)


@pytest.mark.parametrize("study,files", [("gradients", "gradients"), ("lem-bound", "lem_bound"),
                                         ("lem-gradient-length", "lem_gradient_length"),
                                         ("lem-long-range", "lem_long_range"), ("unicornn", "unicornn"),
                                         ("eigen", "eigen")])
def test_cli_stability_studies_write_json_and_png(tmp_path, study, files):
    out = tmp_path / study
    assert main(["stability", "--study", study, "--model", "lem,unicornn", "--steps", "20", "--seeds", "1",
                 "--hidden", "4", "--out", str(out)]) == 0
    _strict_json(out / f"{files}.json")
    assert (out / f"{files}.png").stat().st_size > 0


def test_cli_rejects_unknown_model():
    with pytest.raises(SystemExit):
        stability_command._model_list("lem,nope", stability_command.STABILITY_MODELS)
