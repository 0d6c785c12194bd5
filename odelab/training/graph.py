"""Node classification: a full-batch training loop and the depth / homophily sweeps on generated graphs.

* :func:`fit_node_classification` -- Adam, cross-entropy on ``train_mask``, model selection on ``val_mask``
  accuracy (test accuracy reported at the best validation epoch), tqdm progress.
* :func:`depth_sweep` -- GCN vs GraphCON-GCN vs G²-GCN for 2 → 128 layers (thesis Fig. 8.3 / Table 7.9
  analogue) on a random partition graph; JSON + PNG.
* :func:`homophily_sweep` -- the same models for homophily 0 → 0.99 (thesis Fig. 8.5 analogue); JSON + PNG.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from ..data.graphs import GraphData, random_partition_graph
from ..models.graph import build_graph_model


def _accuracy(logits, y, mask) -> float:
    return float((logits[mask].argmax(-1) == y[mask]).double().mean()) if bool(mask.any()) else float("nan")


def fit_node_classification(model: nn.Module, graph: GraphData, *, epochs: int = 200, lr: float = 0.01,
                            weight_decay: float = 5e-4, patience: int | None = None, seed: int | None = None,
                            progress: bool = True, desc: str | None = None, device=None) -> dict:
    """Train ``model(x, edge_index) -> logits`` full-batch on ``graph.train_mask``; keep the parameters of the
    best validation accuracy (ties: lower validation loss). Returns a JSON-able dict: ``train_acc``,
    ``val_acc``, ``test_acc`` (of the selected epoch), ``best_epoch``, ``epochs_run``, ``seconds``,
    ``parameters``, ``history`` (per-epoch loss and accuracies). ``patience``: stop after that many epochs
    without a validation improvement."""
    for name, value in (("epochs", epochs),):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    if not (isinstance(lr, (int, float)) and lr > 0):
        raise ValueError(f"lr: expected a positive number, got {lr!r}")
    if graph.train_mask is None or graph.val_mask is None or graph.test_mask is None:
        raise ValueError("graph: needs train_mask, val_mask and test_mask (one split; use graph.split(k))")
    if graph.train_mask.dim() != 1:
        raise ValueError("graph: several stacked splits; select one with graph.split(k)")
    if seed is not None:
        torch.manual_seed(seed)
    if device is not None:
        model, graph = model.to(device), graph.to(device)
    x, edge_index, y = graph.x, graph.edge_index, graph.y
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best = {"val_acc": -1.0, "val_loss": math.inf}
    best_state, history, waited = None, [], 0
    start = time.perf_counter()
    bar = tqdm(range(epochs), desc=desc or type(model).__name__, disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x, edge_index)[graph.train_mask], y[graph.train_mask])
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x, edge_index)
            val_loss = float(F.cross_entropy(logits[graph.val_mask], y[graph.val_mask]))
            row = {"epoch": epoch, "loss": float(loss), "val_loss": val_loss,
                   "train_acc": _accuracy(logits, y, graph.train_mask), "val_acc": _accuracy(logits, y, graph.val_mask),
                   "test_acc": _accuracy(logits, y, graph.test_mask)}
        history.append(row)
        if not math.isfinite(row["loss"]):
            break
        if row["val_acc"] > best["val_acc"] or (row["val_acc"] == best["val_acc"] and val_loss < best["val_loss"]):
            best = dict(row)
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            waited = 0
        else:
            waited += 1
        bar.set_postfix(loss=f"{row['loss']:.3f}", val=f"{row['val_acc']:.3f}", test=f"{best.get('test_acc', 0):.3f}")
        if patience is not None and waited >= patience:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"train_acc": best.get("train_acc", float("nan")), "val_acc": best["val_acc"],
            "test_acc": best.get("test_acc", float("nan")), "best_epoch": best.get("epoch", -1),
            "epochs_run": len(history), "seconds": time.perf_counter() - start,
            "parameters": sum(p.numel() for p in model.parameters()), "history": history}


DEFAULT_MODELS = ("gcn", "graphcon-gcn", "graphcon-gcn(dt=0.1)", "g2-gcn")
MODEL_SETTINGS: dict[str, tuple[str, dict]] = {  # label -> (build_graph_model name, keyword arguments)
    "gcn": ("gcn", {}),
    # published coefficients for Cora (α = γ = 1) and Δt = 1: then Yⁿ = σ(F(Xⁿ⁻¹)) − Xⁿ⁻¹ and Xⁿ = σ(F(Xⁿ⁻¹)),
    # i.e. exactly a GCN with one shared weight (the steady-state MPNN of thesis 7.6-7.7)
    "graphcon-gcn": ("graphcon-gcn", {"alpha": 1.0, "gamma": 1.0, "dt": 1.0}),
    # the same system with a small step (Props. 7.2.8-7.2.9: gradients bounded for Δt ~ 1/N)
    "graphcon-gcn(dt=0.1)": ("graphcon-gcn", {"alpha": 1.0, "gamma": 1.0, "dt": 0.1}),
    "g2-gcn": ("g2-gcn", {"p": 2.0}),
}


def _model(label: str) -> tuple[str, dict]:
    if label in MODEL_SETTINGS:
        name, kw = MODEL_SETTINGS[label]
        return name, dict(kw)
    return label, {}


def _write(out_dir: str | None, name: str, result: dict, plot: Callable[[dict, str], None]) -> dict:
    if out_dir is None:
        return result
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh, indent=1, default=float)
    os.replace(tmp, path)
    png = os.path.join(out_dir, f"{name}.png")
    plot(result, png)
    result["files"] = {"json": path, "png": png}
    return result


def _run(models, graph, layers, hidden, epochs, lr, weight_decay, dropout, seeds, progress, label) -> dict:
    rows = {}
    for name in models:
        accs = []
        for seed in seeds:
            torch.manual_seed(seed)
            model_name, kw = _model(name)
            kw["dropout"] = dropout
            model = build_graph_model(model_name, graph.num_features, hidden, graph.num_classes, layers, **kw)
            fit = fit_node_classification(model, graph, epochs=epochs, lr=lr, weight_decay=weight_decay, seed=seed,
                                          progress=progress, desc=f"{name} {label}")
            accs.append(fit["test_acc"])
        mean = sum(accs) / len(accs)
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / len(accs))
        rows[name] = {"test_acc": accs, "mean": mean, "std": std}
    return rows


def depth_sweep(out_dir: str | None = None, *, depths: Sequence[int] = (2, 4, 8, 16, 32, 64, 128),
                models: Sequence[str] = DEFAULT_MODELS, graph: GraphData | None = None, hidden: int = 32,
                epochs: int = 150, lr: float = 0.005, weight_decay: float = 5e-4, dropout: float = 0.0,
                seeds: Sequence[int] = (0,), progress: bool = True, name: str = "graph_depth_sweep") -> dict:
    """Test accuracy vs depth for ``models`` on ``graph`` (default: a 5-class random partition graph, 1000
    nodes, degree 5, homophily 0.8, noisy features). Writes ``<name>.json`` and ``<name>.png`` to ``out_dir``.
    The result also has, per model, ``best`` (max mean accuracy over depths), ``at_64`` and ``retained_64``
    (accuracy at 64 layers / best) and ``chance`` (1 / classes)."""
    graph = graph or random_partition_graph(5, 200, 5.0, 0.8, 16, noise=3.0, seed=0)
    result = {"study": "depth", "graph": graph.summary(), "chance": 1.0 / graph.num_classes, "depths": list(depths),
              "settings": {"hidden": hidden, "epochs": epochs, "lr": lr, "weight_decay": weight_decay,
                           "dropout": dropout, "seeds": list(seeds), "models": {m: _model(m) for m in models}},
              "results": {m: [] for m in models}}
    for depth in tqdm(depths, desc="depth sweep", disable=not progress):
        rows = _run(models, graph, depth, hidden, epochs, lr, weight_decay, dropout, seeds, progress, f"L={depth}")
        for m in models:
            result["results"][m].append({"layers": depth, **rows[m]})
    summary = {}
    for m in models:
        means = [r["mean"] for r in result["results"][m]]
        at = {r["layers"]: r["mean"] for r in result["results"][m]}
        best = max(means)
        summary[m] = {"best": best, "at_64": at.get(64), "retained_64": None if 64 not in at else at[64] / best}
    result["summary"] = summary
    return _write(out_dir, name, result, plot_sweep)


def homophily_sweep(out_dir: str | None = None, *, homophilies: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99),
                    models: Sequence[str] = DEFAULT_MODELS, layers: int = 8, hidden: int = 32, epochs: int = 150,
                    lr: float = 0.005, weight_decay: float = 5e-4, dropout: float = 0.0, seeds: Sequence[int] = (0,),
                    noise: float = 1.5, progress: bool = True, name: str = "graph_homophily_sweep") -> dict:
    """Test accuracy vs homophily ratio (5-class random partition graphs, 1000 nodes, degree 5, feature
    ``noise`` 1.5: informative features, so a heterophilic graph hurts only models that average neighbours)
    for ``models`` at ``layers`` layers. Writes ``<name>.json`` and ``<name>.png`` to ``out_dir``."""
    result = {"study": "homophily", "homophilies": list(homophilies), "layers": layers,
              "settings": {"hidden": hidden, "epochs": epochs, "lr": lr, "weight_decay": weight_decay, "noise": noise,
                           "dropout": dropout, "seeds": list(seeds), "models": {m: _model(m) for m in models}},
              "results": {m: [] for m in models}, "graphs": []}
    for h in tqdm(homophilies, desc="homophily sweep", disable=not progress):
        graph = random_partition_graph(5, 200, 5.0, h, 16, noise=noise, seed=0)
        result["graphs"].append(graph.summary())
        result["chance"] = 1.0 / graph.num_classes
        rows = _run(models, graph, layers, hidden, epochs, lr, weight_decay, dropout, seeds, progress, f"h={h:g}")
        for m in models:
            result["results"][m].append({"homophily": h, **rows[m]})
    return _write(out_dir, name, result, plot_sweep)


def plot_sweep(result: dict, path: str) -> None:
    """Accuracy vs depth (log-2 x axis) or vs homophily, one line per model, chance level dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "layers" if result["study"] == "depth" else "homophily"
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for model, rows in result["results"].items():
        xs = [r[key] for r in rows]
        ys = [r["mean"] for r in rows]
        err = [r["std"] for r in rows]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=2, label=model)
    if "chance" in result:
        ax.axhline(result["chance"], color="gray", ls="--", lw=1, label="chance")
    if key == "layers":
        ax.set_xscale("log", base=2)
        ax.set_xlabel("layers")
    else:
        ax.set_xlabel("homophily ratio")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["fit_node_classification", "depth_sweep", "homophily_sweep", "plot_sweep"]
