"""τ-GRU (001 eq. 2-6 = 14) and Delay GRU (001 eq. 12): the generic cells (delay field + Euler + ring buffer)
against independent references written here from the paper's discrete equations (plain loops with their
own zero-history buffer); outputs and every parameter gradient, float32, within 1e-6."""
import math

import pytest
import torch

import odelab
from odelab import cells
from odelab.systems import DelayGRU, TauGRU

TOL = 1e-6


def taugru_reference(p, x, m, alpha=1.0, beta=1.0, weighting=True, gating=True):
    """001 eq. 14 with l = n − m and h_n = 0 for n = −m..0:
    h_{n+1} = (1 − g_n) h_n + g_n (β u_n + α a_n z_n), u = tanh(W1 h_n + U1 x_n + b1),
    z = tanh(W2 h_l + U2 x_n + b2), g = σ(W3 h_n + U3 x_n + b3), a = σ(W4 h_n + U4 x_n + b4)."""
    batch, steps, _ = x.shape
    d = p["b3"].shape[0] if "b3" in p else (p["b1"] if "b1" in p else p["b2"]).shape[0]
    H = [torch.zeros(batch, d, dtype=x.dtype)] * (m + 1)  # h_{-m}, ..., h_0
    outputs = []
    for n in range(steps):
        h, h_l, x_n = H[-1], H[-1 - m], x[:, n]
        mix = torch.zeros_like(h)
        if beta != 0:
            mix = mix + beta * torch.tanh(h @ p["W1"].T + x_n @ p["U1"].T + p["b1"])
        if alpha != 0:
            z = torch.tanh(h_l @ p["W2"].T + x_n @ p["U2"].T + p["b2"])
            a = torch.sigmoid(h @ p["W4"].T + x_n @ p["U4"].T + p["b4"]) if weighting else 1.0
            mix = mix + alpha * a * z
        if gating:
            g = torch.sigmoid(h @ p["W3"].T + x_n @ p["U3"].T + p["b3"])
            h_new = (1 - g) * h + g * mix
        else:
            h_new = mix
        H.append(h_new)
        outputs.append(h_new)
    return torch.stack(outputs, 1)


def delaygru_reference(p, x, m):
    """001 eq. 12: h_{n+1} = (1 − g_n) h_n + g_n tanh(W1 h_n + W2 h_l + U x_n + b), g_n = σ(W3 h_n + U3 x_n + b3)."""
    batch, steps, _ = x.shape
    H = [torch.zeros(batch, p["b"].shape[0], dtype=x.dtype)] * (m + 1)
    outputs = []
    for n in range(steps):
        h, h_l, x_n = H[-1], H[-1 - m], x[:, n]
        g = torch.sigmoid(h @ p["W3"].T + x_n @ p["U3"].T + p["b3"])
        h_new = (1 - g) * h + g * torch.tanh(h @ p["W1"].T + h_l @ p["W2"].T + x_n @ p["U"].T + p["b"])
        H.append(h_new)
        outputs.append(h_new)
    return torch.stack(outputs, 1)


def compare(model, reference, x, seed=0):
    """Outputs and gradients of every paper symbol (hence every parameter) of the cell vs the reference."""
    symbols = model.system.symbols()
    ref_params = {k: v.detach().clone().requires_grad_(True) for k, v in symbols.items()}
    out, _ = model(x)
    ref = reference(ref_params, x)
    assert out.shape == ref.shape
    assert (out - ref).abs().max().item() <= TOL
    # a random weighting of every output, averaged over time (gradients O(1): float32 sums of O(10)
    # gradients in a different order than the reference already differ by ~1e-6)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1)) / out.shape[1]
    model.zero_grad()
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    got = {}
    for name, view in symbols.items():  # symbols are views: find each one's gradient slice
        for param in model.system.parameters():
            if view.data_ptr() >= param.data_ptr() and view.untyped_storage().data_ptr() == param.untyped_storage().data_ptr():
                offset = (view.data_ptr() - param.data_ptr()) // param.element_size()
                got[name] = param.grad.flatten()[offset:offset + view.numel()].view_as(view)
    assert set(got) == set(ref_params)
    for name in ref_params:
        assert (got[name] - ref_params[name].grad).abs().max().item() <= TOL, name
    assert sum(p.numel() for p in model.system.parameters()) == sum(v.numel() for v in symbols.values())


ABLATIONS = [
    dict(),
    dict(alpha=0.0),
    dict(beta=0.0),
    dict(weighting=False),
    dict(gating=False),
    dict(alpha=0.5, beta=1.0),
]


@pytest.mark.parametrize("switches", ABLATIONS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "full")
@pytest.mark.parametrize("tau", [3, 0])
def test_taugru_cell_matches_eq14(switches, tau):
    torch.manual_seed(0)
    model = cells.TauGRU(3, 8, tau, **switches)
    x = torch.randn(4, 13, 3)
    m = 0 if switches.get("alpha", 1.0) == 0 else tau
    compare(model, lambda p, x: taugru_reference(p, x, m, **switches), x)


@pytest.mark.parametrize("tau", [1, 4, 20])
def test_delaygru_cell_matches_eq12(tau):
    torch.manual_seed(1)
    model = cells.DelayGRU(2, 6, tau)
    compare(model, lambda p, x: delaygru_reference(p, x, tau), torch.randn(3, 25, 2))


