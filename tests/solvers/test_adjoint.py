"""Memory-efficient gradients (odelab.solvers.adjoint): ``checkpoint`` equals direct backprop to round-off
(same arithmetic, recomputed), ``backsolve`` (continuous adjoint) agrees with direct backprop and with
central finite differences within a small multiple of the tolerance; clear errors at the boundary.

References: direct backprop through ``odelab.solve`` (the discretise-then-optimise gradient) and central
finite differences (tests/helpers.py), in float64.
"""
import pytest
import torch
from torch import nn

import odelab
from odelab.solvers import SolveError, Status
from odelab.solvers.adjoint import FANOUT, LEAF, solve_with_adjoint
from odelab.systems import ENSO, LEM

from helpers import assert_matches_finite_differences

F64 = torch.float64


class MLP(nn.Module):
    """A neural vector field f(t, y) = W2 tanh(W1 y + b1 + t c) + b2 (time-dependent through c)."""

    def __init__(self, d=3, h=8, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.l1, self.l2 = nn.Linear(d, h), nn.Linear(h, d)
        self.c = nn.Parameter(0.1 * torch.randn(h))
        self.double()

    def forward(self, t, y):
        return self.l2(torch.tanh(self.l1(y) + t * self.c))


def _grads(field, y0, t, weights, extra_inputs=(), **kw):
    """(outputs, gradients of Σ weights · y w.r.t. y0, the extra inputs and the field's parameters)."""
    solver = solve_with_adjoint if "adjoint" in kw else odelab.solve
    sol = solver(field, y0, t, **kw)
    loss = sum((w * y).sum() for w, y in zip(weights, sol.ys))
    starts = [x for x in (y0 if isinstance(y0, tuple) else (y0,)) if x.requires_grad]
    params = [*starts, *extra_inputs, *field.parameters()]
    return sol, torch.autograd.grad(loss, params, allow_unused=True)


def _assert_equal_grads(direct, other, tol=1e-12):
    for a, b in zip(direct, other):
        assert (a is None) == (b is None)
        if a is not None:
            scale = max(1.0, float(a.abs().max()))
            assert float((a - b).abs().max()) <= tol * scale, float((a - b).abs().max())


# -- checkpoint: exact ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,kw,T", [
    ("rk4", dict(dt=0.01), 7),            # 300 steps: thinning of the kept carries and three levels of recursion
    ("euler", dict(dt=0.013), 5),         # output times off the dt grid
    ("dopri5", dict(rtol=1e-8, atol=1e-10), 9),
    ("tsit5", dict(rtol=1e-6, atol=1e-8), 4),
    ("bosh3", dict(rtol=1e-5, atol=1e-7), 31),  # several outputs inside one step
])
def test_checkpoint_equals_direct_backprop(method, kw, T):
    field = MLP()
    y0 = torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    t = torch.linspace(0.0, 3.0, T, dtype=F64)
    weights = [torch.randn(5, T, 3, dtype=F64, generator=torch.Generator().manual_seed(2))]
    sol_d, g_d = _grads(field, y0, t, weights, method=method, **kw)
    sol_c, g_c = _grads(field, y0, t, weights, method=method, adjoint="checkpoint", **kw)
    assert torch.equal(sol_d.y, sol_c.y)
    for key in sol_d.stats:
        assert torch.equal(sol_d.stats[key], sol_c.stats[key]), key
    assert torch.equal(sol_d.status, sol_c.status)
    _assert_equal_grads(g_d, g_c)
    if method == "rk4":
        assert int(sol_c.stats["steps"][0]) > 2 * FANOUT * LEAF


@pytest.mark.parametrize("method,kw", [("imex", dict(dt=0.25)), ("rk4", dict(dt=0.5)),
                                       ("dopri5", dict(rtol=1e-7, atol=1e-9))])
