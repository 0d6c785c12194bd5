"""Training loop for sequence regression: model selection on validation RMSE, atomic checkpoints every epoch,
exact resume, a clear stop on a non-finite loss, results as JSON + CSV, and data-parallel training across
processes (``torch.distributed``, launched by ``torchrun``): every rank takes a disjoint shard of each global
batch, the gradients are summed across ranks, so the update equals the single-process one on that batch."""
from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..data.cache import atomic_save
from .distributed import rank_and_world, sum_gradients


@dataclass
class TrainConfig:
    epochs: int = 400
    lr: float = 9.04e-3
    batch_size: int = 32  # the GLOBAL batch: split across ranks in data-parallel training
    seed: int = 1234
    clip: float | None = None
    device: str = "cpu"
    eval_batch_size: int = 256
    optimizer: str = "adam"  # "adam" or "rmsprop"


OPTIMIZERS = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}


class NonFiniteLoss(RuntimeError):
    pass


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, not an odelab checkpoint, or of other settings."""


class Interrupted(Exception):
    """Ctrl-C (KeyboardInterrupt) during training: ``epochs`` finished epochs, the last of them in ``checkpoint``
    (None without an output folder or before the first checkpoint)."""

    def __init__(self, epochs: int, checkpoint: Path | None):
        super().__init__(f"interrupted after epoch {epochs}")
        self.epochs, self.checkpoint = epochs, checkpoint


CHECKPOINT_KEYS = ("model", "optimizer", "shuffle", "history", "best", "epoch", "elapsed")


@dataclass
class History:
    epoch: list[int] = field(default_factory=list)
    train_rmse: list[float] = field(default_factory=list)
    valid_rmse: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int, device: str) -> Tensor:
    """The model's outputs for every sequence of ``x``, on the CPU."""
    model.eval()
    return torch.cat([model(x[i:i + batch_size].to(device)).cpu() for i in range(0, x.shape[0], batch_size)])


@torch.no_grad()
def rmse(model: nn.Module, x: Tensor, y: Tensor, batch_size: int, device: str) -> float:
    """Root mean squared error over ALL sequences (not the last batch only, the official code's quirk).
    In data-parallel training each rank evaluates every world-th chunk and the sums are all-reduced."""
    model.eval()
    rank, world = rank_and_world()
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # squared error, count
    for i in range(rank * batch_size, x.shape[0], world * batch_size):
        xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
        sums[0] += ((model(xb) - yb) ** 2).sum().double()
        sums[1] += yb.numel()
    if world > 1:
        dist.all_reduce(sums)
    return math.sqrt(float(sums[0] / sums[1]))


def fit(model: nn.Module, data: dict, config: TrainConfig, out_dir: str | Path | None = None,
        resume: bool = False, progress: bool = True, settings: dict | None = None) -> dict:
    """Train on MSE with ``config.optimizer``; keep the parameters of the best validation epoch; return a result dict.

    With ``out_dir``, a checkpoint (model, optimizer, shuffling RNG, history, best state) is written atomically
    after every epoch; ``resume=True`` continues from it and ends with exactly the uninterrupted result.
    A NaN/Inf loss stops the run with :class:`NonFiniteLoss`; the last good checkpoint stays on disk.
    Inside a torch.distributed group (all ranks call ``fit`` with the same data and config), rank r takes
    rows r, r + W, … of every global batch of ``config.batch_size``; the loss of each shard is divided by the
    global number of target elements and the gradients are summed, so every rank makes the single-process
    update; only rank 0 writes the checkpoint and shows progress.
    ``settings`` (JSON-like: model, hidden size, data, ...) are stored in the checkpoint; a resume with other
    ``settings`` or another ``config`` (but the epoch count, device and evaluation batch) raises
    :class:`CheckpointError` naming each change, as does an unreadable checkpoint. Ctrl-C raises
    :class:`Interrupted` with the last finished epoch, whose checkpoint is intact.
    """
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: expected one of {sorted(OPTIMIZERS)}, got {config.optimizer!r}")
    rank, world = rank_and_world()
    device = config.device
    model.to(device)
    parameters = [p for p in model.parameters() if p.requires_grad]
    x_train, y_train = (t.to(device) for t in data["train"])
    x_valid, y_valid = (t.to(device) for t in data["valid"])
    optimizer = OPTIMIZERS[config.optimizer](parameters, lr=config.lr)
    shuffle = torch.Generator().manual_seed(config.seed)
    history, best, start_epoch, elapsed = History(), {"valid_rmse": math.inf, "epoch": -1, "state": None}, 0, 0.0
    checkpoint = Path(out_dir) / "checkpoint.pt" if out_dir is not None else None
    if resume and checkpoint is not None and checkpoint.exists():
        saved = load_checkpoint(checkpoint, device)
        check_resumable(saved.get("config"), config, checkpoint, saved.get("settings"), settings)
        try:
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            shuffle.set_state(saved["shuffle"].cpu())
        except (RuntimeError, ValueError, KeyError, TypeError) as err:
            reason = str(err).strip().splitlines()[0][:200]
            raise CheckpointError(f"cannot resume from {checkpoint}: it holds another model ({reason}); use another "
                                  "--out, or the settings of that run") from None
        history = History(**saved["history"])
        best = saved["best"]
        start_epoch, elapsed = saved["epoch"] + 1, saved["elapsed"]
    if world > 1:  # every rank starts from rank 0's weights
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, 0)

    per_sequence = y_train[0].numel()
    bar = tqdm(range(start_epoch, config.epochs), initial=start_epoch, total=config.epochs,
               disable=not progress or rank != 0, desc="epochs", unit="epoch", dynamic_ncols=True)
    finished = start_epoch  # epochs done (with an output folder: the last one is in the checkpoint)
    try:
        for epoch in bar:
            tic = time.perf_counter()
            model.train()
            order = torch.randperm(x_train.shape[0], generator=shuffle)  # the same on every rank
            for i in range(0, len(order), config.batch_size):
                batch = order[i:i + config.batch_size]
                mine = batch[rank::world].to(device)
                optimizer.zero_grad(set_to_none=True)
                if mine.numel():
                    loss = ((model(x_train[mine]) - y_train[mine]) ** 2).sum() / (batch.numel() * per_sequence)
                else:  # more ranks than rows in this batch: contribute nothing
                    loss = torch.zeros((), device=device, requires_grad=True)
                total = loss.detach().clone()
                if world > 1:
                    dist.all_reduce(total)
                if not torch.isfinite(total):
                    bar.close()
                    where = f"; the last good checkpoint is {checkpoint}" if checkpoint is not None else ""
                    raise NonFiniteLoss(f"loss became {total.item()} at epoch {epoch + 1}, batch "
                                        f"{i // config.batch_size + 1} (try a smaller lr or --clip){where}")
                loss.backward()
                if world > 1:
                    sum_gradients(parameters)
                if config.clip is not None:
                    nn.utils.clip_grad_norm_(parameters, config.clip)
                optimizer.step()
            train = rmse(model, x_train, y_train, config.eval_batch_size, device)
            valid = rmse(model, x_valid, y_valid, config.eval_batch_size, device)
            elapsed += time.perf_counter() - tic
            history.epoch.append(epoch + 1)
            history.train_rmse.append(train)
            history.valid_rmse.append(valid)
            history.seconds.append(elapsed)
            if valid < best["valid_rmse"]:
                best = {"valid_rmse": valid, "epoch": epoch + 1, "state": copy.deepcopy(model.state_dict())}
            bar.set_postfix(train=f"{train:.2e}", valid=f"{valid:.2e}", best=f"{best['valid_rmse']:.2e}")
            if checkpoint is not None and rank == 0:
                atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "shuffle": shuffle.get_state(), "history": asdict(history), "best": best, "epoch": epoch,
                             "elapsed": elapsed, "config": resumable_fields(config), "settings": settings}, checkpoint)
            finished = epoch + 1
    except KeyboardInterrupt:
        bar.close()
        raise Interrupted(finished, checkpoint if checkpoint is not None and finished > 0 else None) from None
    bar.close()

    if best["state"] is not None:
        model.load_state_dict(best["state"])
    test = rmse(model, *data["test"], config.eval_batch_size, device)
    return {"config": asdict(config), "best_epoch": best["epoch"], "valid_rmse": best["valid_rmse"], "test_rmse": test,
            "train_seconds": elapsed, "world_size": world, "history": asdict(history)}


