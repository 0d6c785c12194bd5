"""Training loop for sequence regression (MSE, or L1 with ``regression_loss="l1"``; model selection on validation
RMSE) and classification (mean
cross-entropy over the predicted symbols; model selection on validation accuracy, ties broken by the lower
validation loss): atomic checkpoints every epoch, exact resume, a clear stop on a non-finite loss (with ``clip``, a
step whose gradient norm is non-finite is skipped and counted, and 20 in a row stop training), results as
JSON + CSV, and data-parallel training across processes (``torch.distributed``, launched by ``torchrun``): every
rank takes a disjoint shard of each global batch, the gradients are summed across ranks, so the update equals the
single-process one on that batch."""
from __future__ import annotations

import copy
import functools
import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn import functional as F
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
    eval_batch_size: int = 256  # with ``stateful``: the training batch_size, the number of streams read at once
    optimizer: str = "adam"  # "adam", "rmsprop" (torch's defaults) or "rmsprop-keras" (Keras' defaults)
    regression_loss: str = "mse"  # "mse" or "l1" (mean absolute error, e.g. the LRC authors' neural-ODE code)
    # step decay of the papers ("lr divided by 10 after epoch 90"): from epoch m (0-based) of each milestone m on,
    # the rate is multiplied by lr_gamma; a function of the epoch alone, so a resumed run keeps it
    lr_milestones: tuple[int, ...] = ()
    lr_gamma: float = 0.1
    weight_decay: float = 0.0  # the optimizer's L2 penalty (torch's weight_decay: λ θ added to the gradient)
    # the sequences are consecutive windows of one long stream (language modelling): batches read them as parallel
    # streams (:func:`stripes`) whose states carry from one batch to the next, detached (truncated BPTT)
    stateful: bool = False
    select: str = "accuracy"  # classification: the best epoch by validation "accuracy" (ties: loss) or "loss"
    # early stopping: end the run once this many epochs in a row gave no better validation score (None: never);
    # a function of the history alone, so a resumed run stops where the uninterrupted one did
    patience: int | None = None

    def lr_at(self, epoch: int) -> float:
        """The learning rate of ``epoch`` (0-based): lr · lr_gamma^(number of milestones ≤ epoch)."""
        return self.lr * self.lr_gamma ** sum(1 for m in self.lr_milestones if m <= epoch)

    def check(self) -> None:
        """ValueError naming the field when a setting is out of range."""
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: expected one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.regression_loss not in REGRESSION_LOSSES:
            raise ValueError(f"regression_loss: expected one of {sorted(REGRESSION_LOSSES)}, got "
                             f"{self.regression_loss!r}")
        milestones = self.lr_milestones = tuple(self.lr_milestones)
        if not all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in milestones) or \
                any(b <= a for a, b in zip(milestones, milestones[1:])):
            raise ValueError(f"lr_milestones: expected strictly increasing epochs >= 1, got {self.lr_milestones!r}")
        if not 0 < self.lr_gamma <= 1:
            raise ValueError(f"lr_gamma: expected a factor in (0, 1], got {self.lr_gamma!r}")
        if self.select not in ("accuracy", "loss"):
            raise ValueError(f"select: expected 'accuracy' or 'loss', got {self.select!r}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"weight_decay: expected a finite number >= 0, got {self.weight_decay!r}")
        if self.patience is not None and (not isinstance(self.patience, int) or isinstance(self.patience, bool)
                                          or self.patience < 1):
            raise ValueError(f"patience: expected a number of epochs >= 1, got {self.patience!r}")


# "rmsprop": torch's defaults (ρ 0.99, ε 1e-8); "rmsprop-keras": Keras' (ρ 0.9, ε 1e-7; the same update
# θ −= lr g / (√v + ε)), the optimizer of the LRC authors' TensorFlow code
OPTIMIZERS = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop,
              "rmsprop-keras": functools.partial(torch.optim.RMSprop, alpha=0.9, eps=1e-7)}
REGRESSION_LOSSES = {"mse": lambda error: (error ** 2).sum(), "l1": lambda error: error.abs().sum()}


class NonFiniteLoss(RuntimeError):
    pass


