"""Discontinuity tracking for state-dependent delays: y(t − τ(t, y)) carries a kink of y at ξ into the solution
where t − τ = ξ, and the adaptive pairs step onto those points. References: the closed form of y' = −y(t − τ),
τ = c + y/2, from the history 1 up to the second breakpoint (the method of steps by hand), and a scipy DOP853
method of steps that locates every breakpoint itself with scipy's events."""
import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import StateDelay, System

F64 = torch.float64
METHODS = ["dopri5", "tsit5", "bosh3"]


class Feedback(System):
    """y'(t) = −y(t − τ) − b y(t − ℓ), τ = c + y(t)/2 ∈ [0.5, 1.5], and a constant lag ℓ where b ≠ 0."""

    blocks, hidden_size = ("y",), 1

    def __init__(self, c=1.0, b: float = 0.0, lag: float = 0.7):
        super().__init__()
        self.c, self.b = c, b
        self.delays = (StateDelay(lambda t, state: self.c + state[0][:, 0] / 2, 0.5, 1.5),) + ((lag,) if b else ())

    def derivative(self, t, state, inp, *delayed):
        out = -delayed[0][0]
        if self.b:
            out = out - self.b * delayed[1][0]
        return (out,)


def closed_form(t: torch.Tensor, y0: torch.Tensor, c) -> tuple[torch.Tensor, torch.Tensor]:
    """y(t) of Feedback(c) from y0 (samples on axis 0, times on axis 1) with the history 1, and ξ1: y = y0 − t while
    t − τ ≤ 0, i.e. up to ξ1 = (c + y0/2) / 1.5, where f jumps unless y0 = 1; then y' = −(y0 − (t − τ)) = t − c − y/2
    − y0 while t − τ ≤ ξ1: y = 2t + β + C e^(−t/2), β = −2c − 2y0 − 4, C from y(ξ1) = y0 − ξ1."""
    xi = (c + y0 / 2) / 1.5
    beta = -2 * c - 2 * y0 - 4
    constant = (y0 - xi - 2 * xi - beta) * torch.exp(xi / 2)
    y0, xi, beta, constant = (x.unsqueeze(1) for x in (y0, xi, beta, constant))
    late = 2 * t + beta + constant * torch.exp(-t / 2)
    after = t > xi
    assert bool(((t - c - late / 2) < xi)[after].all()), "the closed form ends at the second breakpoint"
    return torch.where(t <= xi, y0 - t, late), xi.squeeze(1)


def scipy_reference(end: float, b: float = 0.0, lag: float = 0.7, rtol: float = 1e-13):
    """Feedback(1, b, lag) from y0 = 1 by DOP853 on pieces shorter than the smallest delay (every delayed time in
    the past), each piece ended by scipy's events where t − τ_j(y) crosses a breakpoint found so far (t0 first).
    Returns y(s) and the breakpoints."""
    lags = [lambda y: 1 + y / 2] + ([lambda y: lag] if b else [])
    pieces, points = [], [0.0]

    def past(s):
        if s <= 0:
            return 1.0
        for start, stop, sol in pieces:
            if start <= s <= stop:
                return float(sol(s)[0])
        raise AssertionError(f"no piece holds {s}")

    def rhs(s, v):
        out = -past(s - lags[0](v[0]))
        return [out - b * past(s - lags[1](v[0])) if b else out]

    t, y = 0.0, 1.0
    while t < end - 1e-13:
        events = []
        for tau in lags:
            for xi in points:
                if xi > t - tau(y) + 1e-12:  # a breakpoint this lag's delayed time has yet to reach
                    event = lambda s, v, xi=xi, tau=tau: s - tau(v[0]) - xi
                    event.terminal = True
                    events.append(event)
        sol = solve_ivp(rhs, (t, min(end, t + 0.4)), [y], method="DOP853", rtol=rtol, atol=1e-15,
                        dense_output=True, events=events)
        pieces.append((t, sol.t[-1], sol.sol))
        if any(len(times) for times in sol.t_events):
            points.append(float(sol.t[-1]))
        t, y = float(sol.t[-1]), float(sol.y[0, -1])
    return np.vectorize(past), points[1:]