@pytest.mark.parametrize("interpolation", ["hold", "linear"])
def test_checkpoint_multi_block_system_with_input(method, kw, interpolation):
    """LEM (two blocks, learnable input encoding): gradients w.r.t. y0, the input samples and every parameter."""
    if method == "imex" and interpolation == "linear":
        pytest.skip("covered by hold")
    torch.manual_seed(0)
    system = LEM(2, 4).double()
    gen = torch.Generator().manual_seed(3)
    y0 = torch.randn(3, 4, dtype=F64, generator=gen, requires_grad=True)
    state = (y0, torch.zeros(3, 4, dtype=F64))
    t = torch.linspace(0.0, 6.0, 7, dtype=F64)
    u = torch.randn(3, 7, 2, dtype=F64, generator=gen, requires_grad=True)
    weights = [torch.randn(3, 7, 4, dtype=F64, generator=gen) for _ in range(2)]
    common = dict(u=u, interpolation=interpolation, method=method, **kw)
    sol_d, g_d = _grads(system, state, t, weights, (u,), **common)
    sol_c, g_c = _grads(system, state, t, weights, (u,), adjoint="checkpoint", **common)
    assert all(torch.equal(a, b) for a, b in zip(sol_d.ys, sol_c.ys))
    _assert_equal_grads(g_d, g_c)


@pytest.mark.parametrize("method,kw", [("rk4", dict(dt=0.05)), ("dopri5", dict(rtol=1e-7, atol=1e-9))])
def test_checkpoint_breakpoints_backwards_time_and_callable_input(method, kw):
    """tstops / jump_times (a field that jumps at t = 0.7), decreasing output times (integration backwards)
    and a callable input u(t): still the direct-backprop gradients."""
    field = MLP(d=2, h=4)
    y0 = torch.tensor([[0.3, -0.2], [0.8, 0.1]], dtype=F64, requires_grad=True)
    jumpy = lambda s, y: field(s, y) + (s > 0.7).to(y.dtype) * 0.5
    gen = torch.Generator().manual_seed(9)
    for f, t, extra in [
        (jumpy, torch.linspace(0.0, 1.5, 4, dtype=F64), dict(jump_times=[0.7], tstops=[0.33])),
        (field, torch.linspace(1.0, -0.5, 5, dtype=F64), {}),
    ]:
        weights = [torch.randn(2, len(t), 2, dtype=F64, generator=gen)]
        sol_d = odelab.solve(f, y0, t, method=method, **kw, **extra)
        closed_over = list(field.parameters()) if f is jumpy else []  # a lambda: its tensors are named explicitly
        sol_c = solve_with_adjoint(f, y0, t, method=method, adjoint="checkpoint", adjoint_params=closed_over,
                                   **kw, **extra)
        assert torch.equal(sol_d.y, sol_c.y)
        params = [y0, *field.parameters()]
        g_d = torch.autograd.grad((sol_d.y * weights[0]).sum(), params)
        g_c = torch.autograd.grad((sol_c.y * weights[0]).sum(), params)
        _assert_equal_grads(g_d, g_c)
    amplitude = torch.tensor(0.4, dtype=F64, requires_grad=True)

    class Driven(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = field

        def forward(self, s, y, u):
            return self.inner(s, y) + u

    u = lambda s: amplitude * torch.sin(3 * s) * torch.ones(2, 2, dtype=F64)
    t = torch.linspace(0.0, 1.0, 3, dtype=F64)
    grads = []
    for adjoint in (None, "checkpoint"):
        if adjoint is None:
            sol = odelab.solve(Driven(), y0, t, u=u, method=method, **kw)
        else:
            sol = solve_with_adjoint(Driven(), y0, t, u=u, method=method, adjoint=adjoint,
                                     adjoint_params=[amplitude], **kw)
        grads.append(torch.autograd.grad((sol.y ** 2).sum(), [y0, amplitude, *field.parameters()]))
    _assert_equal_grads(*grads)


def test_backsolve_backwards_in_time():
    field = MLP(d=2, h=4)
    y0 = torch.tensor([[0.3, -0.2], [0.8, 0.1]], dtype=F64, requires_grad=True)
    t = torch.linspace(1.0, -0.5, 4, dtype=F64)
    tol = 1e-9
    grads = []
    for kw in (dict(rtol=1e-12, atol=1e-12), dict(rtol=tol, atol=tol, adjoint="backsolve")):
        solver = solve_with_adjoint if "adjoint" in kw else odelab.solve
        sol = solver(field, y0, t, **kw)
        grads.append(torch.autograd.grad((sol.y ** 2).sum(), [y0, *field.parameters()]))
    for a, b in zip(*grads):
        assert float((a - b).abs().max()) <= 10 * tol * max(1.0, float(a.abs().max()))


def test_checkpoint_adjoint_params_of_a_plain_callable():
    theta = torch.tensor([0.7, -0.2], dtype=F64, requires_grad=True)
    f = lambda s, y: -theta[0] * y + theta[1] * y ** 2
    y0 = torch.tensor([[0.5], [1.0]], dtype=F64)
    t = torch.linspace(0, 2, 5, dtype=F64)

    def loss(**kw):
        solver = solve_with_adjoint if "adjoint" in kw else odelab.solve
        return (solver(f, y0, t, method="rk4", dt=0.05, **kw).y ** 2).sum()

    (g_d,) = torch.autograd.grad(loss(), theta)
    (g_c,) = torch.autograd.grad(loss(adjoint="checkpoint", adjoint_params=[theta]), theta)
    _assert_equal_grads([g_d], [g_c])


def test_checkpoint_without_gradients_and_failures():
    field = MLP()
    y0 = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(5))
    t = torch.linspace(0.0, 1.0, 3, dtype=F64)
    with torch.no_grad():
        plain = odelab.solve(field, y0, t, method="dopri5")
        ours = solve_with_adjoint(field, y0, t, method="dopri5", adjoint="checkpoint")
    # the plain solve without gradients runs the fused CPU loop (C++ arithmetic): the same steps, values to round-off
    assert torch.equal(plain.stats["steps"], ours.stats["steps"])
    assert torch.equal(plain.stats["accepted"], ours.stats["accepted"])
    torch.testing.assert_close(plain.y, ours.y, rtol=0, atol=1e-13)
    with pytest.raises(SolveError, match="max steps"):
        solve_with_adjoint(field, y0, t, method="dopri5", rtol=1e-12, atol=1e-14, max_steps=3, adjoint="checkpoint")
    sol = solve_with_adjoint(field, y0, t, method="dopri5", rtol=1e-12, atol=1e-14, max_steps=3,
                             adjoint="checkpoint", throw=False)
    ref = odelab.solve(field, y0, t, method="dopri5", rtol=1e-12, atol=1e-14, max_steps=3, throw=False)
    assert (sol.status == Status.MAX_STEPS).all() and torch.equal(sol.status, ref.status)
    assert torch.equal(sol.y.isnan(), ref.y.isnan())


