"""Fixed-step DDE stepping (odelab.solvers.fixed_delay) against exact method-of-steps solutions written here,
scipy and torchdde; convergence orders; hold inputs; gradients through the history and a learnable delay;
malformed arguments. Float64 throughout."""
import math

import numpy as np
import pytest
import torch
from numpy.polynomial import Polynomial
from torch import nn

import odelab
from odelab.systems import ENSO, MackeyGlass
from odelab.systems.base import System

from helpers import scipy_method_of_steps


pytestmark = pytest.mark.usefixtures("float64")


class Feedback(System):
    """y' = Σ_i k_i y(t − τ_i)  (+ u(t) with ``input_size=1``)."""

    blocks, observable, hidden_size = ("y",), "y", 1

    def __init__(self, taus=(1.0,), gains=(-1.0,), input_size=0):
        super().__init__()
        self.taus, self.gains, self.input_size = taus, gains, input_size

    @property
    def delays(self):
        return tuple(self.taus)

    def derivative(self, t, state, inp, *delayed):
        dy = sum(k * past[0] for k, past in zip(self.gains, delayed))
        return (dy if inp is None else dy + inp,)


# -- exact solutions ---------------------------------------------------------------------------------------

# y' = −y(t − 1), y = 1 on [−1, 0]: the method of steps by hand.
PIECES = [
    (0.0, 1.0, lambda t: 1 - t),
    (1.0, 2.0, lambda t: t**2 / 2 - 2 * t + 1.5),
    (2.0, 3.0, lambda t: 1 / 6 - (t - 1) ** 3 / 6 + (t - 1) ** 2 - 1.5 * (t - 1)),
]


def exact_by_hand(t):
    for a, b, piece in PIECES:
        if a <= t <= b:
            return piece(t)
    raise ValueError(t)


def method_of_steps(lags, gains, length, n, forcing=None, history=1.0):
    """Exact solution of y' = Σ_i gains[i] y(t − lags[i]·length) + forcing[j] on interval j = [j L, (j+1) L],
    y = history on t ≤ 0, as one polynomial per interval (delayed arguments lie in earlier intervals)."""
    pieces, start = [], history
    for j in range(n):
        integrand = Polynomial([forcing[j] if forcing is not None else 0.0])
        for lag, gain in zip(lags, gains):
            source = j - lag
            delayed = Polynomial([history]) if source < 0 else pieces[source](Polynomial([-lag * length, 1.0]))
            integrand = integrand + gain * delayed
        antiderivative = integrand.integ()
        pieces.append(antiderivative - antiderivative(j * length) + start)
        start = pieces[-1]((j + 1) * length)
    return lambda t: pieces[min(int(t / length), n - 1)](t)


def test_method_of_steps_helper_reproduces_the_hand_pieces():
    exact = method_of_steps([1], [-1.0], 1.0, 3)
    for t in np.linspace(0, 3, 31):
        assert abs(exact(t) - exact_by_hand(t)) < 1e-13


def max_error(sol, exact, times):
    return max(abs(sol.y[0, i, 0].item() - exact(t)) for i, t in enumerate(times))


@pytest.mark.parametrize("dt", [0.1, 0.25, 0.3, 0.07])
def test_rk4_exact_on_piecewise_cubic_solution(dt):
    """On [0, 3] the solution is piecewise cubic: rk4 (Simpson) is exact given exact delayed values, which
    the stage-aligned ring buffer (dt | τ) and the cubic Hermite interpolant (otherwise) both provide."""
    times = np.linspace(0, 3, 13).tolist()
    sol = odelab.solve(Feedback(), torch.ones(1, 1), times, method="rk4", dt=dt)
    assert max_error(sol, exact_by_hand, times) < 1e-12


