"""Memory and time of the gradient modes of odelab.solve on a neural-network field over 10⁴ steps: direct
backprop (the default), adjoint="checkpoint" (exact, recursive checkpointing) and adjoint="backsolve"
(continuous adjoint), against torchdiffeq's odeint (direct) and odeint_adjoint, same field, same run.

    python benchmarks/adjoint_memory.py [--steps 10000] [--batch 16] [--state 64] [--hidden 128]
                                        [--methods rk4 dopri5] [--repeats 3] [--threads 1] [--device cpu]

Problem: f(t, y) = W3 tanh(W2 tanh(W1 y + b1) + b2) + b3 (state 64, hidden 128), float32, y0 ~ N(0, 1) (seed 0),
t ∈ [0, 10] with 11 outputs, loss = Σ w · y(t_i) (w ~ N(0, 1)). rk4 with dt = 10 / steps; dopri5 (rtol 1e-6,
atol 1e-8) with the step capped at 10 / steps (odelab dt_max, torchdiffeq max_step), so both take ≈ steps
steps. Each contender runs in a fresh subprocess (one thread) and reports:

* peak_rss_bytes: the process's peak resident memory (getrusage ru_maxrss) during one forward + backward,
  above the resident memory after setup (weights, inputs, a warm-up on a 10-step problem) -- everything the
  autograd graph, the checkpoints and the solver keep, measured by the OS, independent of tracemalloc;
* saved_bytes: distinct storages autograd saves for the backward of the outer graph (saved_tensors_hooks, as
  in benchmarks/unicornn_memory.py; a checkpointed or adjoint solve saves only its inputs and outputs there,
  its recomputations live inside the backward and show in the peak only);
* on CUDA: torch.cuda.max_memory_allocated over forward + backward, above the memory before;
* median forward + backward seconds over --repeats, and the largest gradient difference to odelab direct.

A second, small float64 instance (state 4, hidden 8, batch 2, 200 steps) checks each mode's gradient
against central finite differences along 4 random directions (relative error of the directional derivative).
Prints tables and writes benchmarks/results/adjoint_memory.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

RESULTS = Path(__file__).resolve().parent / "results"
CONTENDERS = ("odelab direct", "odelab checkpoint", "odelab backsolve", "torchdiffeq odeint",
              "torchdiffeq odeint_adjoint")


class MLP(nn.Module):
    def __init__(self, state: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, state))

    def forward(self, t, y):
        return self.net(y)


def build(state: int, hidden: int, batch: int, dtype, device, seed: int = 0):
    torch.manual_seed(seed)
    field = MLP(state, hidden).to(dtype=dtype, device=device)
    with torch.no_grad():  # a field of moderate Lipschitz constant: trajectories stay O(1) over [0, 10]
        for layer in field.net:
            if isinstance(layer, nn.Linear):
                layer.weight.mul_(0.5)
    gen = torch.Generator().manual_seed(seed + 1)
    y0 = torch.randn(batch, state, generator=gen, dtype=dtype).to(device)
    t = torch.linspace(0.0, 10.0, 11, dtype=torch.float64).to(device)
    w = torch.randn(batch, 11, state, generator=gen, dtype=dtype).to(device)
    return field, y0, t, w


def loss_fn(name: str, method: str, steps: int, field, y0, t, w):
    """The loss of one contender (a closure: forward; .backward() is the caller's)."""
    import odelab
    from odelab.solvers.adjoint import solve_with_adjoint

    T = float(t[-1] - t[0])
    dt = T / steps
    if name.startswith("odelab"):
        kw = dict(method="rk4", dt=dt) if method == "rk4" else dict(method="dopri5", rtol=1e-6, atol=1e-8, dt_max=dt,
                                                                       max_steps=10 * steps + 100)
        mode = name.split()[1]
        if mode == "direct":
            return lambda: (odelab.solve(field, y0, t, **kw).y * w).sum()
        return lambda: (solve_with_adjoint(field, y0, t, adjoint=mode, **kw).y * w).sum()
    import torchdiffeq

    kw = dict(method="rk4", options=dict(step_size=dt)) if method == "rk4" else dict(
        method="dopri5", rtol=1e-6, atol=1e-8, options=dict(max_step=dt))
    if name.endswith("adjoint"):
        return lambda: (torchdiffeq.odeint_adjoint(field, y0, t, **kw).transpose(0, 1) * w).sum()
    return lambda: (torchdiffeq.odeint(field, y0, t, **kw).transpose(0, 1) * w).sum()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(args) -> None:
    """One contender in this (fresh) process; prints one JSON line."""
    torch.set_num_threads(args.threads)
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    field, y0, t, w = build(args.state, args.hidden, args.batch, dtype, device)
    y0.requires_grad_()
    params = [y0, *field.parameters()]
    # warm-up on a short problem (first-call allocations, imports), then the baseline
    small = loss_fn(args.name, args.method, 10, field, y0, t[:2], w[:, :2])
    small().backward()
    for p in params:
        p.grad = None
    row = {}
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    base = rss_bytes()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    loss = loss_fn(args.name, args.method, args.steps, field, y0, t, w)
    tic = time.perf_counter()
    loss().backward()
    first = time.perf_counter() - tic
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    row["peak_rss_bytes"] = max(0, peak - base)  # an upper bound if the run did not raise the high-water mark
    row["peak_rss_raw"] = dict(base=base, peak_before=peak_before, peak=peak)
    if device.type == "cuda":
        torch.cuda.synchronize()
        row["cuda_peak_bytes"] = torch.cuda.max_memory_allocated() - before
    grads = torch.cat([p.grad.detach().reshape(-1).double().cpu() for p in params])
    torch.save(grads, args.grads_out)
    storages: dict[int, int] = {}

    def pack(x):
        storages[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        value = loss()
    row["saved_bytes"] = sum(storages.values())
    del value
    times = [first]
    for _ in range(max(0, args.repeats - 1)):
        for p in params:
            p.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize()
        tic = time.perf_counter()
        loss().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - tic)
    row["seconds"] = statistics.median(times)
    row["seconds_all"] = times
    print("RESULT " + json.dumps(row))


def finite_difference_check(threads: int) -> dict:
    """Small float64 instance: each mode's directional derivative against central differences."""
    torch.set_num_threads(threads)
    out = {}
    for method in ("rk4", "dopri5"):
        field, y0, t, w = build(4, 8, 2, torch.float64, torch.device("cpu"), seed=3)
        t = t[:5] / 5  # [0, 0.8], 5 outputs
        w = w[:, :5, :4]
        y0 = y0[:, :4].clone().requires_grad_()
        params = [y0, *field.parameters()]
        gen = torch.Generator().manual_seed(11)
        directions = []
        for _ in range(4):  # unit-norm random directions over (y0, θ)
            v = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
            norm = float(sum((x ** 2).sum() for x in v)) ** 0.5
            directions.append([x / norm for x in v])
        rows = {}
        for name in CONTENDERS:
            loss = loss_fn(name, method, 200, field, y0, t, w)
            grads = torch.autograd.grad(loss(), params)
            errors = []
            for v in directions:
                eps = 1e-4
                with torch.no_grad():
                    for p, d in zip(params, v):
                        p.add_(eps * d)
                    up = float(loss())
                    for p, d in zip(params, v):
                        p.sub_(2 * eps * d)
                    down = float(loss())
                    for p, d in zip(params, v):
                        p.add_(eps * d)
                fd = (up - down) / (2 * eps)
                ad = float(sum((g * d).sum() for g, d in zip(grads, v)))
                errors.append(abs(ad - fd) / max(1.0, abs(fd)))
            rows[name] = max(errors)
        out[method] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--state", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--methods", nargs="+", default=["rk4", "dopri5"])
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repeats-adaptive", type=int, default=None,
                        help="repeats for dopri5 (default --repeats; its adjoint runs are the slow ones)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(RESULTS / "adjoint_memory.json"))
    # worker mode (internal)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--grads-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods:
            rows, grads = {}, {}
            for name in args.contenders:
                grads_out = os.path.join(tmp, f"{method}-{name.replace(' ', '_')}.pt")
                command = [sys.executable, __file__, "--worker", "--name", name, "--method", method,
                           "--grads-out", grads_out]
                for key in ("steps", "batch", "state", "hidden", "dtype", "repeats", "threads", "device"):
                    value = getattr(args, key)
                    if key == "repeats" and method != "rk4" and args.repeats_adaptive is not None:
                        value = args.repeats_adaptive
                    command += [f"--{key}", str(value)]
                env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
                done = subprocess.run(command, capture_output=True, text=True, env=env)
                lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
                if done.returncode != 0 or not lines:
                    print(f"{method} {name}: failed\n{done.stderr[-2000:]}")
                    rows[name] = {"error": done.stderr[-2000:]}
                    continue
                rows[name] = json.loads(lines[-1][len("RESULT "):])
                grads[name] = torch.load(grads_out)
                print(f"{method:7s} {name:28s} peak {rows[name]['peak_rss_bytes'] / 2**20:9.1f} MiB  "
                      f"saved {rows[name]['saved_bytes'] / 2**20:9.1f} MiB  {rows[name]['seconds']:8.2f} s", flush=True)
            reference = grads.get("odelab direct")
            if reference is not None:
                scale = float(reference.abs().max())
                for name, g in grads.items():
                    rows[name]["max_grad_difference_to_direct"] = float((g - reference).abs().max())
                    rows[name]["max_grad_difference_to_direct_relative"] = float((g - reference).abs().max()) / scale
            direct = rows.get("odelab direct", {})
            for name, row in rows.items():
                if "error" not in row and "peak_rss_bytes" in direct and direct["peak_rss_bytes"]:
                    row["peak_over_direct"] = row["peak_rss_bytes"] / direct["peak_rss_bytes"]
                    row["seconds_over_direct"] = row["seconds"] / direct["seconds"]
            results[method] = rows

    fd = finite_difference_check(args.threads)
    torch.set_num_threads(args.threads)

    print(f"\nMLP field state {args.state}, hidden {args.hidden} (2 hidden layers), batch {args.batch}, {args.steps} steps, "
          f"{args.dtype}, {args.device}, {args.threads} thread(s); medians of {args.repeats}")
    print(f"{'method':7s} {'contender':28s} {'peak MiB':>10s} {'× direct':>9s} {'saved MiB':>10s} {'fwd+bwd s':>10s} "
          f"{'× direct':>9s} {'grad diff (rel)':>16s} {'FD err (f64)':>13s}")
    for method, rows in results.items():
        for name, row in rows.items():
            if "error" in row:
                print(f"{method:7s} {name:28s} failed")
                continue
            print(f"{method:7s} {name:28s} {row['peak_rss_bytes'] / 2**20:10.1f} {row.get('peak_over_direct', 0):9.3f} "
                  f"{row['saved_bytes'] / 2**20:10.1f} {row['seconds']:10.2f} {row.get('seconds_over_direct', 0):9.2f} "
                  f"{row.get('max_grad_difference_to_direct_relative', float('nan')):16.2e} {fd[method][name]:13.2e}")

    meta = dict(torch=torch.__version__, python=platform.python_version(), machine=platform.machine(),
                device=args.device, threads=args.threads, repeats=args.repeats,
                repeats_adaptive=args.repeats_adaptive or args.repeats, steps=args.steps, batch=args.batch,
                state=args.state, hidden=args.hidden, dtype=args.dtype)
    try:
        import torchdiffeq
        meta["torchdiffeq"] = torchdiffeq.__version__
    except ImportError:
        pass
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, results=results, finite_differences_float64=fd), indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
