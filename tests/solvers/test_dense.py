"""Dense output (``solve(..., dense=True)``, ``Solution.evaluate``) and delay solves that continue a dense solution.
References: closed forms, the exact solution of a linear ODE with a hold or linear input (matrix exponentials, knot
to knot) and of a polynomial DDE (method of steps in exact polynomial arithmetic), from ``helpers``."""
import math

import numpy as np
import pytest
import torch

import odelab
from odelab.solvers import fused_step
from odelab.systems import ENSO, System, VanDerPol

from helpers import (assert_matches_finite_differences, learnable_delay_system, linear_ode_exact,
                     polynomial_dde_exact)

F64 = torch.float64
ADAPTIVE = ["dopri5", "tsit5", "bosh3"]
PROBLEM = dict(A=np.array([[-1.0, 2.0], [-2.0, -0.5]]), B=np.array([[1.0], [0.5]]),
               knots=[0.0, 0.37, 0.81, 1.3, 1.77, 2.4, 3.0], u=np.array([[0.0], [1.0], [-1.0], [2.0], [0.5], [0.0], [1.0]]))
QUERIES = np.linspace(0, 3, 301)  # most between output times, steps and knots


def _linear_solve(kind, **kw):
    """y' = A y + B u(t) from (0.3, −0.2), outputs at 0, 1.5, 3 only."""
    At, Bt = torch.tensor(PROBLEM["A"]), torch.tensor(PROBLEM["B"])
    return odelab.solve(lambda s, y, v: y @ At.T + v @ Bt.T, torch.tensor([[0.3, -0.2]], dtype=F64), [0.0, 1.5, 3.0],
                        u=torch.tensor(PROBLEM["u"]).reshape(1, -1, 1), u_times=PROBLEM["knots"], interpolation=kind,
                        dense=True, **kw)


def _linear_exact(kind, times=QUERIES):
    return linear_ode_exact(PROBLEM["A"], [0.3, -0.2], times, PROBLEM["B"], PROBLEM["knots"], PROBLEM["u"], kind)


@pytest.mark.parametrize("kind", ["hold", "linear"])
@pytest.mark.parametrize("method", ADAPTIVE)
def test_adaptive_dense_output_between_steps_within_the_tolerance(method, kind):
    """The continuous extension read at 301 times, most inside steps: within 20 tol of the exact solution (the
    outputs' own error is that of the steps; the extension adds one of its order, which the tolerance holds)."""
    tol = 1e-9
    sol = _linear_solve(kind, method=method, rtol=tol, atol=tol)
    y, = sol.evaluate(torch.tensor(QUERIES))
    assert y.shape == (1, len(QUERIES), 2)
    assert np.abs(y[0].numpy() - _linear_exact(kind)).max() <= 20 * tol


@pytest.mark.parametrize("method", ADAPTIVE + ["rk4", "euler", "midpoint"])
def test_evaluate_at_the_output_times_gives_the_outputs(method):
    kw = dict(rtol=1e-7, atol=1e-9) if method in ADAPTIVE else dict(dt=0.07)
    sol = _linear_solve("hold", method=method, **kw)
    y, = sol.evaluate(sol.ts)
    assert torch.allclose(y, sol.y, rtol=0, atol=1e-13)


def _fitted_order(dts, errors) -> float:
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


@pytest.mark.parametrize("kind", ["hold", "linear"])
def test_rk4_hermite_dense_output_keeps_order_four_between_nodes(kind):
    """Between the nodes the Hermite interpolant of an rk4 solve is O(dt⁴) accurate (its own error is O(dt⁴) with
    exact node data): the log-log slope of the largest error at 301 times over dt = 0.06/2^k is 4 ± 0.3. A hold
    input's jumps sit on nodes, and f is read inside each step (left limit at its end), so they are not smeared."""
    dts = [0.06 / 2**k for k in range(4)]
    errors = [np.abs(_linear_solve(kind, method="rk4", dt=dt).evaluate(torch.tensor(QUERIES))[0][0].numpy()
                     - _linear_exact(kind)).max() for dt in dts]
    assert abs(_fitted_order(dts, errors) - 4) <= 0.3, errors


