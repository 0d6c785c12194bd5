"""ENSO delay oscillator (001 eq. 20: T' = T − T³ − c T(t−δ)(1 − γ T(t−δ)²), c = 0.93, γ = 0.49, δ = 4.8):
odelab's fixed-step DDE rk4 against torchdde's RK4 in the same run, the τ-GRU paper's data recipe (256
trajectories, T0 ~ U(0, 1) as a constant history, [0, 400], dt = 0.1, 4001 output times).

odelab runs eagerly (its fixed-step engine: the stage sums in C++, :mod:`odelab.solvers.fused_fixed`), the same
loop with the sums as torch ops ("torch path", the same bits), with ``compile=True`` and, on CUDA, with
``cuda_graph=True`` (the whole solve replayed as one CUDA graph); and adaptively (dopri5, ``--rtol``/``--atol``)
with the fused CPU loop and with the torch loop.

Accuracy: both against an independent reference, scipy DOP853 (rtol 1e-12) by the method of steps on
[kδ, (k+1)δ] with the previous interval's dense output as the delayed term; odelab rk4 at dt/16 is
reported beside it as a check of the reference.

    python benchmarks/enso_torchdde.py [--repeats 5] [--torchdde-repeats 2] [--batch 256] [--device cpu] [--threads 1]
                                       [--reference-subset N] [--rtol 1e-6] [--atol 1e-8] [--no-compile] [--out PATH]

(on a GPU, the issue's 131072 trajectories: --device cuda --batch 131072 --reference-subset 256)

Both solvers run on ``--threads`` intra-op threads (default 1: the ratio does not depend on how many cores
the machine happens to have free). On a shared machine the load drifts while torchdde runs: odelab is timed
before and after it, CPU time is recorded beside wall time (less sensitive to other processes) and so is
the load average. Prints a table of median times and errors; writes benchmarks/results/enso.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import odelab
from odelab.solvers import fused_fixed, fused_step
from odelab.solvers.fixed_delay import _BLOCK

C, GAMMA, DELTA = 0.93, 0.49, 4.8


def enso_numpy(T: np.ndarray, T_delayed: np.ndarray) -> np.ndarray:
    return T - T**3 - C * T_delayed * (1 - GAMMA * T_delayed**2)


def scipy_reference(T0: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Method of steps with scipy DOP853: one solve_ivp per delay interval, dense output for the next."""
    from scipy.integrate import solve_ivp

    horizon, start, a = times[-1], T0.copy(), 0.0
    past, pieces = (lambda t: T0), []
    while a < horizon - 1e-12:
        b = min(a + DELTA, horizon)
        sol = solve_ivp(lambda t, y, past=past: enso_numpy(y, past(t - DELTA)), (a, b), start, method="DOP853",
                        rtol=1e-12, atol=1e-13, dense_output=True)
        pieces.append((a, b, sol.sol))
        past, start, a = sol.sol, sol.y[:, -1], b
    out = np.empty((T0.shape[0], times.shape[0]))
    for a, b, dense in pieces:
        inside = (times >= a) & (times <= b)
        out[:, inside] = dense(times[inside])
    out[:, 0] = T0
    return out


@contextlib.contextmanager
def switched_off(module):
    """Inside, ``module.usable`` says no: odelab takes its torch path instead of the module's kernels."""
    usable = module.usable
    module.usable = lambda *args: False
    try:
        yield
    finally:
        module.usable = usable


