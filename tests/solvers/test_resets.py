"""Events that reset the state (``solve(..., event=g, reset=r)``): a bouncing ball's landing times, heights and their
derivatives against closed forms, a particle between two walls (two event functions), a reflected oscillator as a
System (|cos t|), the max_events halt of a Zeno sequence, a nonlinear case against central differences, errors."""
import math

import numpy as np
import pytest
import torch

import odelab
from odelab.systems import HarmonicOscillator

F64 = torch.float64


def ball(g, e, heights, times, **options):
    """x'' = −g from rest at ``heights``; at x = 0 falling the speed is reversed and scaled by e."""
    field = lambda t, y: torch.cat([y[:, 1:], -g * torch.ones_like(y[:, 1:])], 1)
    y0 = torch.stack([heights, torch.zeros_like(heights)], 1)
    return odelab.solve(field, y0, times, event=lambda t, y: y[:, 0], event_direction=-1,
                        reset=lambda t, y: torch.stack([torch.zeros_like(y[:, 0]), -e * y[:, 1]], 1), **options)


def landings(g, e, h, count):
    """The closed form: the first landing after √(2h/g), then flights of 2 eᵏ v0 / g, v0 = √(2 g h)."""
    first, flight = math.sqrt(2 * h / g), 2 * math.sqrt(2 * g * h) / g
    return [first + flight * sum(e ** j for j in range(1, k + 1)) for k in range(count)]


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3", "rodas4", "rosenbrock23"])
def test_bouncing_ball_landings_and_heights(method):
    """Landing times to 1e-9 (the flights are parabolas, which the pairs and the Rosenbrock methods integrate
    exactly); the heights at the output times against the piecewise parabola; every sample its own number of
    landings in the span."""
    g, e = 9.81, 0.8
    heights = torch.tensor([1.0, 2.0], dtype=F64)
    times = torch.linspace(0.0, 3.0, 61, dtype=F64)
    sol = ball(g, e, heights, times, method=method, rtol=1e-10, atol=1e-12)
    assert sol.success.all()
    for b, h in enumerate(heights.tolist()):
        exact = [s for s in landings(g, e, h, 12) if s <= 3.0]
        got = sol.event.t[b][sol.event.happened[b]]
        np.testing.assert_allclose(got.detach().numpy(), exact, atol=1e-9, rtol=0)
        # between landings: x = v (t − s) − g (t − s)² / 2 from the last landing s, with v = e^k √(2 g h)
        starts = [0.0] + exact
        for i, t in enumerate(times.tolist()):
            k = sum(s < t for s in exact)
            s, v = starts[k], (e ** k) * math.sqrt(2 * g * h) if k else 0.0
            x = h - g * t * t / 2 if k == 0 else v * (t - s) - g * (t - s) ** 2 / 2
            assert abs(float(sol.y[b, i, 0]) - x) < 1e-8
    assert sol.event.which[sol.event.happened].eq(0).all()


@pytest.mark.parametrize("method", ["dopri5", "rodas4"])
def test_gradients_through_three_resets(method):
    """The third landing t₃ = √(2h/g) (1 + 2e + 2e²): dt₃/dg, dt₃/de and dt₃/dh (through y0) against the closed
    form's derivatives, and d x(2.0)/de through the jumps and the cut steps."""
    g = torch.tensor(9.81, dtype=F64, requires_grad=True)
    e = torch.tensor(0.8, dtype=F64, requires_grad=True)
    h = torch.tensor([1.0], dtype=F64, requires_grad=True)
    sol = ball(g, e, h, torch.tensor([0.0, 2.0], dtype=F64), method=method, rtol=1e-10, atol=1e-12)
    d_g, d_e, d_h = torch.autograd.grad(sol.event.t[0, 2], (g, e, h), retain_graph=True)
    root, poly = math.sqrt(2 / 9.81), 1 + 2 * 0.8 + 2 * 0.64
    assert abs(float(d_g) - (-0.5 * root / 9.81 * poly)) < 1e-9
    assert abs(float(d_e) - root * (2 + 4 * 0.8)) < 1e-9
    assert abs(float(d_h) - 0.5 * root * poly) < 1e-9
    # x(2) after the third landing t₃ ≈ 1.7519: x = v3 (2 − t₃) − g (2 − t₃)²/2, v3 = e³ √(2 g h)
    d_x, = torch.autograd.grad(sol.y[0, 1, 0], e)

    def height(ev):
        t3 = root * (1 + 2 * ev + 2 * ev * ev)
        return ev ** 3 * math.sqrt(2 * 9.81) * (2 - t3) - 9.81 * (2 - t3) ** 2 / 2
    central = (height(0.8 + 1e-6) - height(0.8 - 1e-6)) / 2e-6
    assert abs(float(d_x) - central) < 1e-6


