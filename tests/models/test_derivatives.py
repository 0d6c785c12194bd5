"""Which derivatives a sequence model and a solve give, and that none comes out wrong without a word.

The fused kernels' backward is hand-derived (numbers, not a graph): a second derivative through it used to come
out wrong (relative error ≈ 1 for every CPU preset) with no error, and ``torch.func`` transforms or forward-mode
AD reached the kernels (errors, or tangents dropped under ``torch.no_grad()``). Now a second derivative raises
``SecondDerivativeError`` naming ``engine='generic'``, whose double backward is checked against finite differences
of the fused first-order gradients; ``engine="auto"`` runs the generic loop under ``torch.func`` and forward-mode
AD, checked against the fused engine's reverse mode and finite differences of its forward. The solvers' compiled
stage sums (C++) dropped forward-mode tangents (``odelab.solve`` under ``forward_ad`` gave tangents off by the
whole derivative); they now leave those solves to torch.
"""
import pytest
import torch
import torch.autograd.forward_ad as forward_ad
from torch.func import functional_call, grad, jacrev, jvp, vmap

import odelab
from odelab.kernels.cpu import extension
from odelab.models.unicornn import UnICORNNStack
from odelab import SecondDerivativeError
from helpers import fused_cpu_presets

# presets with a fused CPU kernel, float64: name -> model (input 2, hidden 4)
MODELS = {**fused_cpu_presets(4),
          "unicornn-reversible": lambda: UnICORNNStack(2, 4, num_layers=2, dt=0.9, alpha=0.4, reversible=True)}
needs_kernels = pytest.mark.skipif(not extension.available(), reason="the CPU kernels did not build here")


def model_of(name: str, engine: str):
    torch.manual_seed(0)
    model = MODELS[name]().double()
    with torch.no_grad():  # away from the initial values' symmetries (zero biases, equal time constants)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.engine = engine
    return model


def inputs():
    torch.manual_seed(1)
    return torch.randn(3, 6, 2, dtype=torch.float64)


def loss_of(model, x):
    out = model(x)[0]
    return (out**2).sum() + out[:, -1].sin().sum()


def flat_grad(model, x, **kwargs):
    params = list(model.parameters())
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss_of(model, x), params, **kwargs)])


@needs_kernels
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_second_derivative_through_a_fused_kernel_raises(name):
    model, x = model_of(name, "fused"), inputs()
    params = list(model.parameters())
    plain = flat_grad(model, x)
    first = flat_grad(model, x, create_graph=True)  # first-order values unchanged: only differentiating them fails
    assert torch.equal(first.detach(), plain)
    with pytest.raises(SecondDerivativeError, match="engine='generic'"):
        torch.autograd.grad((first**2).sum(), params)
    first = flat_grad(model, x, create_graph=True)
    with pytest.raises(SecondDerivativeError, match="engine='generic'"):
        (first**2).sum().backward()


@needs_kernels
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_generic_engine_gives_second_derivatives(name):
    """Hessian-vector product of the generic engine's double backward against central differences of the fused
    engine's first-order gradient along the same direction."""
    x = inputs()
    generic, fused = model_of(name, "generic"), model_of(name, "fused")
    params, fused_params = list(generic.parameters()), list(fused.parameters())
    torch.manual_seed(2)
    v = [torch.randn_like(p) for p in params]
    g = torch.autograd.grad(loss_of(generic, x), params, create_graph=True)
    hvp = torch.cat([h.reshape(-1) for h in torch.autograd.grad(sum((gi * vi).sum() for gi, vi in zip(g, v)), params)])
    eps, grads = 1e-5, []
    for sign in (1, -1):
        with torch.no_grad():
            for p, q, vi in zip(fused_params, params, v):
                p.copy_(q + sign * eps * vi)
        grads.append(flat_grad(fused, x))
    reference = (grads[0] - grads[1]) / (2 * eps)
    assert torch.allclose(hvp, reference, rtol=1e-6, atol=1e-7 * reference.abs().max())