def timed(run, repeats: int) -> tuple[list[float], list[float], torch.Tensor]:
    """Wall-clock and CPU seconds (this process's) of ``repeats`` calls, and the last result."""
    wall, cpu, result = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run()
        if result.is_cuda:
            torch.cuda.synchronize()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--horizon", type=float, default=400.0)
    parser.add_argument("--dt", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torchdde-repeats", type=int, default=2)
    parser.add_argument("--torchdde-batch", type=int, default=None,
                        help="torchdde solves only the first N trajectories (default: all; on a GPU its time hardly "
                             "depends on the batch, so a smaller one keeps a lease short and the ratio a lower bound)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference-subset", type=int, default=None,
                        help="errors on the first N trajectories only (the scipy reference takes ~12 ms a trajectory; "
                             "default: all)")
    parser.add_argument("--rtol", type=float, default=1e-6, help="of the adaptive (dopri5) rows")
    parser.add_argument("--atol", type=float, default=1e-8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true", help="skip the compile=True row (its first call is a "
                                                                    "torch.compile of the block)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "enso.json"))
    args = parser.parse_args()
    torchdde_batch = args.torchdde_batch or args.batch
    if not (args.reference_subset or args.batch) <= torchdde_batch <= args.batch:
        parser.error("--torchdde-batch: between the checked trajectories (--reference-subset) and --batch")

    import torchdde

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    dtype, device = torch.float64, torch.device(args.device)
    T0 = torch.rand(args.batch, 1, generator=torch.Generator().manual_seed(args.seed), dtype=dtype).to(device)
    steps = int(round(args.horizon / args.dt))
    ts = torch.linspace(0.0, args.horizon, steps + 1, dtype=dtype, device=device)
    system = odelab.systems.ENSO(c=C, gamma=GAMMA, delta=DELTA)

    def run_odelab(dt=args.dt, compile=False):
        with torch.no_grad():
            return odelab.solve(system, T0, ts, method="rk4", dt=dt, compile=compile).y

    run_compiled = lambda: run_odelab(compile=True)

    def run_graphed():
        """rk4 with cuda_graph=True: the whole solve replayed as one CUDA graph (captured at the second call)."""
        with torch.no_grad():
            return odelab.solve(system, T0, ts, method="rk4", dt=args.dt, cuda_graph=True).y

    def run_adaptive():
        with torch.no_grad():
            return odelab.solve(system, T0, ts, method="dopri5", rtol=args.rtol, atol=args.atol).y

    def run_adaptive_torch_loop():
        """dopri5 with the torch loop (the fused adaptive loop switched off)."""
        with switched_off(fused_step):
            return run_adaptive()

    def run_torch_path():
        """The eager loop with the stage sums as torch ops (the fused fixed-step engine switched off)."""
        with switched_off(fused_fixed):
            return run_odelab()

    def run_torchdde():
        def field(t, y, func_args, history):
            T_delayed = history[0]
            return y - y**3 - C * T_delayed * (1 - GAMMA * T_delayed**2)

        with torch.no_grad():
            return torchdde.integrate(field, torchdde.RK4(), ts[0], ts[-1], ts, lambda t: T0[:torchdde_batch], None,
                                      dt0=torch.tensor(args.dt, dtype=dtype, device=device),
                                      delays=torch.tensor([DELTA], dtype=dtype, device=device),
                                      discretize_then_optimize=True, max_steps=steps + 10)

    run_odelab()  # warm-up
    compile_seconds = None
    if not args.no_compile:
        (compile_seconds,), _, _ = timed(run_compiled, 1)  # first call: torch.compile of a block of _BLOCK steps
        print(f"compile=True, first call (compilation included): {compile_seconds:.1f} s", flush=True)
    graph_first_seconds = None
    if device.type == "cuda":
        first, _, _ = timed(run_graphed, 2)  # the eager first call, then the capture (and its replay)
        graph_first_seconds = sum(first)
        print(f"cuda_graph=True, first two calls (eager, capture): {first[0]:.2f} s, {first[1]:.2f} s", flush=True)
    # the odelab variants in rounds (one call of each per round, so that a drifting load hits them alike), before
    # and after torchdde
    variants = {"odelab": run_odelab, "torch path": run_torch_path, "dopri5": run_adaptive,
                "dopri5 torch loop": run_adaptive_torch_loop}
    if not args.no_compile:
        variants["compiled"] = run_compiled
    if graph_first_seconds is not None:
        variants["cuda graph"] = run_graphed
    walls, cpus, results = {name: [] for name in variants}, {name: [] for name in variants}, {}

    def rounds(count: int) -> None:
        for _ in range(count):
            for name, run in variants.items():
                (wall,), (cpu,), results[name] = timed(run, 1)
                walls[name].append(wall)
                cpus[name].append(cpu)

    rounds(args.repeats)
    for name, times in walls.items():
        print(f"{name} ({args.batch} trajectories): median {statistics.median(times):.3f} s", flush=True)
    torchdde_times, torchdde_cpu, theirs = timed(run_torchdde, args.torchdde_repeats)
    rounds(args.repeats)
    odelab_times, odelab_cpu, ours = walls["odelab"], cpus["odelab"], results["odelab"]
    torch_path_times, torch_path_cpu, ours_torch_path = walls["torch path"], cpus["torch path"], results["torch path"]
    adaptive_times, adaptive_cpu, ours_adaptive = walls["dopri5"], cpus["dopri5"], results["dopri5"]
    adaptive_torch_times, adaptive_torch_cpu = walls["dopri5 torch loop"], cpus["dopri5 torch loop"]
    ours_adaptive_torch = results["dopri5 torch loop"]
    load_after = os.getloadavg()
    print(f"odelab rk4: median {statistics.median(odelab_times):.3f} s over {2 * args.repeats} runs", flush=True)
    print(f"torchdde RK4: median {statistics.median(torchdde_times):.2f} s over {args.torchdde_repeats} runs",
          flush=True)

    # the reference (a scipy solve per trajectory) on the first --reference-subset trajectories
    checked = slice(0, args.reference_subset or args.batch)
    start = time.perf_counter()
    reference = scipy_reference(T0[checked, 0].cpu().numpy(), ts.cpu().numpy())
    scipy_seconds = time.perf_counter() - start
    fine = run_odelab(args.dt / 16)[checked, :, 0].cpu().numpy()

    window = ts.cpu().numpy() >= args.horizon / 2  # the paper keeps [200, 400]

    def errors(y: np.ndarray) -> dict[str, float]:
        diff = np.abs(y[checked] - reference)
        return {"max_abs_error": float(diff.max()), "max_abs_error_kept_window": float(diff[:, window].max())}

    ours_np, theirs_np = ours[:, :, 0].cpu().numpy(), theirs[:, :, 0].cpu().numpy()  # theirs: torchdde_batch rows
    odelab_median, torchdde_median = statistics.median(odelab_times), statistics.median(torchdde_times)
    odelab_cpu_median, torchdde_cpu_median = statistics.median(odelab_cpu), statistics.median(torchdde_cpu)
    result = {
        "problem": {"system": "ENSO (001 eq. 20)", "c": C, "gamma": GAMMA, "delta": DELTA, "batch": args.batch,
                    "t": [0.0, args.horizon], "outputs": steps + 1, "dt": args.dt, "history": "constant T0 ~ U(0,1)",
                    "dtype": "float64", "device": str(device), "seed": args.seed,
                    "errors_on_trajectories": checked.stop},
        "odelab": {"method": "rk4 (stage-aligned reads resolved before the loop: 4.8 = 48 dt)", "seconds": odelab_times,
                   "median_seconds": odelab_median, "cpu_seconds": odelab_cpu, "median_cpu_seconds": odelab_cpu_median,
                   **errors(ours_np)},
        "odelab torch path": {"method": "rk4, the same loop with the stage sums as torch ops (fused_fixed off)",
                              "seconds": torch_path_times, "median_seconds": statistics.median(torch_path_times),
                              "cpu_seconds": torch_path_cpu, "median_cpu_seconds": statistics.median(torch_path_cpu),
                              "bitwise_equal_to_fused": bool(torch.equal(ours, ours_torch_path))},
        "odelab dopri5": {"method": f"dopri5 rtol {args.rtol:g} atol {args.atol:g}, the fused CPU loop (dense history "
                                    "in per-sample rings of records)", "seconds": adaptive_times,
                          "median_seconds": statistics.median(adaptive_times), "cpu_seconds": adaptive_cpu,
                          "median_cpu_seconds": statistics.median(adaptive_cpu),
                          **errors(ours_adaptive[:, :, 0].cpu().numpy())},
        "odelab dopri5 torch loop": {"method": "the same solve with the torch loop (fused_step off)",
                                     "seconds": adaptive_torch_times,
                                     "median_seconds": statistics.median(adaptive_torch_times),
                                     "cpu_seconds": adaptive_torch_cpu,
                                     "median_cpu_seconds": statistics.median(adaptive_torch_cpu),
                                     **errors(ours_adaptive_torch[:, :, 0].cpu().numpy())},
        "torchdde": {"version": getattr(torchdde, "__version__", "0.1.3"), "method": "RK4, ConstantStepSizeController",
                     "batch": torchdde_batch,
                     "seconds": torchdde_times, "median_seconds": torchdde_median, "cpu_seconds": torchdde_cpu,
                     "median_cpu_seconds": torchdde_cpu_median, **errors(theirs_np)},
        "speedup_odelab_vs_torchdde": torchdde_median / odelab_median,
        "speedup_batches": {"odelab": args.batch, "torchdde": torchdde_batch,
                            "reading": "equal batches" if torchdde_batch == args.batch else
                            "torchdde on fewer trajectories: a lower bound of the speed-up at equal batches"},
        "speedup_fused_vs_torch_path": statistics.median(torch_path_times) / odelab_median,
        "speedup_dopri5_fused_vs_torch_loop": statistics.median(adaptive_torch_times) / statistics.median(adaptive_times),
        # per round (the two calls of a pair seconds apart), the median of the ratios of CPU times
        "paired_speedup_fused_vs_torch_path": statistics.median(
            b / a for a, b in zip(odelab_cpu, torch_path_cpu)),
        "paired_speedup_dopri5_fused_vs_torch_loop": statistics.median(
            b / a for a, b in zip(adaptive_cpu, adaptive_torch_cpu)),
        "speedup_odelab_vs_torchdde_cpu_time": torchdde_cpu_median / odelab_cpu_median,
        "max_abs_difference_odelab_vs_torchdde": float(np.abs(ours_np[:torchdde_batch] - theirs_np).max()),
        "reference": {"method": "scipy DOP853 rtol 1e-12 atol 1e-13, method of steps", "seconds": scipy_seconds,
                      "max_abs_difference_to_odelab_rk4_dt_over_16": float(np.abs(fine - reference).max())},
        "targets": {"odelab_max_error_le_1e-4": errors(ours_np)["max_abs_error"] <= 1e-4,
                    "speedup_ge_300": torchdde_median / odelab_median >= 300},
        "platform": {"python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine(),
                     "processor": platform.processor(), "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                     "load_average_1_5_15_min": {"before": load_before, "after": load_after}},
    }

    if not args.no_compile:
        compiled_median = statistics.median(walls["compiled"])
        compiled_cpu_median = statistics.median(cpus["compiled"])
        result["odelab compiled"] = {
            "method": f"rk4, compile=True (blocks of {_BLOCK} steps per torch.compile'd call)",
            "first_call_seconds": compile_seconds, "seconds": walls["compiled"], "median_seconds": compiled_median,
            "cpu_seconds": cpus["compiled"], "median_cpu_seconds": compiled_cpu_median,
            **errors(results["compiled"][:, :, 0].cpu().numpy())}
        result["speedup_odelab_compiled_vs_torchdde"] = torchdde_median / compiled_median
        result["speedup_odelab_compiled_vs_torchdde_cpu_time"] = torchdde_cpu_median / compiled_cpu_median
        result["targets"]["compiled_speedup_ge_300"] = torchdde_median / compiled_median >= 300

    if graph_first_seconds is not None:
        graph_median = statistics.median(walls["cuda graph"])
        result["odelab cuda graph"] = {
            "method": "rk4, cuda_graph=True (the whole solve replayed as one CUDA graph)",
            "first_two_calls_seconds": graph_first_seconds, "seconds": walls["cuda graph"],
            "median_seconds": graph_median, "cpu_seconds": cpus["cuda graph"],
            "median_cpu_seconds": statistics.median(cpus["cuda graph"]),
            **errors(results["cuda graph"][:, :, 0].cpu().numpy())}
        result["speedup_odelab_cuda_graph_vs_torchdde"] = torchdde_median / graph_median
        result["targets"]["cuda_graph_under_1_s"] = graph_median < 1.0

    print()
    print(f"{'solver':<24} {'median s':>8} {'median cpu s':>13} {'max err [0,T]':>14} {'max err kept':>14}")
    for name in ("odelab", "odelab torch path", "odelab compiled", "odelab cuda graph", "odelab dopri5", "odelab dopri5 torch loop",
                 "torchdde"):
        if name not in result:
            continue
        r = result[name]
        error = result["odelab"] if name == "odelab torch path" else r  # the same bits
        print(f"{name:<24} {r['median_seconds']:>8.3f} {r['median_cpu_seconds']:>13.3f} {error['max_abs_error']:>14.2e} "
              f"{error['max_abs_error_kept_window']:>14.2e}")
    print(f"fused vs torch path, paired per round: rk4 {result['paired_speedup_fused_vs_torch_path']:.2f}x, dopri5 "
          f"{result['paired_speedup_dopri5_fused_vs_torch_loop']:.2f}x")
    print(f"speed-up odelab vs torchdde: {result['speedup_odelab_vs_torchdde']:.1f}x wall, "
          f"{result['speedup_odelab_vs_torchdde_cpu_time']:.1f}x cpu time; "
          + (f"compiled {result['speedup_odelab_compiled_vs_torchdde']:.1f}x wall (first call {compile_seconds:.1f} s); "
             if compile_seconds is not None else "") +
          f" reference check |rk4(dt/16) - scipy| = "
          f"{result['reference']['max_abs_difference_to_odelab_rk4_dt_over_16']:.1e}")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
