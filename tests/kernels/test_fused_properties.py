"""Property: for any preset, sizes, step and initial state, the fused CPU kernel equals the generic loop
(values and gradients) -- hypothesis draws the cases (profile "ci": 25 examples, "long": 1000)."""
import pytest
import torch

from odelab import cells

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

PRESETS = {
    "lem": lambda m, d, dt: cells.LEM(m, d, dt=dt),
    "cornn": lambda m, d, dt: cells.CoRNN(m, d, dt=dt * 0.5),
    "cornn-implicit": lambda m, d, dt: cells.CoRNN(m, d, dt=dt, damping="implicit"),
    "oscillator": lambda m, d, dt: cells.NeuralOscillator(m, d, dt=dt * 0.1),
    "gru-ode": lambda m, d, dt: cells.GRUODE(m, d, dt=dt),
    "taugru": lambda m, d, dt: cells.TauGRU(m, d, tau=3.0, dt=dt),
    "delaygru": lambda m, d, dt: cells.DelayGRU(m, d, tau=2.0, dt=dt),
    "lrcu-a": lambda m, d, dt: cells.LRCU(m, d, "asymmetric", dt=dt),
    "ltc": lambda m, d, dt: cells.LTC(m, d, dt=dt, unfolds=2),
}


@given(name=st.sampled_from(sorted(PRESETS)), batch=st.integers(1, 5), steps=st.integers(1, 12),
       hidden=st.integers(1, 20), inputs=st.integers(1, 3), dt=st.floats(0.1, 1.0), seed=st.integers(0, 2**16),
       random_state=st.booleans())
def test_fused_equals_generic(name, batch, steps, hidden, inputs, dt, seed, random_state):
    torch.manual_seed(seed)
    generic = PRESETS[name](inputs, hidden, dt).double()
    generic.engine = "generic"
    fused = PRESETS[name](inputs, hidden, dt).double()
    fused.load_state_dict(generic.state_dict())
    fused.engine = "fused"
    x = torch.randn(batch, steps, inputs, dtype=torch.float64, requires_grad=True)
    state = None
    if random_state:
        state = tuple(0.5 * torch.randn(batch, n, dtype=torch.float64) for n in generic.system.block_sizes())
    weights = torch.randn(batch, steps, hidden, dtype=torch.float64)
    results = []
    for model in (generic, fused):
        out, final = model(x, state)
        loss = (out * weights).sum() + sum(f.sum() for f in final)
        results.append((out, final, torch.autograd.grad(loss, [x, *model.parameters()])))
    (out_g, final_g, grads_g), (out_f, final_f, grads_f) = results
    scale = lambda t: max(1.0, float(t.detach().abs().max()))
    assert (out_g - out_f).abs().max() <= 1e-10 * scale(out_g)
    for a, b in zip(final_g, final_f):
        assert (a - b).abs().max() <= 1e-10 * scale(a)
    for a, b in zip(grads_g, grads_f):
        assert (a - b).abs().max() <= 1e-10 * scale(a)


GAP_PRESETS = [name for name in sorted(PRESETS) if not name.endswith("gru")]  # the delay cells take no gaps


@given(name=st.sampled_from(GAP_PRESETS), batch=st.integers(1, 4), steps=st.integers(1, 10), hidden=st.integers(1, 12),
       dt=st.floats(0.1, 1.0), seed=st.integers(0, 2**16))
def test_fused_equals_generic_with_gaps_that_require_grad(name, batch, steps, hidden, dt, seed):
    """Per-sample gaps requiring grad (some of them 0): the kernel's gradient of each gap is the generic loop's."""
    torch.manual_seed(seed)
    generic = PRESETS[name](2, hidden, dt).double()
    generic.engine = "generic"
    fused = PRESETS[name](2, hidden, dt).double()
    fused.load_state_dict(generic.state_dict())
    fused.engine = "fused"
    x = torch.randn(batch, steps, 2, dtype=torch.float64)
    gaps = (dt * torch.rand(batch, steps, dtype=torch.float64) * (torch.rand(batch, steps) > 0.2)).requires_grad_()
    weights = torch.randn(batch, steps, hidden, dtype=torch.float64)
    results = []
    for model in (generic, fused):
        out, _ = model(x, dt=gaps)
        results.append(torch.autograd.grad((out * weights).sum(), [gaps, *model.parameters()]))
    for a, b in zip(*results, strict=True):
        assert (a - b).abs().max() <= 1e-10 * max(1.0, float(a.abs().max()))


@given(ablation=st.sampled_from(["published", "alpha=0", "beta=0", "weighting=False", "gating=False"]),
       delay_gru=st.booleans(), batch=st.integers(1, 4), steps=st.integers(1, 10), hidden=st.integers(1, 12),
       tau=st.sampled_from([0.0, 0.5, 1.0, 3.0, 20.0]), p=st.floats(0.05, 0.6), seed=st.integers(0, 2**16))
def test_state_dropout_on_the_kernel_equals_the_generic_loop(ablation, delay_gru, batch, steps, hidden, tau, p, seed):
    """Training with state dropout: the same seed draws the same factors on either engine, and the kernel (any
    τ-GRU ablation, or Delay GRU) gives the generic loop's outputs and gradients."""
    option = {} if ablation == "published" else {ablation.split("=")[0]: 0.0 if "alpha" in ablation or "beta" in
                                                 ablation else False}
    build = (lambda: cells.DelayGRU(2, hidden, tau=tau)) if delay_gru else \
        (lambda: cells.TauGRU(2, hidden, tau=tau, **option))
    torch.manual_seed(seed)
    generic = build().double()
    generic.engine, generic.state_dropout = "generic", p
    fused = build().double()
    fused.load_state_dict(generic.state_dict())
    fused.engine, fused.state_dropout = "fused", p
    x = torch.randn(batch, steps, 2, dtype=torch.float64)
    weights = torch.randn(batch, steps, hidden, dtype=torch.float64)
    results = []
    for model in (generic, fused):
        torch.manual_seed(seed + 1)
        out, _ = model(x)
        results.append((out.detach(), torch.autograd.grad((out * weights).sum(), list(model.parameters()))))
    (out_g, grads_g), (out_f, grads_f) = results
    assert (out_g - out_f).abs().max() <= 1e-10 * max(1.0, float(out_g.abs().max()))
    for a, b in zip(grads_g, grads_f, strict=True):
        assert (a - b).abs().max() <= 1e-10 * max(1.0, float(a.abs().max()))