# with clipping, a step whose gradient norm is inf/NaN is skipped; this many in a row stop training
MAX_SKIPPED_IN_A_ROW = 20


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, not an odelab checkpoint, or of other settings."""


class Interrupted(Exception):
    """Ctrl-C (KeyboardInterrupt) during training: ``epochs`` finished epochs, the last of them in ``checkpoint``
    (None without an output folder or before the first checkpoint)."""

    def __init__(self, epochs: int, checkpoint: Path | None):
        super().__init__(f"interrupted after epoch {epochs}")
        self.epochs, self.checkpoint = epochs, checkpoint


CHECKPOINT_KEYS = ("model", "optimizer", "shuffle", "history", "best", "epoch", "elapsed")


LOSSES = ("mse", "cross_entropy")


@dataclass
class History:
    epoch: list[int] = field(default_factory=list)
    train_rmse: list[float] = field(default_factory=list)
    valid_rmse: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    skipped_steps: int = 0  # optimizer steps skipped for a non-finite gradient norm (with clipping)


@dataclass
class ClassificationHistory:
    """Per epoch: mean cross-entropy (nats per predicted symbol) and accuracy (fraction) on train and validation."""

    epoch: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    valid_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    valid_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    skipped_steps: int = 0


def check_targets(data: dict, loss: str) -> None:
    """ValueError naming the split when a classification target is not int64 class indices of shape (N,) (one
    class per sequence) or (N, T) (one per step of the input (N, T, features)), or is negative."""
    if loss not in LOSSES:
        raise ValueError(f"loss: expected one of {', '.join(LOSSES)}, got {loss!r}")
    if loss != "cross_entropy":
        return
    for split in ("train", "valid", "test"):
        if split not in data:
            continue
        x, y = data[split]
        if y.dtype != torch.int64:
            raise ValueError(f"{split} targets: a classification task (cross-entropy) needs int64 class indices, "
                             f"got {y.dtype} (a float target is a regression task)")
        if tuple(y.shape) not in (tuple(x.shape[:1]), tuple(x.shape[:2])):
            raise ValueError(f"{split} targets: expected class indices of shape {tuple(x.shape[:1])} (one per "
                             f"sequence) or {tuple(x.shape[:2])} (one per step) for inputs {tuple(x.shape)}, got "
                             f"{tuple(y.shape)}")
        if y.numel() and int(y.min()) < 0:
            raise ValueError(f"{split} targets: class indices must be >= 0, got {int(y.min())}")


def cross_entropy_sum(logits: Tensor, y: Tensor) -> Tensor:
    """Summed cross-entropy of ``logits`` (..., classes) against class indices ``y`` (...)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int, device: str) -> Tensor:
    """The model's outputs for every sequence of ``x``, on the CPU."""
    model.eval()
    return torch.cat([model(x[i:i + batch_size].to(device)).cpu() for i in range(0, x.shape[0], batch_size)])


def stripes(n: int, count: int) -> list[Tensor]:
    """The batches that read ``n`` consecutive windows of one stream as ``count`` parallel streams (the usual
    language-model batching): stream b holds windows b·S … b·S + S − 1 (S = ⌈n / count⌉; the last stream may be
    shorter), batch j window b·S + j of every stream that has one. A stream that ends drops out of the last batches,
    and it is always the last ones: every batch is a prefix of the streams."""
    if n == 0:
        return []
    length = math.ceil(n / min(count, n))
    starts = torch.arange(0, n, length)
    return [starts[starts + j < n] + j for j in range(length)]


def _outputs_by_batch(model: nn.Module, x: Tensor, y: Tensor, batch_size: int, device: str, stateful: bool):
    """(outputs, targets) batch by batch: this rank's every world-th chunk; ``stateful``: every window, read as
    ``batch_size`` streams carrying their states (:func:`stripes`), on every rank."""
    if not stateful:
        rank, world = rank_and_world()
        for i in range(rank * batch_size, x.shape[0], world * batch_size):
            yield model(x[i:i + batch_size].to(device)), y[i:i + batch_size].to(device)
        return
    state = None
    for batch in stripes(x.shape[0], batch_size):
        state = None if state is None else model.carried(state, batch.numel())
        outputs, state = model.stream(x[batch].to(device), state)
        yield outputs, y[batch].to(device)