def test_hermite_is_exact_for_a_cubic_solution():
    """y' = 3t² − 2t (y = t³ − t² + 1): rk4 is exact at the nodes (Simpson's rule on a quadratic) and the cubic
    Hermite interpolant of exact values and slopes is the cubic itself, between every pair of nodes."""
    sol = odelab.solve(lambda t, y: (3 * t**2 - 2 * t) * torch.ones_like(y), torch.ones(2, 1, dtype=F64), [0.0, 2.0],
                       method="rk4", dt=0.3, dense=True)
    t = torch.linspace(0, 2, 97, dtype=F64)
    y, = sol.evaluate(t)
    assert torch.allclose(y[:, :, 0], (t**3 - t**2 + 1).expand(2, -1), rtol=0, atol=1e-13)


def test_a_hold_input_jump_is_not_smeared_across_its_node():
    """y' = u (hold), y piecewise linear: every scheme and the Hermite pieces reproduce it exactly, also right
    next to the sample times where u jumps (a slope read with the next step's input would bend the neighbour)."""
    knots = [0.0, 0.5, 1.25, 2.0]
    u = torch.tensor([0.0, 3.0, -2.0, 1.0], dtype=F64).reshape(1, -1, 1)
    exact = lambda s: sum(v * max(0.0, min(s, b) - a) for a, b, v in zip(knots, knots[1:], [3.0, -2.0, 1.0]))
    t = torch.tensor([0.1, 0.4999, 0.5, 0.5001, 1.2, 1.2499, 1.25, 1.2501, 1.9, 2.0], dtype=F64)
    for method, kw in [("rk4", dict(dt=0.2)), ("euler", dict(dt=0.3)), ("dopri5", dict(rtol=1e-6, atol=1e-9))]:
        sol = odelab.solve(lambda s, y, v: v, torch.zeros(1, 1, dtype=F64), [0.0, 2.0], u=u, u_times=knots,
                           method=method, dense=True, **kw)
        y, = sol.evaluate(t)
        assert np.allclose(y[0, :, 0].numpy(), [exact(s) for s in t.tolist()], rtol=0, atol=1e-13), method


def test_shapes_blocks_and_per_sample_times():
    """A number gives (batch, size) per block, J times (batch, J, size), a (batch, J) tensor each sample at its own
    times; two blocks come back split as the state is. Harmonic oscillator x' = v, v' = −x: (cos, −sin)."""

    class Oscillator(System):
        blocks, observable, hidden_size = ("x", "v"), "x", 1

        def derivative(self, t, state, inp):
            x, v = state
            return v, -x

    y0 = (torch.tensor([[1.0], [2.0]], dtype=F64), torch.zeros(2, 1, dtype=F64))
    sol = odelab.solve(Oscillator(), y0, [0.0, 4.0], dense=True, rtol=1e-10, atol=1e-12)
    x, v = sol.evaluate(1.3)
    assert x.shape == v.shape == (2, 1)
    assert torch.allclose(x[:, 0], torch.tensor([1.0, 2.0], dtype=F64) * math.cos(1.3), atol=1e-8)
    assert torch.allclose(v[:, 0], -torch.tensor([1.0, 2.0], dtype=F64) * math.sin(1.3), atol=1e-8)
    x, v = sol.evaluate([0.5, 2.5, 3.5])
    assert x.shape == (2, 3, 1)
    own = torch.tensor([[0.3, 3.9], [1.1, 2.2]], dtype=F64)
    x, _ = sol.evaluate(own)
    assert torch.allclose(x[..., 0], torch.tensor([[1.0], [2.0]], dtype=F64) * torch.cos(own), atol=1e-8)


def test_backwards_in_time():
    sol = odelab.solve(lambda t, y: -y, torch.tensor([[1.0], [3.0]], dtype=F64), [2.0, 0.0], dense=True,
                       rtol=1e-10, atol=1e-12)
    t = torch.tensor([1.9, 1.0, 0.25], dtype=F64)
    y, = sol.evaluate(t)
    assert torch.allclose(y[..., 0], torch.tensor([[1.0], [3.0]], dtype=F64) * torch.exp(2.0 - t), rtol=1e-8)
    with pytest.raises(ValueError, match="t: .*outside"):
        sol.evaluate(2.5)


def test_a_failed_sample_reads_nan_after_it_stopped():
    """y' = y² blows up at t = 1/y0: the sample with y0 = 1 stops before 2 (status), the other is read normally."""
    sol = odelab.solve(lambda t, y: y * y, torch.tensor([[0.1], [1.0]], dtype=F64), [0.0, 2.0], dense=True,
                       max_steps=200, throw=False)
    assert bool(sol.success[0]) and not bool(sol.success[1])
    y, = sol.evaluate([0.5, 1.5])
    assert torch.allclose(y[0, :, 0], 0.1 / (1 - 0.1 * torch.tensor([0.5, 1.5], dtype=F64)), rtol=1e-5)
    assert torch.isnan(y[1, 1]).all() and torch.isfinite(y[1, 0]).all()