def test_two_walls_and_which():
    """x' = v between walls at 0 and 1, v reversed at each: from x = 0.25, v = 1 the hits alternate between the
    wall at 1 (g₁ = 1 − x, ``which`` 1) and at 0 (g₀ = x, 0), at t = 0.75 + k; x(t) is the triangle wave, at the
    output times and on the dense output."""
    field = lambda t, y: torch.cat([y[:, 1:], torch.zeros_like(y[:, 1:])], 1)
    walls = lambda t, y: torch.stack([y[:, 0], 1 - y[:, 0]], 1)
    flip = lambda t, y: torch.stack([y[:, 0], -y[:, 1]], 1)
    t = torch.linspace(0.0, 4.0, 41, dtype=F64)
    sol = odelab.solve(field, torch.tensor([[0.25, 1.0]], dtype=F64), t, event=walls, event_direction=-1,
                       reset=flip, rtol=1e-10, atol=1e-12, dense=True)
    np.testing.assert_allclose(sol.event.t[0].detach().numpy(), [0.75, 1.75, 2.75, 3.75], atol=1e-9)
    assert sol.event.which[0].tolist() == [1, 0, 1, 0]
    triangle = lambda t: torch.where((t + 0.25) % 2 <= 1, (t + 0.25) % 2, 2 - (t + 0.25) % 2)
    np.testing.assert_allclose(sol.y[0, :, 0].numpy(), triangle(t).numpy(), atol=1e-9)
    fine = torch.linspace(0.0, 4.0, 401, dtype=F64)  # the dense output's pieces end at the events
    np.testing.assert_allclose(sol.evaluate(fine)[0][0, :, 0].numpy(), triangle(fine).numpy(), atol=1e-9)


