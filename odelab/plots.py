"""PNG figures for training runs (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402


def plot_predictions(model, x, y, path: str | Path, dt: float = 1.0, title: str = "", count: int = 3) -> None:
    """Predicted vs true target for the first ``count`` sequences, with the pointwise error below."""
    with torch.no_grad():
        pred = model(x[:count]).cpu()
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
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curves(history: dict, path: str | Path, title: str = "") -> None:
    """Train and validation RMSE per epoch (log scale)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(history["epoch"], history["train_rmse"], label="train")
    ax.semilogy(history["epoch"], history["valid_rmse"], label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("RMSE")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
