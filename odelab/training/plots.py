"""PNG figures for training runs (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402


def _predict(model, x: Tensor) -> Tensor:
    with torch.no_grad():
        model.eval()
        return model(x).cpu()


def plot_predictions(model, x, y, path: str | Path, dt: float = 1.0, title: str = "", count: int = 3) -> None:
    """Predicted vs true target for the first ``count`` sequences, with the pointwise error below."""
    count = min(count, x.shape[0])
    pred = _predict(model, x[:count])
    y = y[:count].cpu()
    time = torch.arange(1, y.shape[1] + 1) * dt
    fig, axes = plt.subplots(2, count, figsize=(4.2 * count, 5), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1]})
    for k in range(count):
        axes[0, k].plot(time, y[k, :, 0], color="black", lw=1.5, label="true")
        axes[0, k].plot(time, pred[k, :, 0], color="tab:red", lw=1, ls="--", label="predicted")
        axes[0, k].set_title(f"test sequence {k}")
        axes[1, k].plot(time, pred[k, :, 0] - y[k, :, 0], color="tab:blue", lw=0.8)
        axes[1, k].set_xlabel("t")
    axes[0, 0].legend(loc="upper right")
    axes[1, 0].set_ylabel("error")
    _save(fig, title, path)


def plot_scatter(model, x, y, path: str | Path, title: str = "", count: int = 256) -> None:
    """One target per sequence (``target="last"``): predicted against true for up to ``count`` sequences."""
    pred = _predict(model, x[:count])[:, 0]
    y = y[:count, 0].cpu()
    fig, ax = plt.subplots(figsize=(4.8, 4.5))
    low, high = float(torch.minimum(y.min(), pred.min())), float(torch.maximum(y.max(), pred.max()))
    ax.plot([low, high], [low, high], color="black", lw=1, label="exact")
    ax.scatter(y, pred, s=8, color="tab:red", alpha=0.6, label="predicted")
    ax.set_xlabel("true")
    ax.set_ylabel("predicted")
    ax.legend(loc="upper left")
    _save(fig, title, path)


def plot_phase(model, x, y, path: str | Path, dt: float = 1.0, title: str = "", count: int = 3) -> None:
    """Two-dimensional states: open-loop rollouts in the phase plane (top) and the error norm over time."""
    count = min(count, x.shape[0])
    pred = _predict(model, x[:count])
    y = y[:count].cpu()
    time = torch.arange(1, y.shape[1] + 1) * dt
    fig, axes = plt.subplots(2, count, figsize=(4.2 * count, 6), squeeze=False, gridspec_kw={"height_ratios": [3, 1]})
    for k in range(count):
        axes[0, k].plot(y[k, :, 0], y[k, :, 1], color="black", lw=1.5, label="true")
        axes[0, k].plot(pred[k, :, 0], pred[k, :, 1], color="tab:red", lw=1, ls="--", label="predicted")
        axes[0, k].plot(x[k, 0, 0], x[k, 0, 1], "o", color="tab:green", label="initial state")
        axes[0, k].set_title(f"test trajectory {k}")
        axes[1, k].plot(time, (pred[k] - y[k]).norm(dim=-1), color="tab:blue", lw=0.8)
        axes[1, k].set_xlabel("t")
    axes[0, 0].legend(loc="upper right")
    axes[1, 0].set_ylabel("|error|")
    _save(fig, title, path)


def plot_forecast(model, x, y, meta: dict, path: str | Path, title: str = "", max_columns: int = 3) -> None:
    """CSV task: the test part of each column (normalised units), the model's forecasts at horizon 1 and H,
    and persistence, against the row of the file being forecast."""
    pred = _predict(model, x)[0]
    x, y = x[0].cpu(), y[0].cpu()
    columns, horizon = meta["columns"], meta["horizon"]
    first = meta["splits"]["test"][0]
    shown = min(len(columns), max_columns)
    fig, axes = plt.subplots(shown, 1, figsize=(10, 2.8 * shown), sharex=True, squeeze=False)
    rows = torch.arange(x.shape[0]) + first
    for c in range(shown):
        ax = axes[c, 0]
        ax.plot(rows + 1, y[:, c], color="black", lw=1.5, label="true")
        ax.plot(rows + 1, pred[:, c], color="tab:red", lw=1, ls="--", label="model, 1 step ahead")
        if horizon > 1:
            at = (horizon - 1) * len(columns) + c
            ax.plot(rows + horizon, pred[:, at], color="tab:orange", lw=1, ls=":", label=f"model, {horizon} steps ahead")
        ax.plot(rows + 1, x[:, c], color="tab:gray", lw=0.8, alpha=0.7, label="persistence")
        ax.set_ylabel(f"{columns[c]} (normalised)")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("row of the file (test part)")
    _save(fig, title, path)


def plot_curves(history: dict, path: str | Path, title: str = "") -> None:
    """Train and validation RMSE per epoch (log scale)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(history["epoch"], history["train_rmse"], label="train")
    ax.semilogy(history["epoch"], history["valid_rmse"], label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("RMSE")
    ax.legend()
    _save(fig, title, path)


def _save(fig, title: str, path: str | Path) -> None:
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
