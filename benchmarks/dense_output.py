"""Dense output: the state at many times from one adaptive solve, odelab against scipy and diffrax.

    python benchmarks/dense_output.py [--batch 256] [--queries 4001] [--repeats 5] [--threads 1] [--no-diffrax]
                                      [--out benchmarks/results/dense_output.json]

FitzHugh--Nagumo (odelab.systems.FitzHughNagumo, defaults), ``--batch`` trajectories from (c, 0), c ~ U[-1, 1] (seed
0), on [0, 100], float64, dopri5 at rtol 1e-6 / atol 1e-8. The task: the state at ``--queries`` times spread over
[0, 100]. Ways to get it, each timed as solve + read (medians of ``--repeats``):

- odelab dense: ``solve(..., [0, 100], dense=True)`` then ``sol.evaluate(times)``; its solve and read apart;
- odelab grid: ``solve(..., times)`` (the outputs interpolated as the steps are accepted; the same numbers);
- scipy: ``solve_ivp(RK45, dense_output=True)`` per trajectory, then ``sol.sol(times)`` (a loop; timed on the first
  32 trajectories and scaled to the batch: its cost is linear in it);
- diffrax: ``jax.vmap`` of ``diffeqsolve(Dopri5, PIDController, SaveAt(dense=True))`` then of ``sol.evaluate`` over
  the times, jitted (steady state; the first call with its compilation is reported apart), XLA on as many CPU
  threads as torch. A dense diffrax solve keeps a buffer of ``max_steps`` steps a trajectory whatever it takes
  (``--diffrax-max-steps``, diffrax's default 4096; this problem's trajectories take about 170 steps). Skipped
  with a message without jax/diffrax (``pip install jax diffrax``).

Error: max |y − y_ref| at the query times over 32 trajectories, y_ref from solve_ivp(DOP853, rtol = atol = 1e-12).
Ratios are odelab dense (solve + read) over each anchor. JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import FitzHughNagumo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import median_time, one_xla_thread, write_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
F64 = torch.float64
RTOL, ATOL, END, CHECKED = 1e-6, 1e-8, 100.0, 32


def fhn_numpy(system: FitzHughNagumo):
    tau, current, a, b = system.tau, system.current, system.a, system.b
    return lambda t, y: [y[0] - y[0] ** 3 / 3 - y[1] + current, tau * (y[0] + a - b * y[1])]


def odelab_rows(y0: torch.Tensor, times: torch.Tensor, repeats: int) -> dict:
    system = FitzHughNagumo()
    with torch.no_grad():
        solve_s, sol = median_time(lambda: odelab.solve(system, y0, [0.0, END], rtol=RTOL, atol=ATOL, dense=True),
                                   repeats)
        read_s, dense = median_time(lambda: sol.evaluate(times)[0], repeats)
        grid_s, grid = median_time(lambda: odelab.solve(system, y0, times, rtol=RTOL, atol=ATOL).y, repeats)
        plain_s, _ = median_time(lambda: odelab.solve(system, y0, [0.0, END], rtol=RTOL, atol=ATOL), repeats)
    pieces = sol.dense_output
    return {"dense_solve_s": solve_s, "dense_read_s": read_s, "dense_total_s": solve_s + read_s,
            "grid_s": grid_s, "solve_without_dense_s": plain_s, "dense_over_grid_values": float((dense - grid).abs().max()),
            "pieces_mib": (pieces.y.numel() + pieces.coef.numel()) * 8 / 2**20,
            "steps_median": float(sol.stats["steps"].double().median()), "values": dense[:CHECKED].numpy()}


def scipy_row(y0: np.ndarray, times: np.ndarray, batch: int) -> dict:
    f = fhn_numpy(FitzHughNagumo())
    count = min(CHECKED, batch)
    start = time.perf_counter()
    values = [solve_ivp(f, (0.0, END), y, method="RK45", rtol=RTOL, atol=ATOL, dense_output=True).sol(times).T
              for y in y0[:count]]
    seconds = (time.perf_counter() - start) * batch / count
    return {"total_s": seconds, "timed_trajectories": count, "values": np.stack(values)}


def diffrax_row(y0: np.ndarray, times: np.ndarray, repeats: int, max_steps: int) -> dict | None:
    try:
        import jax
        import jax.numpy as jnp
        import diffrax
    except ImportError as err:
        print(f"diffrax not installed ({err}); skipping it (pip install jax diffrax)")
        return None
    jax.config.update("jax_enable_x64", True)
    system = FitzHughNagumo()
    tau, current, a, b = system.tau, system.current, system.a, system.b
    term = diffrax.ODETerm(lambda t, y, args: jnp.stack([y[0] - y[0] ** 3 / 3 - y[1] + current,
                                                         tau * (y[0] + a - b * y[1])]))
    query = jnp.asarray(times)

    def one(start):
        sol = diffrax.diffeqsolve(term, diffrax.Dopri5(), 0.0, END, None, start, saveat=diffrax.SaveAt(dense=True),
                                  stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL), max_steps=max_steps)
        return jax.vmap(sol.evaluate)(query)

    run = jax.jit(jax.vmap(one))
    start_array = jnp.asarray(y0)
    begin = time.perf_counter()
    jax.block_until_ready(run(start_array))
    first = time.perf_counter() - begin
    seconds = []
    for _ in range(repeats):
        begin = time.perf_counter()
        out = jax.block_until_ready(run(start_array))
        seconds.append(time.perf_counter() - begin)
    return {"total_s": statistics.median(seconds), "first_call_s": first, "values": np.asarray(out[:CHECKED])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--queries", type=int, default=4001)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-diffrax", action="store_true")
    parser.add_argument("--diffrax-max-steps", type=int, default=4096,
                        help="diffrax's step buffer (its default): a dense solve allocates this many steps a trajectory")
    parser.add_argument("--out", default=str(RESULTS / "dense_output.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.no_diffrax and args.threads == 1:
        one_xla_thread()
    generator = torch.Generator().manual_seed(0)
    c = torch.rand(args.batch, generator=generator, dtype=F64) * 2 - 1
    y0 = torch.stack([c, torch.zeros_like(c)], -1)
    times = torch.linspace(0.0, END, args.queries, dtype=F64)
    f = fhn_numpy(FitzHughNagumo())
    truth = np.stack([solve_ivp(f, (0.0, END), y, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=times.numpy()).y.T
                      for y in y0[:CHECKED].numpy()])

    rows = {"odelab": odelab_rows(y0, times, args.repeats), "scipy": scipy_row(y0.numpy(), times.numpy(), args.batch)}
    if not args.no_diffrax:
        found = diffrax_row(y0.numpy(), times.numpy(), args.repeats, args.diffrax_max_steps)
        if found is not None:
            rows["diffrax"] = found
    for row in rows.values():
        row["max_error"] = float(np.abs(row.pop("values") - truth).max())
    ours = rows["odelab"]["dense_total_s"]
    for name in ("scipy", "diffrax"):
        if name in rows:
            rows["odelab"][f"ratio_to_{name}"] = ours / rows[name]["total_s"]
    rows["odelab"]["ratio_to_grid"] = ours / rows["odelab"]["grid_s"]
    rows["odelab"]["dense_solve_over_plain_solve"] = rows["odelab"]["dense_solve_s"] / rows["odelab"]["solve_without_dense_s"]

    o = rows["odelab"]
    print(f"FitzHugh-Nagumo, {args.batch} trajectories on [0, {END:g}], {args.queries} query times, dopri5 "
          f"rtol {RTOL:g} / atol {ATOL:g}, float64, {args.threads} thread(s), median of {args.repeats}")
    print(f"  odelab dense   solve {o['dense_solve_s']:.3f} s + read {o['dense_read_s']:.3f} s = {ours:.3f} s, "
          f"max error {o['max_error']:.1e} ({o['pieces_mib']:.1f} MiB of pieces; the solve "
          f"{o['dense_solve_over_plain_solve']:.2f}x one without dense)")
    print(f"  odelab grid    {o['grid_s']:.3f} s (dense / grid {o['ratio_to_grid']:.2f}x; values apart "
          f"{o['dense_over_grid_values']:.1e})")
    s = rows["scipy"]
    print(f"  scipy RK45     {s['total_s']:.3f} s (scaled from {s['timed_trajectories']}), max error {s['max_error']:.1e}"
          f"; odelab / scipy {o['ratio_to_scipy']:.3f}x")
    if "diffrax" in rows:
        d = rows["diffrax"]
        print(f"  diffrax Dopri5 {d['total_s']:.3f} s (first call {d['first_call_s']:.1f} s), max error "
              f"{d['max_error']:.1e}; odelab / diffrax {o['ratio_to_diffrax']:.2f}x")
    write_rows(args.out, rows, batch=args.batch, queries=args.queries, repeats=args.repeats, threads=args.threads,
               diffrax_max_steps=args.diffrax_max_steps)


if __name__ == "__main__":
    main()
