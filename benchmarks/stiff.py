"""A stiff batch: odelab's ``rodas4``, ``rodas4p2`` and ``rosenbrock23`` against scipy's implicit solvers, diffrax's
Kvaerno5 and odelab's own explicit dopri5.

    python benchmarks/stiff.py [--batch 64] [--repeats 3] [--threads 1] [--no-diffrax]
                               [--out benchmarks/results/stiff.json]

Robertson's chemical kinetics (HNW II §IV.1), a batch of ``--batch`` rate sets (k1 = 0.04 s, s ~ U[0.5, 2],
seed 0), from (1, 0, 0) over t ∈ [0, 1e5], outputs at 21 log-spaced times, float64:

    y1' = −k1 y1 + 1e4 y2 y3,   y2' = k1 y1 − 1e4 y2 y3 − 3e7 y2²,   y3' = 3e7 y2².

Ways to solve it at rtol 1e-4 / atol 1e-10 (y2 peaks at 3.6e-5), medians of ``--repeats``:

- odelab ``rodas4``, ``rodas4p2`` and ``rosenbrock23``: one batched solve each (no gradient), and forward + backward
  of Σ y3(t_end) to the rates; ``rodas4_dae`` the same with y3 algebraic, 0 = y1 + y2 + y3 − 1 (``mass`` diag(1, 1, 0),
  HNW's DAE form of the problem);
- scipy ``solve_ivp`` with Radau, BDF and LSODA, one call a sample (timed on 8 samples and scaled to the batch);
- diffrax ``Kvaerno5`` (an ESDIRK method, its Newton solves on ``jax.vmap``'s batch), jitted; the first call with
  its compilation apart; skipped without jax/diffrax;
- odelab ``dopri5``: the explicit pair, held by stability (steps ~ 3.3 / 4e4 s once y2·1e4 y3 dominates), on
  t ≤ 10 only (1e-4 of the span), its steps and time reported.

Error: the max over samples and times of |y − y_ref| / (|y_ref| + 1e-6) for y1, 1e4 y2 and y3 (y2 on the scale
HNW plot it at), y_ref from scipy's Radau at rtol 1e-10 / atol 1e-14. Ratios are odelab's rodas4 over each
anchor. JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.integrate import solve_ivp

import odelab

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import median_time, one_xla_thread, write_rows  # noqa: E402


RESULTS = Path(__file__).resolve().parent / "results"
F64 = torch.float64
RTOL, ATOL, END, SCIPY_SAMPLES, EXPLICIT_SPAN = 1e-4, 1e-10, 1e5, 8, 10.0
TIMES = np.concatenate([[0.0], np.logspace(-5, 5, 20)])


def robertson(k1):
    def field(t, y):
        a, b, c = y[:, :1], y[:, 1:2], y[:, 2:]
        return torch.cat([-k1 * a + 1e4 * b * c, k1 * a - 1e4 * b * c - 3e7 * b * b, 3e7 * b * b], 1)
    return field


def robertson_dae(k1):
    """y3 by conservation: 0 = y1 + y2 + y3 − 1, with M = diag(1, 1, 0)."""
    def field(t, y):
        a, b, c = y[:, :1], y[:, 1:2], y[:, 2:]
        return torch.cat([-k1 * a + 1e4 * b * c, k1 * a - 1e4 * b * c - 3e7 * b * b, a + b + c - 1], 1)
    return field


def robertson_numpy(k1: float):
    return lambda t, y: [-k1 * y[0] + 1e4 * y[1] * y[2], k1 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                         3e7 * y[1] ** 2]


def relative_error(values: np.ndarray, truth: np.ndarray) -> float:
    scale = np.array([1.0, 1e4, 1.0])
    return float((np.abs(values - truth) * scale / (np.abs(truth) * scale + 1e-6)).max())


def odelab_rows(rates: torch.Tensor, repeats: int) -> dict:
    y0 = torch.tensor([[1.0, 0.0, 0.0]], dtype=F64).expand(rates.shape[0], -1).contiguous()
    times = torch.tensor(TIMES, dtype=F64)
    rows = {}
    ways = {"rodas4": ("rodas4", robertson, {}), "rodas4p2": ("rodas4p2", robertson, {}),
            "rosenbrock23": ("rosenbrock23", robertson, {}),
            "rodas4_dae": ("rodas4", robertson_dae, {"mass": [1.0, 1.0, 0.0]})}
    for name, (method, field, extra) in ways.items():
        def forward():
            with torch.no_grad():
                return odelab.solve(field(rates.unsqueeze(1)), y0, times, method=method, rtol=RTOL, atol=ATOL,
                                    **extra)

        def backward():
            k1 = rates.clone().requires_grad_(True)
            sol = odelab.solve(field(k1.unsqueeze(1)), y0, times, method=method, rtol=RTOL, atol=ATOL, **extra)
            return torch.autograd.grad(sol.y[:, -1, 2].sum(), (k1,))[0]

        forward_s, sol = median_time(forward, repeats)
        backward_s, _ = median_time(backward, max(1, repeats // 2))
        rows[name] = {"forward_s": forward_s, "forward_backward_s": backward_s,
                        "steps_median": float(sol.stats["steps"].double().median()),
                        "steps_max": int(sol.stats["steps"].max()), "values": sol.y.numpy()}
    with torch.no_grad():
        explicit_s, explicit = median_time(lambda: odelab.solve(robertson(rates.unsqueeze(1)), y0, [0.0, EXPLICIT_SPAN],
                                                                rtol=RTOL, atol=ATOL, max_steps=10**6), 1)
    rows["dopri5_to_t10"] = {"forward_s": explicit_s, "steps_median": float(explicit.stats["steps"].double().median()),
                             "span": EXPLICIT_SPAN}
    return rows


def scipy_rows(rates: np.ndarray, repeats: int) -> dict:
    count = min(SCIPY_SAMPLES, rates.shape[0])
    rows = {}
    for method in ("Radau", "BDF", "LSODA"):
        def run():
            return np.stack([solve_ivp(robertson_numpy(k), (0.0, END), [1.0, 0.0, 0.0], method=method, rtol=RTOL,
                                       atol=ATOL, t_eval=TIMES).y.T for k in rates[:count]])
        seconds, values = median_time(run, repeats)
        rows[f"scipy_{method.lower()}"] = {"forward_s": seconds * rates.shape[0] / count, "timed_samples": count,
                                           "values": values}
    return rows


def diffrax_row(rates: np.ndarray, repeats: int) -> dict | None:
    try:
        import diffrax
        import jax
        import jax.numpy as jnp
    except ImportError as err:
        print(f"diffrax not installed ({err}); skipping it (pip install jax diffrax)")
        return None
    jax.config.update("jax_enable_x64", True)

    def field(t, y, k1):
        return jnp.stack([-k1 * y[0] + 1e4 * y[1] * y[2], k1 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                          3e7 * y[1] ** 2])

    def one(k1):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(field), diffrax.Kvaerno5(), 0.0, END, None,
                                  jnp.array([1.0, 0.0, 0.0]), args=k1, saveat=diffrax.SaveAt(ts=jnp.asarray(TIMES)),
                                  stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL), max_steps=100_000)
        return sol.ys

    run = jax.jit(jax.vmap(one))
    ks = jnp.asarray(rates)
    begin = time.perf_counter()
    jax.block_until_ready(run(ks))
    first = time.perf_counter() - begin
    seconds, values = median_time(lambda: jax.block_until_ready(run(ks)), repeats)
    return {"forward_s": seconds, "first_call_s": first, "values": np.asarray(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-diffrax", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / "stiff.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.no_diffrax and args.threads == 1:
        one_xla_thread()
    generator = torch.Generator().manual_seed(0)
    rates = 0.04 * (0.5 + 1.5 * torch.rand(args.batch, generator=generator, dtype=F64))
    truth = np.stack([solve_ivp(robertson_numpy(k), (0.0, END), [1.0, 0.0, 0.0], method="Radau", rtol=1e-10,
                                atol=1e-14, t_eval=TIMES).y.T for k in rates.numpy()])

    rows = odelab_rows(rates, args.repeats)
    rows.update(scipy_rows(rates.numpy(), args.repeats))
    if not args.no_diffrax:
        found = diffrax_row(rates.numpy(), args.repeats)
        if found is not None:
            rows["diffrax_kvaerno5"] = found
    for row in rows.values():
        if "values" in row:
            values = row.pop("values")
            row["max_relative_error"] = relative_error(values, truth[:values.shape[0]])
    ours = rows["rodas4"]
    for name, row in rows.items():
        if name.startswith(("scipy", "diffrax")):
            ours[f"ratio_to_{name}"] = ours["forward_s"] / row["forward_s"]

    print(f"Robertson, {args.batch} rate sets on [0, {END:g}], rtol {RTOL:g} / atol {ATOL:g}, float64, "
          f"{args.threads} thread(s), median of {args.repeats}")
    for name, row in rows.items():
        extra = []
        if "forward_backward_s" in row:
            extra.append(f"with the gradient {row['forward_backward_s']:.3f} s")
        if "steps_median" in row:
            extra.append(f"steps median {row['steps_median']:.0f}")
        if "timed_samples" in row:
            extra.append(f"scaled from {row['timed_samples']}")
        if "first_call_s" in row:
            extra.append(f"first call {row['first_call_s']:.1f} s")
        if "span" in row:
            extra.append(f"only to t = {row['span']:g}")
        if "max_relative_error" in row:
            extra.append(f"max relative error {row['max_relative_error']:.1e}")
        print(f"  {name:18s} {row['forward_s']:.3f} s ({'; '.join(extra)})")
    for key, value in ours.items():
        if key.startswith("ratio_to_"):
            print(f"  rodas4 / {key[len('ratio_to_'):]}: {value:.3g}x")
    write_rows(args.out, rows, batch=args.batch, repeats=args.repeats, threads=args.threads)


if __name__ == "__main__":
    main()