def boundaries(solution) -> torch.Tensor:
    """Each sample's accepted step boundaries (B, S) from a dense solve (rejected attempts end where they start)."""
    dense = solution.dense_output
    return torch.where(dense.end > dense.start, dense.end, math.nan).T


@pytest.mark.parametrize("method", METHODS)
def test_a_crossing_of_t0_is_stepped_onto_and_f_restarted_there(method):
    """y0 ≠ φ(t0) for three samples: f jumps at ξ1 (a different time per sample), y'' at ξ1 for y0 = 1; the
    tracked solve meets the closed form to the tolerance, the untracked one straddles ξ1 and misses it."""
    y0 = torch.tensor([1.0, 0.8, 0.5, 0.3], dtype=F64)
    t = torch.linspace(0.0, 1.4, 29, dtype=F64)
    exact, xi = closed_form(t, y0, 1.0)
    options = dict(history=torch.ones(4, 1, dtype=F64), rtol=1e-9, atol=1e-11, method=method)
    tracked = odelab.solve(Feedback(), y0.unsqueeze(1), t, dense=True, **options)
    plain = odelab.solve(Feedback(), y0.unsqueeze(1), t, track_discontinuities=False, **options)
    error = (tracked.y[..., 0] - exact).abs().max(1).values
    assert float(error.max()) < 1e-9, error
    assert float((plain.y[..., 0] - exact).abs()[1:].max()) > 10 * float(error[1:].max())
    assert tracked.stats["discontinuities"].min() >= 1 and "discontinuities" not in plain.stats
    # a step boundary on ξ1 for every sample
    nearest = (boundaries(tracked) - xi.unsqueeze(1)).abs().nan_to_num(math.inf).min(1).values
    assert float(nearest.max()) < 1e-9, nearest
    assert bool((tracked.stats["steps"] < plain.stats["steps"]).all())


def test_every_breakpoint_up_to_the_methods_order_is_landed_on():
    """Over [0, 8] the kinks ξ1 < ξ2 < … (each where t − τ(y(t)) reaches the one before) against scipy's method of
    steps: dopri5 lands on the first five (orders 1..5) and keeps to 1e-9 of the reference at rtol 1e-10."""
    reference, points = scipy_reference(8.0)
    t = torch.linspace(0.0, 8.0, 81, dtype=F64)
    solution = odelab.solve(Feedback(), torch.ones(1, 1, dtype=F64), t, rtol=1e-10, atol=1e-12, dense=True)
    np.testing.assert_allclose(solution.y[0, :, 0].numpy(), reference(t.numpy()), atol=1e-9, rtol=0)
    assert len(points) >= 7 and int(solution.stats["discontinuities"]) == 5
    steps = boundaries(solution)[0]
    for xi in points[:5]:
        assert float((steps - xi).abs().nan_to_num(math.inf).min()) < 1e-9, (xi, points)


def test_a_tracked_kink_propagates_through_a_constant_lag():
    """y' = −y(t − τ(y)) − 0.5 y(t − 0.7): t0 + 0.7 is known ahead, ξ where t − τ(y) reaches t0 is found, and
    reappears at ξ + 0.7 through the constant lag (and t0 + 0.7 through τ); the solve lands on every breakpoint
    scipy's method of steps finds before t = 2.5."""
    reference, points = scipy_reference(3.0, b=0.5)
    t = torch.linspace(0.0, 3.0, 31, dtype=F64)
    solution = odelab.solve(Feedback(b=0.5), torch.ones(1, 1, dtype=F64), t, rtol=1e-10, atol=1e-12, dense=True)
    np.testing.assert_allclose(solution.y[0, :, 0].numpy(), reference(t.numpy()), atol=2e-9, rtol=0)
    found = next(p for p in points if abs(p - 0.7) > 1e-9)  # the first crossing of t0 by t − τ(y)
    assert any(abs(p - (found + 0.7)) < 1e-9 for p in points)
    steps = boundaries(solution)[0]
    for xi in [p for p in points if p < 2.5]:
        assert float((steps - xi).abs().nan_to_num(math.inf).min()) < 1e-8, (xi, points)


