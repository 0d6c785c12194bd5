"""Terminal events, one per sample: odelab's batched event against torchdiffeq, scipy and diffrax.

    python benchmarks/events.py [--batch 256] [--repeats 5] [--threads 1] [--no-diffrax]
                                [--out benchmarks/results/events.json]

A ball with linear drag, x'' = −g − c x' (g = 9.81, c = 0.35), ``--batch`` samples from x0 ~ U[1, 4], v0 ~ U[−1, 3]
(seed 0), float64, dopri5 at rtol 1e-8 / atol 1e-10. The task: each sample's landing time t* (x falling through 0)
and dt*/dx0. Ways to get them, medians of ``--repeats``:

- odelab: one ``solve(..., [0, 5], event=lambda t, y: y[:, 0], event_direction=-1)`` for the batch (every sample
  stops at its own landing, g read at four interior points of every step and its end, the default); forward
  alone (no grad), and forward + backward of Σ t* to x0; again with ``event_points=0`` (g at the step ends only,
  as the others: what seeing grazes costs);
- torchdiffeq: ``odeint_event`` stops a whole batch at its first event (its event functions are combined into one
  by a min), so one call per sample; forward and forward + backward, timed on the first 16 samples and scaled;
- scipy: ``solve_ivp(RK45, events=...)`` per sample, forward only (no gradient), timed on 32 and scaled;
- diffrax: ``jax.vmap`` of ``diffeqsolve(Dopri5, PIDController, event=Event(cond, root_finder=Newton))``, jitted
  (steady state; the first call with its compilation is reported apart), and ``jax.grad`` of Σ t*; skipped without
  jax/diffrax (``pip install jax diffrax``).

References from the closed form x(t) = x0 + (v0 + g/c)(1 − e^(−ct))/c − g t/c: t* by scipy's brentq (xtol 1e-15),
dt*/dx0 = −1 / x'(t*) (the implicit function theorem on the exact solution). Errors are max |· − reference| over the
checked samples; ratios are odelab over each anchor. JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import odelab

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import jitted_rows, median_time, one_xla_thread, per_sample_rows, write_rows  # noqa: E402


RESULTS = Path(__file__).resolve().parent / "results"
F64 = torch.float64
G, C, RTOL, ATOL, END = 9.81, 0.35, 1e-8, 1e-10, 5.0
TORCHDIFFEQ_SAMPLES, SCIPY_SAMPLES = 16, 32


def reference(x0: np.ndarray, v0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Landing times and dt*/dx0 from the closed form."""
    height = lambda t, x, v: x + (v + G / C) * (1 - math.exp(-C * t)) / C - G * t / C
    speed = lambda t, v: (v + G / C) * math.exp(-C * t) - G / C
    times = np.array([brentq(height, 1e-9, END, args=(x, v), xtol=1e-15, rtol=4 * np.finfo(float).eps)
                      for x, v in zip(x0, v0)])
    return times, np.array([-1.0 / speed(t, v) for t, v in zip(times, v0)])