@pytest.mark.parametrize("method, order", [("euler", 1), ("heun", 2), ("rk4", 4)])
@pytest.mark.parametrize("base", [0.25, 0.3], ids=["ring-buffer", "hermite"])
def test_convergence_order(method, order, base):
    """Slope of log error vs log dt at t = 5 (pieces of degree 4 and 5 on [3, 5]): the scheme's order, both
    with the stage-aligned ring buffer (dt divides τ = 1) and with Hermite reads (0.3 · 2^-j does not)."""
    exact = method_of_steps([1], [-1.0], 1.0, 5)
    dts = [base / 2**j for j in range(1, 5)]
    errors = []
    for dt in dts:
        sol = odelab.solve(Feedback(), torch.ones(1, 1), [0.0, 5.0], method=method, dt=dt)
        errors.append(abs(sol.y[0, -1, 0].item() - exact(5.0)))
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert abs(slope - order) < 0.25, (slope, errors)


def test_two_delays_rk4_order_four():
    """y' = −y(t − 1) − ½ y(t − ½): exact pieces on intervals of ½."""
    exact = method_of_steps([2, 1], [-1.0, -0.5], 0.5, 6)
    system = Feedback(taus=(1.0, 0.5), gains=(-1.0, -0.5))
    for base in (0.1, 0.15):
        dts = [base / 2**j for j in range(3)]
        errors = [abs(odelab.solve(system, torch.ones(1, 1), [0.0, 3.0], method="rk4", dt=dt).y[0, -1, 0].item()
                      - exact(3.0)) for dt in dts]
        slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
        assert errors[0] < 1e-5 and abs(slope - 4) < 0.3, (base, slope, errors)


def test_hold_input_jumps_use_left_derivatives():
    """y' = −y(t − 1) + u(t), u a hold input sampled every ½ (u_n acts on (t_{n−1}, t_n]): piecewise cubic on
    [0, 3], so rk4 with Hermite reads (dt = 0.3) is exact only if the interpolant takes the derivative's
    left limit at each input jump."""
    samples = [0.0, 0.7, -1.2, 0.4, 2.0, -0.5, 1.1]
    exact = method_of_steps([2], [-1.0], 0.5, 6, forcing=samples[1:])
    u_times = [0.5 * n for n in range(7)]
    u = torch.tensor(samples).reshape(1, 7, 1)
    times = np.linspace(0, 3, 13).tolist()
    for dt in (0.3, 0.1):
        sol = odelab.solve(Feedback(input_size=1), torch.ones(1, 1), times, u=u, u_times=u_times, method="rk4", dt=dt)
        assert max_error(sol, exact, times) < 1e-12, dt


def test_output_times_off_the_grid_and_stats():
    sol = odelab.solve(Feedback(), torch.ones(3, 1), [0.0, 0.33, 1.7, 2.95], method="rk4", dt=0.1)
    assert sol.y.shape == (3, 4, 1)
    assert max_error(sol, exact_by_hand, [0.0, 0.33, 1.7, 2.95]) < 1e-12
    aligned = odelab.solve(Feedback(), torch.ones(2, 1), [0.0, 2.0], method="rk4", dt=0.1)
    assert aligned.stats["nfe"].tolist() == [80, 80] and aligned.stats["steps"].tolist() == [20, 20]


def test_partitioned_scheme_on_a_delay_system():
    """A partitioned scheme reads the delays at t_n only: node reads when dt | τ, Hermite reads (with the
    extra derivative evaluations they need) otherwise; for a one-block field it is forward Euler."""
    exact = method_of_steps([1], [-1.0], 1.0, 3)
    for dt in (0.01, 0.013):
        imex = odelab.solve(Feedback(), torch.ones(1, 1), [0.0, 3.0], method="imex", dt=dt)
        euler = odelab.solve(Feedback(), torch.ones(1, 1), [0.0, 3.0], method="euler", dt=dt)
        assert (imex.y - euler.y).abs().max().item() < 1e-13
        assert abs(imex.y[0, -1, 0].item() - exact(3.0)) < 0.01


# -- classical DDEs against scipy and torchdde -----------------------------------------------------------------

def enso_rhs(T, Td, c=0.93, gamma=0.49):
    return T - T**3 - c * Td * (1 - gamma * Td**2)


def mackey_glass_rhs(x, xd, a=0.2, b=0.1, n=10):
    return a * xd / (1 + xd**n) - b * x


