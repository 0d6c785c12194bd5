"""A stiff delay equation: odelab's ``rodas4``, ``rodas4p2`` and ``rosenbrock23`` against scipy's Radau driven by the
method of steps, and odelab's own explicit dopri5.

    python benchmarks/stiff_delays.py [--batch 32] [--repeats 3] [--threads 1]
                                      [--out benchmarks/results/stiff_delays.json]

A Mackey–Glass-like equation with a stiff decay and a second, fast lag,

    y' = −λ y + β y(t − 1) / (1 + y(t − 1)¹⁰) + 20 y(t − 0.3) cos t − 10 y³,   λ = 10⁴, β = 2·10⁴,

history φ(s) = 0.5 + 0.3 cos 3s, ``--batch`` starting values y0 ~ U[0.5, 1.5] (seed 0), t ∈ [0, 2], outputs every
0.1 (landed on: ``tstops``), float64, rtol 1e-6 / atol 1e-8. Ways, medians of ``--repeats``:

- odelab ``rodas4``, ``rodas4p2`` and ``rosenbrock23``: one batched solve each (per-sample steps; the delayed states
  from the solve's own continuous extension), no gradient, and forward + backward of Σ y(2) to y0 (the RODAS ones);
- odelab ``dopri5``: the explicit pair, held by stability (|h λ| ≤ 3.3);
- scipy ``solve_ivp(method="Radau")`` per sample on each interval between the points t0 + Σ n_i τ_i (the method
  of steps; the delayed states from the earlier intervals' dense outputs), timed on 4 samples and scaled; at the
  same rtol, and at rtol 1e-8 / atol 1e-10 (``scipy_radau_tight``: its dense output, which the delayed states are
  read from, is far less accurate than its steps at 1e-6).

Error: the max over the checked samples (the first 4) and the outputs of |y − y_ref|, y_ref from the same Radau
method of steps at rtol 1e-10 / atol 1e-12. Ratios are odelab's rodas4p2 (the method for a stiff component under a
time-dependent forcing, which the delayed states are) over each way. JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import System

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import median_time, write_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
F64 = torch.float64
LAM, BETA, TAUS, END, RTOL, ATOL, CHECKED = 1e4, 2e4, (1.0, 0.3), 2.0, 1e-6, 1e-8, 4
TIMES = np.linspace(0.0, END, 21)


class StiffMackeyGlass(System):
    delays = TAUS

    def derivative(self, t, state, inp, slow, fast):
        y, d, e = state[0], slow[0], fast[0]
        return (-LAM * y + BETA * d / (1 + d ** 10) + 20 * e * torch.cos(t) - 10 * y ** 3,)


def history(s):
    return 0.5 + 0.3 * np.cos(3 * s) if isinstance(s, float) else 0.5 + 0.3 * torch.cos(3 * s)


def radau_method_of_steps(y0: float, rtol: float, atol: float) -> np.ndarray:
    """One sample by scipy's Radau between the propagated breakpoints: y at ``TIMES``."""
    points = sorted({sum(c) for n in range(1, 8) for c in itertools.combinations_with_replacement(TAUS, n)
                     if sum(c) < END - 1e-9} | {END})
    intervals = []

    def past(s: float) -> float:
        if s <= 0:
            return history(s)
        for a, b, piece in intervals:  # a stage a rounding error past its interval's end reads that interval
            if a - 1e-9 <= s <= b + 1e-9:
                return float(piece.sol(min(max(s, a), b))[0])
        raise ValueError(f"y({s}) is not solved yet")

    def field(t, y):
        d, e = past(t - TAUS[0]), past(t - TAUS[1])
        return [-LAM * y[0] + BETA * d / (1 + d ** 10) + 20 * e * math.cos(t) - 10 * y[0] ** 3]

    t, y = 0.0, [y0]
    for b in points:
        piece = solve_ivp(field, (t, b), y, method="Radau", rtol=rtol, atol=atol, dense_output=True)
        intervals.append((t, b, piece))
        t, y = b, piece.y[:, -1]
    return np.array([y0] + [past(float(s)) for s in TIMES[1:]])


def odelab_row(method: str, y0: torch.Tensor, repeats: int, gradient: bool) -> dict:
    times = torch.tensor(TIMES, dtype=F64)

    def run(grad: bool):
        start = y0.clone().requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            sol = odelab.solve(StiffMackeyGlass(), start, times, method=method, rtol=RTOL, atol=ATOL, history=history,
                               tstops=times, max_steps=100_000)
            if grad:
                sol.y[:, -1].sum().backward()
        return sol

    forward_s, sol = median_time(lambda: run(False), repeats)
    row = {"forward_s": forward_s, "steps_median": float(sol.stats["steps"].double().median()),
           "steps_max": int(sol.stats["steps"].max()), "ys": sol.y[:CHECKED, :, 0].detach().numpy()}
    if gradient:
        row["forward_backward_s"] = median_time(lambda: run(True), repeats)[0]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "stiff_delays.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    y0 = 0.5 + torch.rand(args.batch, 1, generator=generator, dtype=F64)
    checked = min(CHECKED, args.batch)
    reference = np.stack([radau_method_of_steps(float(v), 1e-10, 1e-12) for v in y0[:checked, 0]])

    rows = {"rodas4": odelab_row("rodas4", y0, args.repeats, True),
            "rodas4p2": odelab_row("rodas4p2", y0, args.repeats, True),
            "rosenbrock23": odelab_row("rosenbrock23", y0, args.repeats, False),
            "dopri5": odelab_row("dopri5", y0, args.repeats, False)}
    for name, rtol in (("scipy_radau", RTOL), ("scipy_radau_tight", RTOL / 100)):
        seconds, ys = median_time(lambda: np.stack([radau_method_of_steps(float(v), rtol, rtol / 100)
                                                    for v in y0[:checked, 0]]), args.repeats)
        rows[name] = {"forward_s": seconds * args.batch / checked, "timed_samples": checked, "rtol": rtol, "ys": ys}
    for row in rows.values():
        row["error"] = float(np.abs(row.pop("ys")[:checked] - reference).max())
    mine = rows["rodas4p2"]
    for name, row in rows.items():
        if name != "rodas4p2":
            mine[f"forward_ratio_to_{name}"] = mine["forward_s"] / row["forward_s"]
    print(f"stiff Mackey–Glass with two lags, {args.batch} samples on [0, {END:g}], rtol {RTOL:g} / atol {ATOL:g}, "
          f"float64, {args.threads} thread(s), median of {args.repeats}")
    for name, row in rows.items():
        steps = f", steps median {row['steps_median']:.0f} (max {row['steps_max']})" if "steps_max" in row else ""
        both = f", with the gradient {row['forward_backward_s']:.3f} s" if "forward_backward_s" in row else ""
        scaled = f" (scaled from {row['timed_samples']})" if "timed_samples" in row else ""
        print(f"  {name:13s} forward {row['forward_s']:.3f} s{scaled}{both}{steps}; error {row['error']:.1e}")
    for key, value in mine.items():
        if key.startswith("forward_ratio_to_"):
            print(f"  rodas4p2 / {key.removeprefix('forward_ratio_to_')}: {value:.3g}x")
    write_rows(args.out, rows, batch=args.batch, repeats=args.repeats, threads=args.threads)


if __name__ == "__main__":
    main()
