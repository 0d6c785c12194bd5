"""Adaptive solvers: odelab dopri5 (one step size per sample) against diffrax, torchdiffeq, torchode and scipy.

    python benchmarks/solvers.py [--repeats 5] [--threads 1] [--quick] [--device cuda] [--batch 1280]
                                 [--batches 1280 16384 131072] [--large-repeats 2] [--no-compile] [--no-diffrax]
                                 [--no-large-state] [--no-slow-anchors]

(a) FitzHugh--Nagumo (odelab.systems.FitzHughNagumo, defaults), 1280 trajectories (--batch) from (c, 0), c ~ U[-1, 1]
    (seed 0), t ∈ [0, 400], 1001 outputs, float64. Anchors at rtol 1e-6 / atol 1e-8: torchdiffeq dopri5,
    torchode dopri5 (skipped with a message if torchode is not installed) and a scipy solve_ivp(RK45) loop.
    The scipy loop is timed on the first 64 trajectories and scaled by 1280/64 (its cost is linear in the
    number of trajectories). Errors: max |y − y_ref| over a fixed subset of 128 trajectories (every 10th),
    y_ref from solve_ivp(DOP853, rtol = atol = 1e-12), cached in benchmarks/results/solvers_fhn_reference.npz.
    odelab runs a ladder of tolerances; the reported one is the loosest whose max error is ≤ the smaller
    of the torchdiffeq/torchode errors (so odelab is never compared at a lower accuracy); it is run eager and
    with compile=True (torch.compile of the step; the one-off compilation time is reported separately), and with
    the torch loop (the default eager path without gradients is the fused loop: C++ kernels on the CPU, Triton
    kernels on CUDA), and on CUDA with cuda_graph=True (each chunk of 8 attempts replayed as one CUDA graph).
    diffrax (JAX, the field's fastest batched solver: jax.vmap of diffeqsolve over the samples, the whole loop one
    XLA while loop; pip install jax diffrax, skipped with a message otherwise) runs Dopri5 with a PIDController
    (I control, its default) on the same problem and error measure, at rtol 1e-6 / atol 1e-8 (the anchor row)
    and on the same tolerance ladder as odelab ("diffrax dopri5 matched": the loosest tolerance reaching the
    same error target), rtol/atol traced so that the ladder compiles once. Its first call (jit compilation
    included) and its steady state are reported apart, as are odelab's compile=True first call and steady
    state. On CUDA the ladder's first call also records where its time goes ("first_call_breakdown": each Triton
    kernel's compilation and each C module's compiler run -- a kernel's launcher, Triton's driver utilities --
    in seconds; from empty caches that is the cold start). --no-slow-anchors skips torchode and the scipy loop
    (the cold-start step needs only torchdiffeq's error target and diffrax's first call).
    Ratios odelab/diffrax and odelab/torchdiffeq: at matched accuracy, steady state. --batches runs
    the same comparison at several batch sizes (anchors other than torchdiffeq and diffrax, the scipy loop and
    compile=True only at the first; --large-repeats repeats for the others).
(b) Van der Pol with μ = linspace(0.1, 10, 256) in one batch, x0 = (2, 0), t ∈ [0, 50], 201 outputs, rtol 1e-6 /
    atol 1e-8: steps per sample (odelab and diffrax: their own per sample; torchdiffeq: one shared count) and time.
(c) A large state where the vector field, not the loop, dominates: Fisher--KPP reaction--diffusion
    u_t = D u_xx + r u (1 − u) on a periodic domain of length 64 by the method of lines (1024 cells, second-order
    central differences, D = 0.01, r = 1), batch 64 of random bumps (seed 0), t ∈ [0, 10], 11 outputs, float64,
    dopri5 at rtol 1e-6 / atol 1e-8 in odelab, torchdiffeq and diffrax; error: max over 4 trajectories against
    scipy DOP853 at rtol 1e-10 / atol 1e-12 (cached in benchmarks/results/solvers_rd_reference.npz).

float64 because a float32 state has a round-off floor of ~1e-4 on this 400-time-unit relaxation oscillation,
which makes tolerance/accuracy comparisons meaningless. Times are medians of --repeats runs (forward only,
torch.no_grad), all contenders in the same process with the same torch thread count (default 1: the ops are
tiny and a second thread only adds synchronisation). With --device cuda the torch solvers run on the GPU (timed
with synchronisation; the scipy loop stays on the CPU). Writes benchmarks/results/solvers[_DEVICE].json.
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
from scipy.integrate import solve_ivp

import odelab
from odelab.systems import FitzHughNagumo, VanDerPol

RESULTS = Path(__file__).resolve().parent / "results"
F64 = torch.float64


def first_call(fn) -> float:
    """Seconds of one call of ``fn`` (a new configuration's first: compilation or kernel builds included)."""
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


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


@contextlib.contextmanager
def torch_loop():
    """odelab's adaptive solves inside take the torch loop (the fused CPU loop and the Triton loop switched off)."""
    from odelab.solvers import adaptive, fused_step

    usable, devices = fused_step.usable, adaptive.TRITON_DEVICES
    fused_step.usable, adaptive.TRITON_DEVICES = (lambda *args: False), ()
    try:
        yield
    finally:
        fused_step.usable, adaptive.TRITON_DEVICES = usable, devices


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


def fhn_problem(batch: int) -> tuple[torch.Tensor, torch.Tensor, list[int], np.ndarray]:
    """Initial states (c, 0), c ~ U[-1, 1], the output times, the checked subset and its reference (cached)."""
    generator = torch.Generator().manual_seed(0)
    c = torch.rand(batch, generator=generator, dtype=F64) * 2 - 1
    y0 = torch.stack([c, torch.zeros_like(c)], -1)
    t = torch.linspace(0.0, 400.0, 1001, dtype=F64)
    subset = list(range(0, batch, 10))[:128]
    truth = reference(FitzHughNagumo(), y0[subset].numpy(), t.numpy(), RESULTS / f"solvers_fhn_reference_{batch}.npz")
    return y0, t, subset, truth


LADDER = (1e-6, 5e-7, 3e-7, 2e-7, 1e-7, 5e-8, 3e-8, 1e-8)


def jax_modules():
    """(jax, jnp, diffrax) with float64 on the CPU, or None with a message when they are not installed."""
    try:
        import jax
        import jax.numpy as jnp
        import diffrax
    except ImportError as err:
        print(f"diffrax not installed ({err}); skipping it (pip install jax diffrax)")
        return None
    jax.config.update("jax_enable_x64", True)
    return jax, jnp, diffrax


def diffrax_batched(field, t_np: np.ndarray, max_steps: int = 100_000):
    """jit(vmap(diffeqsolve)) of Dopri5 with a PIDController, over (y0 batch, per-sample args), rtol/atol traced.
    ``field(t, y, args)`` in jax.numpy. Returns solve(y0, args, rtol, atol) -> (ys, num_steps)."""
    jax, jnp, diffrax = jax_modules()
    term = diffrax.ODETerm(field)
    saveat = diffrax.SaveAt(ts=jnp.asarray(t_np))
    t0, t1 = float(t_np[0]), float(t_np[-1])

    def one(y0, args, rtol, atol):
        sol = diffrax.diffeqsolve(term, diffrax.Dopri5(), t0, t1, None, y0, args=args, saveat=saveat,
                                  stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
                                  max_steps=max_steps, throw=False)
        return sol.ys, sol.stats["num_steps"]

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))