@torch.no_grad()
def rmse(model: nn.Module, x: Tensor, y: Tensor, batch_size: int, device: str, stateful: bool = False) -> float:
    """Root mean squared error over ALL sequences (not the last batch only, the official code's quirk).
    In data-parallel training each rank evaluates every world-th chunk and the sums are all-reduced."""
    model.eval()
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # squared error, count
    for outputs, yb in _outputs_by_batch(model, x, y, batch_size, device, stateful):
        sums[0] += ((outputs - yb) ** 2).sum().double()
        sums[1] += yb.numel()
    if rank_and_world()[1] > 1 and not stateful:
        dist.all_reduce(sums)
    return math.sqrt(float(sums[0] / sums[1]))


@torch.no_grad()
def classification_scores(model: nn.Module, x: Tensor, y: Tensor, batch_size: int, device: str,
                          stateful: bool = False) -> tuple[float, float]:
    """(mean cross-entropy in nats per predicted symbol, accuracy = fraction of symbols whose largest logit is the
    target) over ALL sequences; in data-parallel training each rank takes every world-th chunk, sums all-reduced."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # cross-entropy, correct, count
    for logits, yb in _outputs_by_batch(model, x, y, batch_size, device, stateful):
        sums[0] += cross_entropy_sum(logits, yb).double()
        sums[1] += (logits.argmax(-1) == yb).sum().double()
        sums[2] += yb.numel()
    if rank_and_world()[1] > 1 and not stateful:
        dist.all_reduce(sums)
    return float(sums[0] / sums[2]), float(sums[1] / sums[2])


def clip_gradient_norm(parameters, max_norm: float) -> float:
    """Scale the gradients in place so that their joint 2-norm is at most ``max_norm``; return the norm before.

    The norm is accumulated in float64: float32 gradients of size ~1e19 are finite, but their squares overflow
    float32, and ``nn.utils.clip_grad_norm_`` then reads an infinite norm and scales every gradient by zero
    (later steps turn the zeros into NaN)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.detach(), dtype=torch.float64) for g in grads])).item()
    scale = max_norm / (norm + 1e-6)  # nn.utils.clip_grad_norm_'s coefficient
    if math.isfinite(norm) and scale < 1.0:
        for g in grads:
            g.mul_(scale)
    return norm


def _better(candidate: dict, best: dict, classification: bool, select: str = "accuracy") -> bool:
    """Regression: lower validation RMSE. Classification: higher validation accuracy, then lower validation loss;
    ``select="loss"`` (language models): lower validation loss."""
    if not classification:
        return candidate["valid_rmse"] < best["valid_rmse"]
    if select == "loss":
        return candidate["valid_loss"] < best["valid_loss"]
    return (candidate["valid_accuracy"], -candidate["valid_loss"]) > (best["valid_accuracy"], -best["valid_loss"])