def resumable_fields(config: TrainConfig) -> dict:
    """The settings a resumed run must share with the checkpoint: all but the epoch count (a finished run can be
    extended: with no schedule the result is exactly that of the longer uninterrupted run), the device and the
    evaluation batch size."""
    return {k: v for k, v in asdict(config).items() if k not in ("epochs", "device", "eval_batch_size")}


def load_checkpoint(path: Path, device: str = "cpu") -> dict:
    """An odelab training checkpoint (``weights_only``); :class:`CheckpointError` naming the file when it is
    truncated, corrupt or something else."""
    advice = "use another --out, or delete it to start over"
    try:
        with warnings.catch_warnings():  # e.g. torch's note on an unexpected pickle protocol
            warnings.simplefilter("ignore")
            saved = torch.load(path, weights_only=True, map_location=device)
    except Exception as err:  # truncated (OSError, RuntimeError), random bytes (UnpicklingError), ...
        raise CheckpointError(f"cannot resume: {path} is not a readable checkpoint ({type(err).__name__}: truncated "
                              f"or corrupt); {advice}") from None
    if not isinstance(saved, dict) or any(key not in saved for key in CHECKPOINT_KEYS):
        raise CheckpointError(f"cannot resume: {path} is not an odelab training checkpoint; {advice}")
    return saved




def check_resumable(saved: dict | None, config: TrainConfig, checkpoint: Path, saved_settings: dict | None = None,
                    settings: dict | None = None) -> None:
    """:class:`CheckpointError` naming every setting (training configuration, then ``settings``: model, data, ...)
    that differs from the checkpoint's, with both values. Settings the checkpoint does not record (written by an
    older version) are not compared."""
    changed = []
    if saved is not None:
        changed += [f"{k} {v!r} (checkpoint: {saved[k]!r})" for k, v in resumable_fields(config).items()
                    if k in saved and saved[k] != v]
    if saved_settings is not None and settings is not None:
        for key, value in settings.items():
            if key in saved_settings and key not in UNCOMPARED and saved_settings[key] != value:
                if key == "data_sha256":  # the file's content changed (its path may not have)
                    changed.append(f"data file {settings.get('data_file')} (sha256 {value[:12]}…) (checkpoint: "
                                   f"{saved_settings.get('data_file')} (sha256 {saved_settings[key][:12]}…))")
                else:
                    changed.append(f"{key} {value!r} (checkpoint: {saved_settings[key]!r})")
    if changed:
        detail = ", ".join(changed)
        raise CheckpointError(f"cannot resume from {checkpoint}: {detail}; use another --out or the same settings")


UNCOMPARED = ("data_file",)  # recorded for the message only: a moved file with the same content resumes