class _DelayField(odelab.systems.System):
    """x' = −a x + b tanh(x(t − 0.7)) + c tanh(x(t − 0.25)) with learnable a, b, c (two delays, one of them
    not a multiple of dt: Hermite reads)."""

    blocks, observable = ("x",), "x"
    delays = (0.7, 0.25)

    def __init__(self):
        super().__init__()
        self.hidden_size = 2
        self.a = nn.Parameter(torch.tensor([0.5, 1.2], dtype=F64))
        self.b = nn.Parameter(torch.tensor([-1.5, 0.8], dtype=F64))
        self.c = nn.Parameter(torch.tensor([0.3, -0.4], dtype=F64))

    def derivative(self, t, state, inp=None, *delayed):
        x = state[0]
        return (-self.a * x + self.b * torch.tanh(delayed[0][0]) + self.c * torch.tanh(delayed[1][0]),)


@pytest.mark.parametrize("method,dt,history", [("rk4", 0.05, None), ("heun", 0.1, "callable"), ("euler", 0.03, None)])
def test_checkpoint_delay_system_equals_direct_backprop(method, dt, history):
    """Fixed-step DDE (method of steps): gradients w.r.t. y0 (also through the constant history φ ≡ y0), a
    learnable history and the parameters, past F · LEAF steps so that the recursion runs."""
    system = _DelayField()
    y0 = torch.tensor([[0.4, -0.1], [1.0, 0.3]], dtype=F64, requires_grad=True)
    t = torch.linspace(0.0, 8.0, 6, dtype=F64)
    scale = torch.tensor(0.7, dtype=F64, requires_grad=True)
    hist = None if history is None else (lambda s: scale * torch.cos(s) * torch.ones(2, 2, dtype=F64))
    weights = torch.randn(2, 6, 2, dtype=F64, generator=torch.Generator().manual_seed(12))
    grads, ys = [], []
    for adjoint in (None, "checkpoint"):
        kw = dict(method=method, dt=dt, history=hist)
        if adjoint is None:
            sol = odelab.solve(system, y0, t, **kw)
        else:
            sol = solve_with_adjoint(system, y0, t, adjoint=adjoint, adjoint_params=[scale], **kw)
        ys.append(sol.y.detach())
        params = [y0, *system.parameters()] + ([scale] if hist is not None else [])
        grads.append(torch.autograd.grad((sol.y * weights).sum(), params))
        if adjoint:
            assert int(sol.stats["steps"][0]) > FANOUT * LEAF
    assert torch.equal(*ys)
    _assert_equal_grads(*grads)


