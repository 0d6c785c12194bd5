"""Oversmoothing and stability studies of the graph systems (thesis Figs. 7.2, 8.2, 8.9; §3.3 of the extraction).

* :func:`dirichlet_energy` -- (6.2): 𝒟(X) = (1/v) Σ_i Σ_{j ∈ N_i} ‖X_i − X_j‖² (each undirected edge twice).
* :func:`mad` -- mean average (cosine) distance (Chen et al. 2020), over all node pairs or the edges.
* :func:`energy_vs_depth` -- 𝒟 and MAD after every layer of random-weight GCN, GAT, GraphCON-GCN
  (α ∈ {0, 0.5}, γ = 1, Δt = 1, steps of the :class:`~odelab.systems.GraphCON` system with the "imex"
  scheme) and G²-GCN (p = 2, mean τ-aggregation, 1000 forward-Euler steps of
  :class:`~odelab.systems.GradientGating`) on the 4-neighbour 10 × 10 grid, X⁰ ~ U[0, 1]^{v × m}, Y⁰ = X⁰.
  Every setting the curves depend on is recorded in the result (normalisation, weight scale, sharing,
  feature dimension, seeds): only the GCN/GAT collapse is unconditional (extraction §3.6).
* :func:`graphcon_spectrum` -- eigenvalues of the linearised GraphCON operator (σ = id, W = I)
      d/dt (Y, X) = [[−α I, Â − γ I], [I, 0]] (Y, X)
  and of its one-step map under (7.4) with Δt, for α = 0 (purely imaginary: energy conserving) vs α > 0
  (every non-kernel mode decays exponentially), symmetric or row-stochastic Â.
* :func:`run_study` -- ``run_study("oversmoothing" | "graphcon-spectrum", out_dir, **kw)`` writes
  ``<name>.json`` + ``<name>.png`` and returns the result dict.
"""
from __future__ import annotations

import json
import math
import os
from typing import Sequence

import torch
from torch import Tensor

from ..data.graphs import grid_graph
from ..solvers.field import Field
from ..solvers.schemes import FIXED_SCHEMES
from ..systems.graph import GradientGating, GraphCON
from ..systems.graph_coupling import GATCoupling, GCNCoupling


def dirichlet_energy(x: Tensor, edge_index: Tensor) -> float:
    """(1/v) Σ_{(j→i) ∈ edges} ‖X_i − X_j‖² for x (v, m); pass both directions of each undirected edge."""
    diff = x.index_select(0, edge_index[0]) - x.index_select(0, edge_index[1])
    return float(diff.square().sum() / x.shape[0])


def mad(x: Tensor, edge_index: Tensor | None = None, eps: float | None = None) -> float:
    """Mean average distance (Chen et al. 2020): D_ij = 1 − cos(X_i, X_j) over the pairs of the mask (all
    pairs, or the edges when ``edge_index`` is given); per-node mean over its non-zero entries, then the
    mean over nodes with a non-zero value. Distances ≤ ``eps`` (default 16 × the dtype's machine epsilon,
    the round-off of a cosine) count as zero."""
    eps = 16 * torch.finfo(x.dtype).eps if eps is None else eps
    norm = x / x.norm(dim=1, keepdim=True).clamp_min(1e-30)
    if edge_index is None:
        dist = 1.0 - norm @ norm.T
        dist = torch.where(dist > eps, dist, torch.zeros_like(dist))
        dist.fill_diagonal_(0.0)
        total, count = dist.sum(1), (dist > eps).sum(1)
    else:
        d = 1.0 - (norm[edge_index[0]] * norm[edge_index[1]]).sum(1)
        d = torch.where(d > eps, d, torch.zeros_like(d))
        total = torch.zeros(x.shape[0], dtype=x.dtype).index_add_(0, edge_index[1], d)
        count = torch.zeros(x.shape[0], dtype=x.dtype).index_add_(0, edge_index[1], (d > eps).to(x.dtype))
    has = count > 0
    if not bool(has.any()):
        return 0.0
    return float((total[has] / count[has]).mean())


def _scaled(module: torch.nn.Module, scale: float) -> torch.nn.Module:
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif name == "weight":
                p.mul_(scale)
    return module