def test_gradients_through_evaluate():
    """d/dθ of y(t*) between output times against central differences (y0 and a parameter of f), and d/dt of a
    tensor t against f itself (the polynomial's slope, within the extension's accuracy)."""
    k = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64, requires_grad=True)

    def value():
        sol = odelab.solve(lambda t, y: -k * y + torch.sin(t), y0, [0.0, 3.0], dense=True, rtol=1e-10, atol=1e-12)
        return (sol.evaluate([1.234, 2.5])[0] ** 2).sum()

    assert_matches_finite_differences(value, [y0, k], torch.autograd.grad(value(), [y0, k]), eps=1e-6, rtol=1e-5)
    sol = odelab.solve(lambda t, y: -y, torch.tensor([[2.0]], dtype=F64), [0.0, 3.0], dense=True, rtol=1e-10,
                       atol=1e-12)
    t = torch.tensor(1.1, dtype=F64, requires_grad=True)
    slope, = torch.autograd.grad(sol.evaluate(t)[0].sum(), t)
    assert abs(float(slope) + 2 * math.exp(-1.1)) <= 1e-6


def test_nfe_counts_the_hermite_slopes():
    """rk4 with N steps and no input: f at the start plus one at every step's end, N + 1 beyond the 4 N stages."""
    sol = odelab.solve(lambda t, y: -y, torch.ones(1, 1, dtype=F64), [0.0, 1.0], method="rk4", dt=0.1, dense=True)
    assert int(sol.stats["steps"][0]) == 10
    assert int(sol.stats["nfe"][0]) == 4 * 10 + 11


def _fused_and_torch(run):
    """(fused CPU loop, torch loop) results of ``run()`` without gradients; asserts the fused loop ran."""
    calls, segment = [], fused_step.FusedLoop.segment

    def counted(self, *args):
        calls.append(1)
        return segment(self, *args)

    with torch.no_grad(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_step.FusedLoop, "segment", counted)
        fused = run()
        assert calls, "the fused loop did not run"
        patch.setattr(fused_step, "usable", lambda *args: False)
        plain = run()
    return fused, plain


@pytest.mark.parametrize("delay", [False, True], ids=["ode", "delay"])
def test_the_fused_loop_keeps_the_same_pieces_as_the_torch_loop(delay):
    """The fused CPU loop (no gradient) copies every sample's last accepted step after each attempt: read at 241
    times, the same values as the torch loop's step records to round-off, with the same steps; a sample that fails
    (max_steps) reads NaN after it stopped in both. Van der Pol with μ from 0.5 to 8; ENSO (ring history)."""
    if delay:
        system, y0, end, kw = ENSO(), torch.tensor([[0.1], [0.5], [-0.3]], dtype=F64), 20.0, {}
    else:
        system = VanDerPol(mu=torch.tensor([0.5, 3.0, 8.0], dtype=F64))
        y0, end, kw = torch.tensor([[2.0, 0.0], [1.0, 0.5], [2.0, 0.0]], dtype=F64), 12.0, dict(max_steps=300)
    times = torch.linspace(0, end, 241, dtype=F64)
    fused, plain = _fused_and_torch(lambda: odelab.solve(system, y0, [0.0, end], rtol=1e-7, atol=1e-9, dense=True,
                                                         throw=False, **kw))
    assert torch.equal(fused.stats["steps"], plain.stats["steps"])
    assert torch.equal(fused.status, plain.status)
    assert delay or not bool(plain.success.all())
    a, b = fused.evaluate(times)[0], plain.evaluate(times)[0]
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    assert torch.allclose(a.nan_to_num(), b.nan_to_num(), rtol=0, atol=1e-9)


class Feedback(System):
    """y' = k y(t − τ) + u(t)."""

    blocks, observable, hidden_size = ("y",), "y", 1

    def __init__(self, tau=1.0, gain=-1.0, input_size=0):
        super().__init__()
        self.tau, self.input_size = tau, input_size
        self.gain = torch.nn.Parameter(torch.tensor(gain, dtype=F64))

    @property
    def delays(self):
        return (self.tau,)

    def derivative(self, t, state, inp, *delayed):
        d = self.gain * delayed[0][0]
        return (d if inp is None else d + inp,)