def balls(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 ~ U[1, 4], v0 ~ U[−1, 3], seed 0."""
    generator = torch.Generator().manual_seed(0)
    x0 = 1 + 3 * torch.rand(batch, generator=generator, dtype=F64)
    return x0, -1 + 4 * torch.rand(batch, generator=generator, dtype=F64)


def with_errors(rows: dict, true_times: np.ndarray, true_slopes: np.ndarray) -> None:
    """Each row's "times" and "slopes" replaced by their max errors against the references (over its samples)."""
    for row in rows.values():
        count = row["times"].shape[0]
        row["time_error"] = float(np.abs(row.pop("times") - true_times[:count]).max())
        if "slopes" in row:
            slopes = row.pop("slopes")
            row["slope_error"] = float(np.abs(slopes - true_slopes[:slopes.shape[0]]).max())


def report(rows: dict, ours: str) -> None:
    """Add to row ``ours`` its time over every other row's (forward, and with the gradient where both have one),
    and print the rows and the ratios."""
    mine = rows[ours]
    for name, row in rows.items():
        if name != ours:
            for key in ("forward_s", "forward_backward_s"):
                if key in row:
                    mine[f"{key[:-2]}_ratio_to_{name}"] = mine[key] / row[key]
    for name, row in rows.items():
        scaled = f" (scaled from {row['timed_samples']})" if "timed_samples" in row else ""
        both = f", with the gradient {row['forward_backward_s']:.4f} s" if "forward_backward_s" in row else ""
        first = f" (first calls {row['forward_first_call_s']:.1f} s, {row['forward_backward_first_call_s']:.1f} s)" \
            if "forward_first_call_s" in row else ""
        errors = f"time error {row['time_error']:.1e}" + (f", slope error {row['slope_error']:.1e}"
                                                         if "slope_error" in row else "")
        print(f"  {name:15s} forward {row['forward_s']:.4f} s{both}{scaled}{first}; {errors}")
    for key, value in mine.items():
        if "_ratio_to_" in key:
            print(f"  {ours} / {key.split('_ratio_to_')[1]} ({key.split('_ratio_to_')[0].replace('_', ' + ')}): "
                  f"{value:.3g}x")


def field(t, y):
    return torch.cat([y[..., 1:], -G - C * y[..., 1:]], -1)


def odelab_row(x0: torch.Tensor, v0: torch.Tensor, repeats: int, points: int = 4) -> dict:
    def landing(grad: bool):
        start = x0.clone().requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            sol = odelab.solve(field, torch.stack([start, v0], 1), [0.0, END], event=lambda t, y: y[:, 0],
                               event_direction=-1, event_points=points, rtol=RTOL, atol=ATOL)
        if not grad:
            return sol.event.t, None, sol
        (slope,) = torch.autograd.grad(sol.event.t.sum(), (start,))
        return sol.event.t.detach(), slope, sol

    forward_s, (times, _, sol) = median_time(lambda: landing(False), repeats)
    backward_s, (_, slope, _) = median_time(lambda: landing(True), repeats)
    return {"forward_s": forward_s, "forward_backward_s": backward_s,
            "steps_median": float(sol.stats["steps"].double().median()),
            "times": times.numpy(), "slopes": slope.numpy()}


def torchdiffeq_row(x0: torch.Tensor, v0: torch.Tensor, repeats: int) -> dict | None:
    try:
        from torchdiffeq import odeint_event
    except ImportError as err:
        print(f"torchdiffeq not installed ({err}); skipping it")
        return None
    count = min(TORCHDIFFEQ_SAMPLES, x0.shape[0])

    def one(b: int, grad: bool):
        start = x0[b:b + 1].clone().requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            t, _ = odeint_event(lambda t, y: field(t, y), torch.stack([start, v0[b:b + 1]], 1)[0],
                                torch.tensor(0.0, dtype=F64), event_fn=lambda t, y: y[0], method="dopri5",
                                rtol=RTOL, atol=ATOL)
        if not grad:
            return t.item(), math.nan
        (slope,) = torch.autograd.grad(t, (start,))
        return t.item(), slope.item()

    return per_sample_rows(one, count, x0.shape[0], repeats)


def scipy_row(x0: np.ndarray, v0: np.ndarray, repeats: int) -> dict:
    count = min(SCIPY_SAMPLES, x0.shape[0])
    ground = lambda t, y: y[0]
    ground.terminal, ground.direction = True, -1

    def run():
        return np.array([solve_ivp(lambda t, y: [y[1], -G - C * y[1]], (0.0, END), [x, v], method="RK45", rtol=RTOL,
                                   atol=ATOL, events=ground).t_events[0][0] for x, v in zip(x0[:count], v0[:count])])

    seconds, times = median_time(run, repeats)
    return {"forward_s": seconds * x0.shape[0] / count, "timed_samples": count, "times": times}


def diffrax_row(x0: np.ndarray, v0: np.ndarray, repeats: int) -> dict | None:
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
    event = diffrax.Event(lambda t, y, args, **kwargs: y[0],  # real-valued: the root finder refines the crossing
                          root_finder=optimistix.Newton(rtol=1e-12, atol=1e-12))

    def landing(x, v):
        sol = diffrax.diffeqsolve(term, diffrax.Dopri5(), 0.0, END, None, jnp.stack([x, v]), event=event,
                                  stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL))
        return sol.ts[-1]

    forward = jax.jit(jax.vmap(landing))
    slope = jax.jit(jax.vmap(jax.grad(landing)))
    return jitted_rows(forward, slope, jnp.asarray(x0), jnp.asarray(v0), repeats=repeats)


def ball_arguments(description: str, out: str, **extra: int) -> argparse.Namespace:
    """The ball benchmarks' command line (``extra``: more integer options and their defaults), with torch's threads
    set and XLA held to one thread where torch runs on one."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch", type=int, default=256)
    for name, default in extra.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-diffrax", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / out))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.no_diffrax and args.threads == 1:
        one_xla_thread()
    return args


def main() -> None:
    args = ball_arguments(__doc__.splitlines()[0], "events.json")
    x0, v0 = balls(args.batch)
    true_times, true_slopes = reference(x0.numpy(), v0.numpy())

    rows = {"odelab": odelab_row(x0, v0, args.repeats), "odelab_ends": odelab_row(x0, v0, args.repeats, 0)}
    found = torchdiffeq_row(x0, v0, args.repeats)
    if found is not None:
        rows["torchdiffeq"] = found
    rows["scipy"] = scipy_row(x0.numpy(), v0.numpy(), args.repeats)
    if not args.no_diffrax:
        found = diffrax_row(x0.numpy(), v0.numpy(), args.repeats)
        if found is not None:
            rows["diffrax"] = found
    with_errors(rows, true_times, true_slopes)
    print(f"landing of {args.batch} balls with drag, dopri5 rtol {RTOL:g} / atol {ATOL:g}, float64, "
          f"{args.threads} thread(s), median of {args.repeats}")
    report(rows, "odelab")
    write_rows(args.out, rows, batch=args.batch, repeats=args.repeats, threads=args.threads)


if __name__ == "__main__":
    main()
