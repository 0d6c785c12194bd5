"""State-dependent delays: odelab's discontinuity tracking against the same solve without it, and a scipy method of
steps that locates every breakpoint with scipy's events.

    python benchmarks/state_delays.py [--batch 256] [--checked 4] [--repeats 5] [--threads 1]
                                      [--out benchmarks/results/state_delays.json]

Hutchinson's equation with a density-dependent maturation delay (``examples/state_delay.py``):
N' = r N (1 − N(t − τ)), τ = τ0 + τ1 N / (1 + N) held to [0.3, 6], (r, τ0, τ1) = (1.1, 1.0, 1.2) (a limit
cycle), the history N = 0.5 on t ≤ 0, ``--batch`` samples N(0) ~ U[0.1, 2] (seed 0), float64, on [0, 30] with 61
outputs, rtol 1e-6 / atol 1e-9. N(0) ≠ 0.5, so f jumps where t − τ(N(t)) reaches 0 (a time of each sample's own),
and y^(m) where it reaches the points found before. Ways, medians of ``--repeats``, forward alone (no grad) and
forward + backward of Σ N(t_k) to (r, τ0, τ1):

- odelab tracked: ``solve(..., method="dopri5")``, the default (:mod:`odelab.solvers.tracking`);
- odelab untracked: the same with ``track_discontinuities=False`` (steps straddle the breakpoints; the error control
  alone shrinks them), at rtol 1e-6 and at ``--matched-rtol`` (1e-8: about the tracked solve's error);
- odelab rk4: the fixed-step scheme at ``--dt`` (0.05), each stage's delayed state from the cubic Hermite
  interpolant of the nodes (f's jump at each sample's crossing of t0 falls between nodes: first order there);
- odelab rodas4: the linearly implicit method with the same tracking (the problem is not stiff: what the
  Jacobian and the LU cost where they buy nothing);
- scipy: ``solve_ivp(DOP853)`` on pieces shorter than the smallest delay (every delayed time in the past), each
  ended by an event where t − τ(N) crosses a breakpoint found so far; one sample at a time, timed on ``--checked``
  samples and scaled to the batch; forward only (no gradient).

Reference: the scipy method of steps at rtol 1e-12 / atol 1e-14 on the checked samples, its gradient by central
differences (step 1e-5 in each parameter). Errors: the max |N − N_ref| over the checked samples and outputs; the max
relative error of the three derivatives of each checked sample's Σ N(t_k). JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import StateDelay, System

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import median_time, write_rows  # noqa: E402

F64 = torch.float64
PARAMS = (1.1, 1.0, 1.2)  # r, τ0, τ1: a limit cycle
HISTORY, LOWER, UPPER, END = 0.5, 0.3, 6.0, 30.0
RTOL, ATOL = 1e-6, 1e-9


def delay(tau0, tau1, n):
    return tau0 + tau1 * n / (1 + n)


class Maturation(System):
    blocks, hidden_size = ("N",), 1

    def __init__(self, params: torch.Tensor):
        super().__init__()
        self.params = params
        self.delays = (StateDelay(lambda t, state: delay(params[1], params[2], state[0][:, 0]), LOWER, UPPER),)

    def derivative(self, t, state, inp, delayed):
        return (self.params[0] * state[0] * (1 - delayed[0]),)


def method_of_steps(n0: float, params, times: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """N at ``times`` by scipy's DOP853, piece by piece (each shorter than the smallest delay, ended where
    t − τ(N) crosses a breakpoint found so far, t0 first)."""
    r, tau0, tau1 = params
    lag = lambda n: min(max(delay(tau0, tau1, n), LOWER), UPPER)
    pieces, points = [], [0.0]

    def past(s):
        if s <= 0:
            return HISTORY
        for start, stop, sol in reversed(pieces):
            if start <= s <= stop:
                return float(sol(s)[0])
        raise AssertionError(f"no piece holds {s}")

    rhs = lambda s, v: [r * v[0] * (1 - past(s - lag(v[0])))]
    t, n = 0.0, n0
    while t < END - 1e-12:
        events = []
        for xi in points:
            if xi > t - lag(n) + 1e-12:  # a breakpoint the delayed time has yet to reach
                event = lambda s, v, xi=xi: s - lag(v[0]) - xi
                event.terminal = True
                events.append(event)
        sol = solve_ivp(rhs, (t, min(END, t + 0.8 * LOWER)), [n], method="DOP853", rtol=rtol, atol=atol,
                        dense_output=True, events=events)
        pieces.append((t, float(sol.t[-1]), sol.sol))
        if any(len(found) for found in sol.t_events):
            points.append(float(sol.t[-1]))
        t, n = float(sol.t[-1]), float(sol.y[0, -1])
    return np.array([past(s) if s > 0 else n0 for s in times])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--checked", type=int, default=4, help="samples checked against (and timed for) scipy")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--matched-rtol", type=float, default=1e-8, help="the untracked solve's rtol of a like error")
    parser.add_argument("--dt", type=float, default=0.05, help="the rk4 row's step")
    parser.add_argument("--out", default="benchmarks/results/state_delays.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n0 = torch.rand(args.batch, 1, generator=torch.Generator().manual_seed(0), dtype=F64) * 1.9 + 0.1
    times = torch.linspace(0.0, END, 61, dtype=F64)
    checked = list(range(args.checked))

    reference = np.stack([method_of_steps(float(n0[b]), PARAMS, times.numpy(), 1e-12, 1e-14) for b in checked])
    step = 1e-5
    slopes = np.zeros((len(checked), 3))
    for j in range(3):
        for sign in (1, -1):
            moved = list(PARAMS)
            moved[j] += sign * step
            sums = [method_of_steps(float(n0[b]), moved, times.numpy(), 1e-12, 1e-14).sum() for b in checked]
            slopes[:, j] += sign * np.array(sums) / (2 * step)

    rows = {}
    adaptive = lambda rtol, track: dict(method="dopri5", rtol=rtol, atol=ATOL, track_discontinuities=track)
    ways = (("odelab tracked", adaptive(RTOL, True)), ("odelab untracked", adaptive(RTOL, False)),
            (f"odelab untracked, rtol {args.matched_rtol:g}", adaptive(args.matched_rtol, False)),
            (f"odelab rk4, dt {args.dt:g}", dict(method="rk4", dt=args.dt)),
            ("odelab rodas4 tracked", dict(method="rodas4", rtol=RTOL, atol=ATOL)))
    for name, method in ways:
        params = torch.tensor(PARAMS, dtype=F64)

        def forward():
            with torch.no_grad():
                return odelab.solve(Maturation(params), n0, times, history=HISTORY, **method)

        def gradient():
            p = params.clone().requires_grad_(True)
            solution = odelab.solve(Maturation(p), n0[checked], times, history=HISTORY, **method)
            return torch.stack([torch.autograd.grad(solution.y[b, :, 0].sum(), p, retain_graph=True)[0]
                                for b in range(len(checked))])

        def training():
            p = params.clone().requires_grad_(True)
            odelab.solve(Maturation(p), n0, times, history=HISTORY, **method).y.sum().backward()

        seconds, solution = median_time(forward, args.repeats)
        grad_seconds, _ = median_time(training, args.repeats)
        error = float(np.abs(solution.y[checked, :, 0].numpy() - reference).max())
        grad_error = float((np.abs(gradient().numpy() - slopes) / np.abs(slopes)).max())
        rows[name] = {"seconds": seconds, "grad_seconds": grad_seconds, "error": error, "grad_error": grad_error,
                      "steps_median": float(solution.stats["steps"].double().median()),
                      "rejected_median": float(solution.stats["rejected"].double().median())}
        print(f"{name:30s} {seconds * 1e3:8.1f} ms forward, {grad_seconds * 1e3:8.1f} ms with the gradient, "
              f"steps {rows[name]['steps_median']:.0f} (rejected {rows[name]['rejected_median']:.0f}), "
              f"error {error:.2e}, gradient error {grad_error:.2e}")

    per_sample, _ = median_time(lambda: [method_of_steps(float(n0[b]), PARAMS, times.numpy(), RTOL, ATOL)
                                         for b in checked], max(1, args.repeats // 2))
    scipy_seconds = per_sample / len(checked) * args.batch
    scipy_values = np.stack([method_of_steps(float(n0[b]), PARAMS, times.numpy(), RTOL, ATOL) for b in checked])
    rows["scipy method of steps (scaled)"] = {"seconds": scipy_seconds,
                                              "error": float(np.abs(scipy_values - reference).max())}
    print(f"{'scipy (scaled)':30s} {scipy_seconds * 1e3:8.1f} ms forward, "
          f"error {rows['scipy method of steps (scaled)']['error']:.2e}")
    tracked = rows["odelab tracked"]
    for name, row in rows.items():
        if name != "odelab tracked":
            row["tracked_speedup"] = row["seconds"] / tracked["seconds"]
            if "grad_seconds" in row:
                row["tracked_grad_speedup"] = row["grad_seconds"] / tracked["grad_seconds"]
    write_rows(args.out, rows, batch=args.batch, checked=args.checked, repeats=args.repeats, threads=args.threads,
               params=PARAMS, rtol=RTOL, atol=ATOL)


if __name__ == "__main__":
    main()