def fit(model: nn.Module, data: dict, config: TrainConfig, out_dir: str | Path | None = None,
        resume: bool = False, progress: bool = True, settings: dict | None = None, loss: str = "mse") -> dict:
    """Train with ``config.optimizer`` on ``loss``; keep the parameters of the best validation epoch; return a result
    dict (``"metric"``: ``"rmse"`` or ``"accuracy"``).

    ``loss="mse"``: float targets shaped like the outputs; the best epoch has the lowest validation RMSE; the result
    has ``valid_rmse`` and ``test_rmse``. ``loss="cross_entropy"``: the outputs are logits (..., classes), the
    targets int64 class indices (N,) or (N, T) (see :func:`check_targets`); the loss is the mean cross-entropy per
    predicted symbol; the best epoch has the highest validation accuracy (ties: the lower validation loss); the
    result has ``valid_accuracy``, ``valid_loss``, ``test_accuracy`` (fraction in [0, 1]) and ``test_loss`` (nats
    per predicted symbol), the history the loss and accuracy of train and validation per epoch.

    With ``out_dir``, a checkpoint (model, optimizer, shuffling RNG, history, best state) is written atomically
    after every epoch; ``resume=True`` continues from it and ends with exactly the uninterrupted result.
    With ``config.patience`` the run ends once that many epochs in a row gave no better validation score
    (``"stopped_early"``: the epochs done, else None); the best epoch is kept either way.
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
    config.check()
    check_targets(data, loss)
    if config.stateful and not hasattr(model, "stream"):
        raise ValueError(f"stateful: training carries states between batches through model.stream(x, state) "
                         f"(odelab.models.SequenceRegressor); {type(model).__name__} has none")
    evaluation_batch = config.batch_size if config.stateful else config.eval_batch_size  # stateful: as many streams
    classification = loss == "cross_entropy"
    rank, world = rank_and_world()
    device = config.device
    model.to(device)
    parameters = [p for p in model.parameters() if p.requires_grad]
    x_train, y_train = (t.to(device) for t in data["train"])
    x_valid, y_valid = (t.to(device) for t in data["valid"])
    optimizer = OPTIMIZERS[config.optimizer](parameters, lr=config.lr, weight_decay=config.weight_decay)
    shuffle = torch.Generator().manual_seed(config.seed)
    history, start_epoch, elapsed = (ClassificationHistory() if classification else History()), 0, 0.0
    best = ({"valid_accuracy": -math.inf, "valid_loss": math.inf, "epoch": -1, "state": None} if classification
            else {"valid_rmse": math.inf, "epoch": -1, "state": None})
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
        try:
            history = type(history)(**saved["history"])
        except TypeError:
            kind = "classification" if classification else "regression"
            raise CheckpointError(f"cannot resume from {checkpoint}: it is not a {kind} run; use another --out, or "
                                  "the settings of that run") from None
        best = saved["best"]
        start_epoch, elapsed = saved["epoch"] + 1, saved["elapsed"]
    if world > 1:  # every rank starts from rank 0's weights
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, 0)

    per_sequence = y_train[0].numel()
    bar = tqdm(range(start_epoch, config.epochs), initial=start_epoch, total=config.epochs,
               disable=not progress or rank != 0, desc="epochs", unit="epoch", dynamic_ncols=True)
    skipped_in_a_row = 0
    finished = start_epoch  # epochs done (with an output folder: the last one is in the checkpoint)
    saving = start_epoch  # the epoch whose checkpoint is being written
    stopped = None  # the epochs done when early stopping ended the run
    try:
        for epoch in bar:
            if config.patience is not None and best["epoch"] >= 1 and epoch - best["epoch"] >= config.patience:
                stopped = epoch
                break
            tic = time.perf_counter()
            for group in optimizer.param_groups:  # the step schedule (also after a resume: it reads the epoch)
                group["lr"] = config.lr_at(epoch)
            model.train()
            if config.stateful:
                batches, state = stripes(x_train.shape[0], config.batch_size), None
            else:
                order = torch.randperm(x_train.shape[0], generator=shuffle)  # the same on every rank
                batches = order.split(config.batch_size)
            for number, batch in enumerate(batches):
                mine = batch[rank::world].to(device)
                optimizer.zero_grad(set_to_none=True)
                if mine.numel() and config.stateful:
                    state = None if state is None else model.carried(state, mine.numel())
                    outputs, state = model.stream(x_train[mine], state)
                elif mine.numel():
                    outputs = model(x_train[mine])
                if mine.numel():
                    summed = (cross_entropy_sum(outputs, y_train[mine]) if classification
                              else REGRESSION_LOSSES[config.regression_loss](outputs - y_train[mine]))
                    batch_loss = summed / (batch.numel() * per_sequence)
                else:  # more ranks than rows in this batch: contribute nothing
                    batch_loss = torch.zeros((), device=device, requires_grad=True)
                total = batch_loss.detach().clone()
                if world > 1:
                    dist.all_reduce(total)
                if not torch.isfinite(total):
                    bar.close()
                    where = f"; the last good checkpoint is {checkpoint}" if checkpoint is not None else ""
                    raise NonFiniteLoss(f"loss became {total.item()} at epoch {epoch + 1}, batch "
                                        f"{number + 1} (try a smaller lr or --clip){where}")
                batch_loss.backward()
                if world > 1:
                    sum_gradients(parameters)
                if config.clip is not None:
                    norm = clip_gradient_norm(parameters, config.clip)
                    if not math.isfinite(norm):  # skip the step, as torch.amp's GradScaler does
                        history.skipped_steps += 1
                        skipped_in_a_row += 1
                        if skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW:
                            bar.close()
                            where = f"; the last good checkpoint is {checkpoint}" if checkpoint is not None else ""
                            raise NonFiniteLoss(f"gradient norm non-finite ({norm}) in {skipped_in_a_row} steps in a "
                                                f"row up to epoch {epoch + 1}, batch {number + 1} "
                                                f"(try a smaller lr){where}")
                        continue
                    skipped_in_a_row = 0
                optimizer.step()
            if classification:
                train_loss, train_accuracy = classification_scores(model, x_train, y_train, evaluation_batch,
                                                                    device, config.stateful)
                valid_loss, valid_accuracy = classification_scores(model, x_valid, y_valid, evaluation_batch,
                                                                    device, config.stateful)
                scores = {"valid_accuracy": valid_accuracy, "valid_loss": valid_loss}
                history.train_loss.append(train_loss)
                history.valid_loss.append(valid_loss)
                history.train_accuracy.append(train_accuracy)
                history.valid_accuracy.append(valid_accuracy)
                postfix = dict(loss=f"{train_loss:.3f}", valid=f"{valid_accuracy:.1%}")
            else:
                train = rmse(model, x_train, y_train, evaluation_batch, device, config.stateful)
                valid = rmse(model, x_valid, y_valid, evaluation_batch, device, config.stateful)
                scores = {"valid_rmse": valid}
                history.train_rmse.append(train)
                history.valid_rmse.append(valid)
                postfix = dict(train=f"{train:.2e}", valid=f"{valid:.2e}")
            elapsed += time.perf_counter() - tic
            history.epoch.append(epoch + 1)
            history.seconds.append(elapsed)
            if _better(scores, best, classification, config.select):
                best = {**scores, "epoch": epoch + 1, "state": copy.deepcopy(model.state_dict())}
            best_text = f"{best['valid_accuracy']:.1%}" if classification else f"{best['valid_rmse']:.2e}"
            bar.set_postfix(**postfix, best=best_text)
            if checkpoint is not None and rank == 0:
                saving = epoch + 1
                atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "shuffle": shuffle.get_state(), "history": asdict(history), "best": best, "epoch": epoch,
                             "elapsed": elapsed, "config": resumable_fields(config), "settings": settings}, checkpoint)
            finished = epoch + 1
    except KeyboardInterrupt:
        bar.close()
        if saving > finished:  # Ctrl-C during the save: the rename may have happened before `finished` was set
            try:
                finished = max(finished, min(saving, load_checkpoint(checkpoint)["epoch"] + 1))
            except (CheckpointError, OSError):
                pass
        raise Interrupted(finished, checkpoint if checkpoint is not None and finished > 0 else None) from None
    bar.close()

    if best["state"] is not None:
        model.load_state_dict(best["state"])
    if classification:
        test_loss, test_accuracy = classification_scores(model, *data["test"], evaluation_batch, device,
                                                         config.stateful)
        return {"config": asdict(config), "best_epoch": best["epoch"], "valid_accuracy": best["valid_accuracy"],
                "valid_loss": best["valid_loss"], "test_accuracy": test_accuracy, "test_loss": test_loss,
                "metric": "accuracy", "loss": loss, "train_seconds": elapsed, "world_size": world,
                "history": asdict(history), "stopped_early": stopped}
    test = rmse(model, *data["test"], evaluation_batch, device, config.stateful)
    return {"config": asdict(config), "best_epoch": best["epoch"], "valid_rmse": best["valid_rmse"], "test_rmse": test,
            "train_seconds": elapsed, "world_size": world, "history": asdict(history), "metric": "rmse",
            "stopped_early": stopped}


def resumable_fields(config: TrainConfig) -> dict:
    """The settings a resumed run must share with the checkpoint: all but the epoch count (a finished run can be
    extended: with no schedule the result is exactly that of the longer uninterrupted run), the patience (which
    only decides where the run ends), the device and the evaluation batch size."""
    return {k: v for k, v in asdict(config).items() if k not in ("epochs", "patience", "device", "eval_batch_size")}


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