@pytest.mark.parametrize("system, rhs, delta, horizon, dt, tol", [
    (ENSO(), enso_rhs, 4.8, 40.0, 0.05, 2e-6),
    (MackeyGlass(), mackey_glass_rhs, 17.0, 120.0, 0.25, 2e-6),
])
def test_classical_ddes_against_scipy_method_of_steps(system, rhs, delta, horizon, dt, tol):
    y0 = torch.rand(5, 1, generator=torch.Generator().manual_seed(0))
    times = np.linspace(0, horizon, 41).tolist()
    sol = odelab.solve(system, y0, times, method="rk4", dt=dt)
    ref = scipy_method_of_steps(rhs, delta, y0[:, 0].numpy(), times)
    assert np.abs(sol.y[:, :, 0].numpy() - ref).max() < tol


@pytest.mark.filterwarnings("ignore:b_err_list is only zeros")  # torchdde says RK4 has no error estimate: known
def test_enso_against_torchdde_and_the_adapter():
    torchdde = pytest.importorskip("torchdde")
    from odelab.interop import torchdde_system

    system = ENSO()
    y0 = torch.rand(4, 1, generator=torch.Generator().manual_seed(1))
    ts = torch.linspace(0, 30, 301)
    dt = torch.tensor(0.05)
    ours = odelab.solve(system, y0, ts, method="rk4", dt=0.05).y
    field = torchdde_system(system)
    theirs = torchdde.integrate(field, torchdde.RK4(), ts[0], ts[-1], ts, lambda t: field.pack((y0,)), None,
                                dt0=dt, delays=field.delays, discretize_then_optimize=True, max_steps=1000)

    def by_hand(t, y, args, history):
        return enso_rhs(y, history[0])

    direct = torchdde.integrate(by_hand, torchdde.RK4(), ts[0], ts[-1], ts, lambda t: y0, None, dt0=dt,
                                delays=torch.tensor([4.8]), discretize_then_optimize=True, max_steps=1000)
    assert (theirs - direct).abs().max().item() < 1e-13  # the adapter is the same vector field
    assert (ours - theirs).abs().max().item() < 2e-6  # two fourth-order DDE solvers at the same step


def test_adapter_packs_blocks_and_inputs():
    from odelab.interop import torchdde_system

    system = odelab.systems.TauGRU(2, 3, 1.5)
    field = torchdde_system(system)
    h, hd, x = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 2)
    got = field(torch.tensor(0.0), h, lambda t: x, [hd])
    assert torch.equal(got, system.derivative(0.0, (h,), system.encode(x), (hd,))[0])
    with pytest.raises(ValueError, match="system"):
        torchdde_system(odelab.systems.VanDerPol())


# -- gradients -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [0.25, 0.3])
def test_gradcheck_through_constant_history(dt):
    def run(history, y0):
        return odelab.solve(Feedback(gains=(-1.3,)), y0, [0.0, 1.2, 2.5], method="rk4", dt=dt, history=history).y

    history = torch.randn(2, 1, requires_grad=True)
    y0 = torch.randn(2, 1, requires_grad=True)
    assert torch.autograd.gradcheck(run, (history, y0))


def test_gradcheck_through_callable_history():
    """φ(t) = a + b t + c t²: the stage reads before t0 call φ; Hermite reads (dt = 0.3) and aligned ones."""
    def run(a, b, c, y0):
        phi = lambda t: a + b * t + c * t * t
        return odelab.solve(Feedback(taus=(1.0, 0.6), gains=(-1.0, 0.5)), y0, [0.0, 0.9, 2.0], method="rk4",
                            dt=0.3, history=phi).y

    args = tuple(torch.randn(2, 1, requires_grad=True) for _ in range(4))
    assert torch.autograd.gradcheck(run, args)


