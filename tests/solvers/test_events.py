"""Terminal events (``solve(..., event=g)``): each sample's first zero crossing of g, the state there, and the
gradient of both. References: closed forms (exponential decay, free fall, the harmonic oscillator, y' = y²'s blow-up,
y' = −y(t − 1) by the method of steps) and their derivatives by hand."""
import math

import pytest
import torch

import odelab
from odelab.systems import System

F64 = torch.float64
ADAPTIVE = [("dopri5", dict(rtol=1e-10, atol=1e-12), 1e-8), ("tsit5", dict(rtol=1e-10, atol=1e-12), 1e-8),
            ("bosh3", dict(rtol=1e-10, atol=1e-12), 1e-7)]
FIXED = [("rk4", dict(dt=0.01), 1e-8), ("heun", dict(dt=1e-3), 1e-6), ("euler", dict(dt=1e-3), 2e-3)]


class Fall(System):
    """x' = v, v' = −g: a ball dropped from height x0 with upward speed v0 lands at (v0 + √(v0² + 2 g x0)) / g."""

    blocks = ("x", "v")

    def __init__(self, g: float):
        super().__init__()
        self.g = torch.nn.Parameter(torch.tensor(g, dtype=F64))

    def derivative(self, t, state, inp):
        return state[1], -self.g * torch.ones_like(state[1])


class Lagged(System):
    """y' = −y(t − 1), history 1: y = 1 − t on [0, 1], 1 − t + (t − 1)²/2 on [1, 2]."""

    delays = (1.0,)

    def derivative(self, t, state, inp, delayed):
        return (-delayed[0],)


def rotation(t, y):
    """x'' = −x as (x, x'): from (1, 0), x = cos t."""
    return torch.cat([y[:, 1:], -y[:, :1]], 1)


@pytest.mark.parametrize("method,options,tol", ADAPTIVE + FIXED)
def test_decay_time_state_and_gradients(method, options, tol):
    """y' = −k y falls to c at t* = ln(y0 / c) / k: dt*/dk = −t*/k, dt*/dy0 = 1/(k y0), and y = c there."""
    k = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[2.0], [3.0], [5.0]], dtype=F64, requires_grad=True)
    sol = odelab.solve(lambda t, y: -k * y, y0, [0.0, 5.0], event=lambda t, y: y[:, 0] - 1.0, method=method, **options)
    star = torch.log(y0.detach()[:, 0]) / 0.7
    assert sol.event.happened.all() and (sol.event.which == 0).all()
    torch.testing.assert_close(sol.event.t, star, atol=tol, rtol=0)
    torch.testing.assert_close(sol.event.y[:, 0], torch.ones(3, dtype=F64), atol=10 * tol, rtol=0)
    grad_k, grad_y0 = torch.autograd.grad(sol.event.t.sum(), (k, y0))
    torch.testing.assert_close(grad_k, -(star / 0.7).sum(), atol=20 * tol, rtol=0)
    torch.testing.assert_close(grad_y0[:, 0], 1 / (0.7 * y0.detach()[:, 0]), atol=20 * tol, rtol=0)


