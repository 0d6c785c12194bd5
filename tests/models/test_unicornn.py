"""UnICORNN (thesis ch. 3): the generic layer (UnICORNN field with time scale σ̂(c) + symplectic Euler + Δt)
and the stacked model against an independent reference of eq. 3.6; the reversible backward (eq. 3.7)
against autograd; the exact inverse step."""
import pytest
import torch

from odelab import cells
from odelab.models import Recurrent
from odelab.systems import UnICORNN
from odelab.models.unicornn import ReversibleUnICORNN, UnICORNNStack

BATCH, STEPS, INPUTS, HIDDEN = 4, 40, 3, 5


def reference_layer(x, w, V, b, c, alpha, dt):
    """Eq. 3.6 for one layer: z_n = z − Δt σ̂(c)[tanh(w y + V x_n + b) + α y]; y_n = y + Δt σ̂(c) z_n."""
    z = torch.zeros(x.shape[0], w.shape[0], dtype=x.dtype)
    y = torch.zeros_like(z)
    step = dt * (0.5 + 0.5 * torch.tanh(c / 2))  # σ̂(c) = 0.5 + 0.5 tanh(c/2), the thesis' form
    outputs = []
    for n in range(x.shape[1]):
        z = z - step * (torch.tanh(w * y + x[:, n] @ V.T + b) + alpha * y)
        y = y + step * z
        outputs.append(y)
    return torch.stack(outputs, dim=1), (z, y)


def leaf(system):
    return {k: v.detach().clone().requires_grad_() for k, v in system.symbols().items()}


def randomise(module):
    """Move the zero biases off zero so their gradients are exercised."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.3)


def test_layer_matches_eq_3_6():
    torch.manual_seed(0)
    system = UnICORNN(INPUTS, HIDDEN, alpha=9.0)
    randomise(system)
    x = torch.randn(BATCH, STEPS, INPUTS)
    weights = torch.randn(BATCH, STEPS, HIDDEN)
    out, (z, y) = Recurrent(system, "symplectic-euler", 0.046)(x)
    ((out * weights).sum() + z.sum()).backward()
    s = leaf(system)
    ref, (rz, ry) = reference_layer(x, s["w"], s["V"], s["b"], s["c"], 9.0, 0.046)
    ((ref * weights).sum() + rz.sum()).backward()
    assert (out - ref).abs().max() <= 1e-6 and (z - rz).abs().max() <= 1e-6
    for name, p in system.symbols().items():
        assert (p.grad - s[name].grad).abs().max() <= 1e-6, name


@pytest.mark.parametrize("reversible", [False, True])
def test_stack_matches_multilayer_eq_3_6(reversible):
    torch.manual_seed(1)
    dts = [0.0066, 0.205, 0.1]
    model = cells.UnICORNN(INPUTS, HIDDEN, dt=dts, alpha=0.5, num_layers=3, reversible=reversible)
    randomise(model)
    x = torch.randn(BATCH, STEPS, INPUTS, requires_grad=True)
    weights = torch.randn(BATCH, STEPS, HIDDEN) / STEPS  # a loss scale with O(1) gradients
    out, states = model(x)
    ((out * weights).sum() + sum(s[0].mean() + s[1].mean() for s in states)).backward()

    x_ref = x.detach().clone().requires_grad_()
    leaves = [leaf(layer.system) for layer in model.layers]
    h, loss = x_ref, 0.0
    for s, dt in zip(leaves, dts):  # layer ℓ driven by layer ℓ−1's current y (y^0 = u)
        h, (z, y) = reference_layer(h, s["w"], s["V"], s["b"], s["c"], 0.5, dt)
        loss = loss + z.mean() + y.mean()
    ((h * weights).sum() + loss).backward()

    assert (out - h).abs().max() <= 1e-6
    assert (x.grad - x_ref.grad).abs().max() <= 1e-6
    for layer, s in zip(model.layers, leaves):
        for name, p in layer.system.symbols().items():
            assert (p.grad - s[name].grad).abs().max() <= 1e-6, name


@pytest.mark.parametrize("unfolds", [1, 3])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_reversible_backward_equals_autograd(dtype, tol, unfolds):
    """Against autograd through the generic loop; with L = 3 sub-steps of Δt / 3 on each sample held."""
    torch.manual_seed(2)
    system = UnICORNN(INPUTS, HIDDEN, alpha=2.0).to(dtype)
    randomise(system)
    x = torch.randn(BATCH, 200, INPUTS, dtype=dtype, requires_grad=True)
    z0 = torch.randn(BATCH, HIDDEN, dtype=dtype, requires_grad=True)
    y0 = torch.randn(BATCH, HIDDEN, dtype=dtype, requires_grad=True)
    weights = torch.randn(BATCH, 200, HIDDEN, dtype=dtype)
    dt = 0.126
    params = [system.weight_input, system.bias, system.w, system.c]

    def grads(run):
        out, z, y = run()
        loss = (out * weights).sum() + (z * y).sum()
        return out.detach(), torch.autograd.grad(loss, [x, z0, y0] + params)

    def plain():
        out, (z, y) = Recurrent(system, "symplectic-euler", dt, unfolds=unfolds)(x, (z0, y0))
        return out, z, y

    out_a, grads_a = grads(plain)
    out_r, grads_r = grads(lambda: ReversibleUnICORNN.apply(x, *params, z0, y0, dt / unfolds, 2.0, unfolds))
    assert (out_a - out_r).abs().max() <= tol
    for name, ga, gr in zip(["x", "z0", "y0", "V", "b", "w", "c"], grads_a, grads_r):
        assert (ga - gr).abs().max() <= tol * max(1.0, ga.abs().max().item()), name


def test_inverse_step_rebuilds_the_initial_state():
    torch.manual_seed(3)
    system = UnICORNN(2, 4, alpha=1.0).double()
    x = torch.randn(3, 100, 2, dtype=torch.float64)
    state = (torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64))
    _, (z, y) = Recurrent(system, "symplectic-euler", 0.2)(x, state)
    step = 0.2 * torch.sigmoid(system.c)
    with torch.no_grad():
        for x_n in reversed(system.encode(x).unbind(1)):  # eq. 3.7
            y = y - step * z
            z = z + step * (torch.tanh(system.w * y + x_n) + 1.0 * y)
    assert (z - state[0]).abs().max() < 1e-11 and (y - state[1]).abs().max() < 1e-11


def saved_bytes(run):
    """Bytes of distinct storages autograd saves for the backward during ``run``."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return sum(storages.values()), out