@pytest.mark.parametrize("kind", ["parameter", "computed", "per-block tuple"])
def test_checkpoint_differentiates_a_tensor_history(kind):
    """A constant history that requires grad (a parameter itself, a tensor computed from one, a tuple of blocks)
    gets the gradient of direct backprop; before, the checkpointed solve never saw it and returned None for it."""
    system = _DelayField()
    weight = nn.Parameter(torch.tensor([[0.3, -0.6]], dtype=F64))
    y0 = torch.tensor([[0.4, -0.1], [1.0, 0.3]], dtype=F64)
    t = torch.linspace(0.0, 3.0, 4, dtype=F64)
    history = {"parameter": lambda: weight, "computed": lambda: torch.tanh(2 * weight),
               "per-block tuple": lambda: (weight * y0,)}[kind]
    grads = []
    for adjoint in (None, "checkpoint"):
        sol = odelab.solve(system, y0, t, method="rk4", dt=0.05, history=history(), adjoint=adjoint)
        grads.append(torch.autograd.grad(sol.y.square().sum(), [weight, system.b]))
    assert grads[0][0].abs().max() > 0.01
    _assert_equal_grads(*grads)


def test_checkpoint_refuses_a_callable_history_over_tensors_it_cannot_see():
    """A callable history's value that depends on a tensor requiring grad outside the system and adjoint_params
    would get no gradient from the recomputing backward: a ValueError names history; with the tensor in
    adjoint_params, the gradient of direct backprop."""
    system = _DelayField()
    scale = nn.Parameter(torch.tensor(0.7, dtype=F64))
    history = lambda s: scale * torch.cos(s) * torch.ones(2, 2, dtype=F64)
    y0 = torch.tensor([[0.4, -0.1], [1.0, 0.3]], dtype=F64)
    t = torch.linspace(0.0, 2.0, 3, dtype=F64)
    with pytest.raises(ValueError, match=r"history: the callable's values depend on tensors .* adjoint_params"):
        odelab.solve(system, y0, t, method="rk4", dt=0.05, history=history, adjoint="checkpoint")
    grads = []
    for kw in (dict(adjoint=None), dict(adjoint="checkpoint", adjoint_params=[scale])):
        sol = odelab.solve(system, y0, t, method="rk4", dt=0.05, history=history, **kw)
        grads.append(torch.autograd.grad(sol.y.square().sum(), [scale]))
    _assert_equal_grads(*grads)


@pytest.mark.parametrize("adjoint,where", [("checkpoint", "field"), ("backsolve", "field"), ("checkpoint", "input")])
def test_adjoints_refuse_tensors_they_cannot_see(adjoint, where):
    """A plain callable f, or a callable input u(t), that closes over a tensor requiring grad which is neither a
    parameter of the system nor in adjoint_params: the adjoints differentiate only what they see, so that tensor got
    no gradient (None) silently; now a ValueError naming adjoint_params. Named in adjoint_params, the checkpointed
    gradient equals direct backprop's."""
    weight = nn.Parameter(torch.tensor([[0.3]], dtype=F64))
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64, requires_grad=True)
    if where == "field":
        f, kw = (lambda t, y: -weight * y), {}
    else:  # backsolve takes systems without inputs
        f, kw = (lambda t, y, v: -y + v), dict(u=lambda t: weight * torch.cos(t) * torch.ones_like(y0))
    with pytest.raises(ValueError, match=r"adjoint_params: .* does not see .* no gradient"):
        odelab.solve(f, y0, [0.0, 1.0], adjoint=adjoint, **kw)
    if adjoint == "checkpoint":
        grads = []
        for extra in (dict(adjoint=None), dict(adjoint="checkpoint", adjoint_params=[weight])):
            sol = odelab.solve(f, y0, [0.0, 1.0], method="rk4", dt=0.1, **kw, **extra)
            grads.append(torch.autograd.grad(sol.y[:, -1].sum(), [weight, y0]))
        _assert_equal_grads(*grads)