@pytest.mark.parametrize("method,options", [("dopri5", {}), ("rk4", dict(dt=0.05))])
def test_free_fall_landing(method, options):
    """A System with two blocks (given as a dict): the landing time, the impact speed −√(v0² + 2 g x0) and their
    derivatives in x0, v0 and g; falling crossings only (the ball thrown up starts above the ground anyway)."""
    fall = Fall(9.81)
    x0 = torch.tensor([[1.0], [2.0], [0.3]], dtype=F64, requires_grad=True)
    v0 = torch.tensor([[0.5], [-1.0], [4.0]], dtype=F64, requires_grad=True)
    sol = odelab.solve(fall, {"x": x0, "v": v0}, [0.0, 1.0, 3.0], event=lambda t, y: y[0][:, 0], event_direction=-1,
                       method=method, **options)
    g, x, v = 9.81, x0.detach()[:, 0], v0.detach()[:, 0]
    root = torch.sqrt(v * v + 2 * g * x)
    torch.testing.assert_close(sol.event.t, (v + root) / g, atol=1e-12, rtol=0)
    torch.testing.assert_close(sol.event["v"][:, 0], -root, atol=1e-12, rtol=0)
    torch.testing.assert_close(sol.event["x"][:, 0], torch.zeros(3, dtype=F64), atol=1e-12, rtol=0)
    grads = torch.autograd.grad(sol.event.t.sum(), (x0, v0, fall.g), retain_graph=True)
    torch.testing.assert_close(grads[0][:, 0], 1 / root, atol=1e-10, rtol=0)
    torch.testing.assert_close(grads[1][:, 0], (1 + v / root) / g, atol=1e-10, rtol=0)
    torch.testing.assert_close(grads[2], (x / (g * root) - (v + root) / g ** 2).sum(), atol=1e-10, rtol=0)
    with pytest.raises(KeyError, match=r"no block 'q'; blocks are \['x', 'v'\]"):
        sol.event["q"]
    with pytest.raises(AttributeError, match="event has blocks"):
        sol.event.y
    impact = torch.autograd.grad(sol.event["v"].sum(), (x0,))[0]
    torch.testing.assert_close(impact[:, 0], -g / root, atol=1e-10, rtol=0)


@pytest.mark.parametrize("direction,turns", [(0, 0.5), (-1, 0.5), (1, 1.5)])
def test_direction(direction, turns):
    """x = cos t falls through 0 at π/2 and rises through it at 3π/2."""
    sol = odelab.solve(rotation, torch.tensor([[1.0, 0.0]], dtype=F64), [0.0, 7.0], event=lambda t, y: y[:, 0],
                       event_direction=direction, rtol=1e-10, atol=1e-12)
    assert sol.event.t.item() == pytest.approx(turns * math.pi, abs=1e-8)


def test_the_first_of_several_functions_and_samples_without_an_event():
    """y = t: the first of (y − a_b, y − 2) to cross, per sample; a sample whose functions never cross has NaN
    time and state, which −1, and its outputs untouched; the others' outputs after their events are NaN and their
    outputs before them those of the solve without an event."""
    t = torch.linspace(0.0, 5.0, 11, dtype=F64)
    y0 = torch.tensor([[0.0], [0.0], [-10.0]], dtype=F64)
    level = torch.tensor([1.0, 3.0, 9.0], dtype=F64)
    plain = odelab.solve(lambda s, y: torch.ones_like(y), y0, t)
    sol = odelab.solve(lambda s, y: torch.ones_like(y), y0, t,
                       event=lambda s, y: torch.stack([y[:, 0] - level, y[:, 0] - 2.0], 1))
    torch.testing.assert_close(sol.event.t[:2], torch.tensor([1.0, 2.0], dtype=F64), atol=1e-12, rtol=0)
    assert sol.event.which.tolist() == [0, 1, -1] and sol.event.happened.tolist() == [True, True, False]
    assert math.isnan(sol.event.t[2].item()) and torch.isnan(sol.event.y[2]).all()
    for b, star in ((0, 1.0), (1, 2.0)):
        before = t <= star
        torch.testing.assert_close(sol.y[b, before], plain.y[b, before])
        assert torch.isnan(sol.y[b, ~before]).all()
    torch.testing.assert_close(sol.y[2], plain.y[2])
    assert sol.success.all() and sol.dense_output is None


def test_starting_on_zero_is_no_event():
    """g = y − 1 from y0 = 1 with y' = 1 leaves zero upwards: no crossing."""
    sol = odelab.solve(lambda t, y: torch.ones_like(y), torch.ones(1, 1, dtype=F64), [0.0, 2.0],
                       event=lambda t, y: y[:, 0] - 1.0)
    assert not sol.event.happened.any()


