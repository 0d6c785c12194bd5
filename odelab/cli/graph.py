"""``odelab graph``: graph-coupled oscillators (GraphCON) and gradient gating (G²) on graphs.

    odelab graph fit --dataset partition|sbm|cora|citeseer|pubmed|texas|wisconsin|cornell [--data-root DIR]
                     [--model graphcon-gcn|g2-gcn|gcn|...] [--layers N] [--epochs N] [--out DIR]
    odelab graph depth-sweep [--depths 2,4,...,128] [--models gcn,graphcon-gcn,g2-gcn] [--seeds N]
    odelab graph homophily-sweep [--homophilies 0,0.1,...,0.99] [--layers 8]
    odelab graph oversmoothing | spectrum       Dirichlet energy / MAD vs depth; the linearised GraphCON spectrum

Real data sets are read from ``--data-root`` (Planetoid raw files, WebKB with its 10 splits), never downloaded.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..analysis import oversmoothing
from ..data import load_graph, random_partition_graph, stochastic_block_model
from ..data.graph_files import PLANETOID, WEBKB
from ..models.graph import build_graph_model
from ..training import graph as graph_training
from .arguments import device, fraction, integer, non_negative_float, positive_float, seed

Defaults = argparse.ArgumentDefaultsHelpFormatter  # every option's help ends with its default

GENERATED = ("partition", "sbm")


def _numbers(kind):
    def parse(text: str):
        try:
            values = [kind(v.strip()) for v in text.split(",") if v.strip()]
        except (ValueError, argparse.ArgumentTypeError) as err:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers ({err}), got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


def _graph(args):
    if args.dataset == "partition":
        return random_partition_graph(args.classes, args.nodes_per_class, 5.0, args.homophily, 16, noise=3.0,
                                      seed=args.seed)
    if args.dataset == "sbm":  # average degree 5, a fraction `homophily` of it inside the class
        n, c = args.nodes_per_class, args.classes
        p_in, p_out = 5.0 * args.homophily / max(n - 1, 1), 5.0 * (1 - args.homophily) / max((c - 1) * n, 1)
        probs = [[p_in if i == j else p_out for j in range(c)] for i in range(c)]
        return stochastic_block_model([n] * c, probs, 16, noise=3.0, seed=args.seed)
    if args.data_root is None:
        raise ValueError(f"--data-root: the {args.dataset} files are read from a local folder (never downloaded)")
    graph = load_graph(args.dataset, args.data_root, **({"largest_component_only": True}
                                                         if args.dataset in PLANETOID else {}))
    return graph.split(args.split) if graph.train_mask is not None and graph.train_mask.dim() > 1 else graph


def cmd_fit(args) -> int:
    try:
        graph = _graph(args)
        model = build_graph_model(args.model, graph.num_features, args.hidden, graph.num_classes, args.layers,
                                  dropout=args.dropout)
        if int(graph.test_mask.sum()) == 0:
            raise ValueError("--nodes-per-class: no node is left for testing after the 20 training and 30 "
                             "validation nodes per class; use more than 50")
    except (ValueError, FileNotFoundError, ImportError) as err:
        print(f"odelab graph fit: {err}", file=sys.stderr)
        return 2
    result = graph_training.fit_node_classification(model, graph, epochs=args.epochs, lr=args.lr,
                                                    weight_decay=args.weight_decay, seed=args.seed,
                                                    progress=not args.no_progress, device=args.device)
    result.update(dataset=args.dataset, model=args.model, layers=args.layers, hidden=args.hidden,
                  graph=graph.summary())
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=float)
    print(f"{args.dataset}: {args.model}, {args.layers} layers: test accuracy {result['test_acc']:.4f} "
          f"(validation {result['val_acc']:.4f}, best epoch {result['best_epoch']}); results in {args.out}/")
    return 0


def _summary(result: dict, key: str) -> None:
    for model, rows in result["results"].items():
        print(f"{model:24s}" + "  ".join(f"{row[key]:g}: {row['mean']:.3f}" for row in rows))
    print(f"chance {result['chance']:.3f}; results in {result.get('files', {}).get('json', '(not written)')}")


def cmd_depth(args) -> int:
    result = graph_training.depth_sweep(args.out, depths=args.depths, models=args.models, epochs=args.epochs,
                                        seeds=tuple(range(args.seeds)), progress=not args.no_progress)
    _summary(result, "layers")
    return 0


def cmd_homophily(args) -> int:
    result = graph_training.homophily_sweep(args.out, homophilies=args.homophilies, models=args.models,
                                            layers=args.layers, epochs=args.epochs, seeds=tuple(range(args.seeds)),
                                            progress=not args.no_progress)
    _summary(result, "homophily")
    return 0


def cmd_study(args) -> int:
    name = "oversmoothing" if args.graph_command == "oversmoothing" else "graphcon-spectrum"
    result = oversmoothing.run_study(name, args.out)
    print(f"{name}: {result['files']['json']}, {result['files']['png']}")
    return 0


def add_command(subparsers) -> None:
    p = subparsers.add_parser("graph", help="GraphCON and G² on graphs: fit, depth/homophily sweeps, oversmoothing",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="graph_command", required=True)
    models = "comma-separated: gcn, gat, graphcon-gcn, graphcon-gat, g2-gcn, g2-gat (pyg- couplings with odelab[graph])"

    f = sub.add_parser("fit", help="node classification on one graph", formatter_class=Defaults)
    f.add_argument("--dataset", default="partition", choices=GENERATED + tuple(PLANETOID) + tuple(WEBKB),
                   help="a generated graph (partition, sbm) or a data set read from --data-root")
    f.add_argument("--data-root", help="folder with the data set's raw files (Planetoid / WebKB formats)")
    f.add_argument("--split", type=integer(0, 9), default=0, help="WebKB: which of the 10 splits")
    f.add_argument("--model", default="graphcon-gcn", help="gcn, gat, graphcon-gcn, graphcon-gat, g2-gcn, g2-gat")
    f.add_argument("--layers", type=integer(1), default=8, help="graph layers (coupled-oscillator steps) (>= 1)")
    f.add_argument("--hidden", type=integer(1), default=64, help="node features per layer (>= 1)")
    f.add_argument("--epochs", type=integer(1), default=200, help="full-batch training epochs (>= 1)")
    f.add_argument("--lr", type=positive_float, default=0.005, help="Adam's learning rate (> 0)")
    f.add_argument("--weight-decay", type=non_negative_float, default=5e-4, help="Adam's L2 penalty (>= 0)")
    f.add_argument("--dropout", type=fraction(closed_upper=False), default=0.0,
                   help="dropout in [0, 1) where each model's official code puts it (GraphCON: input, encoder and "
                        "every step; G²: before the decoder; GCN, GAT: between layers)")
    f.add_argument("--classes", type=integer(2), default=5, help="generated graphs: number of classes")
    f.add_argument("--nodes-per-class", type=integer(1), default=200, help="generated graphs")
    f.add_argument("--homophily", type=fraction(), default=0.8, help="generated graphs: fraction of intra-class edges")
    f.add_argument("--seed", type=seed, default=0, help="graph and initialisation seed")
    f.add_argument("--device", type=device, default=None, help="cpu or cuda (None: cpu)")
    f.add_argument("--out", default="runs/graph-fit", help="output folder (JSON and figures)")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")
    f.set_defaults(run=cmd_fit)

    d = sub.add_parser("depth-sweep", help="test accuracy vs depth (2 to 128 layers) on a generated graph",
                       formatter_class=Defaults)
    d.add_argument("--depths", type=_numbers(integer(1)), default=[2, 4, 8, 16, 32, 64, 128],
                   help="comma-separated layer counts")
    d.add_argument("--models", type=lambda s: [m.strip() for m in s.split(",") if m.strip()],
                   default=list(graph_training.DEFAULT_MODELS), help=models)
    d.add_argument("--epochs", type=integer(1), default=150, help="training epochs per run (>= 1)")
    d.add_argument("--seeds", type=integer(1), default=3, help="runs per (model, depth) (>= 1)")
    d.add_argument("--out", default="runs/graph-depth", help="output folder (JSON and figure)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(run=cmd_depth)

    h = sub.add_parser("homophily-sweep", help="test accuracy vs homophily (0 to 0.99) on generated graphs",
                       formatter_class=Defaults)
    h.add_argument("--homophilies", type=_numbers(fraction()), default=[0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99],
                   help="comma-separated fractions of intra-class edges, in [0, 1]")
    h.add_argument("--models", type=lambda s: [m.strip() for m in s.split(",") if m.strip()],
                   default=list(graph_training.DEFAULT_MODELS), help=models)
    h.add_argument("--layers", type=integer(1), default=8, help="graph layers (>= 1)")
    h.add_argument("--epochs", type=integer(1), default=150, help="training epochs per run (>= 1)")
    h.add_argument("--seeds", type=integer(1), default=3, help="runs per (model, homophily) (>= 1)")
    h.add_argument("--out", default="runs/graph-homophily", help="output folder (JSON and figure)")
    h.add_argument("--no-progress", action="store_true", help="no progress bar")
    h.set_defaults(run=cmd_homophily)

    for name, text in (("oversmoothing", "Dirichlet energy and MAD vs depth on the 10×10 grid (GCN, GAT, GraphCON, G²)"),
                       ("spectrum", "eigenvalues of the linearised GraphCON operator, α = 0 vs α > 0")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--out", default="runs/graph-studies", help="output folder (JSON and figure)")
        s.set_defaults(run=cmd_study)