# -- backsolve: the continuous adjoint ------------------------------------------------------------------

@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
def test_backsolve_matches_direct_backprop_and_finite_differences(method):
    """Within 10 × tol of the converged direct-backprop gradient (rtol = atol = 1e-12) and of central finite
    differences of the backsolve loss itself. (Direct backprop at the same tol is itself off the exact gradient
    by ~30 × tol on this problem -- the discrete gradient of the dense output -- so it is not the reference.)"""
    tol = 1e-8
    field = MLP(d=2, h=5)
    y0 = torch.tensor([[0.5, -0.3], [1.0, 0.2], [-0.7, 0.4]], dtype=F64, requires_grad=True)
    t = torch.linspace(0.0, 2.0, 6, dtype=F64)
    weights = [torch.randn(3, 6, 2, dtype=F64, generator=torch.Generator().manual_seed(4))]
    kw = dict(method=method, rtol=tol, atol=tol)
    sol_d, g_d = _grads(field, y0, t, weights, method=method, rtol=1e-12, atol=1e-12)
    sol_b, g_b = _grads(field, y0, t, weights, adjoint="backsolve", **kw)
    assert float((sol_d.y - sol_b.y).detach().abs().max()) <= 10 * tol
    for a, b in zip(g_d, g_b):
        assert float((a - b).abs().max()) <= 10 * tol * max(1.0, float(a.abs().max())), float((a - b).abs().max())
    if method == "dopri5":
        params = [y0, *field.parameters()]
        loss = lambda: (solve_with_adjoint(field, y0, t, adjoint="backsolve", **kw).y * weights[0]).sum()
        assert_matches_finite_differences(loss, params, g_b, eps=1e-5, rtol=10 * tol)


def test_backsolve_fixed_step_rk4():
    """rk4 stepped backwards on the forward grid: the adjoint of the flow up to O(dt⁴) (direct backprop gives the
    discrete gradient; at dt = 0.01 the two agree to ~1e-10 here)."""
    field = MLP(d=3, h=6)
    y0 = torch.randn(2, 3, dtype=F64, generator=torch.Generator().manual_seed(8), requires_grad=True)
    t = torch.linspace(0.0, 2.0, 5, dtype=F64)
    weights = [torch.randn(2, 5, 3, dtype=F64, generator=torch.Generator().manual_seed(6))]
    sol_d, g_d = _grads(field, y0, t, weights, method="rk4", dt=0.01)
    sol_b, g_b = _grads(field, y0, t, weights, method="rk4", dt=0.01, adjoint="backsolve")
    assert torch.equal(sol_d.y, sol_b.y)
    for a, b in zip(g_d, g_b):
        assert float((a - b).abs().max()) <= 1e-8 * max(1.0, float(a.abs().max()))


def test_backsolve_two_blocks_and_per_sample_parameters():
    """VanDerPol with a per-sample μ buffer (the adjoint never slices the batch) and a two-block split."""

    class TwoBlocks(odelab.systems.System):
        blocks, observable = ("x", "v"), "x"

        def __init__(self):
            super().__init__()
            self.hidden_size = 2
            self.k = nn.Parameter(torch.tensor([1.0, 2.0], dtype=F64))
            self.register_buffer("damping", torch.tensor([[0.1], [0.3], [0.2]], dtype=F64))

        def derivative(self, t, state, inp=None, *delayed):
            x, v = state
            return v, -self.k * torch.sin(x) - self.damping * v

    system = TwoBlocks()
    x0 = torch.tensor([[0.5, -0.2], [1.0, 0.1], [0.3, 0.3]], dtype=F64, requires_grad=True)
    v0 = torch.zeros(3, 2, dtype=F64, requires_grad=True)
    t = torch.linspace(0.0, 3.0, 4, dtype=F64)
    gen = torch.Generator().manual_seed(7)
    weights = [torch.randn(3, 4, 2, dtype=F64, generator=gen) for _ in range(2)]
    tol = 1e-9

    def grads(**kw):
        solver = solve_with_adjoint if "adjoint" in kw else odelab.solve
        sol = solver(system, (x0, v0), t, method="dopri5", rtol=tol, atol=tol, **kw)
        loss = sum((w * y).sum() for w, y in zip(weights, sol.ys))
        return torch.autograd.grad(loss, [x0, v0, system.k])

    for a, b in zip(grads(), grads(adjoint="backsolve")):
        assert float((a - b).abs().max()) <= 10 * tol * max(1.0, float(a.abs().max()))


