"""LTC / STC / LRC (LRC paper eqs. 1–5, 52): the generic cells (field + scheme + Δt [+ unfolds]) against
independent references written from the paper's discrete equations; outputs and all parameter gradients.
Plus the single-neuron damping example S1 of the extraction (§5.1) as a known-answer test."""
import pytest
import torch
from torch.nn import functional as F

from odelab import cells
from odelab.models import Recurrent
from odelab.systems import LRC, LTC, STC

BATCH, STEPS, INPUTS, HIDDEN = 3, 12, 2, 4


def synapses(params, h, x):
    """f_i = Σ_j g_ji σ(a_ji y_j + b_ji) + g_li and u_i = Σ_j k_ji σ(a_ji y_j + b_ji) + g_li, y = [h, x] (eq. 1),
    with g = softplus(raw_g), g_l = softplus(raw_g_leak) (odelab's documented positivity)."""
    y = torch.cat((h, x), dim=1)
    g, g_leak = F.softplus(params["raw_g"]), F.softplus(params["raw_g_leak"])
    f = g_leak.expand(h.shape[0], -1)
    u = g_leak.expand(h.shape[0], -1)
    for j in range(y.shape[1]):  # one chemical synapse per presynaptic value
        opening = torch.sigmoid(params["a"][j] * y[:, j:j + 1] + params["b"][j])
        f = f + g[j] * opening
        u = u + params["k"][j] * opening
    return f, u


def elastance(params, h, x, kind):
    w = h @ params["o_hidden"] + x @ params["o_input"] + params["p"]  # w_i = Σ_j o_ji y_j + p_i
    if kind == "asymmetric":
        return torch.sigmoid(w)  # eq. 4
    k = F.softplus(params["raw_k_shift"])
    return torch.sigmoid(w + k) - torch.sigmoid(w - k)  # eq. 5


def reference_lrcu(params, x, kind):
    """Eq. 52: h_t = (1 − ε(w_t) σ(f_t)) h_{t−1} + ε(w_t) tanh(u_t) e_l, Δt = 1, y_t = [h_{t−1}, x_t]."""
    h = torch.zeros(x.shape[0], HIDDEN)
    outputs = []
    for n in range(x.shape[1]):
        f, u = synapses(params, h, x[:, n])
        eps = elastance(params, h, x[:, n], kind)
        h = (1 - eps * torch.sigmoid(f)) * h + eps * torch.tanh(u) * params["e_leak"]
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def reference_fused(params, x, saturated, unfolds, delta):
    """Fused semi-implicit Euler (ncps LTC, the paper's H6): L sub-steps of δ = Δ/L per sample,
    LTC h ← (h + δ u e_l) / (1 + δ f); STC h ← (h + δ tanh(u) e_l) / (1 + δ σ(f))."""
    h = torch.zeros(x.shape[0], HIDDEN)
    step = delta / unfolds
    outputs = []
    for n in range(x.shape[1]):
        for _ in range(unfolds):
            f, u = synapses(params, h, x[:, n])
            if saturated:
                f, u = torch.sigmoid(f), torch.tanh(u)
            h = (h + step * u * params["e_leak"]) / (1 + step * f)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def reference_stc_euler(params, x):
    """STC-E1: h_t = h + (−σ(f) h + tanh(u) e_l), Δt = 1 (eq. 2 with explicit Euler)."""
    h = torch.zeros(x.shape[0], HIDDEN)
    outputs = []
    for n in range(x.shape[1]):
        f, u = synapses(params, h, x[:, n])
        h = h + (-torch.sigmoid(f) * h + torch.tanh(u) * params["e_leak"])
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def compare(model, reference):
    """Run model and reference on the same random data; outputs and all parameter gradients within 1e-6."""
    torch.manual_seed(10)
    x = torch.randn(BATCH, STEPS, INPUTS)
    weights = torch.randn(BATCH, STEPS, HIDDEN) / STEPS
    out, _ = model(x)
    (out * weights).sum().backward()
    params = {k: v.detach().clone().requires_grad_() for k, v in model.system.named_parameters()}
    ref = reference(params, x)
    (ref * weights).sum().backward()
    assert (out - ref).abs().max() <= 1e-6
    for name, p in model.system.named_parameters():
        assert (p.grad - params[name].grad).abs().max() <= 1e-6, name


@pytest.mark.parametrize("kind", ["asymmetric", "symmetric"])
def test_lrcu_matches_eq_52(kind):
    torch.manual_seed(0)
    model = cells.LRCU(INPUTS, HIDDEN, elastance=kind)
    with torch.no_grad():
        model.system.p.normal_()
    compare(model, lambda params, x: reference_lrcu(params, x, kind))