@torch.no_grad()
def trajectory(kind: str, edge_index: Tensor, x0: Tensor, layers: int, *, alpha: float = 0.5, gamma: float = 1.0,
               p: float = 2.0, dt: float = 1.0, shared: bool | None = None, weight_scale: float = 1.0,
               heads: int = 1, seed: int = 0) -> dict[str, list[float]]:
    """Dirichlet energy and MAD of X after each of ``layers`` random-weight layers (index 0 = X⁰).

    ``kind``: "gcn" (Xⁿ = ReLU(GCN_n(Xⁿ⁻¹))), "gat" (Xⁿ = ELU(GAT_n(Xⁿ⁻¹))), "graphcon-gcn", "graphcon-gat"
    (GraphCON system, "imex" steps, ReLU / identity σ, Y⁰ = X⁰) or "g2-gcn" (GradientGating, "euler" steps).
    Glorot-uniform weights times ``weight_scale``, zero biases; ``shared`` (default: False for GCN/GAT, True
    for GraphCON and G² as the official models) uses one coupling for every layer."""
    torch.manual_seed(seed)
    m, v = x0.shape[1], x0.shape[0]
    base, _, coupling_kind = kind.partition("-")
    if base in ("gcn", "gat"):
        coupling_kind, base = base, "mpnn"
    if shared is None:
        shared = base != "mpnn"

    def coupling():
        layer = GCNCoupling(m, m) if coupling_kind == "gcn" else GATCoupling(m, m, heads=heads, concat=False)
        return _scaled(layer, weight_scale).double()

    energy, distance = [dirichlet_energy(x0, edge_index)], [mad(x0)]
    if base == "mpnn":
        act = torch.relu if coupling_kind == "gcn" else torch.nn.functional.elu
        convs = [coupling()] * layers if shared else [coupling() for _ in range(layers)]
        x = x0
        for conv in convs:
            x = act(conv(x, edge_index))
            energy.append(dirichlet_energy(x, edge_index))
            distance.append(mad(x))
        return {"energy": energy, "mad": distance}
    if base == "graphcon":
        act = "relu" if coupling_kind == "gcn" else "elu"
        system, scheme, state = GraphCON(coupling(), m, alpha, gamma, activation=act), FIXED_SCHEMES["imex"], (x0, x0)
    elif base == "g2":
        system, scheme, state = GradientGating(coupling(), m, p), FIXED_SCHEMES["euler"], (x0,)
    else:
        raise ValueError(f"kind: expected 'gcn', 'gat', 'graphcon-gcn', 'graphcon-gat' or 'g2-gcn', got {kind!r}")
    system.set_graph(edge_index, v)
    fresh = None if shared else [coupling() for _ in range(layers)]
    field, observable = Field(system), system.block_index("X")
    for n in range(layers):
        if fresh is not None:
            system.coupling = fresh[n]
        state = scheme.step(field, n * dt, state, dt)
        energy.append(dirichlet_energy(state[observable], edge_index))
        distance.append(mad(state[observable]))
    return {"energy": energy, "mad": distance}


