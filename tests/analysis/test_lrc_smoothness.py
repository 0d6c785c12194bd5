"""LRC smoothness theory (Farsang et al. 2024, App. A.1, Theorem 1): odelab.analysis.lrc_smoothness against
references written out by hand (eq. 3 field, one-neuron eq. 13, a hand-computed Euler-step Jacobian)."""
import json
import math

import pytest
import torch

from odelab.analysis import lrc_smoothness as ls
from odelab.cli import main
from odelab.models import cells
from odelab.systems import STC

torch.set_num_threads(1)


def _sig(z):
    return 1.0 / (1.0 + math.exp(-z))


def _set(system, **values):
    """Write the paper's symbols into a liquid system (g, g_l through the inverse softplus)."""
    with torch.no_grad():
        for name, value in values.items():
            value = torch.as_tensor(value, dtype=torch.float64)
            if name in ("g", "g_l"):
                value = value + torch.log(-torch.expm1(-value))  # inverse softplus
                name = {"g": "raw_g", "g_l": "raw_g_leak"}[name]
            getattr(system, name).copy_(value.reshape(getattr(system, name).shape))
    return system


def _one_neuron_stc():
    # m = n = 1: rows j = 0 (h), 1 (x)
    return _set(STC(1, 1).double(), g=[[0.7], [0.3]], a=[[4.0], [-5.0]], b=[[-2.0], [1.5]], k=[[0.6], [-0.9]],
                g_l=[0.4], e_leak=[0.15])


def _hand_lrc_field(stc, o, p, h, x):
    """Eq. 3 written out elementwise: ḣ_i = σ(w_i)(−σ(f_i) h_i + tanh(u_i) e_li), w_i = Σ_j o_ji y_j + p_i."""
    s = {k: v.detach().tolist() for k, v in stc.symbols().items()}
    out = []
    for row_h, row_x in zip(h.tolist(), x.tolist()):
        y = row_h + row_x
        deriv = []
        for i in range(len(row_h)):
            opening = [_sig(s["a"][j][i] * y[j] + s["b"][j][i]) for j in range(len(y))]
            f = sum(s["g"][j][i] * opening[j] for j in range(len(y))) + s["g_l"][i]
            u = sum(s["k"][j][i] * opening[j] for j in range(len(y))) + s["g_l"][i]
            w = sum(o[j][i] * y[j] for j in range(len(y))) + p[i]
            deriv.append(_sig(w) * (-_sig(f) * row_h[i] + math.tanh(u) * s["e_l"][i]))
        out.append(deriv)
    return torch.tensor(out, dtype=torch.float64)


def test_construct_lrc_satisfies_eq29_and_field_identity_eq24():
    torch.manual_seed(0)
    stc = STC(2, 3).double()
    lrc = ls.construct_lrc(stc, shrink=0.5)
    o = lrc.symbols()["o"].detach()
    star = ls.o_star(stc)
    assert torch.all(o.abs() < star) and torch.allclose(o.abs(), 0.5 * star)
    for name in ("g", "a", "b", "k", "g_l", "e_l"):
        assert torch.equal(lrc.symbols()[name], stc.symbols()[name])
    assert torch.all(lrc.p == 0)
    h, x = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 2, dtype=torch.float64)
    hand = _hand_lrc_field(stc, o.tolist(), [0.0] * 3, h, x)
    eps = torch.sigmoid(torch.cat((h, x), 1) @ o)
    with torch.no_grad():
        assert torch.allclose(ls.field(lrc, h, x), hand, atol=1e-12)
        assert torch.allclose(ls.field(lrc, h, x), eps * ls.field(stc, h, x), atol=1e-12)


def test_construct_lrc_rejects_non_strict_shrink():
    stc = STC(1, 2).double()
    for shrink in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError):
            ls.construct_lrc(stc, shrink=shrink)


def test_bound_matrix_one_neuron_eq13_by_hand():
    stc = _one_neuron_stc()
    q, dt, hb = torch.tensor([[-1.3]], dtype=torch.float64), 0.5, 2.0
    # eq. 23: 0.0625 |g a| |h| + 0.25 |k a e_l| + 1, per presynaptic j
    s_h = 0.0625 * 0.7 * 4.0 * 2.0 + 0.25 * 0.6 * 4.0 * 0.15 + 1
    s_x = 0.0625 * 0.3 * 5.0 * 2.0 + 0.25 * 0.9 * 5.0 * 0.15 + 1
    v_hand = [1.3 * (1 + dt * s_h), 1.3 * (1 + dt * s_x)]
    v, lam = ls.bound_matrix(stc, q, dt, hb)
    assert v.shape == (1, 2)  # K × (m + n)
    assert torch.allclose(v, torch.tensor([v_hand], dtype=torch.float64))
    assert lam == pytest.approx(math.hypot(*v_hand))