def test_history_gradient_of_the_first_step_is_exact():
    """y' = −y(t − 1) with φ ≡ h and y0: y(t) = y0 − h t on [0, 1], so ∂y(1)/∂h = −1, ∂y(1)/∂y0 = 1."""
    h = torch.tensor([[0.4]], requires_grad=True)
    y0 = torch.tensor([[1.0]], requires_grad=True)
    odelab.solve(Feedback(), y0, [0.0, 1.0], method="rk4", dt=0.1, history=h).y[0, -1, 0].backward()
    assert abs(h.grad.item() + 1) < 1e-12 and abs(y0.grad.item() - 1) < 1e-12


class LearnableDelay(Feedback):
    def __init__(self, tau):
        super().__init__()
        self.tau = nn.Parameter(torch.tensor(tau))

    @property
    def delays(self):
        return (self.tau,)


def test_learnable_delay_gradient_is_exact_on_the_second_interval():
    """y' = −y(t − τ), y ≡ 1 before 0: y(t) = 1 − t + (t − τ)²/2 on [τ, 2τ], so ∂y/∂τ = −(t − τ)."""
    system = LearnableDelay(1.0)
    sol = odelab.solve(system, torch.ones(1, 1), [0.0, 1.5], method="rk4", dt=0.1)
    sol.y[0, -1, 0].backward()
    assert abs(sol.y[0, -1, 0].item() - (1 - 1.5 + 0.5**2 / 2)) < 1e-12
    assert abs(system.tau.grad.item() + 0.5) < 1e-12


class LearnableENSO(ENSO):
    def __init__(self, delta):
        super().__init__()
        self.delta_parameter = nn.Parameter(torch.tensor(delta))

    @property
    def delays(self):
        return (self.delta_parameter,)


def test_learnable_delay_gradient_matches_finite_differences():
    """Autograd differentiates the solve at a fixed step grid, finite differences also move the grid points
    t0 + kδ: the two agree to O(dt³) (measured 4.5e-6, 5.6e-7, 1.2e-7 at dt = 0.1, 0.05, 0.025)."""
    y0 = torch.tensor([[0.3], [0.8]])
    weights = torch.tensor([[1.0], [-0.7]])

    def loss(delta, grad=False):
        system = LearnableENSO(delta)
        value = (odelab.solve(system, y0, [0.0, 25.0], method="rk4", dt=0.05).y[:, -1] * weights).sum()
        if grad:
            value.backward()
            return value.item(), system.delta_parameter.grad.item()
        return value.item()

    _, grad = loss(4.8, grad=True)
    eps = 1e-5
    finite = (loss(4.8 + eps) - loss(4.8 - eps)) / (2 * eps)
    assert abs(grad - finite) <= 2e-6, (grad, finite)


# -- reads resolved before the loop (fixed delays) against the reads by time ---------------------------------

class TanhFeedback(Feedback):
    """y' = Σ_i k_i tanh(y(t − τ_i)) − 0.2 y  (+ u(t) with ``input_size=1``); the τ_i may be learnable tensors."""

    def derivative(self, t, state, inp, *delayed):
        dy = sum(k * torch.tanh(past[0]) for k, past in zip(self.gains, delayed)) - 0.2 * state[0]
        return (dy if inp is None else dy + inp,)


@pytest.mark.parametrize("method, dt", [("rk4", 0.1), ("heun", 0.07), ("euler", 0.05), ("rk4", 0.03)])
def test_fixed_delay_agrees_with_the_same_delay_made_learnable(method, dt):
    """τ = 0.73 is no multiple of dt: every stage after t0 + τ reads through the Hermite interpolant. A fixed τ
    takes the reads resolved before the loop, a learnable one (a tensor requiring grad) the reads by time with
    θ a tensor of τ: one solution to 1e-12."""
    y0, t = torch.tensor([[0.3], [1.2]]), torch.linspace(0, 8, 9)
    fixed = odelab.solve(TanhFeedback((0.73,), (-1.3,)), y0, t, method=method, dt=dt).y
    tau = nn.Parameter(torch.tensor(0.73))
    learnable = odelab.solve(TanhFeedback((tau,), (-1.3,)), y0, t, method=method, dt=dt).y
    assert (fixed - learnable).abs().max().item() < 1e-12


