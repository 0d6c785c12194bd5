"""Training loop for sequence-to-sequence regression: model selection on validation RMSE, atomic checkpoints
every epoch, exact resume, a clear stop on a non-finite loss, results as JSON + CSV."""
from __future__ import annotations

import copy
import csv
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from .data.cache import atomic_save


class SequenceRegressor(nn.Module):
    """A recurrent body ``(outputs, state) = body(x)`` followed by a linear readout applied at every step."""

    def __init__(self, body: nn.Module, hidden_size: int, output_size: int):
        super().__init__()
        self.body = body
        self.readout = nn.Linear(hidden_size, output_size)
        nn.init.kaiming_normal_(self.readout.weight)  # as the official LEM code

    def forward(self, x: Tensor) -> Tensor:
        return self.readout(self.body(x)[0])


@dataclass
class TrainConfig:
    epochs: int = 400
    lr: float = 9.04e-3
    batch_size: int = 32
    seed: int = 1234
    clip: float | None = None
    device: str = "cpu"
    eval_batch_size: int = 256


class NonFiniteLoss(RuntimeError):
    pass


@dataclass
class History:
    epoch: list[int] = field(default_factory=list)
    train_rmse: list[float] = field(default_factory=list)
    valid_rmse: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


@torch.no_grad()
def rmse(model: nn.Module, x: Tensor, y: Tensor, batch_size: int, device: str) -> float:
    """Root mean squared error over ALL sequences (not the last batch only, the official code's quirk)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, x.shape[0], batch_size):
        xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
        total += float(((model(xb) - yb) ** 2).sum())
        count += yb.numel()
    return math.sqrt(total / count)


def fit(model: nn.Module, data: dict, config: TrainConfig, out_dir: str | Path | None = None,
        resume: bool = False, progress: bool = True) -> dict:
    """Train with Adam on MSE; keep the parameters of the best validation epoch; return a result dict.

    With ``out_dir``, a checkpoint (model, optimizer, shuffling RNG, history, best state) is written atomically
    after every epoch; ``resume=True`` continues from it and ends with exactly the uninterrupted result.
    A NaN/Inf loss stops the run with :class:`NonFiniteLoss`; the last good checkpoint stays on disk.
    """
    device = config.device
    model.to(device)
    x_train, y_train = data["train"]
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    shuffle = torch.Generator().manual_seed(config.seed)
    history, best, start_epoch, elapsed = History(), {"valid_rmse": math.inf, "epoch": -1, "state": None}, 0, 0.0
    checkpoint = Path(out_dir) / "checkpoint.pt" if out_dir is not None else None
    if resume and checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        shuffle.set_state(saved["shuffle"])
        history = History(**saved["history"])
        best = saved["best"]
        start_epoch, elapsed = saved["epoch"] + 1, saved["elapsed"]

    bar = tqdm(range(start_epoch, config.epochs), initial=start_epoch, total=config.epochs, disable=not progress,
               desc="epochs", unit="epoch", dynamic_ncols=True)
    for epoch in bar:
        tic = time.perf_counter()
        model.train()
        order = torch.randperm(x_train.shape[0], generator=shuffle)
        for i in range(0, len(order), config.batch_size):
            idx = order[i:i + config.batch_size]
            xb, yb = x_train[idx].to(device), y_train[idx].to(device)
            loss = ((model(xb) - yb) ** 2).mean()
            if not torch.isfinite(loss):
                bar.close()
                where = f"; the last good checkpoint is {checkpoint}" if checkpoint is not None else ""
                raise NonFiniteLoss(f"loss became {loss.item()} at epoch {epoch + 1}, batch {i // config.batch_size + 1}"
                                    f" (try a smaller lr or --clip){where}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), config.clip)
            optimizer.step()
        train = rmse(model, x_train, y_train, config.eval_batch_size, device)
        valid = rmse(model, *data["valid"], config.eval_batch_size, device)
        elapsed += time.perf_counter() - tic
        history.epoch.append(epoch + 1)
        history.train_rmse.append(train)
        history.valid_rmse.append(valid)
        history.seconds.append(elapsed)
        if valid < best["valid_rmse"]:
            best = {"valid_rmse": valid, "epoch": epoch + 1, "state": copy.deepcopy(model.state_dict())}
        bar.set_postfix(train=f"{train:.2e}", valid=f"{valid:.2e}", best=f"{best['valid_rmse']:.2e}")
        if checkpoint is not None:
            atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "shuffle": shuffle.get_state(),
                         "history": asdict(history), "best": best, "epoch": epoch, "elapsed": elapsed}, checkpoint)
    bar.close()

    if best["state"] is not None:
        model.load_state_dict(best["state"])
    test = rmse(model, *data["test"], config.eval_batch_size, device)
    return {"config": asdict(config), "best_epoch": best["epoch"], "valid_rmse": best["valid_rmse"], "test_rmse": test,
            "train_seconds": elapsed, "history": asdict(history)}


def write_results(result: dict, out_dir: str | Path) -> None:
    """results.json (everything) and curves.csv (one row per epoch)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    h = result["history"]
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["epoch", "train_rmse", "valid_rmse", "seconds"])
        writer.writerows(zip(h["epoch"], h["train_rmse"], h["valid_rmse"], h["seconds"]))