@needs_kernels
@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_func_runs_the_generic_loop_under_auto(name):
    x = inputs()
    auto, fused = model_of(name, "auto"), model_of(name, "fused")
    params = {k: v.detach() for k, v in auto.named_parameters()}
    by_func = grad(lambda p: loss_of(lambda x: functional_call(auto, p, (x,)), x))(params)
    by_kernel = dict(zip(params, torch.autograd.grad(loss_of(fused, x), list(fused.parameters()))))
    for key in params:
        assert torch.allclose(by_func[key], by_kernel[key], rtol=1e-10, atol=1e-12), key
    jacobian = jacrev(lambda x: auto(x)[0][:, -1])(x)  # (batch, hidden, batch, time, input)
    reference = torch.autograd.functional.jacobian(lambda x: fused(x)[0][:, -1], x)
    assert torch.allclose(jacobian, reference, rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        mapped = vmap(lambda sample: auto(sample[None])[0][0])(x)
        assert torch.allclose(mapped, fused(x)[0], rtol=1e-12, atol=1e-13)


@needs_kernels
@pytest.mark.parametrize("grad_mode", [True, False])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_mode_runs_the_generic_loop_under_auto(name, grad_mode):
    """The tangent of the outputs along a direction of x, against central differences of the fused forward; under
    ``torch.no_grad()`` the fused forward used to run and return no tangent at all."""
    x = inputs()
    auto, fused = model_of(name, "auto"), model_of(name, "fused")
    torch.manual_seed(3)
    direction = torch.randn_like(x)
    with torch.set_grad_enabled(grad_mode), forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(auto(forward_ad.make_dual(x, direction))[0]).tangent
    eps = 1e-6
    with torch.no_grad():
        reference = (fused(x + eps * direction)[0] - fused(x - eps * direction)[0]) / (2 * eps)
    assert tangent is not None
    assert torch.allclose(tangent, reference, rtol=1e-6, atol=1e-8)


@needs_kernels
def test_the_fused_engine_refuses_torch_func_and_forward_mode():
    model, x = model_of("lem", "fused"), inputs()
    with pytest.raises(ValueError, match="engine='fused' gives first-order reverse-mode gradients only.*'generic'"):
        vmap(lambda sample: model(sample[None])[0][0])(x)
    with pytest.raises(ValueError, match="engine='fused'.*forward-mode AD"), forward_ad.dual_level():
        model(forward_ad.make_dual(x, torch.ones_like(x)))
    stack = model_of("unicornn-reversible", "fused")
    with pytest.raises(ValueError, match="engine='fused'.*torch.func"):
        jacrev(lambda x: stack(x)[0])(x)


class Tanh(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.weight = torch.nn.Parameter(0.5 * torch.randn(3, 3, dtype=torch.float64))

    def forward(self, t, y):
        return torch.tanh(y @ self.weight)


@pytest.mark.parametrize("adjoint", ["checkpoint", "backsolve"])
def test_a_second_derivative_through_an_adjoint_solve_raises(adjoint):
    field = Tanh()
    y0 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    loss = lambda: (odelab.solve(field, y0, t, method="rk4", dt=0.1, adjoint=adjoint).y ** 2).sum()
    plain = torch.autograd.grad(loss(), [field.weight, y0])
    first = torch.autograd.grad(loss(), [field.weight, y0], create_graph=True)
    for a, b in zip(first, plain):
        assert torch.allclose(a.detach(), b, rtol=1e-13, atol=0)
    with pytest.raises(SecondDerivativeError, match=f"adjoint='{adjoint}'.*adjoint=None"):
        torch.autograd.grad(sum((g**2).sum() for g in first), [field.weight])


@pytest.mark.parametrize("adjoint", [None, "checkpoint", "backsolve"])
@pytest.mark.parametrize("grad_mode", [True, False])
@pytest.mark.parametrize("method", ["euler", "rk4", "dopri5"])
def test_forward_mode_through_a_solve(method, grad_mode, adjoint):
    """dy(t)/dy0 along a direction by forward-mode AD and torch.func.jvp, against central differences of the
    solve (the C++ stage sums, which dropped the tangents, run there; an adjoint is set aside: backsolve's
    forward, which keeps no graph, returned no tangent)."""
    field = Tanh()
    torch.manual_seed(5)
    y0, direction = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    options = dict(dt=0.05) if method != "dopri5" else dict(rtol=1e-10, atol=1e-10)
    solve = lambda y: odelab.solve(field, y, t, method=method, adjoint=adjoint, **options).y
    eps = 1e-6
    with torch.no_grad():
        reference = (solve(y0 + eps * direction) - solve(y0 - eps * direction)) / (2 * eps)
    with torch.set_grad_enabled(grad_mode):
        with forward_ad.dual_level():
            tangent = forward_ad.unpack_dual(solve(forward_ad.make_dual(y0, direction))).tangent
        _, by_jvp = jvp(solve, (y0,), (direction,))
    assert reference.abs().max() > 0.1
    for result in (tangent, by_jvp):
        assert torch.allclose(result, reference, rtol=1e-6, atol=1e-8)


def test_a_solve_under_vmap_is_refused_by_name():
    field = Tanh()
    y0 = torch.randn(4, 3, dtype=torch.float64)
    t = torch.linspace(0, 1, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="torch.func.vmap.*stack the initial states along y0's first dimension"):
        vmap(lambda y: odelab.solve(field, y[None], t, method="rk4", dt=0.1).y[0])(y0)