def test_a_failure_after_the_event_is_forgiven():
    """y' = y² from 1 blows up at t = 1 and reaches 10 at 0.9; from 0.2 it reaches 10 at 4.9 and blows up at 5 —
    past t = 2, so that sample succeeds without an event; from 0.6 it blows up at 5/3, past its event at 5/3 − 0.1.
    With a level it never reaches before blowing up the solve still fails."""
    y0 = torch.tensor([[1.0], [0.2], [0.6]], dtype=F64)
    sol = odelab.solve(lambda t, y: y * y, y0, [0.0, 2.0], event=lambda t, y: y[:, 0] - 10.0)
    torch.testing.assert_close(sol.event.t[[0, 2]], torch.tensor([0.9, 5 / 3 - 0.1], dtype=F64), atol=1e-6, rtol=0)
    assert sol.event.happened.tolist() == [True, False, True] and sol.success.all()
    with pytest.raises(odelab.SolveError, match="step underflow"):
        odelab.solve(lambda t, y: y * y, y0, [0.0, 2.0], event=lambda t, y: y[:, 0] + 1.0)
    partial = odelab.solve(lambda t, y: y * y, y0, [0.0, 2.0], event=lambda t, y: y[:, 0] + 1.0, throw=False)
    assert partial.success.tolist() == [False, True, False]


@pytest.mark.parametrize("method,max_steps", [("dopri5", 400), ("bosh3", 3000), ("rodas4", 400)])
def test_the_gradient_through_an_event_before_a_blow_up_is_finite(method, max_steps):
    """y' = k y² reaches 10 at t* = (1/y0 − 1/10)/k and blows up at 1/(k y0), inside the span (the samples end at
    max_steps, forgiven after their events): the attempts that overflow past the event are rejected and,
    recomputed without the overflow, pass no NaN back, nor do the outputs past the samples' last steps. dt*/dk =
    −t*/k summed over y0 = 1 and 0.5 (−2.8 at k = 1), and the gradient of an output before the event."""
    k = torch.tensor(1.0, dtype=F64, requires_grad=True)
    sol = odelab.solve(lambda t, y: k * y * y, torch.tensor([[1.0], [0.5]], dtype=F64), [0.0, 0.5, 3.0],
                       method=method, event=lambda t, y: y[:, 0] - 10.0, rtol=1e-9, atol=1e-12,
                       max_steps=max_steps)
    d_event, = torch.autograd.grad(sol.event.t.sum(), k, retain_graph=True)
    d_output, = torch.autograd.grad(sol.y[:, 1, 0].sum(), k)
    assert abs(float(d_event) + 2.8) < 1e-5
    # y(t) = y0 / (1 − k y0 t): dy/dk = y0² t / (1 − k y0 t)², at t = 0.5
    assert abs(float(d_output) - (0.5 / 0.25 + 0.25 * 0.5 / 0.75 ** 2)) < 1e-5


@pytest.mark.parametrize("method,dt,tol", [("rk4", 0.01, 1e-4), ("heun", 1e-3, 1e-3), ("euler", 1e-3, 0.05)])
def test_a_fixed_step_blow_up_after_the_event_passes_no_nan(method, dt, tol):
    """The same y' = k y² under fixed steps, which cannot reject: each sample's step that overflows past its event
    is recomputed without it and the sample retired (its later outputs NaN), so dt*/dk = −2.8 and the output's
    gradient are finite and right (they were NaN: the batch's sum met 0 · inf); without an event the blow-up is
    still a failure."""
    k = torch.tensor(1.0, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64)
    sol = odelab.solve(lambda t, y: k * y * y, y0, [0.0, 0.5, 3.0], method=method, dt=dt,
                       event=lambda t, y: y[:, 0] - 10.0)
    d_event, = torch.autograd.grad(sol.event.t.sum(), k, retain_graph=True)
    d_output, = torch.autograd.grad(sol.y[:, 1, 0].sum(), k)
    assert abs(float(d_event) + 2.8) < 2 * tol
    assert abs(float(d_output) - (0.5 / 0.25 + 0.25 * 0.5 / 0.75 ** 2)) < tol
    assert sol.success.all() and bool(torch.isnan(sol.y[:, -1]).all())
    plain = odelab.solve(lambda t, y: k * y * y, y0, [0.0, 0.5, 3.0], method=method, dt=dt, dense=True, throw=False)
    assert plain.status.tolist() == [int(odelab.Status.NONFINITE)] * 2


class Quadratic(System):
    """y' = k y² + c y(t − ½) with c = 0: the blow-up of y' = k y², as a delay system (its fixed-step solves keep a
    past that later steps read)."""

    delays = (0.5,)

    def __init__(self, k, c=0.0):
        super().__init__()
        self.k, self.c = k, c

    def derivative(self, t, state, inp, delayed):
        return (self.k * state[0] ** 2 + self.c * delayed[0],)