def _decay_rate(values: Sequence[float], start: int = 1, stop: int | None = None) -> float:
    """Slope of log 𝒟 against the layer index over [start, stop) (finite, positive values only)."""
    pts = [(n, math.log(e)) for n, e in enumerate(values[:stop]) if n >= start and e > 0 and math.isfinite(e)]
    if len(pts) < 2:
        return float("nan")
    mx = sum(n for n, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((n - mx) ** 2 for n, _ in pts)
    return sum((n - mx) * (y - my) for n, y in pts) / den


def energy_vs_depth(*, rows: int = 10, cols: int = 10, features: int = 64, layers: int = 100, g2_layers: int = 1000,
                    alphas: Sequence[float] = (0.0, 0.5), gamma: float = 1.0, p: float = 2.0, weight_scale: float = 1.0,
                    seeds: Sequence[int] = (0,), include: Sequence[str] = ("gcn", "gat", "graphcon-gcn", "graphcon-gat", "g2-gcn"),
                    gat_heads: int = 1) -> dict:
    """Dirichlet energy and MAD vs depth on the 4-neighbour ``rows × cols`` grid (see module docstring).
    Returns ``{"settings": ..., "curves": {label: {"layers": [...], "energy": [...], "mad": [...]} (first seed),
    "per_seed": ...}, "summary": {label: {energy at 0/10/100/last layer, log-slope, collapsed}}}``;
    ``collapsed`` = energy below 1e-10 × its initial value at the last layer."""
    edge_index = grid_graph(rows, cols)
    v = rows * cols
    runs: list[tuple[str, str, dict, int]] = []
    for kind in include:
        if kind.startswith("graphcon"):
            runs += [(f"{kind}(α={a:g})", kind, {"alpha": a, "gamma": gamma}, layers) for a in alphas]
        elif kind.startswith("g2"):
            runs.append((kind, kind, {"p": p}, g2_layers))
        else:
            runs.append((kind, kind, {"heads": gat_heads} if kind == "gat" else {}, layers))
    curves, per_seed, summary = {}, {}, {}
    for label, kind, kw, depth in runs:
        traces = []
        for seed in seeds:
            gen = torch.Generator().manual_seed(10_000 + seed)
            x0 = torch.rand(v, features, generator=gen, dtype=torch.float64)
            traces.append(trajectory(kind, edge_index, x0, depth, weight_scale=weight_scale, seed=seed, **kw))
        curves[label] = {"layers": list(range(depth + 1)), **traces[0]}
        per_seed[label] = [t["energy"] for t in traces]
        e = traces[0]["energy"]
        at = lambda n: e[n] if n < len(e) else None
        summary[label] = {
            "energy_0": e[0], "energy_10": at(10), "energy_100": at(100), "energy_last": e[-1], "layers": depth,
            "log_slope_1_to_50": _decay_rate(e, 1, 51),
            "collapsed": bool(not math.isfinite(e[-1]) or e[-1] < 1e-10 * e[0]) and math.isfinite(e[-1]),
            "exploded": bool(not math.isfinite(e[-1]) or e[-1] > 1e10 * e[0]),
            "seeds_collapsed": sum(1 for t in per_seed[label] if t[-1] < 1e-10 * t[0]),
            "mad_last": traces[0]["mad"][-1],
        }
    settings = {"graph": f"{rows}x{cols} grid, 4-neighbour, {edge_index.shape[1] // 2} undirected edges",
                "features": features, "x0": "U[0,1]^{v x m}, Y0 = X0", "normalisation": "D^-1/2 (A+I) D^-1/2 (GCN)",
                "gat": f"plain-torch GATCoupling, {gat_heads} head(s), ELU", "weights": "Glorot uniform x weight_scale, zero bias",
                "weight_scale": weight_scale, "sharing": "fresh per layer for GCN/GAT; one shared coupling for GraphCON/G2",
                "gamma": gamma, "alphas": list(alphas), "dt": 1.0, "p": p, "g2_aggregation": "mean", "layers": layers,
                "g2_layers": g2_layers, "seeds": list(seeds), "dtype": "float64"}
    return {"study": "oversmoothing", "settings": settings, "curves": curves, "per_seed": per_seed, "summary": summary}


def _normalised_adjacency(edge_index: Tensor, v: int, normalisation: str) -> Tensor:
    A = torch.zeros(v, v, dtype=torch.float64)
    A[edge_index[1], edge_index[0]] = 1.0
    A += torch.eye(v, dtype=torch.float64)
    deg = A.sum(1)
    if normalisation == "sym":
        d = deg.rsqrt()
        return d[:, None] * A * d[None, :]
    if normalisation == "rw":
        return A / deg[:, None]
    raise ValueError(f"normalisation: expected 'sym' or 'rw', got {normalisation!r}")


def graphcon_spectrum(*, rows: int = 10, cols: int = 10, alphas: Sequence[float] = (0.0, 0.5, 1.0), gamma: float = 1.0,
                      dt: float = 1.0, normalisation: str = "sym", tol: float = 1e-6) -> dict:
    """Eigenvalues of the linearised GraphCON operator L = [[−αI, Â − γI], [I, 0]] on (Y, X) and of the
    one-step map of (7.4), M = [[(1 − αΔt)I, Δt(Â − γI)], [Δt(1 − αΔt)I, I + Δt²(Â − γI)]], per α.
    Per α: ``max_real`` (largest Re λ(L) over the modes with |λ| > tol), ``kernel`` (modes with |λ| ≤ tol),
    ``conserving`` (all |Re λ| ≤ tol), ``decay_rate`` (−max_real), ``step_radius`` (max |μ(M)|) and the
    eigenvalues as [re, im] pairs."""
    edge_index = grid_graph(rows, cols)
    v = rows * cols
    A = _normalised_adjacency(edge_index, v, normalisation)
    I = torch.eye(v, dtype=torch.float64)
    out = {"study": "graphcon-spectrum", "settings": {"graph": f"{rows}x{cols} grid, 4-neighbour", "gamma": gamma,
           "dt": dt, "normalisation": normalisation, "sigma": "identity", "W": "identity"},
           "adjacency_eigenvalues": sorted(torch.linalg.eigvalsh((A + A.T) / 2).tolist()) if normalisation == "sym" else None,
           "alphas": {}}
    for alpha in alphas:
        L = torch.cat([torch.cat([-alpha * I, A - gamma * I], 1), torch.cat([I, torch.zeros_like(I)], 1)], 0)
        lam = torch.linalg.eigvals(L)
        M = torch.cat([torch.cat([(1 - alpha * dt) * I, dt * (A - gamma * I)], 1),
                       torch.cat([dt * (1 - alpha * dt) * I, I + dt * dt * (A - gamma * I)], 1)], 0)
        mu = torch.linalg.eigvals(M)
        nonkernel = lam.abs() > tol
        max_real = float(lam.real[nonkernel].max()) if bool(nonkernel.any()) else float("nan")
        out["alphas"][f"{alpha:g}"] = {
            "alpha": alpha, "max_real": max_real, "decay_rate": -max_real, "kernel": int((~nonkernel).sum()),
            "conserving": bool((lam.real.abs() <= 1e-7).all()), "step_radius": float(mu.abs().max()),
            "step_modes_on_unit_circle": int(((mu.abs() - 1).abs() <= 1e-7).sum()),
            "eigenvalues": [[float(z.real), float(z.imag)] for z in lam],
            "step_eigenvalues": [[float(z.real), float(z.imag)] for z in mu],
        }
    return out


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_energy(result: dict, path: str) -> None:
    """Log–log Dirichlet energy (left) and MAD (right) vs layer (Figs. 7.2 / 8.2 / 8.9)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, curve in result["curves"].items():
        xs = curve["layers"][1:]
        for ax, key in zip(axes, ("energy", "mad")):
            ys = [max(y, 1e-300) if math.isfinite(y) else float("nan") for y in curve[key][1:]]
            ax.plot(xs, ys, label=label, lw=1.2)
    for ax, title in zip(axes, ("Dirichlet energy", "MAD")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("layer n")
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    s = result["settings"]
    fig.suptitle(f"{s['graph']}, m={s['features']}, weight scale {s['weight_scale']}, γ={s['gamma']}, Δt=1", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_spectrum(result: dict, path: str) -> None:
    """Eigenvalues of the linearised operator in the complex plane, one panel per α."""
    plt = _plt()
    items = list(result["alphas"].values())
    fig, axes = plt.subplots(1, len(items), figsize=(4 * len(items), 3.8), squeeze=False)
    for ax, item in zip(axes[0], items):
        ev = item["eigenvalues"]
        ax.scatter([z[0] for z in ev], [z[1] for z in ev], s=8)
        ax.axvline(0, color="gray", lw=0.8)
        ax.set_title(f"α = {item['alpha']:g}: max Re λ = {item['max_real']:.3g}", fontsize=9)
        ax.set_xlabel("Re λ")
        ax.set_ylabel("Im λ")
        ax.grid(alpha=0.3)
    s = result["settings"]
    fig.suptitle(f"linearised GraphCON, {s['graph']}, Â {s['normalisation']}, γ={s['gamma']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


STUDIES = {"oversmoothing": (energy_vs_depth, plot_energy), "graphcon-spectrum": (graphcon_spectrum, plot_spectrum)}


def run_study(name: str, out_dir: str, **kw) -> dict:
    """Run study ``name`` ("oversmoothing" or "graphcon-spectrum") with keyword arguments ``kw``, write
    ``out_dir/<name>.json`` (atomically) and ``out_dir/<name>.png``; return the result dict with ``files``."""
    if name not in STUDIES:
        raise ValueError(f"name: expected one of {sorted(STUDIES)}, got {name!r}")
    compute, plot = STUDIES[name]
    result = compute(**kw)
    os.makedirs(out_dir, exist_ok=True)
    path, png = os.path.join(out_dir, f"{name}.json"), os.path.join(out_dir, f"{name}.png")
    with open(path + ".tmp", "w") as fh:
        json.dump(result, fh, default=float)
    os.replace(path + ".tmp", path)
    plot(result, png)
    result["files"] = {"json": path, "png": png}
    return result


__all__ = ["dirichlet_energy", "mad", "trajectory", "energy_vs_depth", "graphcon_spectrum", "run_study",
           "plot_energy", "plot_spectrum"]