def test_samples_track_their_own_discontinuities():
    """A batch gives each sample the steps it gets alone and its values to round-off (the root search of a crossing
    runs until every sample's bracket closes; its ξ1 depends on its y0)."""
    y0 = torch.tensor([[1.0], [0.4], [0.7]], dtype=F64)
    t = torch.linspace(0.0, 5.0, 11, dtype=F64)
    batch = odelab.solve(Feedback(), y0, t, history=1.0, rtol=1e-8, atol=1e-10)
    for b in range(3):
        alone = odelab.solve(Feedback(), y0[b:b + 1], t, history=1.0, rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(batch.y[b], alone.y[0], rtol=0, atol=1e-10)
        for key in ("steps", "accepted", "discontinuities"):
            assert int(batch.stats[key][b]) == int(alone.stats[key][0])


@pytest.mark.parametrize("method,rtol,tol", [("dopri5", 1e-10, 1e-6), ("rodas4", 1e-10, 1e-6),
                                            ("rosenbrock23", 1e-7, 2e-6)])
def test_gradients_match_the_closed_form(method, rtol, tol):
    """d/dy0 and d/dc of Σ y(t_k) through the tracked solve (ξ1 moves with both, and f jumps there) against the
    closed form's, under an explicit pair and the Rosenbrock loop; untracked, the gradient misses the jump's motion
    (44 % off in d/dc, measured)."""
    t = torch.linspace(0.0, 1.4, 15, dtype=F64)

    def grads(solve):
        y0 = torch.tensor([0.5, 0.9], dtype=F64, requires_grad=True)
        c = torch.tensor(1.05, dtype=F64, requires_grad=True)
        return torch.autograd.grad(solve(y0, c).sum(), (y0, c))

    exact = grads(lambda y0, c: closed_form(t, y0, c)[0])
    tracked = grads(lambda y0, c: odelab.solve(Feedback(c), y0.unsqueeze(1), t, method=method, history=1.0,
                                               rtol=rtol, atol=rtol * 1e-2).y[..., 0])
    for got, want in zip(tracked, exact):
        torch.testing.assert_close(got, want, rtol=tol, atol=1e-8 if method == "dopri5" else tol)


class Returning(System):
    """y' = −y(t − τ(t)), τ = 0.4 + t²/2 ∈ [0.4, 2.5]: t − τ rises through t0 = 0 at t1 = 1 − √0.2 and falls back
    through it at t2 = 1 + √0.2 (dτ/dt > 1 there)."""

    blocks, hidden_size = ("y",), 1

    def __init__(self):
        super().__init__()
        self.delays = (StateDelay(lambda t, state: 0.4 + 0.5 * t[:, 0] ** 2, 0.4, 2.5),)

    def derivative(self, t, state, inp, delayed):
        return (-delayed[0],)


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3", "rodas4"])
def test_a_crossing_of_t0_back_towards_the_history(method):
    """History 1, y0 = ½ (f jumps at both crossings): y = ½ − t up to t1; then y(t − τ) = ½ − (t − τ) from the first
    piece, y' = −0.9 + t − t²/2; past t2, y(t − τ) = φ = 1 again, y' = −1 (piecewise polynomial: every method
    integrates it to round-off). Approaching t2 from above, the held delayed time must read y0's side, and after
    it φ's, also in the stage at a step's start, which asks for the right limit: the holds sit two round-off
    margins past t0 (held on t0 itself, those reads took the other side: errors 2.8e-14 to 1.8e-11 and 17
    rejected attempts under rodas4, measured). Both crossings landed on, the closed form to 2e-14, fewer steps
    than untracked."""
    t1, t2 = 1 - math.sqrt(0.2), 1 + math.sqrt(0.2)
    ramp = lambda s: -0.9 * s + s * s / 2 - s ** 3 / 6
    y1 = 0.5 - t1

    def exact(t):
        if t <= t1:
            return 0.5 - t
        return y1 + ramp(t) - ramp(t1) if t <= t2 else y1 + ramp(t2) - ramp(t1) - (t - t2)

    t = torch.linspace(0.0, 2.0, 21, dtype=F64)
    options = dict(method=method, history=1.0, rtol=1e-10, atol=1e-12, tstops=t)
    tracked = odelab.solve(Returning(), torch.full((1, 1), 0.5, dtype=F64), t, **options)
    plain = odelab.solve(Returning(), torch.full((1, 1), 0.5, dtype=F64), t, track_discontinuities=False, **options)
    want = torch.tensor([exact(float(s)) for s in t], dtype=F64)
    torch.testing.assert_close(tracked.y[0, :, 0], want, atol=2e-14, rtol=0)
    assert int(tracked.stats["discontinuities"][0]) == 2
    assert int(tracked.stats["steps"][0]) < int(plain.stats["steps"][0])


def test_the_option_is_checked():
    with pytest.raises(TypeError, match="track_discontinuities: expected True or False"):
        odelab.solve(Feedback(), torch.ones(1, 1, dtype=F64), [0.0, 1.0], track_discontinuities="yes")


def test_a_continued_solve_reads_the_kinks_its_history_found():
    """[0, 2], then [2, 5] from the first solve's dense solution: the kinks ξ1, ξ2 the first solve found (per
    sample) reach the second through t − τ, which lands on ξ3 (whose source is ξ2) and ξ4, and meets scipy's method
    of steps; without the first solve's kinks ξ3 is straddled."""
    reference, points = scipy_reference(5.0)
    options = dict(rtol=1e-10, atol=1e-12, dense=True)
    first = odelab.solve(Feedback(), torch.ones(2, 1, dtype=F64), torch.linspace(0.0, 2.0, 5, dtype=F64), **options)
    times, orders = first.dense_output.sample_kinks
    for xi in points[:2]:
        assert float((times - xi).abs().min(1).values.max()) < 1e-9, (times, points)
    t = torch.linspace(2.0, 5.0, 31, dtype=F64)
    second = odelab.solve(Feedback(), first.y[:, -1], t, history=first, **options)
    np.testing.assert_allclose(second.y[0, :, 0].numpy(), reference(t.numpy()), atol=1e-9, rtol=0)
    steps = boundaries(second)[0]
    later = [p for p in points if 2.0 < p < 4.5]
    assert len(later) == 2
    for xi in later:
        assert float((steps - xi).abs().nan_to_num(math.inf).min()) < 1e-9, (xi, points)
    first.dense_output.sample_kinks = None  # as if the first solve had kept none
    blind = boundaries(odelab.solve(Feedback(), first.y[:, -1], t, history=first, **options))[0]
    assert float((blind - later[0]).abs().nan_to_num(math.inf).min()) > 1e-6


def test_a_terminal_event_ignores_the_undone_steps():
    """g = y + 0.2 on the tracked solve: y0 = 0.5 reaches it at 0.7, before its ξ1 (y = y0 − t there); y0 = 0.8
    after its ξ1, where scipy's brentq finds it on the closed form. The undone steps across ξ1 (their interpolants
    straddle the jump of f) take no part (they put t* 7e-3 early)."""
    from scipy.optimize import brentq

    y0 = torch.tensor([0.5, 0.8], dtype=F64)
    solution = odelab.solve(Feedback(), y0.unsqueeze(1), torch.linspace(0.0, 1.4, 8, dtype=F64), history=1.0,
                            rtol=1e-10, atol=1e-12, event=lambda t, state: state[0][:, 0] + 0.2)
    level = lambda s, b: float(closed_form(torch.tensor([s], dtype=F64), y0[b:b + 1], 1.0)[0][0, 0]) + 0.2
    exact = [0.7, brentq(level, 0.95, 1.4, args=(1,), xtol=1e-15)]
    assert exact[1] > float(closed_form(torch.zeros(1, dtype=F64), y0, 1.0)[1][1])  # after ξ1
    torch.testing.assert_close(solution.event.t, torch.tensor(exact, dtype=F64), rtol=0, atol=1e-9)