@pytest.mark.parametrize("method,dt", [("rk4", 0.01), ("heun", 1e-3)])
def test_a_fixed_step_delay_blow_up_after_the_event_passes_no_nan(method, dt):
    """The fixed-step delay driver retires a sample that overflows as the ODE one does, its delayed reads fed as
    zeros too: dt*/dk = −2.8 (it was NaN), the blow-up without an event still a failure."""
    k = torch.tensor(1.0, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64)
    sol = odelab.solve(Quadratic(k), y0, [0.0, 0.5, 3.0], method=method, dt=dt, event=lambda t, y: y[0][:, 0] - 10.0)
    d_event, = torch.autograd.grad(sol.event.t.sum(), k)
    assert abs(float(d_event) + 2.8) < 2e-3
    plain = odelab.solve(Quadratic(k), y0, [0.0, 0.5, 3.0], method=method, dt=dt, dense=True, throw=False)
    assert plain.status.tolist() == [int(odelab.Status.NONFINITE)] * 2


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3", "rodas4"])
@pytest.mark.parametrize("grad", [True, False])
def test_a_rejected_trial_across_the_surface_is_no_event(method, grad):
    """y' = −y from 1 with a first trial step of 2 (to e^−2, past y = 0.5, and rejected): the event is where the
    accepted steps cross, t* = ln 2, also in the torch loop a recorded gradient takes, whose step records keep the
    rejected trial's interpolant (it put t* 0.06–0.21 early)."""
    y0 = torch.ones(1, 1, dtype=torch.float64, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        solution = odelab.solve(lambda t, y: -y, y0, [0.0, 3.0], method=method, rtol=1e-9, atol=1e-12,
                                first_step=2.0, event=lambda t, y: y[:, 0] - 0.5)
    assert int(solution.stats["rejected"][0]) >= 1
    assert abs(float(solution.event.t[0].detach()) - math.log(2)) < 2e-9


def test_backwards_in_time():
    """y' = y from 1 at t = 0, solved to t = −5, halves at t = ln ½; its outputs further back are NaN."""
    sol = odelab.solve(lambda t, y: y, torch.ones(1, 1, dtype=F64), [0.0, -0.5, -5.0], event=lambda t, y: y[:, 0] - 0.5,
                       rtol=1e-10, atol=1e-12)
    assert sol.event.t.item() == pytest.approx(math.log(0.5), abs=1e-8)
    assert sol.y[0, 1, 0].item() == pytest.approx(math.exp(-0.5), abs=1e-8) and math.isnan(sol.y[0, 2, 0].item())


@pytest.mark.parametrize("method,options", [("dopri5", dict(rtol=1e-10, atol=1e-12)), ("rk4", dict(dt=0.01))])
def test_delay_system(method, options):
    """y' = −y(t − 1): y = ½ at t = ½, and y = −¼ at 1 + s with s² − 2 s + ½ = 0, s = 1 − √½."""
    sol = odelab.solve(Lagged(), torch.ones(2, 1, dtype=F64), [0.0, 3.0], method=method,
                       event=lambda t, y: y[0][:, 0] - torch.tensor([0.5, -0.25], dtype=F64), **options)
    torch.testing.assert_close(sol.event.t, torch.tensor([0.5, 2 - math.sqrt(0.5)], dtype=F64), atol=1e-9, rtol=0)


def test_the_gradient_of_g_own_parameters_without_a_solve_graph():
    """Only g carries a gradient (y0 and f take none): t* = ln(y0 / c) / k, dt*/dc = −1 / (k c)."""
    c = torch.tensor(0.5, dtype=F64, requires_grad=True)
    sol = odelab.solve(lambda t, y: -2.0 * y, torch.ones(1, 1, dtype=F64), [0.0, 3.0], event=lambda t, y: y[:, 0] - c,
                       rtol=1e-10, atol=1e-12)
    (grad,) = torch.autograd.grad(sol.event.t.sum(), (c,))
    assert grad.item() == pytest.approx(-1 / (2.0 * 0.5), abs=1e-7)


def test_gradcheck_of_the_discrete_event_time():
    """Under rk4 the located time is a smooth function of k and y0: autograd's implicit-function gradient against
    finite differences of the same discrete solve."""
    def landing(k, y0):
        return odelab.solve(lambda t, y: -k * y + torch.sin(t), y0, [0.0, 4.0], method="rk4", dt=0.1,
                            event=lambda t, y: y[:, 0] - 0.4).event.t

    k = torch.tensor(0.9, dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.5], [2.5]], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(landing, (k, y0), eps=1e-6, atol=1e-6)