def test_general_dt_euler_form_rounds_the_delay_down():
    """h_{n+1} = h_n + Δt g_n (u_n + a_n z_n − h_n) with m = ⌊τ/Δt⌋ (taugru.md §1.6): τ = 2.3, Δt = 0.5 → m = 4."""
    torch.manual_seed(2)
    model = cells.TauGRU(2, 5, 2.3, dt=0.5)
    p = {k: v.detach() for k, v in model.system.symbols().items()}
    x = torch.randn(2, 11, 2)
    H = [torch.zeros(2, 5)] * 5
    ref = []
    for n in range(11):
        h, h_l, x_n = H[-1], H[-5], x[:, n]
        u = torch.tanh(h @ p["W1"].T + x_n @ p["U1"].T + p["b1"])
        z = torch.tanh(h_l @ p["W2"].T + x_n @ p["U2"].T + p["b2"])
        g = torch.sigmoid(h @ p["W3"].T + x_n @ p["U3"].T + p["b3"])
        a = torch.sigmoid(h @ p["W4"].T + x_n @ p["U4"].T + p["b4"])
        H.append(h + 0.5 * g * (u + a * z - h))
        ref.append(H[-1])
    out, _ = model(x)
    assert (out - torch.stack(ref, 1)).abs().max().item() <= TOL


def test_delay_steps_robust_to_rounding():
    from odelab.solvers.recurrence import delay_steps

    assert delay_steps(0.3, 0.1) == 3 and delay_steps(4.8, 0.1) == 48 and delay_steps(2.3, 0.5) == 4
    assert delay_steps(0.05, 0.1) == 0


def test_continuous_field_euler_solve_equals_the_cell():
    """solve(TauGRU, euler, dt = 1) with a hold input and zero history = the recurrent cell (eq. 14)."""
    torch.manual_seed(3)
    model = cells.TauGRU(2, 4, 3)
    x = torch.randn(2, 9, 2)
    out, _ = model(x)
    u = torch.cat([torch.zeros(2, 1, 2), x], 1)  # sample k+1 acts on (k, k+1]
    sol = odelab.solve(model.system, model.system.initial_state(2), torch.arange(10.0), u=u, method="euler", dt=1.0)
    assert (sol["h"][:, 1:] - out).abs().max().item() <= TOL


def test_lemma1_state_bound():
    """001 Lemma 1: |h_n| ≤ 2 for zero history, whatever the weights."""
    torch.manual_seed(4)
    model = cells.TauGRU(1, 16, 5)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
        out, _ = model(10 * torch.randn(8, 200, 1))
    assert out.abs().max().item() <= 2.0


def test_parameter_counts_and_symbols():
    """4 maps of d² + dp + d (one bias per map; the paper counts two: 4d more, taugru.md §1.8)."""
    d, p = 16, 1
    full = TauGRU(p, d, 20)
    assert sum(q.numel() for q in full.parameters()) == 4 * (d * d + d * p + d)
    assert list(full.symbols()) == ["W1", "W2", "W3", "W4", "U1", "U2", "U3", "U4", "b1", "b2", "b3", "b4"]
    assert sum(q.numel() for q in TauGRU(p, d, 20, alpha=0).parameters()) == 2 * (d * d + d * p + d)
    assert TauGRU(p, d, 20, alpha=0).delays == ()
    assert sum(q.numel() for q in TauGRU(p, d, 20, beta=0).parameters()) == 3 * (d * d + d * p + d)
    assert sum(q.numel() for q in DelayGRU(p, d, 20).parameters()) == 3 * d * d + 2 * d * p + 2 * d
    assert list(DelayGRU(p, d, 20).symbols()) == ["W1", "W2", "W3", "U", "U3", "b", "b3"]
    bound = 1 / math.sqrt(d)
    assert all(q.abs().max().item() <= bound for q in full.parameters())


def test_symbols_are_views():
    system = TauGRU(2, 3, 1.0)
    with torch.no_grad():
        system.symbols()["W4"].fill_(7.0)
    assert (system.weight_h[6:9] == 7.0).all()


def test_presets_registered():
    for name in ("taugru", "delaygru"):
        model = cells.PRESETS[name](1, 16)
        assert model.system.delays == (20.0,)
        out, state = model(torch.randn(2, 30, 1))
        assert out.shape == (2, 30, 16) and state[0].shape == (2, 16)


def test_imex_split_matches_euler():
    """decay = g ≥ 0: the explicit-decay partitioned step is the same cell (split = forcing − g h)."""
    torch.manual_seed(5)
    system = TauGRU(2, 4, 2)
    x = torch.randn(3, 7, 2)
    a, _ = odelab.Recurrent(system, "euler", 1.0)(x)
    b, _ = odelab.Recurrent(system, "imex", 1.0)(x)
    assert (a - b).abs().max().item() <= TOL


@pytest.mark.parametrize("kwargs, match", [
    (dict(tau=-1.0), "tau"),
    (dict(tau=2.0, alpha=0.0, beta=0.0), "alpha"),
    (dict(tau=2.0, alpha=1.5), "alpha"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TauGRU(1, 4, **kwargs)