def test_reversible_stack_saves_a_fraction_of_autograd_memory():
    torch.manual_seed(4)
    x = torch.randn(8, 512, 2)
    plain = UnICORNNStack(2, 32, num_layers=1, dt=0.1, alpha=1.0)
    reversible = UnICORNNStack(2, 32, num_layers=1, dt=0.1, alpha=1.0, reversible=True)
    reversible.load_state_dict(plain.state_dict())
    bytes_plain, (out_plain, _) = saved_bytes(lambda: plain(x))
    bytes_rev, (out_rev, _) = saved_bytes(lambda: reversible(x))
    assert torch.allclose(out_plain, out_rev, atol=1e-6)
    assert bytes_rev <= 0.2 * bytes_plain


def test_initialisation_and_symbols():
    system = UnICORNN(3, 50)
    assert 0 <= system.w.min() and system.w.max() <= 1
    assert system.c.abs().max() <= 0.1 and system.bias.abs().max() == 0
    assert system.symbols()["w"].data_ptr() == system.w.data_ptr()


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="alpha"):
        UnICORNN(1, 2, alpha=-1.0)
    with pytest.raises(ValueError, match="dt"):
        UnICORNNStack(1, 2, num_layers=2, dt=[0.1])
    for text in ("ab", "0.1"):  # a string is not one step per character (`--model-option dt=ab` once read so)
        with pytest.raises(ValueError, match="expected a positive step or one per layer"):
            UnICORNNStack(1, 2, num_layers=2, dt=text)
    with pytest.raises(ValueError, match="num_layers"):
        UnICORNNStack(1, 2, num_layers=0)
    with pytest.raises(ValueError, match="state"):
        UnICORNNStack(1, 2, num_layers=2)(torch.randn(1, 3, 1), state=[None])


def test_engine_is_validated_and_set_on_every_layer():
    with pytest.raises(ValueError, match="engine"):
        UnICORNNStack(1, 2, engine="compiled")
    model = UnICORNNStack(1, 2, num_layers=2, engine="generic")
    assert [layer.engine for layer in model.layers] == ["generic", "generic"]
    model.engine = "fused"
    assert [layer.engine for layer in model.layers] == ["fused", "fused"]
    with pytest.raises(ValueError, match="engine"):
        model.engine = "cuda-graph"


def backward_node(model, x) -> str:
    return type(model(x)[0].grad_fn).__name__


def test_reversible_engines_pick_the_implementation():
    """"generic" always runs the Python ReversibleUnICORNN; "auto" the fused kernel where one exists for the
    device and dtype (none for bfloat16: the Python function), "fused" without one is an error."""
    from odelab.kernels.cpu import available

    x = torch.randn(2, 3, 1)
    model = UnICORNNStack(1, 4, reversible=True, engine="generic")
    assert backward_node(model, x) == "ReversibleUnICORNNBackward"
    if available():
        model.engine = "auto"
        assert backward_node(model, x) == "ReversibleUnICORNNFunctionBackward"
    model = model.to(torch.bfloat16)
    assert backward_node(model, x.bfloat16()) == "ReversibleUnICORNNBackward"
    model.engine = "fused"
    with pytest.raises(ValueError, match="engine: no fused reversible kernel"):
        model(x.bfloat16())


@pytest.mark.parametrize("engine", ["fused", "generic"])
def test_reversible_forward_saves_no_per_step_state(engine):
    """What autograd keeps for a reversible layer: its input u, V, b, w, c and the final (z, y) -- nothing of
    shape (batch, time, hidden), whichever implementation runs."""
    from odelab.kernels.cpu import available

    if engine == "fused" and not available():
        pytest.skip("the CPU kernels do not build here")
    batch, time, inputs, hidden = 8, 64, 2, 32
    model = UnICORNNStack(inputs, hidden, dt=0.1, alpha=1.0, reversible=True, engine=engine)
    x = torch.randn(batch, time, inputs, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        model(x)
    expected = [(batch, time, inputs), (hidden, inputs), (hidden,), (hidden,), (hidden,), (batch, hidden),
                (batch, hidden)]
    assert sorted(tuple(t.shape) for t in saved) == sorted(expected)