def test_no_gradient_under_no_grad_and_float32():
    with torch.no_grad():
        sol = odelab.solve(lambda t, y: -y, torch.ones(2, 1), [0.0, 3.0], event=lambda t, y: y[:, 0] - 0.5)
    assert not sol.event.t.requires_grad and sol.event.y.dtype == torch.float32
    assert sol.event.t.dtype == F64
    torch.testing.assert_close(sol.event.t, torch.full((2,), math.log(2), dtype=F64), atol=1e-5, rtol=0)


def test_dense_output_kept_when_asked():
    sol = odelab.solve(lambda t, y: -y, torch.ones(1, 1, dtype=F64), [0.0, 3.0], event=lambda t, y: y[:, 0] - 0.5,
                       dense=True)
    assert sol.evaluate(0.2)[0].item() == pytest.approx(math.exp(-0.2), abs=1e-6)


GRAZE = [("dopri5", dict(rtol=1e-8, atol=1e-10), 1e-6), ("tsit5", dict(rtol=1e-8, atol=1e-10), 1e-6),
         ("rodas4", dict(rtol=1e-5, atol=1e-7), 3e-4), ("rk4", dict(dt=0.1), 2e-4)]


@pytest.mark.parametrize("method,options,tol", GRAZE)
def test_interior_points_see_a_graze_inside_one_step(method, options, tol):
    """cos t + c for c = 0.9999 dips below zero only on π ± 0.0141, inside one step: the step ends alone miss it
    (``event_points=0``), the default four interior points and nine find it at arccos(−c) (|ẋ| = 0.014 there, so
    the time is 70× as sensitive as the state); the second sample (c = ½) crosses plainly, at the same time either
    way (to the root search's ulps); dt*/dc = 1 / √(1 − c²)."""
    c = torch.tensor([0.9999, 0.5], dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=F64)
    event = lambda t, y: y[:, 0] + c
    ends = odelab.solve(rotation, y0, [0.0, 4.0], method=method, event=event, event_points=0, **options)
    assert ends.event.happened.tolist() == [False, True]
    default = odelab.solve(rotation, y0, [0.0, 4.0], method=method, event=event, **options)
    assert default.event.happened.all()
    inside = odelab.solve(rotation, y0, [0.0, 4.0], method=method, event=event, event_points=9, **options)
    exact = torch.acos(-c.detach())
    torch.testing.assert_close(inside.event.t.detach(), exact, atol=tol, rtol=0)
    assert float(inside.event.t[1].detach()) == pytest.approx(float(ends.event.t[1].detach()), abs=1e-13)
    (slope,) = torch.autograd.grad(inside.event.t.sum(), (c,))
    torch.testing.assert_close(slope, 1 / torch.sqrt(1 - c.detach() ** 2), rtol=2e-2 if tol > 1e-6 else 1e-3,
                               atol=0)
    assert math.isnan(float(inside.y[0, -1, 0])) and not math.isnan(float(ends.y[0, -1, 0]))


@pytest.mark.parametrize("direction,side", [(-1, -1), (1, 1)])
def test_interior_points_keep_the_direction(direction, side):
    """A graze has a falling and a rising crossing in one step, at π ∓ (π − arccos(−c)): the direction picks which
    one is the event."""
    c = 0.9999
    sol = odelab.solve(rotation, torch.tensor([[1.0, 0.0]], dtype=F64), [0.0, 4.0], rtol=1e-8, atol=1e-10,
                       event=lambda t, y: y[:, 0] + c, event_direction=direction, event_points=9)
    assert float(sol.event.t[0]) == pytest.approx(math.pi + side * (math.pi - math.acos(-c)), abs=1e-6)


