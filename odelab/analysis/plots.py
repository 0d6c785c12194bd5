"""PNG figures of the scheme comparison and the stability studies (matplotlib, headless)."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from .gates import log_histogram  # noqa: E402
from .stability import STABILITY_FUNCTIONS  # noqa: E402


def _save(fig, path: str | Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _positive(values):
    return [v if v is not None and v > 0 else np.nan for v in values]


def plot_scheme_comparison(evaluation: dict, training: list[dict] | None, path: str | Path, title: str = "") -> None:
    """Left: trajectory error vs sub-step h per scheme (log-log, with the empirical order in the legend).
    Middle: test RMSE vs h per scheme. Right: test RMSE vs training wall time, one point per scheme (part b)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    rows = evaluation["rows"]
    for scheme in evaluation["schemes"]:
        mine = [r for r in rows if r["scheme"] == scheme]
        steps = [r["step"] for r in mine]
        order = evaluation["orders"].get(scheme)
        label = f"{scheme} (order {order:.2f})" if order is not None else scheme
        axes[0].loglog(steps, _positive([r["trajectory_error"] for r in mine]), "o-", label=label)
        if mine[0]["test_rmse"] is not None:
            axes[1].loglog(steps, _positive([r["test_rmse"] for r in mine]), "o-", label=scheme)
    trained = [r for r in rows if r["scheme"] == evaluation["trained_scheme"] and Fraction(r["factor"]) == 1]
    for r in trained:
        axes[1].plot(r["step"], r["test_rmse"], "k*", ms=14, label="as trained")
    axes[0].set(xlabel="sub-step h", ylabel="max |observable − reference|",
                title=f"trajectory error vs {evaluation['reference']}")
    axes[1].set(xlabel="sub-step h", ylabel="test RMSE", title="test error of the trained model")
    steps = sorted({r["step"] for r in rows})
    for ax in axes[:2]:  # ticks at the sub-steps themselves (the log axis' minor labels overlap)
        ax.set_xticks(steps, [f"{h:.3g}" for h in steps])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    if training:
        for r in training:
            if r["test_rmse"] is not None:
                axes[2].loglog(r["train_seconds"], r["test_rmse"], "o")
                axes[2].annotate(r["scheme"], (r["train_seconds"], r["test_rmse"]), fontsize=8)
        axes[2].set(xlabel="training wall time [s]", ylabel="test RMSE", title="trained under each scheme")
    else:
        axes[2].axis("off")
    fig.suptitle(title)
    _save(fig, path)