def test_a_system_state_of_blocks():
    """HarmonicOscillator (p, q) from q = 1: a wall at q = 0 reverses p, so q = |cos t|, with events at π/2 + kπ;
    r gets and returns the blocks."""
    t = torch.linspace(0.0, 7.0, 36, dtype=F64)
    sol = odelab.solve(HarmonicOscillator(), (torch.zeros(1, 1, dtype=F64), torch.ones(1, 1, dtype=F64)), t,
                       event=lambda t, state: state[1][:, 0], event_direction=-1,
                       reset=lambda t, state: (-state[0], state[1]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sol.event.t[0].detach().numpy(), [math.pi / 2 + k * math.pi for k in range(2)],
                               atol=1e-8)
    np.testing.assert_allclose(sol["q"][0, :, 0].numpy(), np.abs(np.cos(t.numpy())), atol=1e-8)
    assert sol.event["q"].shape == (1, 2, 1)


def test_max_events_halts_a_zeno_sequence():
    """e = 0.5: infinitely many landings before √(2h/g) · 3; with max_events = 6 the ball stops at its 6th landing
    (the closed form's), its outputs after it NaN, and the solve succeeds."""
    times = torch.linspace(0.0, 2.0, 21, dtype=F64)
    sol = ball(9.81, 0.5, torch.tensor([1.0], dtype=F64), times, rtol=1e-10, atol=1e-12, max_events=6)
    exact = landings(9.81, 0.5, 1.0, 6)
    np.testing.assert_allclose(sol.event.t[0].detach().numpy(), exact, atol=1e-9)
    assert sol.success.all()
    assert torch.isnan(sol.y[0, times > exact[-1]]).all() and not torch.isnan(sol.y[0, times <= exact[-1]]).any()


def test_a_nonlinear_flight_against_central_differences():
    """Quadratic drag, x'' = −g − c v|v|: d t₄ / dc (the fourth landing) against central differences at rtol 1e-12,
    to 1e-6 relative."""
    def fourth(c):
        field = lambda t, y: torch.cat([y[:, 1:], -9.81 - c * y[:, 1:] * y[:, 1:].abs()], 1)
        sol = odelab.solve(field, torch.tensor([[2.0, 0.0]], dtype=F64), [0.0, 4.0], event=lambda t, y: y[:, 0],
                           event_direction=-1, reset=lambda t, y: torch.stack([torch.zeros_like(y[:, 0]),
                                                                                -0.9 * y[:, 1]], 1),
                           rtol=1e-12, atol=1e-14)
        return sol.event.t[0, 3]

    c = torch.tensor(0.1, dtype=F64, requires_grad=True)
    grad, = torch.autograd.grad(fourth(c), c)
    with torch.no_grad():
        central = (fourth(torch.tensor(0.1 + 1e-6, dtype=F64)) - fourth(torch.tensor(0.1 - 1e-6, dtype=F64))) / 2e-6
    assert abs(float(grad) - float(central)) < 1e-6 * abs(float(central))


def test_no_event_in_the_span():
    """y' = −y never reaches −1: no event, an empty event axis, and the outputs of the plain solve (e^(−t))."""
    sol = odelab.solve(lambda t, y: -y, torch.ones(2, 1, dtype=F64), [0.0, 1.0], event=lambda t, y: y[:, 0] + 1,
                       reset=lambda t, y: y, rtol=1e-10, atol=1e-12)
    assert sol.event.t.shape == (2, 0) and sol.event["y"].shape == (2, 0, 1) and sol.success.all()
    torch.testing.assert_close(sol.y[:, -1, 0], torch.full((2,), math.exp(-1.0), dtype=F64), atol=1e-9, rtol=0)


@pytest.mark.parametrize("method,options", [("dopri5", dict(rtol=1e-6, atol=1e-9)),
                                            ("rodas4", dict(rtol=1e-6, atol=1e-9))])
def test_interior_points_see_grazes_between_resets(method, options):
    """x = cos t reflected (x' → −x') where x + c falls through 0, c = 0.9995: every event grazes (x + c < 0 only
    within 0.032 of the turning point), at t* = arccos(−c) and then, the motion retracing itself, at 3t*, 5t*, …
    Four interior points find each; the step ends alone miss at least one under one of the methods (checked
    below for rodas4)."""
    c = 0.9995
    y0 = torch.tensor([[1.0, 0.0]], dtype=F64)
    solve = lambda points: odelab.solve(lambda t, y: torch.cat([y[:, 1:], -y[:, :1]], 1), y0, [0.0, 20.0],
                                        method=method, event=lambda t, y: y[:, 0] + c, event_direction=-1,
                                        reset=lambda t, y: torch.stack([y[:, 0], -y[:, 1]], 1), event_points=points,
                                        **options)
    t_star = math.acos(-c)
    exact = [k * t_star for k in range(1, 20, 2) if k * t_star <= 20.0]
    found = solve(4).event
    np.testing.assert_allclose(found.t[0][found.happened[0]].numpy(), exact, atol=2e-4, rtol=0)
    if method == "rodas4":
        missed = solve(0).event
        assert float(missed.t[0, 0]) > exact[0] + 1.0


def test_errors():
    y0 = torch.tensor([[1.0, 0.0]], dtype=F64)
    field = lambda t, y: torch.cat([y[:, 1:], -torch.ones_like(y[:, 1:])], 1)
    bounce = lambda t, y: torch.stack([y[:, 0], -y[:, 1]], 1)
    floor = lambda t, y: y[:, 0]
    with pytest.raises(ValueError, match="reset: resets the state at the events of g"):
        odelab.solve(field, y0, [0.0, 1.0], reset=bounce)
    with pytest.raises(ValueError, match="reset: events with resets are located inside the loop"):
        odelab.solve(field, y0, [0.0, 1.0], method="rk4", dt=0.1, event=floor, reset=bounce)
    with pytest.raises(ValueError, match="forwards in time"):
        odelab.solve(field, y0, [1.0, 0.0], event=floor, reset=bounce)
    with pytest.raises(ValueError, match="max_events"):
        odelab.solve(field, y0, [0.0, 1.0], event=floor, reset=bounce, max_events=0)
    with pytest.raises(TypeError, match="reset: expected a callable"):
        odelab.solve(field, y0, [0.0, 1.0], event=floor, reset=3)
    with pytest.raises(ValueError, match=r"reset: r\(t, y\) must return a state of shape \(1, 2\)"):
        odelab.solve(field, y0, [0.0, 2.0], event=floor, reset=lambda t, y: y[:, :1])


def test_landing_points_across_resets():
    """tstops every 0.37 s and a hold input (the gravity, constant in value but sampled every 0.29 s, so the steps
    land on its sample times): a step cut at an event goes back to its landing point, and the landings are the
    closed form's still."""
    heights = torch.tensor([1.0, 2.0], dtype=F64)
    times = torch.linspace(0.0, 3.0, 11, dtype=F64)
    u_times = torch.arange(0.0, 3.2, 0.29, dtype=F64)
    gravity = torch.full((2, len(u_times), 1), 9.81, dtype=F64)
    field = lambda t, y, u: torch.cat([y[:, 1:], -u], 1)
    sol = odelab.solve(field, torch.stack([heights, torch.zeros_like(heights)], 1), times, u=gravity,
                       u_times=u_times, tstops=torch.arange(0.0, 3.0, 0.37, dtype=F64), event=lambda t, y: y[:, 0],
                       event_direction=-1, reset=lambda t, y: torch.stack([torch.zeros_like(y[:, 0]), -0.8 * y[:, 1]],
                                                                          1), rtol=1e-10, atol=1e-12)
    for b, h in enumerate(heights.tolist()):
        exact = [s for s in landings(9.81, 0.8, h, 12) if s <= 3.0]
        np.testing.assert_allclose(sol.event.t[b][sol.event.happened[b]].detach().numpy(), exact, atol=1e-9)