def test_interior_points_skip_rejected_and_held_pieces():
    """The rejected first trial (step 2 from y = 1 under y' = −y, down to e^−2) is no piece to look inside: the
    event at y = ½ stays at ln 2 with interior points."""
    sol = odelab.solve(lambda t, y: -y, torch.ones(1, 1, dtype=F64), [0.0, 3.0], rtol=1e-9, atol=1e-12,
                       first_step=2.0, event=lambda t, y: y[:, 0] - 0.5, event_points=3)
    assert int(sol.stats["rejected"][0]) >= 1
    assert abs(float(sol.event.t[0]) - math.log(2)) < 2e-9


@pytest.mark.parametrize("points", [0, 4])
def test_a_repeated_piece_is_no_second_crossing(points):
    """The Rosenbrock and fused loops record a rejected attempt as a repeat of the last accepted step. Pieces
    y = −1 + 2θ on [0, 1], that piece again, then y = 1 + θ on [1, 2]: g = y rises through 0 once, so a falling event
    (direction −1) never happens, and a rising one (+1) happens at ½; read again, the repeat's interior would seem
    to fall from 1 back to −0.6."""
    from odelab.solvers.dense import DenseOutput
    from odelab.solvers.events import locate
    start, length, end = (torch.tensor(x, dtype=F64).view(3, 1) for x in ([0.0, 0.0, 1.0], [1.0] * 3, [1.0, 1.0, 2.0]))
    base = torch.tensor([[-1.0], [-1.0], [1.0]], dtype=F64)
    coef = torch.tensor([[2.0], [2.0], [1.0]], dtype=F64)  # y = base + θ C1
    dense = DenseOutput(start, length, end, base, coef, [1])
    g = lambda t, y: y[:, 0]
    y0 = torch.tensor([[-1.0]], dtype=F64)
    assert not bool(locate(dense, y0, 0.0, g, -1, True, ("y",), points).happened[0])
    rising = locate(dense, y0, 0.0, g, 1, True, ("y",), points)
    assert float(rising.t[0]) == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(event=3), TypeError, "event: expected a callable"),
    (dict(event=lambda t, y: y[:, 0], event_direction=2), ValueError, "event_direction"),
    (dict(event=lambda t, y: y[:, 0], event_direction=True), ValueError, "event_direction"),
    (dict(event=lambda t, y: y[:1, 0]), ValueError, r"event: g\(t, y\) must return \(batch,\)"),
    (dict(event=lambda t, y: y.unsqueeze(-1)), ValueError, "got shape"),
    (dict(event=lambda t, y: (y[:, 0] > 0).long()), TypeError, "real floating tensor"),
    (dict(event=lambda t, y: y[:, 0], adjoint="checkpoint"), ValueError, "adjoint=None"),
    (dict(event=lambda t, y: y[:, 0], cuda_graph=True), ValueError, "without cuda_graph"),
    (dict(event=lambda t, y: y[:, 0], event_points=-1), ValueError, "event_points: expected a non-negative"),
    (dict(event=lambda t, y: y[:, 0], event_points=1.5), ValueError, "event_points"),
    (dict(event=lambda t, y: y[:, 0], event_points=True), ValueError, "event_points"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        odelab.solve(lambda t, y: -y, torch.ones(2, 1, dtype=F64), [0.0, 1.0], **kwargs)


@pytest.mark.parametrize("method,options", [("dopri5", {}), ("rk4", dict(dt=0.3))])
def test_with_a_hold_input(method, options):
    """y' = u, u = 1 until t = 1 and 3 after (a hold input): y = 1 + 3 (t − 1) reaches 2.5 at t = 1.5."""
    u = torch.tensor([[[0.0], [1.0], [3.0]]], dtype=F64)
    sol = odelab.solve(lambda t, y, v: v, torch.zeros(1, 1, dtype=F64), [0.0, 1.0, 2.0], u=u, method=method,
                       event=lambda t, y: y[:, 0] - 2.5, **options)
    assert sol.event.t.item() == pytest.approx(1.5, abs=1e-12)
    assert sol.y[0, 1, 0].item() == pytest.approx(1.0, abs=1e-12) and math.isnan(sol.y[0, 2, 0].item())
