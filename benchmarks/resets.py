"""Events that reset the state: five bounces of a ball with drag, odelab's one solve with ``reset=`` against chained
terminal-event solves (odelab's, torchdiffeq's ``odeint_event``, diffrax's ``Event``).

    python benchmarks/resets.py [--batch 256] [--bounces 5] [--repeats 5] [--threads 1] [--no-diffrax]
                                [--out benchmarks/results/resets.json]

The balls of ``benchmarks/events.py`` (x'' = −g − c x', g = 9.81, c = 0.35, ``--batch`` samples from x0 ~ U[1, 4],
v0 ~ U[−1, 3], seed 0, float64, dopri5 at rtol 1e-8 / atol 1e-10); at each landing the speed is reversed and scaled
by e = 0.8. The task: each ball's ``--bounces``-th landing time and its derivative in x0. Ways, medians of
``--repeats``, forward alone (no grad) and forward + backward of Σ t_n to x0:

- odelab ``reset=``: one ``solve(..., [0, 20], event=..., reset=..., max_events=bounces)`` for the batch (g read
  at four interior points of every step and its end, the default); again with ``event_points=0`` (the ends only);
- odelab chained: one terminal-event solve per flight for the batch, the next flight from each ball's event state
  (what a user of terminal events writes);
- torchdiffeq: ``odeint_event`` per sample and flight (it stops a whole batch at its first event), timed on 8
  samples and scaled;
- diffrax: ``jax.vmap`` of ``bounces`` chained ``diffeqsolve(..., event=Event(...))`` calls, jitted (steady state;
  the first call apart); skipped without jax/diffrax.

Reference: the closed form of each flight, x(t) = x_s + (v_s + g/c)(1 − e^(−ct))/c − g t/c, landings by scipy's
brentq (xtol 1e-15) in sequence, dt_n/dx0 by central differences of that sequence (step 1e-6). Errors are the max
over the checked samples; ratios are odelab ``reset=`` over each way. JSON to ``--out``.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import brentq

import odelab

sys.path.insert(0, str(Path(__file__).resolve().parent))
from events import ATOL, C, G, RTOL, ball_arguments, balls, field, report, with_errors  # noqa: E402
from timing import jitted_rows, median_time, per_sample_rows, write_rows  # noqa: E402

F64 = torch.float64
E, SPAN, TORCHDIFFEQ_SAMPLES = 0.8, 20.0, 8


def reference_landing(x0: float, v0: float, bounces: int) -> float:
    """The ``bounces``-th landing from the closed form, flight by flight."""
    height = lambda t, x, v: x + (v + G / C) * (1 - math.exp(-C * t)) / C - G * t / C
    speed = lambda t, v: (v + G / C) * math.exp(-C * t) - G / C
    clock, x, v = 0.0, x0, v0
    for _ in range(bounces):
        low = 1e-9 if x > 0 else 1e-6  # from the floor: past the start's own zero
        flight = brentq(height, low, SPAN, args=(x, v), xtol=1e-15, rtol=4 * np.finfo(float).eps)
        clock, x, v = clock + flight, 0.0, -E * speed(flight, v)
    return clock


def reference(x0: np.ndarray, v0: np.ndarray, bounces: int) -> tuple[np.ndarray, np.ndarray]:
    times = np.array([reference_landing(x, v, bounces) for x, v in zip(x0, v0)])
    step = 1e-6
    slopes = np.array([(reference_landing(x + step, v, bounces) - reference_landing(x - step, v, bounces)) / (2 * step)
                       for x, v in zip(x0, v0)])
    return times, slopes


floor = lambda t, y: y[:, 0]
bounce = lambda t, y: torch.stack([torch.zeros_like(y[:, 0]), -E * y[:, 1]], 1)


def odelab_rows(x0: torch.Tensor, v0: torch.Tensor, bounces: int, repeats: int) -> dict:
    def with_reset(start, points=4):
        sol = odelab.solve(field, torch.stack([start, v0], 1), [0.0, SPAN], event=floor, event_direction=-1,
                           reset=bounce, max_events=bounces, event_points=points, rtol=RTOL, atol=ATOL)
        return sol.event.t[:, bounces - 1], int(sol.stats["steps"].max())

    def chained(start):
        state, clock, steps = torch.stack([start, v0], 1), 0.0, 0
        for _ in range(bounces):
            sol = odelab.solve(field, state, [0.0, SPAN], event=floor, event_direction=-1, rtol=RTOL, atol=ATOL)
            clock, steps = clock + sol.event.t, steps + int(sol.stats["steps"].max())
            state = torch.stack([torch.zeros_like(clock), -E * sol.event.y[:, 1]], 1)
        return clock, steps

    rows = {}
    ways = (("odelab_reset", with_reset), ("odelab_reset_ends", lambda start: with_reset(start, 0)),
            ("odelab_chained", chained))
    for name, way in ways:
        def run(grad: bool):
            start = x0.clone().requires_grad_(grad)
            with torch.set_grad_enabled(grad):
                times, steps = way(start)
            if not grad:
                return times, None, steps
            (slope,) = torch.autograd.grad(times.sum(), (start,))
            return times.detach(), slope, steps

        forward_s, (times, _, steps) = median_time(lambda: run(False), repeats)
        backward_s, (_, slope, _) = median_time(lambda: run(True), repeats)
        rows[name] = {"forward_s": forward_s, "forward_backward_s": backward_s, "steps_max": steps,
                      "times": times.numpy(), "slopes": slope.numpy()}
    return rows


def torchdiffeq_row(x0: torch.Tensor, v0: torch.Tensor, bounces: int, repeats: int) -> dict | None:
    try:
        from torchdiffeq import odeint_event
    except ImportError as err:
        print(f"torchdiffeq not installed ({err}); skipping it")
        return None
    count = min(TORCHDIFFEQ_SAMPLES, x0.shape[0])

    def one(b: int, grad: bool):
        start = x0[b:b + 1].clone().requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            state, clock = torch.stack([start, v0[b:b + 1]], 1)[0], torch.tensor(0.0, dtype=F64)
            for _ in range(bounces):
                # from the floor the start sits on x = 0: the event counts only a fall below it
                t, path = odeint_event(field, state, clock, event_fn=lambda t, y: torch.where(y[1] < 0, y[0], 1.0),
                                       method="dopri5", rtol=RTOL, atol=ATOL)
                clock = t
                state = torch.stack([torch.zeros_like(t), -E * path[-1][1]])
        if not grad:
            return clock.item(), math.nan
        (slope,) = torch.autograd.grad(clock, (start,))
        return clock.item(), slope.item()

    return per_sample_rows(one, count, x0.shape[0], repeats)


def diffrax_row(x0: np.ndarray, v0: np.ndarray, bounces: int, repeats: int) -> dict | None:
    try:
        import diffrax
        import jax
        import jax.numpy as jnp
        import optimistix
    except ImportError as err:
        print(f"diffrax not installed ({err}); skipping it (pip install jax diffrax)")
        return None
    jax.config.update("jax_enable_x64", True)
    term = diffrax.ODETerm(lambda t, y, args: jnp.stack([y[1], -G - C * y[1]]))
    # from the floor the first flight's start sits on x = 0: the condition counts only a fall below it
    event = diffrax.Event(lambda t, y, args, **kwargs: jnp.where(y[1] < 0, y[0], 1.0),
                          root_finder=optimistix.Newton(rtol=1e-12, atol=1e-12))

    def landing(x, v):
        clock, state = 0.0, jnp.stack([x, v])
        for _ in range(bounces):
            sol = diffrax.diffeqsolve(term, diffrax.Dopri5(), clock, clock + SPAN, None, state, event=event,
                                      stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL))
            clock = sol.ts[-1]
            state = jnp.stack([0.0, -E * sol.ys[-1][1]])
        return clock

    forward = jax.jit(jax.vmap(landing))
    slope = jax.jit(jax.vmap(jax.grad(landing)))
    return jitted_rows(forward, slope, jnp.asarray(x0), jnp.asarray(v0), repeats=repeats)


def main() -> None:
    args = ball_arguments(__doc__.splitlines()[0], "resets.json", bounces=5)
    x0, v0 = balls(args.batch)
    true_times, true_slopes = reference(x0.numpy(), v0.numpy(), args.bounces)

    rows = odelab_rows(x0, v0, args.bounces, args.repeats)
    found = torchdiffeq_row(x0, v0, args.bounces, args.repeats)
    if found is not None:
        rows["torchdiffeq"] = found
    if not args.no_diffrax:
        found = diffrax_row(x0.numpy(), v0.numpy(), args.bounces, args.repeats)
        if found is not None:
            rows["diffrax"] = found
    with_errors(rows, true_times, true_slopes)
    print(f"landing {args.bounces} of {args.batch} balls with drag (e = {E}), dopri5 rtol {RTOL:g} / atol {ATOL:g}, "
          f"float64, {args.threads} thread(s), median of {args.repeats}")
    report(rows, "odelab_reset")
    write_rows(args.out, rows, batch=args.batch, bounces=args.bounces, repeats=args.repeats, threads=args.threads)


if __name__ == "__main__":
    main()