KNOTS = [0.0, 0.3, 0.75, 1.45, 2.2, 3.1]
SAMPLES = [0.0, 0.7, -1.2, 0.4, 2.0, -0.5]


def _delay(t0, t1, method, history, y0, **kw):
    return odelab.solve(Feedback(input_size=1), y0, [t0, t1], u=torch.tensor(SAMPLES, dtype=F64).reshape(1, -1, 1),
                        u_times=KNOTS, history=history, method=method, **kw)


def _delay_exact(times):
    return polynomial_dde_exact([-1.0], [1.0], 1.0, 0.5, times, KNOTS, SAMPLES, "hold")


@pytest.mark.parametrize("method,kw,bound", [("dopri5", dict(rtol=1e-10, atol=1e-12), 1e-9),
                                             ("bosh3", dict(rtol=1e-10, atol=1e-12), 1e-9),
                                             ("rk4", dict(dt=0.05), 1e-5), ("rk4", dict(dt=0.03), 1e-6)],
                         ids=["dopri5", "bosh3", "rk4-aligned", "rk4-hermite-reads"])
def test_delay_dense_output(method, kw, bound):
    """y' = −y(t − 1) + u (hold), history 0.5, y0 = 1, on [0, 3.1] read at 311 times against the exact piecewise
    polynomial: the adaptive methods' extension and the fixed-step Hermite pieces (jumps of u and of the history
    at 0, propagated, all on nodes)."""
    sol = _delay(0.0, 3.1, method, torch.full((1, 1), 0.5, dtype=F64), torch.ones(1, 1, dtype=F64), dense=True,
                 **kw)
    times = np.linspace(0, 3.1, 311)
    y, = sol.evaluate(torch.tensor(times))
    assert np.abs(y[0, :, 0].detach().numpy() - _delay_exact(times)).max() <= bound


@pytest.mark.parametrize("method,kw", [("dopri5", dict(rtol=1e-10, atol=1e-12)), ("rk4", dict(dt=0.05))])
def test_a_delay_solve_continues_a_dense_solution(method, kw):
    """[0, 3.1] in two solves, the second from 1.6 with ``history=`` the first: the same values as one solve and the
    exact solution."""
    history, y0 = torch.full((1, 1), 0.5, dtype=F64), torch.ones(1, 1, dtype=F64)
    first = _delay(0.0, 1.6, method, history, y0, dense=True, **kw)
    second = _delay(1.6, 3.1, method, first, first.evaluate(1.6)[0], **kw)
    whole = _delay(0.0, 3.1, method, history, y0, **kw)
    assert torch.allclose(second.y[:, -1], whole.y[:, -1], rtol=0, atol=1e-12 if method == "dopri5" else 1e-9)
    if method == "dopri5":
        assert abs(float(second.y[0, -1, 0].detach()) - _delay_exact([3.1])[0]) <= 1e-12


def test_the_continued_solve_lands_on_the_kinks_of_its_history():
    """y' = −y(t − 1), history 1 (no input): y is a polynomial between the integers, whose derivatives jump at
    t0 = 0 and its propagations 1, 2, 3. Continued from 1.5, the second solve's own t0 + kτ are 2.5, 3.5; the
    first solve's kinks make it land on 2 and 3 too, where dopri5 (exact on polynomials of degree ≤ 4 between
    landing points) then stays exact: 5.0e-16 (1.4e-9 at rtol 1e-10 without them)."""
    system, y0 = Feedback(), torch.ones(1, 1, dtype=F64)
    first = odelab.solve(system, y0, [0.0, 1.5], dense=True, rtol=1e-10, atol=1e-12)
    second = odelab.solve(system, first.evaluate(1.5)[0], [1.5, 3.5], history=first, rtol=1e-10, atol=1e-12)
    exact = polynomial_dde_exact([-1.0], [1.0], 1.0, 1.0, [3.5])[0]
    assert abs(float(second.y[0, -1, 0].detach()) - exact) <= 1e-13


@pytest.mark.parametrize("method,kw", [("bosh3", dict(rtol=1e-9, atol=1e-11)), ("dopri5", dict(rtol=1e-10, atol=1e-12)),
                                       ("rk4", dict(dt=0.01))])
