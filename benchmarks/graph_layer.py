"""One GraphCON-GCN layer vs the GCN coupling alone, forward + backward, on a generated 100k-node graph.

The layer is one "imex" step (thesis 7.4, Δt = 1) of ``odelab.systems.GraphCON`` through the scheme machinery
(``FIXED_SCHEMES["imex"].step(Field(system), ...)``); the baseline is the coupling's own forward + backward
(PyG ``GCNConv`` when torch-geometric is installed, and odelab's built-in ``GCNCoupling`` always). Goal: the
oscillator update costs at most 20 % on top of the message passing (ratio ≤ 1.2). Also times one G² layer.

    python benchmarks/graph_layer.py [--nodes 100000] [--edges 1000000] [--hidden 64] [--repeats 15]

Writes benchmarks/results/graph_layer.json (median seconds per forward + backward, interleaved runs; the
ratio is the median of the per-repeat ratios).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from odelab.data.graphs import random_partition_graph
from odelab.solvers.field import Field
from odelab.solvers.schemes import FIXED_SCHEMES
from odelab.systems.graph import GradientGating, GraphCON
from odelab.systems.graph_coupling import GCNCoupling


def timed(fns: dict, repeats: int, warmup: int = 2) -> dict:
    """Median and min seconds of each function, the functions interleaved within every repeat (a shared
    machine's load then hits all of them alike), plus the median of the per-repeat ratios to the first."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    first = next(iter(fns))
    return {name: {"median_s": statistics.median(t), "min_s": min(t), "repeats": repeats,
                   "paired_ratio_median": statistics.median(a / b for a, b in zip(t, times[first]))}
            for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000, help="directed edges (both directions counted)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave the default)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "graph_layer.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    classes = 10
    graph = random_partition_graph(classes, args.nodes // classes, args.edges / args.nodes, 0.8, 8, seed=0)
    edge_index, n, m = graph.edge_index, graph.num_nodes, args.hidden
    X = torch.randn(n, m, requires_grad=True)
    Y = torch.randn(n, m, requires_grad=True)
    imex, euler = FIXED_SCHEMES["imex"], FIXED_SCHEMES["euler"]

    def coupling_alone(conv):
        def run():
            X.grad = None
            conv.zero_grad(set_to_none=True)
            conv(X, edge_index).sum().backward()
        return run

    def graphcon_layer(conv):
        system = GraphCON(conv, m, 1.0, 1.0, edge_index=edge_index, num_nodes=n)
        field = Field(system)

        def run():
            X.grad = Y.grad = None
            conv.zero_grad(set_to_none=True)
            Y1, X1 = imex.step(field, 0.0, (Y, X), 1.0)
            (X1.sum() + Y1.sum()).backward()
        return run

    def g2_layer(conv):
        system = GradientGating(conv, m, 2.0, edge_index=edge_index, num_nodes=n)
        field = Field(system)

        def run():
            X.grad = None
            conv.zero_grad(set_to_none=True)
            (X1,) = euler.step(field, 0.0, (X,), 1.0)
            X1.sum().backward()
        return run

    couplings = {"odelab GCNCoupling": GCNCoupling(m, m)}
    try:
        from torch_geometric.nn import GCNConv

        couplings["PyG GCNConv"] = GCNConv(m, m, cached=True)
    except ImportError:
        print("torch-geometric not installed: timing the built-in GCNCoupling only (pip install odelab[graph])")
    results = {}
    for name, conv in couplings.items():
        timing = timed({"coupling_alone": coupling_alone(conv), "graphcon_layer": graphcon_layer(conv),
                        "g2_layer": g2_layer(conv)}, args.repeats)
        alone, layer, g2 = timing["coupling_alone"], timing["graphcon_layer"], timing["g2_layer"]
        results[name] = {**timing, "graphcon_ratio": layer["paired_ratio_median"], "g2_ratio": g2["paired_ratio_median"],
                         "graphcon_ratio_of_medians": layer["median_s"] / alone["median_s"]}
        print(f"{name:20s} coupling {alone['median_s'] * 1e3:8.1f} ms   GraphCON layer {layer['median_s'] * 1e3:8.1f} ms"
              f" ({results[name]['graphcon_ratio']:.2f}x)   G2 layer {g2['median_s'] * 1e3:8.1f} ms ({results[name]['g2_ratio']:.2f}x)")
    if len(couplings) == 2:
        results["odelab GraphCON layer vs PyG GCNConv alone"] = (
            results["odelab GCNCoupling"]["graphcon_layer"]["median_s"] / results["PyG GCNConv"]["coupling_alone"]["median_s"])
    out = {"benchmark": "graph_layer", "nodes": n, "edges": int(edge_index.shape[1]), "hidden": m,
           "threads": torch.get_num_threads(), "torch": torch.__version__, "machine": platform.machine(),
           "processor": platform.processor(), "goal": "graphcon_ratio <= 1.2", "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
