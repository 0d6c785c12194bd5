"""Adaptive solvers: odelab dopri5 (one step size per sample) against torchdiffeq, torchode and scipy.

    python benchmarks/solvers.py [--repeats 5] [--threads 1] [--quick] [--device cuda] [--batch 1280]

(a) FitzHugh--Nagumo (odelab.systems.FitzHughNagumo, defaults), 1280 trajectories (--batch) from (c, 0), c ~ U[-1, 1]
    (seed 0), t ∈ [0, 400], 1001 outputs, float64. Anchors at rtol 1e-6 / atol 1e-8: torchdiffeq dopri5,
    torchode dopri5 (skipped with a message if torchode is not installed) and a scipy solve_ivp(RK45) loop.
    The scipy loop is timed on the first 64 trajectories and scaled by 1280/64 (its cost is linear in the
    number of trajectories). Errors: max |y − y_ref| over a fixed subset of 128 trajectories (every 10th),
    y_ref from solve_ivp(DOP853, rtol = atol = 1e-12), cached in benchmarks/results/solvers_fhn_reference.npz.
    odelab runs a ladder of tolerances; the reported one is the loosest whose max error is ≤ the smaller
    of the torchdiffeq/torchode errors (so odelab is never compared at a lower accuracy); it is run eager and
    with compile=True (torch.compile of the step; the one-off compilation time is reported separately).
(b) Van der Pol with μ = linspace(0.1, 10, 256) in one batch, x0 = (2, 0), t ∈ [0, 50], 201 outputs, rtol 1e-6 /
    atol 1e-8: steps per sample (odelab: its own per sample; torchdiffeq: one shared count) and time.

float64 because a float32 state has a round-off floor of ~1e-4 on this 400-time-unit relaxation oscillation,
which makes tolerance/accuracy comparisons meaningless. Times are medians of --repeats runs (forward only,
torch.no_grad), all contenders in the same process with the same torch thread count (default 1: the ops are
tiny and a second thread only adds synchronisation). With --device cuda the torch solvers run on the GPU (timed
with synchronisation; the scipy loop stays on the CPU). Writes benchmarks/results/solvers[_DEVICE].json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import FitzHughNagumo, VanDerPol

RESULTS = Path(__file__).resolve().parent / "results"
F64 = torch.float64


def median_time(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        out = fn()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def fhn_numpy(system: FitzHughNagumo):
    tau, current, a, b = system.tau, system.current, system.a, system.b
    return lambda t, y: [y[0] - y[0] ** 3 / 3 - y[1] + current, tau * (y[0] + a - b * y[1])]


def reference(system, y0: np.ndarray, t: np.ndarray, path: Path) -> np.ndarray:
    if path.exists():
        cached = np.load(path)
        if cached["y0"].shape == y0.shape and np.array_equal(cached["y0"], y0) and np.array_equal(cached["t"], t):
            return cached["ys"]
    f = fhn_numpy(system)
    ys = np.stack([solve_ivp(f, (t[0], t[-1]), y, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=t).y.T for y in y0])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, y0=y0, t=t, ys=ys)
    return ys


def fitzhugh_nagumo(repeats: int, quick: bool, device: torch.device, batch: int) -> dict:
    system = FitzHughNagumo()
    batch = 128 if quick else batch
    generator = torch.Generator().manual_seed(0)
    c = torch.rand(batch, generator=generator, dtype=F64) * 2 - 1
    y0_cpu = torch.stack([c, torch.zeros_like(c)], -1)
    t_cpu = torch.linspace(0.0, 400.0, 1001, dtype=F64)
    y0, t = y0_cpu.to(device), t_cpu.to(device)
    subset = list(range(0, batch, 10))[:128]
    truth = reference(system, y0_cpu[subset].numpy(), t_cpu.numpy(), RESULTS / f"solvers_fhn_reference_{batch}.npz")
    error = lambda ys: float(np.abs(ys[subset].cpu().numpy() - truth).max())
    rtol, atol = 1e-6, 1e-8
    f = lambda s, y: system.derivative(s, (y,))[0]
    rows = {}

    import torchdiffeq

    with torch.no_grad():
        seconds, ys = median_time(lambda: torchdiffeq.odeint(f, y0, t, rtol=rtol, atol=atol, method="dopri5"), repeats)
    rows["torchdiffeq dopri5"] = dict(seconds=seconds, max_error=error(ys.transpose(0, 1)), rtol=rtol, atol=atol)

    try:
        import torchode
    except ImportError as err:
        print(f"torchode not installed ({err}); skipping it (pip install torchode)")
    else:
        term = torchode.ODETerm(f)
        solver = torchode.AutoDiffAdjoint(torchode.Dopri5(term=term),
                                          torchode.IntegralController(atol=atol, rtol=rtol, term=term))
        problem = torchode.InitialValueProblem(y0=y0, t_eval=t.expand(batch, -1))
        with torch.no_grad():
            seconds, sol = median_time(lambda: solver.solve(problem), repeats)
        rows["torchode dopri5"] = dict(seconds=seconds, max_error=error(sol.ys), rtol=rtol, atol=atol,
                                       steps_max=int(sol.stats["n_steps"].max()))

    scipy_count = min(64, batch)
    fn = fhn_numpy(system)

    def scipy_loop():
        return [solve_ivp(fn, (0.0, 400.0), y, method="RK45", rtol=rtol, atol=atol, t_eval=t_cpu.numpy()).y.T
                for y in y0_cpu[:scipy_count].numpy()]

    seconds, _ = median_time(scipy_loop, max(1, repeats // 2))
    scipy_ys = np.stack([solve_ivp(fn, (0.0, 400.0), y, method="RK45", rtol=rtol, atol=atol, t_eval=t_cpu.numpy()).y.T
                         for y in y0_cpu[subset].numpy()])
    rows["scipy RK45 loop"] = dict(seconds=seconds * batch / scipy_count, measured_on=scipy_count,
                                   max_error=float(np.abs(scipy_ys - truth).max()), rtol=rtol, atol=atol)

    target = min(rows[k]["max_error"] for k in rows if not k.startswith("scipy"))
    ladder = []
    for tol in (1e-6, 5e-7, 3e-7, 2e-7, 1e-7, 5e-8, 3e-8, 1e-8):
        with torch.no_grad():
            seconds, sol = median_time(lambda: odelab.solve(system, y0, t, rtol=tol, atol=tol * 1e-2), repeats)
        entry = dict(seconds=seconds, max_error=error(sol.y), rtol=tol, atol=tol * 1e-2,
                     steps_max=int(sol.stats["steps"].max()), steps_mean=float(sol.stats["steps"].double().mean()))
        ladder.append(entry)
        if entry["max_error"] <= target:
            break
    chosen = ladder[-1]
    rows["odelab dopri5"] = chosen
    # the same solve with the step compiled by torch.compile (first call = compilation, reported apart)
    run = lambda: odelab.solve(system, y0, t, rtol=chosen["rtol"], atol=chosen["atol"], compile=True)
    with torch.no_grad():
        start = time.perf_counter()
        run()
        first = time.perf_counter() - start
        seconds, sol = median_time(run, repeats)
    rows["odelab dopri5 compiled"] = dict(seconds=seconds, max_error=error(sol.y), rtol=chosen["rtol"],
                                          atol=chosen["atol"], steps_max=int(sol.stats["steps"].max()),
                                          compile_seconds=first - seconds)
    anchors = [k for k in ("torchdiffeq dopri5", "torchode dopri5") if k in rows]
    fastest_anchor = min(anchors, key=lambda k: rows[k]["seconds"])
    return dict(problem=f"FitzHugh-Nagumo, {batch} x (c, 0), [0, 400], 1001 outputs, float64, {device}",
                batch=batch, device=str(device),
                rows=rows, odelab_ladder=ladder, error_target=target,
                speedup_vs_fastest_torch_anchor=rows[fastest_anchor]["seconds"] / chosen["seconds"],
                compiled_speedup_vs_fastest_torch_anchor=rows[fastest_anchor]["seconds"]
                / rows["odelab dopri5 compiled"]["seconds"],
                fastest_torch_anchor=fastest_anchor,
                speedup_vs_scipy=rows["scipy RK45 loop"]["seconds"] / chosen["seconds"])


def van_der_pol(repeats: int, quick: bool, device: torch.device) -> dict:
    batch = 64 if quick else 256
    mu = torch.linspace(0.1, 10.0, batch, dtype=F64, device=device)
    y0 = torch.tensor([[2.0, 0.0]], dtype=F64, device=device).expand(batch, -1).contiguous()
    t = torch.linspace(0.0, 50.0, 201, dtype=F64, device=device)
    system = VanDerPol(mu=mu)
    rtol, atol = 1e-6, 1e-8
    with torch.no_grad():
        ours_s, ours = median_time(lambda: odelab.solve(system, y0, t, rtol=rtol, atol=atol), repeats)
    import torchdiffeq

    calls = [0]

    def f(s, y):
        calls[0] += 1
        return system.derivative(s, (y,))[0]

    with torch.no_grad():
        theirs_s, theirs = median_time(lambda: torchdiffeq.odeint(f, y0, t, rtol=rtol, atol=atol), repeats)
    calls[0] = 0
    with torch.no_grad():
        torchdiffeq.odeint(f, y0, t, rtol=rtol, atol=atol)
    shared_steps = (calls[0] - 2) / 6  # dopri5: 6 evaluations per attempted step after f(t0) and the first-step probe
    steps = ours.stats["steps"].double()
    gap = float((ours.y - theirs.transpose(0, 1)).abs().max())
    return dict(problem=f"Van der Pol, mu = linspace(0.1, 10, {batch}), [0, 50], 201 outputs, float64, {device}",
                odelab=dict(seconds=ours_s, steps_min=int(steps.min()), steps_median=float(steps.median()),
                            steps_max=int(steps.max()), steps_mu_0_1=int(steps[0]), steps_mu_10=int(steps[-1]),
                            nfe_total=int(ours.stats["nfe"].sum())),
                torchdiffeq=dict(seconds=theirs_s, shared_steps=shared_steps, nfe_total_per_sample_equiv=calls[0] * batch),
                max_difference_between_solvers=gap, speedup=theirs_s / ours_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="small batches (a smoke run)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the scipy loop always runs on the CPU)")
    parser.add_argument("--batch", type=int, default=1280, help="FitzHugh-Nagumo trajectories (default 1280)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    fhn = fitzhugh_nagumo(args.repeats, args.quick, device, args.batch)
    vdp = van_der_pol(args.repeats, args.quick, device)

    print(f"\n(a) {fhn['problem']}")
    print(f"{'solver':24s} {'rtol':>8s} {'time [s]':>10s} {'max error':>11s} {'steps (max)':>12s} {'odelab speedup':>15s}")
    chosen = fhn["rows"]["odelab dopri5"]["seconds"]
    for name, row in fhn["rows"].items():
        print(f"{name:24s} {row['rtol']:8.0e} {row['seconds']:10.3f} {row['max_error']:11.2e} "
              f"{row.get('steps_max', ''):>12} {row['seconds'] / chosen:15.2f}x")
    print("odelab tolerance ladder: " + ", ".join(f"{e['rtol']:.0e}: {e['max_error']:.1e} in {e['seconds']:.2f}s"
                                                  for e in fhn["odelab_ladder"]))
    print(f"speed-up vs {fhn['fastest_torch_anchor']}: {fhn['speedup_vs_fastest_torch_anchor']:.2f}x eager, "
          f"{fhn['compiled_speedup_vs_fastest_torch_anchor']:.2f}x compiled (target ≥ 2x; compilation "
          f"{fhn['rows']['odelab dopri5 compiled']['compile_seconds']:.0f}s once); "
          f"vs scipy loop: {fhn['speedup_vs_scipy']:.1f}x eager (target ≥ 20x)")

    print(f"\n(b) {vdp['problem']}")
    o, d = vdp["odelab"], vdp["torchdiffeq"]
    print(f"odelab dopri5      time {o['seconds']:.3f}s  steps per sample min/median/max "
          f"{o['steps_min']}/{o['steps_median']:.0f}/{o['steps_max']} (mu=0.1: {o['steps_mu_0_1']}, mu=10: {o['steps_mu_10']})")
    print(f"torchdiffeq dopri5 time {d['seconds']:.3f}s  shared steps {d['shared_steps']:.0f} (every sample)")
    print(f"speed-up {vdp['speedup']:.2f}x; max |odelab − torchdiffeq| = {vdp['max_difference_between_solvers']:.1e}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = dict(torch=torch.__version__, threads=args.threads, repeats=args.repeats, machine=platform.processor()
                or platform.machine(), python=platform.python_version(), quick=args.quick, device=str(device),
                gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    suffix = ("_quick" if args.quick else "") + ("" if device.type == "cpu" else f"_{device.type}")
    out = RESULTS / f"solvers{suffix}.json"
    out.write_text(json.dumps(dict(meta=meta, fitzhugh_nagumo=fhn, van_der_pol=vdp), indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