@pytest.mark.parametrize("method, dt", [("rk4", 0.1), ("heun", 0.06), ("midpoint", 0.07)])
def test_reads_resolved_ahead_equal_the_reads_by_time(method, dt):
    """``adjoint="checkpoint"`` steps with the reads by time (fixed_delay._Past), ``odelab.solve`` with the reads
    resolved before the loop: over hundreds of steps (many chunks of resolved reads, the past released behind
    them), with one delay a multiple of dt and one not (stage-aligned and Hermite reads), hold-input jumps
    (left-limit derivatives in the Hermite data) and a callable history, the two give the same bits, and
    gradients equal to round-off."""
    from odelab.solvers.adjoint import solve_with_adjoint

    system = TanhFeedback((1.4, 0.55), (-1.1, 0.6), input_size=1)
    gen = torch.Generator().manual_seed(3)
    y0 = torch.randn(3, 1, generator=gen).requires_grad_()
    u, u_times = torch.randn(3, 31, 1, generator=gen), [0.75 * n for n in range(31)]
    scale = torch.tensor(0.8, requires_grad=True)
    kw = dict(u=u, u_times=u_times, method=method, dt=dt, history=lambda s: scale * torch.cos(s) * torch.ones(3, 1))
    t = torch.linspace(0, 22.5, 10)
    ahead = odelab.solve(system, y0, t, **kw)
    by_time = solve_with_adjoint(system, y0, t, adjoint="checkpoint", adjoint_params=[scale], **kw)
    assert torch.equal(ahead.y, by_time.y) and torch.equal(ahead.stats["nfe"], by_time.stats["nfe"])
    weights = torch.randn(3, 10, 1, generator=gen)
    grads = [torch.autograd.grad((sol.y * weights).sum(), (y0, scale)) for sol in (ahead, by_time)]
    for a, b in zip(*grads):
        assert (a - b).abs().max().item() <= 1e-12 * (1 + b.abs().max().item())


# -- compile=True: blocks of steps in one compiled call ------------------------------------------------------

def test_compiled_blocks_equal_the_eager_steps(monkeypatch):
    """With delays that are multiples of dt (37 and 29 steps, both more than a compiled block, here of 6 steps
    so that a cold compilation takes seconds, not minutes: the solver's 24 only makes the graph longer),
    once every stage reads aligned stages, ``compile=True`` runs blocks of steps through torch.compile, reading
    stages of eager steps and of earlier blocks (straddling two of them: 37 is no multiple of 6): the same
    nodes to round-off over hundreds of steps (the first τ on the history, eagerly), the same evaluation
    count, and gradients with respect to y0 and a parameter of the history to round-off."""
    from torch._dynamo.utils import counters
    from odelab.solvers import fixed_delay

    monkeypatch.setattr(fixed_delay, "_BLOCK", 6)
    monkeypatch.setattr(fixed_delay, "_CHUNK", 24)  # a multiple of the block
    monkeypatch.setattr(fixed_delay, "_COMPILED_BLOCKS", {})  # no block of another length is reused or kept

    system = TanhFeedback((3.7, 2.9), (-1.1, 0.6))
    gen = torch.Generator().manual_seed(5)
    y0 = torch.randn(3, 1, generator=gen).requires_grad_()
    scale = torch.tensor(0.8, requires_grad=True)
    kw = dict(method="rk4", dt=0.1, history=lambda s: scale * torch.cos(s) * torch.ones(3, 1))
    t = torch.linspace(0, 30, 61)
    graphs = counters["stats"]["unique_graphs"]
    compiled = odelab.solve(system, y0, t, compile=True, **kw)
    assert (system, "rk4", "cpu", (1,)) in fixed_delay._COMPILED_BLOCKS and counters["stats"]["unique_graphs"] > graphs
    eager = odelab.solve(system, y0, t, **kw)
    assert torch.equal(compiled.stats["nfe"], eager.stats["nfe"])
    assert (compiled.y - eager.y).abs().max().item() <= 1e-12 * eager.y.abs().max().item()
    weights = torch.randn(3, 61, 1, generator=gen)
    grads = [torch.autograd.grad((sol.y * weights).sum(), (y0, scale)) for sol in (compiled, eager)]
    for a, b in zip(*grads):
        assert (a - b).abs().max().item() <= 1e-10 * (1 + b.abs().max().item())