def time_jax(fn, repeats: int) -> tuple[float, float, object]:
    """(first call incl. compilation, median steady state, result) of a jitted function (block_until_ready)."""
    import jax

    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), out


@contextlib.contextmanager
def triton_build_times(record: dict):
    """Fill ``record`` with what Triton builds inside the block: ``kernels`` (name, seconds of its compilation,
    whether the cache had it) and ``c_modules`` (name, seconds of the C compiler run: a kernel's launcher, the
    driver's utilities). Nothing is recorded without Triton."""
    try:
        from triton import knobs
        from triton.runtime import build

        original_build, original_listener = build._build, knobs.compilation.listener
    except (ImportError, AttributeError):  # no Triton, or one without these hooks (before 3.4)
        yield
        return
    kernels, c_modules = record.setdefault("kernels", []), record.setdefault("c_modules", [])

    def timed_build(name, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original_build(name, *args, **kwargs)
        finally:
            c_modules.append(dict(name=name, seconds=time.perf_counter() - start))

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        seconds = (times.ir_initialization + times.total_lowering + times.store_results) * 1e-6
        kernels.append(dict(name=metadata.get("name", "?") if isinstance(metadata, dict) else getattr(metadata, "name", "?"),
                            seconds=seconds, cache_hit=bool(cache_hit)))
        if original_listener is not None:
            original_listener(src=src, metadata=metadata, metadata_group=metadata_group, times=times,
                              cache_hit=cache_hit)

    build._build, knobs.compilation.listener = timed_build, listener
    try:
        yield
    finally:
        build._build, knobs.compilation.listener = original_build, original_listener
        record["kernel_seconds"] = sum(k["seconds"] for k in kernels)
        record["c_module_seconds"] = sum(c["seconds"] for c in c_modules)


def fitzhugh_nagumo(repeats: int, quick: bool, device: torch.device, batch: int, *, anchors: bool = True,
                    compiled: bool = True, use_diffrax: bool = True, chunk: int = 16) -> dict:
    system = FitzHughNagumo()
    batch = 128 if quick else batch
    y0_cpu, t_cpu, subset, truth = fhn_problem(batch)
    y0, t = y0_cpu.to(device), t_cpu.to(device)
    error = lambda ys: float(np.abs(ys[subset].cpu().numpy() - truth).max())
    rtol, atol = 1e-6, 1e-8
    f = lambda s, y: system.derivative(s, (y,))[0]
    rows = {}

    import torchdiffeq

    with torch.no_grad():
        seconds, ys = median_time(lambda: torchdiffeq.odeint(f, y0, t, rtol=rtol, atol=atol, method="dopri5"), repeats)
    rows["torchdiffeq dopri5"] = dict(seconds=seconds, max_error=error(ys.transpose(0, 1)), rtol=rtol, atol=atol)

    try:
        if not anchors:
            raise ImportError("not run at this batch size")
        import torchode
    except ImportError as err:
        if anchors:
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

    if anchors:
        seconds, _ = median_time(scipy_loop, max(1, repeats // 2))
        scipy_ys = np.stack([solve_ivp(fn, (0.0, 400.0), y, method="RK45", rtol=rtol, atol=atol,
                                       t_eval=t_cpu.numpy()).y.T for y in y0_cpu[subset].numpy()])
        rows["scipy RK45 loop"] = dict(seconds=seconds * batch / scipy_count, measured_on=scipy_count,
                                       max_error=float(np.abs(scipy_ys - truth).max()), rtol=rtol, atol=atol)

    target = min(rows[k]["max_error"] for k in rows if not k.startswith("scipy"))
    diffrax_ladder = []
    if use_diffrax and jax_modules() is not None:
        import jax.numpy as jnp

        tau, current, a, b = system.tau, system.current, system.a, system.b

        def fhn_jax(s, y, args):
            return jnp.stack([y[0] - y[0] ** 3 / 3 - y[1] + current, tau * (y[0] + a - b * y[1])])

        solve_jax = diffrax_batched(fhn_jax, t_cpu.numpy())
        y0_jax, no_args = jnp.asarray(y0_cpu.numpy()), jnp.zeros(batch)
        first, seconds, (ys, steps) = time_jax(lambda: solve_jax(y0_jax, no_args, rtol, atol), repeats)
        rows["diffrax dopri5 (vmap)"] = dict(seconds=seconds, first_call_seconds=first, max_error=error(
            torch.from_numpy(np.asarray(ys))), rtol=rtol, atol=atol, steps_max=int(np.asarray(steps).max()))
        for tol in LADDER:  # the loosest tolerance reaching the target (one compilation: rtol/atol are traced)
            first, seconds, (ys, steps) = time_jax(lambda: solve_jax(y0_jax, no_args, tol, tol * 1e-2), repeats)
            entry = dict(seconds=seconds, first_call_seconds=first, max_error=error(torch.from_numpy(np.asarray(ys))),
                         rtol=tol, atol=tol * 1e-2, steps_max=int(np.asarray(steps).max()),
                         steps_mean=float(np.asarray(steps).mean()))
            diffrax_ladder.append(entry)
            if entry["max_error"] <= target:
                break
        # (its first call is not a compilation: the ladder reuses the jit of the 1e-6 row)
        rows["diffrax dopri5 matched"] = {k: v for k, v in diffrax_ladder[-1].items() if k != "first_call_seconds"}
    ladder, breakdown = [], {}
    for tol in LADDER:
        with torch.no_grad():
            with triton_build_times(breakdown) if device.type == "cuda" and not ladder else contextlib.nullcontext():
                start = time.perf_counter()
                odelab.solve(system, y0, t, rtol=tol, atol=tol * 1e-2)
                synchronize()
                first = time.perf_counter() - start
            seconds, sol = median_time(lambda: odelab.solve(system, y0, t, rtol=tol, atol=tol * 1e-2), repeats)
        entry = dict(seconds=seconds, first_call_seconds=first, max_error=error(sol.y), rtol=tol, atol=tol * 1e-2,
                     steps_max=int(sol.stats["steps"].max()), steps_mean=float(sol.stats["steps"].double().mean()))
        ladder.append(entry)
        if entry["max_error"] <= target:
            break
    chosen = ladder[-1]
    rows["odelab dopri5"] = chosen
    # the same solve with the torch loop (the fused loop off: its C++ kernels on the CPU, Triton's on CUDA)
    with torch.no_grad(), torch_loop():
        seconds, sol = median_time(lambda: odelab.solve(system, y0, t, rtol=chosen["rtol"], atol=chosen["atol"]),
                                   repeats)
    rows["odelab dopri5 torch loop"] = dict(seconds=seconds, max_error=error(sol.y), rtol=chosen["rtol"],
                                            atol=chosen["atol"], steps_max=int(sol.stats["steps"].max()))
    if device.type == "cuda":  # the Triton loop with each chunk of attempts replayed as one CUDA graph
        run = lambda: odelab.solve(system, y0, t, rtol=chosen["rtol"], atol=chosen["atol"], cuda_graph=True)
        with torch.no_grad():
            first = first_call(run)
            seconds, sol = median_time(run, repeats)
        rows["odelab dopri5 cuda graph"] = dict(seconds=seconds, first_call_seconds=first, max_error=error(sol.y),
                                                rtol=chosen["rtol"], atol=chosen["atol"])
    if compiled:
        # the same solve with the step compiled by torch.compile (first call = compilation, reported apart)
        run = lambda: odelab.solve(system, y0, t, rtol=chosen["rtol"], atol=chosen["atol"], compile=True)
        with torch.no_grad():
            first = first_call(run)
            seconds, sol = median_time(run, repeats)
            # another configuration (batch // 2 + 1 samples, tolerances × 2): dynamic shapes and rtol/atol as an
            # argument let it reuse the compilation, so its first call is close to its eager time
            other = lambda compile: odelab.solve(system, y0[: batch // 2 + 1], t, rtol=chosen["rtol"] * 2,
                                                 atol=chosen["atol"] * 2, compile=compile)
            start = time.perf_counter()
            other(True)
            new_first = time.perf_counter() - start
            new_eager, _ = median_time(lambda: other(False), repeats)
        rows["odelab dopri5 compiled"] = dict(seconds=seconds, max_error=error(sol.y), rtol=chosen["rtol"],
                                              atol=chosen["atol"], steps_max=int(sol.stats["steps"].max()),
                                              first_call_seconds=first, compile_seconds=first - seconds,
                                              new_configuration_first_call_seconds=new_first,
                                              new_configuration_eager_seconds=new_eager)
        if chunk > 1 and device.type == "cpu":  # the chunk's attempts in one compiled scan
            run = lambda: odelab.solve(system, y0, t, rtol=chosen["rtol"], atol=chosen["atol"], compile=True,
                                       chunk=chunk)
            with torch.no_grad():
                start = time.perf_counter()
                run()
                first = time.perf_counter() - start
                seconds, sol = median_time(run, repeats)
            rows[f"odelab compiled chunk {chunk}"] = dict(seconds=seconds, max_error=error(sol.y), rtol=chosen["rtol"],
                                                          atol=chosen["atol"], steps_max=int(sol.stats["steps"].max()),
                                                          first_call_seconds=first, compile_seconds=first - seconds)
    torch_anchors = [k for k in ("torchdiffeq dopri5", "torchode dopri5") if k in rows]
    fastest_anchor = min(torch_anchors, key=lambda k: rows[k]["seconds"])
    result = dict(problem=f"FitzHugh-Nagumo, {batch} x (c, 0), [0, 400], 1001 outputs, float64, {device}",
                  batch=batch, device=str(device),
                  rows=rows, odelab_ladder=ladder, diffrax_ladder=diffrax_ladder, error_target=target,
                  first_call_breakdown=breakdown or None,
                  speedup_vs_fastest_torch_anchor=rows[fastest_anchor]["seconds"] / chosen["seconds"],
                  fastest_torch_anchor=fastest_anchor,
                  odelab_over_torchdiffeq=chosen["seconds"] / rows["torchdiffeq dopri5"]["seconds"],
                  fused_loop_over_torch_loop=chosen["seconds"] / rows["odelab dopri5 torch loop"]["seconds"])
    if "odelab dopri5 compiled" in rows:
        result["compiled_speedup_vs_fastest_torch_anchor"] = (rows[fastest_anchor]["seconds"]
                                                              / rows["odelab dopri5 compiled"]["seconds"])
        result["odelab_compiled_over_torchdiffeq"] = (rows["odelab dopri5 compiled"]["seconds"]
                                                      / rows["torchdiffeq dopri5"]["seconds"])
    if "scipy RK45 loop" in rows:
        result["speedup_vs_scipy"] = rows["scipy RK45 loop"]["seconds"] / chosen["seconds"]
    if "diffrax dopri5 matched" in rows:
        matched = rows["diffrax dopri5 matched"]
        result["odelab_over_diffrax"] = chosen["seconds"] / matched["seconds"]
        # eager's first call of this configuration (the ladder's first tolerance; on the CPU the fused loop, whose
        # kernels are built once per machine, not per configuration) against diffrax's, jit included
        result["odelab_first_call_over_diffrax_first_call"] = (
            ladder[0]["first_call_seconds"] / rows["diffrax dopri5 (vmap)"]["first_call_seconds"])
        if "odelab dopri5 compiled" in rows:
            result["odelab_compiled_over_diffrax"] = rows["odelab dopri5 compiled"]["seconds"] / matched["seconds"]
            result["odelab_compiled_first_call_over_diffrax_first_call"] = (
                rows["odelab dopri5 compiled"]["first_call_seconds"] / rows["diffrax dopri5 (vmap)"]["first_call_seconds"])
        if f"odelab compiled chunk {chunk}" in rows:
            result["odelab_compiled_chunk_over_diffrax"] = (rows[f"odelab compiled chunk {chunk}"]["seconds"]
                                                            / matched["seconds"])
        if "odelab dopri5 cuda graph" in rows:
            result["odelab_cuda_graph_over_diffrax"] = rows["odelab dopri5 cuda graph"]["seconds"] / matched["seconds"]
    return result


def van_der_pol(repeats: int, quick: bool, device: torch.device, use_diffrax: bool = True,
                compiled: bool = True, chunk: int = 16) -> dict:
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
    compiled_row = chunk_row = None
    if compiled:
        solve_compiled = lambda: odelab.solve(system, y0, t, rtol=rtol, atol=atol, compile=True)
        with torch.no_grad():
            synchronize()
            start = time.perf_counter()
            solve_compiled()
            synchronize()
            first = time.perf_counter() - start
            seconds, comp = median_time(solve_compiled, repeats)
        compiled_row = dict(seconds=seconds, first_call_seconds=first,
                            max_difference_to_eager=float((comp.y - ours.y).abs().max()))
        if chunk > 1 and device.type == "cpu":  # the chunk's attempts in one compiled scan
            solve_scanned = lambda: odelab.solve(system, y0, t, rtol=rtol, atol=atol, compile=True, chunk=chunk)
            with torch.no_grad():
                start = time.perf_counter()
                solve_scanned()
                first = time.perf_counter() - start
                seconds, comp = median_time(solve_scanned, repeats)
            chunk_row = dict(chunk=chunk, seconds=seconds, first_call_seconds=first,
                             max_difference_to_eager=float((comp.y - ours.y).abs().max()))
    steps = ours.stats["steps"].double()
    gap = float((ours.y - theirs.transpose(0, 1)).abs().max())
    jax_row = None
    if use_diffrax and jax_modules() is not None:
        import jax.numpy as jnp

        def vdp_jax(s, y, mu):
            return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])

        solve_jax = diffrax_batched(vdp_jax, t.cpu().numpy())
        first, seconds, (ys, jsteps) = time_jax(
            lambda: solve_jax(jnp.asarray(y0.cpu().numpy()), jnp.asarray(mu.cpu().numpy()), rtol, atol), repeats)
        jsteps = np.asarray(jsteps)
        jax_row = dict(seconds=seconds, first_call_seconds=first, steps_min=int(jsteps.min()),
                       steps_median=float(np.median(jsteps)), steps_max=int(jsteps.max()), steps_mu_0_1=int(jsteps[0]),
                       steps_mu_10=int(jsteps[-1]),
                       max_difference_to_odelab=float(np.abs(np.asarray(ys) - ours.y.cpu().numpy()).max()))
    return dict(problem=f"Van der Pol, mu = linspace(0.1, 10, {batch}), [0, 50], 201 outputs, float64, {device}",
                odelab=dict(seconds=ours_s, steps_min=int(steps.min()), steps_median=float(steps.median()),
                            steps_max=int(steps.max()), steps_mu_0_1=int(steps[0]), steps_mu_10=int(steps[-1]),
                            nfe_total=int(ours.stats["nfe"].sum())),
                torchdiffeq=dict(seconds=theirs_s, shared_steps=shared_steps, nfe_total_per_sample_equiv=calls[0] * batch),
                max_difference_between_solvers=gap, speedup=theirs_s / ours_s, diffrax=jax_row,
                odelab_over_diffrax=None if jax_row is None else ours_s / jax_row["seconds"],
                odelab_compiled=compiled_row, odelab_compiled_chunk=chunk_row,
                odelab_compiled_chunk_over_diffrax=None if jax_row is None or chunk_row is None
                else chunk_row["seconds"] / jax_row["seconds"],
                odelab_compiled_over_diffrax=None if jax_row is None or compiled_row is None
                else compiled_row["seconds"] / jax_row["seconds"])


def reaction_diffusion(repeats: int, quick: bool, device: torch.device, use_diffrax: bool = True,
                       compiled: bool = True) -> dict:
    """(c) of the module docstring: Fisher--KPP by the method of lines, state 1024, batch 64."""
    cells, batch = (256, 16) if quick else (1024, 64)
    length, D, r = 64.0, 0.01, 1.0
    dx = length / cells
    x = torch.arange(cells, dtype=F64) * dx
    gen = torch.Generator().manual_seed(0)
    centres = torch.rand(batch, 3, generator=gen, dtype=F64) * length
    widths = 1.0 + 3.0 * torch.rand(batch, 3, generator=gen, dtype=F64)
    heights = 0.2 + 0.8 * torch.rand(batch, 3, generator=gen, dtype=F64)
    gap = (x.view(1, 1, -1) - centres.unsqueeze(-1) + length / 2) % length - length / 2  # periodic distance
    u0_cpu = (heights.unsqueeze(-1) * torch.exp(-(gap / widths.unsqueeze(-1)) ** 2)).sum(1).clamp_max(1.0)
    t_cpu = torch.linspace(0.0, 10.0, 11, dtype=F64)
    coef = D / dx ** 2
    rtol, atol = 1e-6, 1e-8

    def f(s, u):
        lap = torch.roll(u, 1, -1) + torch.roll(u, -1, -1) - 2 * u
        return coef * lap + r * u * (1 - u)

    def f_np(s, u):
        return coef * (np.roll(u, 1) + np.roll(u, -1) - 2 * u) + r * u * (1 - u)

    subset = [0, batch // 3, 2 * batch // 3, batch - 1]
    path = RESULTS / f"solvers_rd_reference_{cells}x{batch}.npz"
    truth = None
    if path.exists():
        cached = np.load(path)
        if np.array_equal(cached["u0"], u0_cpu[subset].numpy()):
            truth = cached["ys"]
    if truth is None:
        truth = np.stack([solve_ivp(f_np, (0.0, 10.0), u, method="DOP853", rtol=1e-10, atol=1e-12,
                                    t_eval=t_cpu.numpy()).y.T for u in u0_cpu[subset].numpy()])
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, u0=u0_cpu[subset].numpy(), ys=truth)
    error = lambda ys: float(np.abs(np.asarray(ys)[subset] - truth).max())
    u0, t = u0_cpu.to(device), t_cpu.to(device)
    rows = {}
    with torch.no_grad():
        start = time.perf_counter()
        odelab.solve(f, u0, t, rtol=rtol, atol=atol)
        first = time.perf_counter() - start
        seconds, sol = median_time(lambda: odelab.solve(f, u0, t, rtol=rtol, atol=atol), repeats)
    rows["odelab dopri5"] = dict(seconds=seconds, first_call_seconds=first, max_error=error(sol.y.cpu()),
                                 steps_max=int(sol.stats["steps"].max()), steps_mean=float(sol.stats["steps"].double().mean()))
    if compiled:  # the step through torch.compile: the field's rolls fuse with the stages
        solve_compiled = lambda: odelab.solve(f, u0, t, rtol=rtol, atol=atol, compile=True)
        with torch.no_grad():
            start = time.perf_counter()
            solve_compiled()
            synchronize()
            first = time.perf_counter() - start
            seconds, sol = median_time(solve_compiled, repeats)
        rows["odelab dopri5 compiled"] = dict(seconds=seconds, first_call_seconds=first, max_error=error(sol.y.cpu()),
                                              steps_max=int(sol.stats["steps"].max()))
    import torchdiffeq

    with torch.no_grad():
        seconds, ys = median_time(lambda: torchdiffeq.odeint(f, u0, t, rtol=rtol, atol=atol, method="dopri5"), repeats)
    rows["torchdiffeq dopri5"] = dict(seconds=seconds, max_error=error(ys.transpose(0, 1).cpu()))
    if use_diffrax and jax_modules() is not None:
        import jax.numpy as jnp

        def f_jax(s, u, args):
            return coef * (jnp.roll(u, 1) + jnp.roll(u, -1) - 2 * u) + r * u * (1 - u)

        solve_jax = diffrax_batched(f_jax, t_cpu.numpy())
        first, seconds, (ys, steps) = time_jax(lambda: solve_jax(jnp.asarray(u0_cpu.numpy()), jnp.zeros(batch),
                                                                 rtol, atol), repeats)
        rows["diffrax dopri5 (vmap)"] = dict(seconds=seconds, first_call_seconds=first, max_error=error(ys),
                                             steps_max=int(np.asarray(steps).max()))
    out = dict(problem=f"Fisher-KPP reaction-diffusion, {cells} cells (periodic, dx = {dx:g}), batch {batch}, "
                       f"[0, 10], 11 outputs, float64, dopri5 rtol {rtol:g} / atol {atol:g}, {device}",
               rows=rows, odelab_over_torchdiffeq=rows["odelab dopri5"]["seconds"] / rows["torchdiffeq dopri5"]["seconds"])
    if "diffrax dopri5 (vmap)" in rows:
        out["odelab_over_diffrax"] = rows["odelab dopri5"]["seconds"] / rows["diffrax dopri5 (vmap)"]["seconds"]
        if "odelab dopri5 compiled" in rows:
            out["odelab_compiled_over_diffrax"] = (rows["odelab dopri5 compiled"]["seconds"]
                                                   / rows["diffrax dopri5 (vmap)"]["seconds"])
    return out


def print_fhn(fhn: dict) -> None:
    print(f"\n(a) {fhn['problem']}")
    print(f"{'solver':26s} {'rtol':>8s} {'steady [s]':>11s} {'first call [s]':>15s} {'max error':>11s} "
          f"{'steps (max)':>12s} {'time / odelab':>14s}")
    chosen = fhn["rows"]["odelab dopri5"]["seconds"]
    for name, row in fhn["rows"].items():
        first = row.get("first_call_seconds")
        print(f"{name:26s} {row['rtol']:8.0e} {row['seconds']:11.3f} {'' if first is None else f'{first:.3f}':>15s} "
              f"{row['max_error']:11.2e} {row.get('steps_max', ''):>12} {row['seconds'] / chosen:13.2f}x")
    print("odelab tolerance ladder: " + ", ".join(f"{e['rtol']:.0e}: {e['max_error']:.1e} in {e['seconds']:.2f}s"
                                                  for e in fhn["odelab_ladder"]))
    if fhn["diffrax_ladder"]:
        print("diffrax tolerance ladder: " + ", ".join(f"{e['rtol']:.0e}: {e['max_error']:.1e} in {e['seconds']:.2f}s"
                                                       for e in fhn["diffrax_ladder"]))
    line = f"odelab/torchdiffeq {fhn['odelab_over_torchdiffeq']:.2f}"
    if "odelab_compiled_over_torchdiffeq" in fhn:
        line += f" (compiled {fhn['odelab_compiled_over_torchdiffeq']:.2f})"
    if "odelab_over_diffrax" in fhn:
        line += (f"; odelab/diffrax {fhn['odelab_over_diffrax']:.2f} eager (first call "
                 f"{fhn['odelab_first_call_over_diffrax_first_call']:.2f}x diffrax's)")
        if "odelab_compiled_over_diffrax" in fhn:
            line += (f", {fhn['odelab_compiled_over_diffrax']:.2f} compiled; first call (compile/jit included) "
                     f"{fhn['odelab_compiled_first_call_over_diffrax_first_call']:.1f}x diffrax's")
        if "odelab_compiled_chunk_over_diffrax" in fhn:
            line += f"; {fhn['odelab_compiled_chunk_over_diffrax']:.2f} compiled with chunk"
    if "speedup_vs_scipy" in fhn:
        line += f"; {fhn['speedup_vs_scipy']:.1f}x faster than the scipy loop"
    print(line + " (steady state, at matched accuracy)")
    breakdown = fhn.get("first_call_breakdown")
    if breakdown:
        print(f"odelab's first call: Triton compiled {len(breakdown['kernels'])} kernel(s) in "
              f"{breakdown['kernel_seconds']:.2f}s ("
              + ", ".join(f"{k['name']} {k['seconds']:.2f}s" + (" cached" if k["cache_hit"] else "")
                          for k in breakdown["kernels"])
              + f"), the C compiler built {len(breakdown['c_modules'])} module(s) in {breakdown['c_module_seconds']:.2f}s")
    compiled = fhn["rows"].get("odelab dopri5 compiled")
    if compiled and "new_configuration_first_call_seconds" in compiled:
        print(f"compile=True, another batch size and tolerance: first call {compiled['new_configuration_first_call_seconds']:.2f}s"
              f" (eager {compiled['new_configuration_eager_seconds']:.2f}s): no recompilation")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="small batches (a smoke run)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the scipy loop always runs on the CPU)")
    parser.add_argument("--batch", type=int, default=1280, help="FitzHugh-Nagumo trajectories (default 1280)")
    parser.add_argument("--batches", type=int, nargs="+", default=None,
                        help="several FitzHugh-Nagumo batch sizes, e.g. 1280 16384 131072 (the first one gets the "
                             "full set of anchors and compile=True)")
    parser.add_argument("--large-repeats", type=int, default=2, help="repeats at the batch sizes after the first")
    parser.add_argument("--no-compile", action="store_true", help="skip odelab compile=True")
    parser.add_argument("--chunk", type=int, default=16,
                        help="CPU: also time compile=True with this chunk (its attempts in one compiled scan; 1: skip)")
    parser.add_argument("--no-diffrax", action="store_true", help="skip diffrax")
    parser.add_argument("--no-large-state", action="store_true", help="skip (c), the reaction-diffusion problem")
    parser.add_argument("--no-slow-anchors", action="store_true", help="skip torchode and the scipy loop")
    parser.add_argument("--references", action="store_true",
                        help="only compute and cache the scipy references of --batches (for a machine where time is "
                             "short), then exit")
    parser.add_argument("--out", default=None,
                        help="JSON file (default benchmarks/results/solvers[_quick][_DEVICE].json); written after "
                             "every FitzHugh-Nagumo batch too, so a run stopped midway keeps what it measured")
    args = parser.parse_args()
    if not args.no_diffrax:  # before jax is imported: XLA on as many CPU threads as torch
        flags = os.environ.get("XLA_FLAGS", "")
        if args.threads == 1 and "intra_op_parallelism_threads" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu" if args.device == "cpu" else "")
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU's memory to torch
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    use_diffrax = not args.no_diffrax

    batches = args.batches or [args.batch]
    if args.references:
        for batch in batches:
            fhn_problem(128 if args.quick else batch)
            print(f"reference of batch {batch}: {RESULTS / f'solvers_fhn_reference_{batch}.npz'}")
        return
    suffix = ("_quick" if args.quick else "") + ("" if device.type == "cpu" else f"_{device.type}")
    out = Path(args.out) if args.out else RESULTS / f"solvers{suffix}.json"
    by_batch = {}
    for i, batch in enumerate(batches):
        by_batch[str(batch)] = fitzhugh_nagumo(args.repeats if i == 0 else args.large_repeats, args.quick, device,
                                               batch, anchors=i == 0 and not args.no_slow_anchors,
                                               compiled=i == 0 and not args.no_compile,
                                               use_diffrax=use_diffrax, chunk=args.chunk)
        print_fhn(by_batch[str(batch)])
        write(out, args, device, use_diffrax, dict(fitzhugh_nagumo=by_batch[str(batches[0])],
                                                   fitzhugh_nagumo_by_batch=by_batch, partial=True))
    fhn = by_batch[str(batches[0])]
    vdp = van_der_pol(args.repeats, args.quick, device, use_diffrax, compiled=not args.no_compile, chunk=args.chunk)
    rd = None if args.no_large_state else reaction_diffusion(args.repeats, args.quick, device, use_diffrax,
                                                            compiled=not args.no_compile)

    print(f"\n(b) {vdp['problem']}")
    o, d = vdp["odelab"], vdp["torchdiffeq"]
    print(f"odelab dopri5      time {o['seconds']:.3f}s  steps per sample min/median/max "
          f"{o['steps_min']}/{o['steps_median']:.0f}/{o['steps_max']} (mu=0.1: {o['steps_mu_0_1']}, mu=10: {o['steps_mu_10']})")
    if vdp["odelab_compiled"] is not None:
        c = vdp["odelab_compiled"]
        print(f"odelab compiled    time {c['seconds']:.3f}s (first call {c['first_call_seconds']:.2f}s), max |compiled − eager| "
              f"= {c['max_difference_to_eager']:.1e}")
    if vdp["odelab_compiled_chunk"] is not None:
        c = vdp["odelab_compiled_chunk"]
        print(f"odelab compiled, chunk {c['chunk']} (one scan per chunk) time {c['seconds']:.3f}s (first call "
              f"{c['first_call_seconds']:.2f}s), max |compiled − eager| = {c['max_difference_to_eager']:.1e}")
    print(f"torchdiffeq dopri5 time {d['seconds']:.3f}s  shared steps {d['shared_steps']:.0f} (every sample)")
    if vdp["diffrax"] is not None:
        j = vdp["diffrax"]
        print(f"diffrax dopri5     time {j['seconds']:.3f}s (first call {j['first_call_seconds']:.2f}s)  steps per sample "
              f"min/median/max {j['steps_min']}/{j['steps_median']:.0f}/{j['steps_max']}; odelab/diffrax "
              f"{vdp['odelab_over_diffrax']:.2f} eager" + (f", {vdp['odelab_compiled_over_diffrax']:.2f} compiled"
                                                          if vdp["odelab_compiled_over_diffrax"] else "")
              + (f", {vdp['odelab_compiled_chunk_over_diffrax']:.2f} compiled with chunk"
                 if vdp["odelab_compiled_chunk_over_diffrax"] else ""))
    print(f"speed-up vs torchdiffeq {vdp['speedup']:.2f}x; max |odelab − torchdiffeq| = "
          f"{vdp['max_difference_between_solvers']:.1e}")
    if rd is not None:
        print(f"\n(c) {rd['problem']}")
        for name, row in rd["rows"].items():
            first = row.get("first_call_seconds")
            print(f"{name:26s} steady {row['seconds']:8.3f}s  first call {'' if first is None else f'{first:.3f}s':>9s}  "
                  f"max error {row['max_error']:.2e}  steps (max) {row.get('steps_max', '')}")
        print(f"odelab/torchdiffeq {rd['odelab_over_torchdiffeq']:.2f}" + (
            f"; odelab/diffrax {rd['odelab_over_diffrax']:.2f}" if "odelab_over_diffrax" in rd else "") + (
            f" ({rd['odelab_compiled_over_diffrax']:.2f} compiled)" if "odelab_compiled_over_diffrax" in rd else ""))

    write(out, args, device, use_diffrax, dict(fitzhugh_nagumo=fhn, fitzhugh_nagumo_by_batch=by_batch,
                                               van_der_pol=vdp, reaction_diffusion=rd))
    print(f"\nwrote {out}")


def write(out: Path, args, device: torch.device, use_diffrax: bool, parts: dict) -> None:
    meta = dict(torch=torch.__version__, threads=args.threads, repeats=args.repeats, large_repeats=args.large_repeats,
                machine=platform.processor() or platform.machine(), python=platform.python_version(), quick=args.quick,
                device=str(device), gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    if use_diffrax and jax_modules() is not None:
        import diffrax
        import jax

        meta.update(jax=jax.__version__, diffrax=diffrax.__version__, jax_backend=jax.default_backend())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, **parts), indent=2))

if __name__ == "__main__":
    main()
