"""Memory of UnICORNN training: the reversible backward (exact inverse of symplectic Euler, thesis eq. 3.7), as
the Python loop and as the fused kernel, and the fused kernel that stores the states, against plain autograd BPTT
through the generic loop (the anchor), same weights, same run.

    python benchmarks/unicornn_memory.py [--steps 4096] [--batch 32] [--hidden 128] [--layers 2] [--device cpu]
                                         [--threads 1] [--unfolds 1]

Measures, for each path:
* saved bytes: distinct storages autograd keeps between forward and backward (counted with
  torch.autograd.graph.saved_tensors_hooks) -- the activation memory the reversible backward removes;
* on CUDA also the peak of torch.cuda.max_memory_allocated over forward + backward, above the memory held
  before the forward (weights and input);
* median forward + backward seconds over repeats, and the largest gradient difference to autograd.
Prints a table and writes benchmarks/results/unicornn_memory.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from odelab import UnICORNNStack


def saved_bytes(model: UnICORNNStack, x: torch.Tensor) -> int:
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


def train_step(model: UnICORNNStack, x: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    out, _ = model(x)
    (out * weights).mean().backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def cuda_peak(model: UnICORNNStack, x: torch.Tensor, weights: torch.Tensor) -> int:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    train_step(model, x, weights)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def median_seconds(model: UnICORNNStack, x: torch.Tensor, weights: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if x.is_cuda:
            torch.cuda.synchronize()
        tic = time.perf_counter()
        train_step(model, x, weights)
        if x.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - tic)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--unfolds", type=int, default=1, help="sub-steps a sample, every layer (Δt / L each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "unicornn_memory.json"))
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    models = {}
    # the anchor (autograd through the generic loop), the fused kernel that stores the states, and the reversible
    # backward as the Python loop (ReversibleUnICORNN) and as the fused kernel
    for name, reversible, engine in (("autograd", False, "generic"), ("fused", False, "auto"),
                                     ("reversible", True, "generic"), ("reversible fused", True, "auto")):
        torch.manual_seed(0)
        models[name] = UnICORNNStack(args.inputs, args.hidden, args.layers, dt=0.126, alpha=13.0,
                                     reversible=reversible, engine=engine).to(device=args.device, dtype=dtype)
        for layer in models[name].layers:
            layer.unfolds = args.unfolds
    x = torch.randn(args.batch, args.steps, args.inputs, device=args.device, dtype=dtype)
    weights = torch.randn(args.batch, args.steps, args.hidden, device=args.device, dtype=dtype)

    rows = {}
    grads = {}
    for name, model in models.items():
        row = {"saved_bytes": saved_bytes(model, x)}
        if x.is_cuda:
            row["cuda_peak_bytes"] = cuda_peak(model, x, weights)
        grads[name] = train_step(model, x, weights)
        row["seconds"] = median_seconds(model, x, weights, args.repeats)
        rows[name] = row
    grad_errors = {name: max((a - b).abs().max().item() for a, b in zip(grads["autograd"], grads[name]))
                   for name in rows if name != "autograd"}
    grad_scale = max(a.abs().max().item() for a in grads["autograd"])
    ratios = {name: {key: row[key] / rows["autograd"][key] for key in row} for name, row in rows.items()}

    print(f"UnICORNN memory, batch {args.batch}, T={args.steps}, inputs {args.inputs}, hidden {args.hidden}, "
          f"layers {args.layers}, unfolds {args.unfolds}, {args.dtype}, {args.device}")
    peak = f"{'peak MiB':>12}{'× autograd':>11}" if x.is_cuda else ""
    print(f"{'path':<18}{'saved MiB':>12}{'× autograd':>11}{peak}{'fwd+bwd s':>12}{'× autograd':>11}{'max |Δgrad|':>13}")
    for name, row in rows.items():
        line = f"{name:<18}{row['saved_bytes'] / 2**20:12.2f}{ratios[name]['saved_bytes']:11.3f}"
        if x.is_cuda:
            line += f"{row['cuda_peak_bytes'] / 2**20:12.2f}{ratios[name]['cuda_peak_bytes']:11.3f}"
        line += f"{row['seconds']:12.3f}{ratios[name]['seconds']:11.3f}{grad_errors.get(name, 0.0):13.2e}"
        print(line)
    print(f"largest gradient {grad_scale:.3e}")

    result = {"config": vars(args), "device": platform.node() if not x.is_cuda else torch.cuda.get_device_name(),
              "torch": torch.__version__, "rows": rows, "ratio_over_autograd": ratios,
              "max_grad_abs_error": grad_errors, "max_grad_abs": grad_scale}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