def test_compile_is_refused_where_it_does_not_apply():
    y0, t = torch.ones(2, 1), torch.linspace(0, 3, 4)
    with pytest.raises(TypeError, match="compile"):
        odelab.solve(Feedback(), y0, t, method="rk4", dt=0.1, compile=1)
    with pytest.raises(ValueError, match="compile"):  # an ODE: the adaptive methods compile those
        odelab.solve(lambda t, y: -y, y0, t, method="rk4", dt=0.1, compile=True)
    with pytest.raises(ValueError, match="compile"):  # an input
        odelab.solve(Feedback(input_size=1), y0, t, u=torch.ones(2, 4, 1), method="rk4", dt=0.1, compile=True)
    with pytest.raises(ValueError, match="compile"):  # a partitioned scheme
        odelab.solve(Feedback(), y0, t, method="imex", dt=0.1, compile=True)


# -- malformed arguments -------------------------------------------------------------------------------

@pytest.mark.parametrize("history", [
    torch.ones(3, 1),  # wrong batch
    torch.ones(2, 2),  # wrong size
    (torch.ones(2, 1), torch.ones(2, 1)),  # two blocks for a one-block system
    {"x": torch.ones(2, 1)},  # wrong block name
    torch.tensor([[1.0], [float("nan")]]),
    lambda t: torch.ones(2, 3),
])
def test_malformed_history_raises_value_error(history):
    with pytest.raises(ValueError, match="history"):
        odelab.solve(Feedback(), torch.ones(2, 1), [0.0, 1.0], method="rk4", dt=0.1, history=history)


def test_callable_history_receives_a_0dim_time_tensor():
    """φ(t) = cos t with t a 0-dim tensor of the state's dtype: the batch shares the time in a fixed-step solve
    (solve's convention for every user callable; the adaptive methods pass (batch, 1)); on [0, 1],
    y' = −cos(t − 1) gives y = 1 − sin(t − 1) − sin 1."""
    seen = []

    def phi(t):
        seen.append(tuple(t.shape))
        return torch.cos(t)

    times = [0.0, 0.5, 1.0]
    sol = odelab.solve(Feedback(), torch.ones(3, 1), times, method="rk4", dt=0.1, history=phi)
    exact = [1 - math.sin(t - 1) - math.sin(1) for t in times]
    assert (sol.y[:, :, 0] - torch.tensor(exact)).abs().max().item() < 1e-6
    assert set(seen) == {()}


def test_history_of_wrong_type_raises_type_error():
    with pytest.raises(TypeError, match="history"):
        odelab.solve(Feedback(), torch.ones(2, 1), [0.0, 1.0], method="rk4", dt=0.1, history="constant")


def test_accepted_history_forms_agree():
    y0 = torch.full((2, 1), 0.5)
    forms = [None, 0.5, torch.tensor(0.5), torch.full((2, 1), 0.5), {"y": y0}, (y0,), lambda t: y0, lambda t: 0.5]
    results = [odelab.solve(Feedback(), y0, [0.0, 2.0], method="rk4", dt=0.1, history=h).y for h in forms]
    assert all(torch.equal(results[0], r) for r in results[1:])


def test_step_larger_than_the_delay_is_refused():
    with pytest.raises(ValueError, match="dt"):
        odelab.solve(Feedback(taus=(0.5,)), torch.ones(1, 1), [0.0, 1.0], method="rk4", dt=0.6)


def test_non_positive_delay_is_refused():
    with pytest.raises(ValueError, match="delays"):
        odelab.solve(Feedback(taus=(0.0,)), torch.ones(1, 1), [0.0, 1.0], method="rk4", dt=0.1)


def test_history_on_an_ode_is_refused():
    with pytest.raises(ValueError, match="history"):
        odelab.solve(odelab.systems.VanDerPol(), torch.ones(1, 2), [0.0, 1.0], method="rk4", dt=0.1, history=1.0)