def plot_gradients(result: dict, path: str | Path) -> None:
    """Median ‖∂L/∂h_k‖ against the lag T − k, one line per model (log scale)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.get_cmap("tab20").colors if len(result) > 10 else plt.get_cmap("tab10").colors
    for color, (name, curve) in zip(colors, result.items()):
        normal = [v if v >= np.finfo(np.float64).tiny else np.nan for v in curve["median_norm"]]  # cut at underflow
        ax.semilogy(curve["lag"], normal, label=name, color=color,
                    ls="--" if name in ("lstm", "rnn", "gru") else "-")
    ax.set(xlabel="lag T − k", ylabel="median ‖∂L/∂h_k‖", title="gradient of the last output w.r.t. the state at step k")
    ax.legend(fontsize=8, ncol=2)
    _save(fig, path)


def plot_lem_bound(rows: list[dict], path: str | Path) -> None:
    """max_i max(|z_n^i|, |y_n^i|) along t_n against the Prop. 4.1 bound (Δt ≤ 1) or max(1, Δt/(2−Δt))."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        line, = ax.plot(row["t"], row["max_state_curve"], label=f"Δt = {row['dt']}")
        ax.plot(row["t"], row["bound_curve"], ls="--", color=line.get_color(), lw=1)
    ax.set(xscale="log", yscale="log", xlabel="t_n", ylabel="max state (solid) / bound (dashed)",
           title="LEM hidden-state bound (Rusch et al. 2022, Prop. 4.1)")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_lem_gradient_length(result: dict, path: str | Path) -> None:
    """max_θ |∂E_N/∂θ| against N per exponent s (Δt = N^−s), log-log, with Prop. 4.2's bound dashed."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in result["exponents"]:
        mine = [r for r in result["rows"] if r["s"] == s]
        slope = result["slopes"][f"{s:g}"]
        line, = ax.loglog([r["steps"] for r in mine], [r["max_abs_gradient"] for r in mine], "o-",
                          label=f"s = {s:.3g}: slope {slope['slope'] or 0:.2f} (bound's rate {slope['bound_rate']:.2f})")
        ax.loglog([r["steps"] for r in mine], [r["bound"] for r in mine], "--", color=line.get_color(), lw=1)
    ax.set(xlabel="sequence length N", ylabel="max_θ |∂E_N/∂θ| (solid) / bound (dashed)",
           title="LEM gradient vs length, Δt = N^−s (Rusch et al. 2022, Prop. 4.2)")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_long_range(result: dict, path: str | Path) -> None:
    """Left: median max_θ |∂E_n^(k)/∂θ| of the fixed step k against n − k, one line per model (log y; torch
    baselines dashed). Right: the LEMs' contribution at n − k = lag against Δt (log-log) per parameter, with the
    fitted slopes and a Δt^(3/2) guide (Rusch et al. 2022, Prop. 4.3)."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for name, row in result["models"].items():
        normal = [v if v >= np.finfo(np.float64).tiny else np.nan for v in row["median_contribution"]]
        axes[0].semilogy(row["n_minus_k"], normal, label=name, ls="--" if row["dt"] is None else "-")
    axes[0].set(xlabel="n − k", ylabel="median max_θ |∂E_n^(k)/∂θ|",
                title=f"contribution of step k = {result['k']} to the gradient of E_n")
    axes[0].legend(fontsize=8)
    scaling = result["dt_scaling"]
    lems = [row for row in result["models"].values() if row["lem"]]
    dts = np.asarray(scaling["dts"])
    for key, slope in scaling["slopes"].items():
        label = f"{key.removeprefix('system.')}: slope {'—' if slope is None else f'{slope:.2f}'}"
        axes[1].loglog(dts, _positive([row["at_lag"][key] for row in lems]), "o-", label=label,
                       lw=2.5 if key == "max" else 1)
    if len(dts):  # through the max at the smallest Δt
        smallest = int(np.argmin(dts))
        guide = np.sort(dts)
        axes[1].loglog(guide, lems[smallest]["at_lag"]["max"] * (guide / dts[smallest]) ** 1.5, "k:",
                       label="∝ Δt^(3/2)")
    axes[1].set(xlabel="Δt", ylabel=f"|∂E_n^(k)/∂θ| at n − k = {scaling['lag']}", title="LEM: scaling with Δt")
    axes[1].legend(fontsize=7)
    _save(fig, path)