# -- errors ---------------------------------------------------------------------------------------------

def test_clear_errors():
    field = MLP()
    y0 = torch.randn(2, 3, dtype=F64)
    t = torch.linspace(0, 1, 3, dtype=F64)
    with pytest.raises(ValueError, match="adjoint: expected one of"):
        solve_with_adjoint(field, y0, t, adjoint="magic")
    with pytest.raises(ValueError, match="delay systems"):
        solve_with_adjoint(ENSO(), torch.zeros(2, 1, dtype=F64), t, method="rk4", dt=0.1, adjoint="backsolve")
    with pytest.raises(ValueError, match="delay systems take fixed-step methods"):
        solve_with_adjoint(ENSO(), torch.zeros(2, 1, dtype=F64), t, method="dopri5", adjoint="checkpoint")
    with pytest.raises(ValueError, match="u: adjoint='backsolve'"):
        solve_with_adjoint(LEM(2, 3).double(), (y0, y0), t, u=torch.zeros(2, 3, 2, dtype=F64), method="rk4",
                           dt=0.1, adjoint="backsolve")
    with pytest.raises(ValueError, match="explicit Runge--Kutta"):
        solve_with_adjoint(field, y0, t, method="imex", dt=0.1, adjoint="backsolve")
    with pytest.raises(ValueError, match="compile: not supported"):
        solve_with_adjoint(field, y0, t, compile=True, adjoint="checkpoint")
    with pytest.raises(ValueError, match="checkpoint_segments: not supported"):
        solve_with_adjoint(field, y0, t, method="rk4", dt=0.1, checkpoint_segments=2, adjoint="checkpoint")
    with pytest.raises(ValueError, match="dt: the fixed-step method"):
        solve_with_adjoint(field, y0, t, method="rk4", adjoint="checkpoint")
    with pytest.raises(TypeError, match="unexpected options"):
        solve_with_adjoint(field, y0, t, method="dopri5", bogus=1, adjoint="backsolve")
    with pytest.raises(ValueError, match="jump_times: not supported"):
        solve_with_adjoint(field, y0, t, adjoint="backsolve", jump_times=[0.5])
    with pytest.raises(ValueError, match="adjoint_params"):
        solve_with_adjoint(field, y0, t, adjoint="backsolve", adjoint_params=[torch.zeros(1)])


def test_solve_dispatches_the_adjoint_keyword():
    """odelab.solve(..., adjoint=...) gives checkpointed gradients equal to direct backprop and backsolve ones
    within the tolerance, and refuses an unknown mode."""

    class Tanh(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W = torch.nn.Parameter(torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 0.3)

        def forward(self, t, y):
            return torch.tanh(y @ self.W.T)

    field, y0 = Tanh(), torch.ones(2, 3, dtype=torch.float64)
    t = torch.linspace(0, 2, 5, dtype=torch.float64)
    grads = {}
    for mode in (None, "checkpoint", "backsolve"):
        field.zero_grad()
        sol = odelab.solve(field, y0, t, method="dopri5", rtol=1e-10, atol=1e-12, adjoint=mode)
        (sol.y ** 2).sum().backward()
        grads[mode] = field.W.grad.clone()
    assert torch.allclose(grads["checkpoint"], grads[None], rtol=1e-12, atol=1e-12)
    assert (grads["backsolve"] - grads[None]).abs().max() < 1e-8  # 100 × rtol: the continuous adjoint's own error
    with pytest.raises(ValueError, match="adjoint"):
        odelab.solve(field, y0, t, adjoint="magic")
