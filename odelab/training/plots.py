"""PNG figures for training runs (matplotlib, headless)."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
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


def plot_future(result: dict, path: str | Path, title: str = "", max_columns: int = 3) -> None:
    """``odelab forecast``: each column's last rows of the file and the forecast of the next ``horizon`` rows
    after it, in the file's units (:func:`odelab.training.forecast.forecast`'s result)."""
    history, future = torch.tensor(result["history"]), torch.tensor(result["rows"])
    shown = min(len(result["columns"]), max_columns)
    fig, axes = plt.subplots(shown, 1, figsize=(10, 2.8 * shown), sharex=True, squeeze=False)
    if result.get("times"):  # against the time column (dates as dates)
        moments = [datetime.fromisoformat(t) if isinstance(t, str) else t
                   for t in result["history_times"] + result["times"]]
        past, ahead = moments[:len(history)], moments[len(history) - 1:]
        label = result["time"]
    else:
        last = result["rows_read"] - 1
        past = torch.arange(last - history.shape[0] + 1, last + 1)
        ahead = torch.arange(last, last + future.shape[0] + 1)
        label = "row of the file (0 = the first data row)"
    for c in range(shown):
        ax = axes[c, 0]
        ax.plot(past, history[:, c], color="black", lw=1.2, label="the file")
        ax.plot(ahead, torch.cat((history[-1:, c], future[:, c])), color="tab:red", lw=1.2, ls="--", marker=".",
                label=f"forecast, {future.shape[0]} rows")
        ax.set_ylabel(result["columns"][c])
    axes[0, 0].legend(loc="upper left", fontsize=8)
    axes[-1, 0].set_xlabel(label)
    _save(fig, title, path)


def plot_classes(model, x, y, classes: int, path: str | Path, title: str = "", batch_size: int = 256) -> None:
    """The confusion matrix (rows: true class, columns: predicted) and the accuracy of each class over every test
    prediction: one per sequence, or one per step for per-step classes (targets ``(N, T)``)."""
    pred = torch.cat([_predict(model, x[i:i + batch_size]).argmax(-1) for i in range(0, x.shape[0], batch_size)])
    y, pred = y.cpu().flatten(), pred.flatten()
    confusion = torch.zeros(classes, classes)
    confusion.index_put_((y, pred), torch.ones(y.numel()), accumulate=True)
    per_class = (confusion.diagonal() / confusion.sum(1).clamp(min=1)).numpy()
    seen = (confusion.sum(1) > 0).numpy()
    confusion = confusion.numpy()  # matplotlib takes NumPy arrays (a tensor goes through deprecated conversions)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 1.4]})
    image = axes[0].imshow(confusion, cmap="Greys", interpolation="nearest", origin="lower")
    axes[0].set_xlabel("predicted class")
    axes[0].set_ylabel("true class")
    fig.colorbar(image, ax=axes[0], label="test predictions", shrink=0.8)
    index = np.arange(classes)
    axes[1].bar(index[seen], 100 * per_class[seen], width=1.0, color="tab:blue")
    axes[1].axhline(100 / classes, color="black", lw=1, ls="--", label="chance")
    axes[1].set_xlabel("class")
    axes[1].set_ylabel("test accuracy (%)")
    axes[1].set_ylim(0, 105)
    axes[1].legend(loc="lower right")
    _save(fig, title, path)


def plot_symbols(model, x, y, path: str | Path, title: str = "", count: int = 3, shown: int = 10) -> None:
    """A class at every step (e.g. the copy task): for ``count`` test sequences, the input symbols of the first
    ``shown`` steps, then the target and the decoded prediction (largest logit) of the last ``shown`` steps."""
    count = min(count, x.shape[0])
    pred = _predict(model, x[:count]).argmax(-1)
    inputs, y = x[:count].argmax(-1).cpu(), y[:count].cpu()
    shown = min(shown, y.shape[1])
    steps = y.shape[1]
    fig, axes = plt.subplots(count, 1, figsize=(8, 1.6 + 1.1 * count), squeeze=False)
    for k in range(count):
        ax = axes[k, 0]
        rows = [("input, first steps", inputs[k, :shown]), ("target, last steps", y[k, -shown:]),
                ("predicted", pred[k, -shown:])]
        ax.imshow(torch.stack([r for _, r in rows]).numpy(), cmap="tab10", vmin=0, vmax=9, aspect="auto")
        for row, (_, values) in enumerate(rows):
            for col, value in enumerate(values.tolist()):
                wrong = row == 2 and value != int(y[k, steps - shown + col])
                ax.text(col, row, str(value), ha="center", va="center", fontsize=9,
                        color="red" if wrong else "white", fontweight="bold" if wrong else "normal")
        ax.set_yticks(range(3), [name for name, _ in rows])
        ax.set_xticks(range(shown), [f"{c}/{steps - shown + c}" for c in range(shown)], fontsize=7)
        correct = int((pred[k, -shown:] == y[k, -shown:]).sum())
        ax.set_title(f"test sequence {k}: {correct}/{shown} recalled (steps: input/output)", fontsize=9)
    _save(fig, title, path)


def plot_token_losses(model, x, y, path: str | Path, title: str = "", elements: int = 2 ** 24) -> None:
    """A class at every step over a large vocabulary (language modelling): the mean test cross-entropy of the
    target at each position of the window, over every test window (the cost of each window's zero initial state
    shows at its first steps). Streamed over batches of at most ``elements`` logits: memory O(elements), never
    O(windows × steps × classes)."""
    steps = y.shape[1]
    sums = torch.zeros(steps, dtype=torch.float64)
    i, batch = 0, 1  # one window first, to learn the number of classes
    with torch.no_grad():
        model.eval()
        while i < x.shape[0]:
            logits = model(x[i:i + batch]).cpu()
            losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y[i:i + batch].cpu(), reduction="none")
            sums += losses.double().sum(0)
            i += batch
            batch = max(1, elements // (steps * logits.shape[-1]))
    mean = (sums / x.shape[0]).numpy()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.arange(1, steps + 1), mean, color="tab:blue", lw=1, label="per position")
    ax.axhline(float(mean.mean()), color="black", lw=1, ls="--", label=f"mean {mean.mean():.3f}")
    ax.set_xlabel("position in the window (step)")
    ax.set_ylabel("test cross-entropy (nats per token)")
    ax.legend(loc="upper right")
    _save(fig, title, path)


def plot_curves(history: dict, path: str | Path, title: str = "") -> None:
    """Train and validation RMSE per epoch (log scale); for a classification run, the cross-entropy (log scale)
    and the accuracy per epoch side by side."""
    if "train_accuracy" in history:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        axes[0].semilogy(history["epoch"], history["train_loss"], label="train")
        axes[0].semilogy(history["epoch"], history["valid_loss"], label="validation")
        axes[0].set_ylabel("cross-entropy (nats per symbol)")
        axes[1].plot(history["epoch"], [100 * a for a in history["train_accuracy"]], label="train")
        axes[1].plot(history["epoch"], [100 * a for a in history["valid_accuracy"]], label="validation")
        axes[1].set_ylabel("accuracy (%)")
        for ax in axes:
            ax.set_xlabel("epoch")
            ax.legend()
        _save(fig, title, path)
        return
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


def plot_sweep(result: dict, path: str | Path) -> None:
    """The test metric against the varied value (mean ± std over seeds, every seed as a dot); a log x axis when the
    values are positive numbers spanning more than a decade."""
    rows = result["rows"]
    numeric = all(isinstance(r["value"], (int, float)) and not isinstance(r["value"], bool) for r in rows)
    x = [r["value"] for r in rows] if numeric else list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.errorbar(x, [r["mean"] for r in rows], yerr=[r["std"] for r in rows], fmt="o-", capsize=3)
    for xi, r in zip(x, rows):
        ax.plot([xi] * len(r["values"]), r["values"], ".", color="gray", alpha=0.6)
    if numeric and min(x) > 0 and max(x) > 10 * min(x):
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(x, [str(r["value"]) for r in rows])
    ax.set(xlabel=result["key"], ylabel=result["metric"])
    _save(fig, f"{result['task']}: {result['model']}, {result['preset']} preset, {result['epochs']} epochs", path)