def test_lrc_bound_one_neuron_eq28_by_hand():
    stc = _one_neuron_stc()
    lrc = ls.construct_lrc(stc, shrink=0.5)
    q, dt, hb, xb = torch.tensor([[1.0]], dtype=torch.float64), 1.0, 1.0, 0.5
    o_h = 0.5 * min(0.0625 * 0.7 * 4.0, 0.25 * 0.6 * 4.0)
    o_x = 0.5 * min(0.0625 * 0.3 * 5.0, 0.25 * 0.9 * 5.0)
    eps_hi = _sig(o_h * hb + o_x * xb)  # p = 0, σ increasing
    drift = hb + 0.15  # |ḣ^s| ≤ |h| + |e_l|
    expected = []
    for o, s in ((o_h, 0.0625 * 0.7 * 4.0 + 0.25 * 0.6 * 4.0 * 0.15 + 1),
                 (o_x, 0.0625 * 0.3 * 5.0 + 0.25 * 0.9 * 5.0 * 0.15 + 1)):
        # ε S + ε (1 − ε) |o| drift is increasing in ε here (vertex > 1), so its max is at ε_hi
        assert (s + o * drift) / (2 * o * drift) > 1
        expected.append(1 + dt * (eps_hi * s + eps_hi * (1 - eps_hi) * o * drift))
    v, lam_r = ls.bound_matrix(lrc, q, dt, hb, xb)
    assert torch.allclose(v, torch.tensor([expected], dtype=torch.float64))
    _, lam_s = ls.bound_matrix(stc, q, dt, hb, xb)
    assert lam_r < lam_s


def test_symmetric_elastance_range_by_hand():
    stc = _one_neuron_stc()
    lrc = ls.construct_lrc(stc, shrink=0.5, elastance="symmetric")
    radius = float(lrc.symbols()["o"].detach().abs().sum()) * 1.0
    lo, hi = ls.elastance_range(lrc, 1.0, 1.0)
    # ε_S(w) = σ(w + 1) − σ(w − 1): max at w = 0 (inside [−r, r]), min at |w| = r
    assert hi.item() == pytest.approx(_sig(1) - _sig(-1))
    assert lo.item() == pytest.approx(_sig(radius + 1) - _sig(radius - 1))


def test_output_lipschitz_matches_hand_jacobian():
    stc = _one_neuron_stc()
    s = {k: v.detach().flatten().tolist() for k, v in stc.symbols().items()}
    q, dt = -0.8, 0.7

    def hand_norm(h, x):
        z = [s["a"][0] * h + s["b"][0], s["a"][1] * x + s["b"][1]]
        op = [_sig(v) for v in z]
        dop = [v * (1 - v) for v in op]
        f = s["g"][0] * op[0] + s["g"][1] * op[1] + s["g_l"][0]
        u = s["k"][0] * op[0] + s["k"][1] * op[1] + s["g_l"][0]
        dsf, dtu = _sig(f) * (1 - _sig(f)), 1 - math.tanh(u) ** 2
        d_h = -dsf * s["g"][0] * s["a"][0] * dop[0] * h - _sig(f) + dtu * s["e_l"][0] * s["k"][0] * s["a"][0] * dop[0]
        d_x = -dsf * s["g"][1] * s["a"][1] * dop[1] * h + dtu * s["e_l"][0] * s["k"][1] * s["a"][1] * dop[1]
        return abs(q) * math.hypot(1 + dt * d_h, dt * d_x)  # ‖1×2 row‖₂ = Euclidean norm

    y = torch.tensor([[0.3, -0.2], [-0.9, 0.6], [0.5, 0.45]], dtype=torch.float64)
    expected = max(hand_norm(h, x) for h, x in y.tolist())
    got = ls.output_lipschitz(stc, torch.tensor([[q]], dtype=torch.float64), dt, y)
    assert got == pytest.approx(expected, rel=1e-12)


def test_output_lipschitz_accepts_recurrent_cell():
    torch.manual_seed(1)
    cell = cells.LRCU(2, 3).double()
    q, y = torch.randn(2, 3, dtype=torch.float64), torch.rand(5, 5, dtype=torch.float64)
    assert ls.output_lipschitz(cell, q, 1.0, y) == ls.output_lipschitz(cell.system, q, 1.0, y)


@pytest.mark.parametrize("seed", [0, 3])
def test_empirical_constant_within_bound_on_box(seed):
    stc = ls.random_stc(2, 4, seed)
    q = torch.randn(3, 4, dtype=torch.float64)
    y = 2 * torch.rand(500, 6, dtype=torch.float64) - 1  # |h|, |x| ≤ 1
    for system in (stc, ls.construct_lrc(stc), ls.construct_lrc(stc, 0.2, "symmetric")):
        _, lam = ls.bound_matrix(system, q, 1.0, 1.0, 1.0)
        jac = ls.output_jacobians(system, q, 1.0, y)
        v, _ = ls.bound_matrix(system, q, 1.0, 1.0, 1.0)
        assert torch.all(jac.abs() <= v + 1e-12)  # eq. 13 entrywise
        assert ls.output_lipschitz(system, q, 1.0, y) <= lam  # eq. 14


def test_gate_inequalities_15_to_17_hold():
    gates = ls.gate_inequalities()
    assert max(gates.values()) < 1e-12
    assert gates["sigmoid_slope_15"] == pytest.approx(0.0, abs=1e-12)  # σ'(0) = 1/4 is on the grid
    assert gates["symmetric_slope_16"] > -1e-6  # sup |ε_S'| = 1/4 approached for large k


def test_study_and_cli(tmp_path):
    result = ls.smoothness_study(seeds=(0, 1), samples=200)
    assert result["all_bounds_ordered"] and result["all_symmetric_bounds_ordered"]
    for row in result["rows"]:
        assert row["field_identity_error"] < 1e-12 and row["empirical_within_bound"]
        assert row["max_o_over_o_star"] == pytest.approx(0.5)
    out = tmp_path / "lrc"
    assert main(["stability", "--study", "lrc-lipschitz", "--seeds", "2", "--threads", "1", "--out", str(out)]) == 0
    saved = json.loads((out / "lrc_lipschitz.json").read_text())
    assert len(saved["rows"]) == 2 and saved["all_bounds_ordered"]