def plot_unicornn(energy: dict, inverse: dict, path: str | Path) -> None:
    """Left: mean Hamiltonian H_n − H_0 per scheme (symlog). Right: inverse-step reconstruction error vs length."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, row in energy.items():
        h = np.asarray(row["mean_energy"])
        axes[0].plot(h - h[0], label=name)
    axes[0].set(yscale="symlog", xlabel="step n", ylabel="mean H_n − H_0", title="UnICORNN energy (thesis eq. 3.4)")
    axes[0].legend(fontsize=8)
    for key in ("float32", "float64"):
        axes[1].loglog(inverse["lengths"], _positive(inverse[key]), "o-", label=key)
    axes[1].set(xlabel="sequence length", ylabel="max |reconstructed − initial|",
                title=f"exact inverse (3.7), Δt = {inverse['dt']}")
    axes[1].legend(fontsize=8)
    _save(fig, path)


def plot_eigen(result: dict, path: str | Path) -> None:
    """Per model: eigenvalues of h·J over the boundaries |R(z)| = 1 of the stability regions."""
    count = len(result)
    cols = min(count, 3)
    fig, axes = plt.subplots((count + cols - 1) // cols, cols, figsize=(5 * cols, 4.3 * ((count + cols - 1) // cols)),
                             squeeze=False)
    for ax, (name, row) in zip(axes.flat, result.items()):
        re, im = np.asarray(row["eigenvalues_real"]), np.asarray(row["eigenvalues_imag"])
        span = max(3.2, 1.2 * float(np.abs(re).max(initial=0)), 1.2 * float(np.abs(im).max(initial=0)))
        gx, gy = np.meshgrid(np.linspace(-span, span / 2, 400), np.linspace(-span, span, 400))
        grid = gx + 1j * gy
        for (region, function), color in zip(STABILITY_FUNCTIONS.items(), ("C0", "C1", "C2", "C3")):
            values = function(torch.from_numpy(grid)).abs().numpy()
            ax.contour(gx, gy, values, levels=[1.0], colors=color, linewidths=1)
            ax.plot([], [], color=color, label=f"{region}: {row['inside'][region]:.0%} inside")
        ax.scatter(re, im, s=8, color="black", zorder=3)
        ax.axhline(0, color="grey", lw=0.5)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set(title=f"{name} ({row['scheme']}, h = {row['h']:.3g})", xlabel="Re hλ", ylabel="Im hλ")
        ax.legend(fontsize=7, loc="lower left")
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    _save(fig, path)


def plot_damping(result: dict, path: str | Path) -> None:
    """h_1 over time for each surrogate: fine solution (top) and E1 with Δ = 1 (bottom), zero crossings in the legend."""
    labels = list(result)
    fig, axes = plt.subplots(2, len(labels), figsize=(6.5 * len(labels), 7), squeeze=False)
    for col, label in enumerate(labels):
        setup = result[label]
        for name, row in setup["models"].items():
            fine = np.asarray(row["fine_h1"])
            axes[0, col].plot(np.arange(len(fine)) * setup["fine_dt"], fine, label=f"{name} ({row['zero_crossings_fine']} ZC)")
            axes[1, col].plot(np.arange(len(row["e1_h1"])), row["e1_h1"], "o-", ms=3,
                              label=f"{name} ({row['sign_changes_e1']} sign changes)")
        axes[0, col].set(title=f"{label}: fine rk4 solution", xlabel="t", ylabel="h_1")
        axes[1, col].set(title=f"{label}: explicit Euler, Δ = 1", xlabel="step", ylabel="h_1", yscale="symlog")
        axes[0, col].legend(fontsize=7)
        axes[1, col].legend(fontsize=7)
    _save(fig, path)


def plot_step_histograms(steps: dict, summary: dict, path: str | Path, marks: tuple[float, ...] = (),
                         title: str = "") -> None:
    """One panel per block: the density of its steps h · decay on log-spaced bins (log-log, as Rusch et al. 2022,
    Figs. 4, 5, 7), the power-law and exponential fits of the tail (``summary``: :func:`gates.step_summary`), and
    vertical lines at ``marks`` (e.g. the data's true time scales)."""
    fig, axes = plt.subplots(1, len(steps), figsize=(5.5 * len(steps), 4.2), squeeze=False)
    for ax, (block, values) in zip(axes[0], steps.items()):
        edges, density = log_histogram(values)
        centres = (edges[:-1] * edges[1:]).sqrt().numpy()
        ax.stairs(density.numpy(), edges.numpy(), fill=True, alpha=0.5, label="density")
        tail = summary[block]["tail"]
        if tail is not None:
            start = int(density.argmax())
            s = centres[start:]
            p0 = float(density[start])
            k, lam = tail["power_law"]["exponent"], tail["exponential"]["rate"]
            ax.plot(s, p0 * (s / s[0]) ** (-k), "r-",
                    label=f"power law s^-{k:.2f} (R² {tail['power_law']['r2']:.2f})")
            ax.plot(s, p0 * np.exp(-lam * (s - s[0])), "k--",
                    label=f"exponential e^-{lam:.3g}s (R² {tail['exponential']['r2']:.2f})")
        for mark in marks:
            ax.axvline(mark, color="g", lw=1)
        decades = summary[block]["decades_1_99"]
        ax.set(xscale="log", yscale="log", xlabel=f"step of {block} (h · decay)", ylabel="density",
               title=f"{block}: {decades:.2f} decades (1–99 %)")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    _save(fig, path)