def test_ltc_fused_solver_matches_ncps_step():
    torch.manual_seed(1)
    compare(cells.LTC(INPUTS, HIDDEN, dt=1.0, unfolds=6), lambda p, x: reference_fused(p, x, False, 6, 1.0))


def test_stc_fused_and_euler():
    torch.manual_seed(2)
    compare(cells.STC(INPUTS, HIDDEN, dt=0.5, unfolds=3), lambda p, x: reference_fused(p, x, True, 3, 0.5))
    compare(cells.STC(INPUTS, HIDDEN, unfolds=1, scheme="euler"), reference_stc_euler)


def single_neuron(system, kind=None):
    """S1 of the extraction (§5.1): self synapse g=1, a=4, b=0, k=−3; input synapse g=0.5, a=1, b=0, k=2;
    g_l = 0.1, e_l = 1; LRC-A w = 0.5 h − x − 1; LRC-S w = 0.5 h with k = 0.2."""
    def inverse_softplus(v):
        return torch.log(torch.expm1(torch.tensor(v)))

    with torch.no_grad():
        system.raw_g.copy_(torch.stack([inverse_softplus(1.0), inverse_softplus(0.5)])[:, None])
        system.a.copy_(torch.tensor([[4.0], [1.0]]))
        system.b.zero_()
        system.k.copy_(torch.tensor([[-3.0], [2.0]]))
        system.raw_g_leak.fill_(inverse_softplus(0.1))
        system.e_leak.fill_(1.0)
        if kind == "asymmetric":
            system.o_hidden.fill_(0.5), system.o_input.fill_(-1.0), system.p.fill_(-1.0)
        elif kind == "symmetric":
            system.o_hidden.fill_(0.5), system.o_input.fill_(0.0), system.p.fill_(0.0)
            system.raw_k_shift.fill_(inverse_softplus(0.2))
    return system


def test_single_neuron_damping_example_s1():
    x = torch.ones(1, 40, 1, dtype=torch.float64)
    run = lambda system: Recurrent(system.double(), "euler", 1.0)(x)[0][0, :, 0]
    ltc, stc = run(single_neuron(LTC(1, 1))), run(single_neuron(STC(1, 1)))
    lrc_a = run(single_neuron(LRC(1, 1, "asymmetric"), "asymmetric"))
    lrc_s = run(single_neuron(LRC(1, 1, "symmetric"), "symmetric"))
    # E1 oscillates with period 2 for LTC and STC, the elastance removes the oscillation (table of §5.1)
    assert torch.allclose(ltc[-2:].sort().values, torch.tensor([-1.5736, 0.7185], dtype=torch.float64), atol=1e-4)
    assert torch.allclose(stc[-2:].sort().values, torch.tensor([-0.7117, 0.6195], dtype=torch.float64), atol=1e-4)
    assert torch.allclose(lrc_a[:4], torch.tensor([0.0074, 0.0115, 0.0138, 0.0151], dtype=torch.float64), atol=1e-4)
    assert torch.allclose(lrc_s[:4], torch.tensor([0.0062, 0.0101, 0.0125, 0.0141], dtype=torch.float64), atol=1e-4)
    assert torch.all(lrc_a.diff() > 0) and torch.all(lrc_s.diff() > 0)
    assert abs(lrc_a[-1] - 0.016669) < 1e-5 and abs(lrc_s[-1] - 0.016669) < 1e-5


def test_positivity_of_conductances_and_symmetric_shift():
    system = LRC(2, 3, "symmetric")
    with torch.no_grad():
        for p in (system.raw_g, system.raw_g_leak):
            p.fill_(-30.0)
        system.raw_k_shift.copy_(torch.tensor([-30.0, -3.0, 2.0]))
    s = system.symbols()
    assert (s["g"] > 0).all() and (s["g_l"] > 0).all() and (s["k_shift"] > 0).all()
    eps = system.elastance_of(torch.linspace(-5, 5, 11)[:, None].expand(11, 3))
    assert (eps >= 0).all() and (eps <= torch.tanh(s["k_shift"] / 2) + 1e-7).all()
    assert torch.allclose(eps[5], torch.tanh(s["k_shift"] / 2), rtol=1e-5)  # peak tanh(k/2) at w = 0


def test_parameter_count_matches_the_paper():
    """5 m (m + n) + 3 m (+ m for LRC-S): psMNIST m = 64, n = 1 gives the paper's "20k"."""
    count = lambda module: sum(p.numel() for p in module.parameters())
    assert count(LRC(1, 64, "asymmetric")) == 5 * 64 * 65 + 3 * 64
    assert count(LRC(1, 64, "symmetric")) == 5 * 64 * 65 + 4 * 64


def test_bad_elastance_names_the_argument():
    with pytest.raises(ValueError, match="elastance"):
        LRC(1, 2, "linear")