def test_a_learnable_delay_differentiates_the_dense_output(method, kw):
    """d/dτ of y read between the outputs (y' = −y(t − τ) + 0.1 y, τ a parameter, a history per sample) against
    central differences: the pieces carry the delay's gradient (fixed-step: the moving jump at t0 + τ too)."""

    system = learnable_delay_system()
    y0, history = torch.tensor([[1.0], [0.5]], dtype=F64), torch.tensor([[0.7], [0.2]], dtype=F64)

    def value():
        sol = odelab.solve(system, y0, [0.0, 3.0], method=method, history=history, dense=True, **kw)
        return (sol.evaluate([1.3, 2.77])[0] ** 2).sum()

    grads = torch.autograd.grad(value(), [system.tau])
    assert_matches_finite_differences(value, [system.tau], grads, eps=1e-6, rtol=1e-5 if method != "rk4" else 1e-4)


def test_gradients_flow_through_a_continued_solve():
    """d y(3) / d(gain, y0) of the continued solve (rk4) equal those of one solve over [0, 3]."""
    system = Feedback()
    y0 = torch.tensor([[1.0], [0.4]], dtype=F64, requires_grad=True)
    first = odelab.solve(system, y0, [0.0, 1.5], method="rk4", dt=0.05, dense=True)
    second = odelab.solve(system, first.evaluate(1.5)[0], [1.5, 3.0], history=first, method="rk4", dt=0.05)
    whole = odelab.solve(system, y0, [0.0, 3.0], method="rk4", dt=0.05)
    got = torch.autograd.grad(second.y[:, -1].sum(), [system.gain, y0])
    want = torch.autograd.grad(whole.y[:, -1].sum(), [system.gain, y0])
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12)


def test_errors_name_the_argument():
    f = lambda t, y: -y
    y0 = torch.ones(2, 1, dtype=F64)
    plain = odelab.solve(f, y0, [0.0, 1.0])
    with pytest.raises(ValueError, match="dense=True"):
        plain.evaluate(0.5)
    sol = odelab.solve(f, y0, [0.0, 1.0], dense=True)
    with pytest.raises(ValueError, match="t: 1.5 lies outside"):
        sol.evaluate(1.5)
    with pytest.raises(ValueError, match=r"t: expected .* \(batch, J\)"):
        sol.evaluate(torch.zeros(3, 2))
    with pytest.raises(TypeError, match="dense: expected True or False"):
        odelab.solve(f, y0, [0.0, 1.0], dense=1)
    for kw in (dict(adjoint="checkpoint"), dict(checkpoint_segments=2), dict(method="rk4", dt=0.1, checkpoint_segments=2)):
        with pytest.raises(ValueError, match="dense: "):
            odelab.solve(f, y0, [0.0, 1.0], dense=True, **kw)

    system = Feedback()
    first = odelab.solve(system, y0, [0.0, 1.5], method="rk4", dt=0.05)
    with pytest.raises(ValueError, match="history: .*dense=True"):
        odelab.solve(system, y0, [1.5, 3.0], history=first, method="rk4", dt=0.05)
    first = odelab.solve(system, y0, [0.0, 1.5], method="rk4", dt=0.05, dense=True)
    with pytest.raises(ValueError, match=r"history: -0\.\d+ lies outside the span of the solution given as history"):
        odelab.solve(system, y0, [0.8, 3.0], history=first, method="rk4", dt=0.05)
    with pytest.raises(ValueError, match="history: 1.7 lies outside"):  # t0 past the solution
        odelab.solve(system, y0, [1.7, 3.0], history=first, method="rk4", dt=0.05)
    with pytest.raises(ValueError, match=r"history: .*\(2, 1\) does not broadcast to the state's \(3, 1\)"):
        odelab.solve(system, torch.ones(3, 1, dtype=F64), [1.5, 3.0], history=first, rtol=1e-6)
    with pytest.raises(ValueError, match="history: the solution given carries the earlier solve's graph"):
        odelab.solve(system, y0, [1.5, 3.0], history=first, method="rk4", dt=0.05, adjoint="checkpoint")
    with torch.no_grad():
        first = odelab.solve(system, y0, [0.0, 1.5], method="rk4", dt=0.05, dense=True)
    continued = odelab.solve(system, first.evaluate(1.5)[0], [1.5, 3.0], history=first, method="rk4", dt=0.05,
                             adjoint="checkpoint")
    assert continued.y.requires_grad  # the gain's gradient, by the adjoint
