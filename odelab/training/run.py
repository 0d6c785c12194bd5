"""One ``odelab fit`` run as a function: ``run_fit(FitSpec(...))`` loads the task's data, builds the model, trains
it and writes the results. The ``fit`` and ``reproduce`` commands and ``compare-schemes`` all go through it."""
from __future__ import annotations

import inspect
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from ..data.tasks import TASKS, Task, settings
from ..models import Recurrent, SequenceRegressor, cells
from ..models.heads import takes_time_gaps
from .distributed import rank_and_world
from .loop import CheckpointError, Interrupted, NonFiniteLoss, TrainConfig, fit, predict
from .results import print_table, write_results


class FitError(Exception):
    """A run that cannot start or finish, with the exit code of the command (2: bad input, 1: training failed)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class DataError(FitError):
    """The task's data cannot be loaded with these options: the same for every model and seed."""


@dataclass
class FitSpec:
    """Everything that decides an ``odelab fit`` run; None keeps the preset's value."""

    task: str
    model: str = "lem"
    preset: str = "quick"
    hidden: int | None = None
    epochs: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    clip: float | None = None
    lr_milestones: tuple[int, ...] | None = None
    lr_gamma: float | None = None
    weight_decay: float | None = None
    optimizer: str | None = None
    seed: int = 1234
    device: str = "cpu"
    model_options: dict = field(default_factory=dict)
    data_options: dict = field(default_factory=dict)
    out: Path | None = None
    resume: bool = False
    progress: bool = True
    engine: str = "auto"  # Recurrent.engine of every layer: auto, generic, fused or cuda-graph (same results)
    embedding_size: int | None = None  # token tasks: the embedding's width
    input_dropout: float | None = None  # SequenceRegressor's dropout on what the body reads
    output_dropout: float | None = None  # ... on the body's outputs, before the readout
    patience: int | None = None  # early stopping: epochs without a better validation score (TrainConfig.patience)

    def check(self) -> Task:
        """The task, after checking the names (before any data is loaded)."""
        if self.task not in TASKS:
            raise FitError(f"unknown task {self.task!r}; choose from {', '.join(sorted(TASKS))}")
        task = TASKS[self.task]
        if self.model not in cells.PRESETS:
            raise FitError(f"--model: unknown model {self.model!r}; choose from {', '.join(sorted(cells.PRESETS))}")
        if self.preset not in task.presets:
            raise FitError(f"--preset: the task {self.task} has the preset(s) {', '.join(task.presets)}, "
                           f"not {self.preset!r}")
        for name, value, low, strict in (("epochs", self.epochs, 1, False), ("hidden", self.hidden, 1, False),
                                          ("batch-size", self.batch_size, 1, False), ("lr", self.lr, 0, True),
                                          ("clip", self.clip, 0, True)):
            if value is not None and (value <= low if strict else value < low):
                raise FitError(f"--{name}: expected a number {'>' if strict else '>='} {low}, got {value}")
        for name, value in (("input-dropout", self.input_dropout), ("output-dropout", self.output_dropout)):
            if value is not None and not 0 <= value < 1:
                raise FitError(f"--{name}: expected a probability in [0, 1), got {value}")
        if self.embedding_size is not None and (task.vocabulary is None or self.embedding_size < 1):
            raise FitError(f"--embedding-size: expected an integer >= 1, for a task with token inputs "
                           f"({', '.join(sorted(n for n, t in TASKS.items() if t.vocabulary))}), got "
                           f"{self.embedding_size} for {self.task}")
        try:
            TrainConfig(lr_milestones=self.lr_milestones or (), lr_gamma=1.0 if self.lr_gamma is None else self.lr_gamma,
                        weight_decay=self.weight_decay or 0.0, optimizer=self.optimizer or "adam",
                        patience=self.patience).check()
        except ValueError as err:
            name, detail = str(err).split(":", 1)
            raise FitError(f"--{name.replace('_', '-')}:{detail}") from None
        return task

    def config(self, task: Task) -> tuple[int, TrainConfig]:
        """(hidden size, training configuration): the preset with this spec's overrides."""
        preset = settings(task, self.preset, self.model)
        hidden = self.hidden or preset.pop("hidden_size")
        preset.pop("hidden_size", None)
        for key in HEAD_KEYS + ("data_options",):
            preset.pop(key, None)
        overrides = {k: getattr(self, k) for k in ("epochs", "lr", "batch_size", "clip", "lr_milestones", "lr_gamma",
                                                   "weight_decay", "optimizer", "patience")
                     if getattr(self, k) is not None}
        return hidden, TrainConfig(**{**preset, **overrides}, seed=self.seed, device=self.device)

    def head(self, task: Task) -> dict:
        """The readout head's settings that differ from its defaults (:data:`HEAD_KEYS`): the preset's, with this
        spec's overrides."""
        preset = settings(task, self.preset, self.model)
        head = {k: preset[k] for k in HEAD_KEYS if k in preset}
        head.update({k: getattr(self, k) for k in ("embedding_size", "input_dropout", "output_dropout")
                     if getattr(self, k) is not None})
        return {k: v for k, v in head.items() if v != HEAD_DEFAULTS[k]}


# A preset's settings of the readout head (odelab.models.SequenceRegressor), beside TrainConfig's fields and hidden_size
HEAD_DEFAULTS = {"embedding_size": None, "input_dropout": 0.0, "output_dropout": 0.0, "variational_dropout": True,
                 "readout_init": None, "tie_embedding": False}
HEAD_KEYS = tuple(HEAD_DEFAULTS)


def model_keywords(task: Task, model: str, data_options: dict | None = None, options: dict | None = None) -> dict:
    """The constructor keywords of ``model`` on ``task``: the task's (e.g. τ-GRU's τ), then ``options``."""
    return {**task.model_options(model, data_options or {}), **(options or {})}


def accepted_options(model: str) -> list[str]:
    """The constructor keywords of the preset ``model`` (and of its system, for presets that pass ``**kwargs`` on)."""
    preset = cells.PRESETS[model]
    func = getattr(preset, "func", preset)
    fixed = set(getattr(preset, "keywords", {}) or {})
    names = []
    for p in inspect.signature(func).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            system = getattr(cells.systems, func.__name__, None)
            if system is not None:
                names += [q.name for q in list(inspect.signature(system.__init__).parameters.values())[1:]
                          if q.kind is not q.VAR_KEYWORD]
        elif p.kind is not p.VAR_POSITIONAL:
            names.append(p.name)
    skip = {"input_size", "hidden_size"}
    return [n for n in dict.fromkeys(names) if n not in skip] + [n for n in fixed if n not in names]


def check_model_options(task: Task, spec: "FitSpec", hidden: int) -> dict:
    """The model's constructor keywords, after building it once on a 1-feature input (cheap, before any data is
    loaded): a FitError names an option the model does not take, with the accepted ones."""
    options = model_keywords(task, spec.model, spec.data_options, spec.model_options)
    try:
        torch.manual_seed(0)
        build_regressor(task, spec.model, 1, hidden, 1, options,
                        head={"embedding_size": 1} if task.vocabulary is not None else None)
    except TypeError as err:
        raise FitError(f"--model-option: {spec.model} with options {spec.model_options}: {err}; it accepts: "
                       f"{', '.join(accepted_options(spec.model))}") from None
    except ValueError as err:
        raise FitError(f"--model-option: {spec.model} with options {spec.model_options}: {err}") from None
    return options


def build_regressor(task: Task, model: str, input_size: int, hidden: int, output_size: int,
                    keywords: dict | None = None, head: dict | None = None, meta: dict | None = None) \
        -> SequenceRegressor:
    """The preset ``model`` with ``keywords`` (see :func:`model_keywords`) behind a linear readout: at every step,
    or at the last one for tasks whose target is ``"last"``. For a classification task ``output_size`` is its
    number of classes (the readout gives logits). On a task with ``time_gaps`` (the inputs' last feature is each
    sample's duration) a body that steps by it (:func:`~odelab.models.heads.takes_time_gaps`) takes one input
    feature less; the others read the gap as an input. ``head``: the head's settings (:meth:`FitSpec.head`);
    ``meta``: the data's, for a token task's vocabulary (``meta["vocabulary"]``, else the task's) and pretrained
    vectors (``meta["embedding"]``, frozen unless ``meta["freeze_embedding"]`` is False), a fixed input suffix
    (``meta["suffix"]``) and time gaps of the data's own (``meta["time_gaps"]``); a token task's body reads the
    embeddings (``input_size`` is not used)."""
    build = cells.PRESETS[model]
    keywords, head, meta = keywords or {}, dict(head or {}), meta or {}
    vectors = meta.get("embedding")
    if task.vocabulary is not None:
        head["vocabulary"] = int(meta.get("vocabulary", task.vocabulary))
        if vectors is not None:
            head.setdefault("embedding_size", int(vectors.shape[1]))
        if head.get("embedding_size") is None:
            raise ValueError(f"the task {task.name} has token inputs and needs an embedding size (a preset's "
                             f"embedding_size, --embedding-size, or pretrained vectors)")
        input_size = head["embedding_size"]
    if meta.get("suffix") is not None:
        head["suffix"] = meta["suffix"]
    time_gaps = bool(meta.get("time_gaps", task.time_gaps))  # a task's, or its data's (a CSV with a time column)
    if time_gaps:
        with torch.random.fork_rng():  # a probe: the real body below draws the same numbers as without it
            steps_by_gaps = takes_time_gaps(build(max(1, input_size - 1), hidden, **keywords))
        input_size -= steps_by_gaps
    regressor = SequenceRegressor(build(input_size, hidden, **keywords), hidden, output_size, task.target == "last",
                                  time_gaps=time_gaps, **head)
    if vectors is not None:
        regressor.load_embedding(torch.as_tensor(vectors, dtype=torch.float32), meta.get("freeze_embedding", True))
    return regressor


def output_size(task: Task, targets: torch.Tensor, meta: dict | None = None) -> int:
    """The readout's width: for a classification task its classes (logits): the data's ``meta["class_count"]`` where
    given (e.g. a vocabulary read from the files), else the task's; else the target features."""
    return int((meta or {}).get("class_count", task.classes)) if task.classification else targets.shape[-1]


def architecture(task: Task, input_size: int, output_size: int, head: dict, meta: dict) -> dict:
    """What rebuilding the model needs beside the run's task, model, hidden size and model options (JSON): the
    readout's sizes, the head's settings, and the shapes of the tensors the data lent the model (pretrained
    vectors, a fixed input suffix), whose values the checkpoint holds."""
    record = {"input_size": int(input_size), "output_size": int(output_size), "head": dict(head)}
    if task.vocabulary is not None:
        record["vocabulary"] = int(meta.get("vocabulary", task.vocabulary))
    for key in ("embedding", "suffix"):
        if meta.get(key) is not None:
            record[key] = list(torch.as_tensor(meta[key]).shape)
    if meta.get("embedding") is not None:
        record["freeze_embedding"] = bool(meta.get("freeze_embedding", True))
    if meta.get("time_gaps"):
        record["time_gaps"] = True
    return record


def check_classes(task: Task, splits: dict, classes: int | None = None) -> None:
    """FitError when a classification task's targets are not int64 class indices in 0 … classes − 1 (``classes``:
    the data's, else the task's) of shape (N,) (``target="last"``) or (N, T) (a class at every step)."""
    if not task.classification:
        return
    classes = classes or task.classes
    for split, (x, y) in splits.items():
        if y.dtype != torch.int64:
            raise FitError(f"task {task.name}: the {split} targets are {y.dtype}; a classification task needs int64 "
                           f"class indices (a float target is a regression target)")
        shape = tuple(x.shape[:1]) if task.target == "last" else tuple(x.shape[:2])
        if tuple(y.shape) != shape:
            raise FitError(f"task {task.name}: the {split} targets have shape {tuple(y.shape)}; expected {shape} "
                           f"(one class {'per sequence' if task.target == 'last' else 'per step'} for inputs "
                           f"{tuple(x.shape)})")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= classes):
            raise FitError(f"task {task.name}: the {split} targets hold classes {int(y.min())} … {int(y.max())}; "
                           f"expected 0 … {classes - 1}")


def run_fit(spec: FitSpec, data: dict | None = None) -> tuple[nn.Module, dict]:
    """Train ``spec.model`` on ``spec.task`` and return (the model at its best validation epoch, the result).

    ``data`` replaces the task's loader (``{"train"|"valid"|"test": (x, y)}``, e.g. a subset). With ``spec.out``
    the run writes results.json, curves.csv, the figures and a checkpoint every epoch, and prints its table
    (rank 0). Errors a user can fix raise :class:`FitError`.
    """
    task = spec.check()
    # a preset's data options (e.g. LRC's IMDB vocabulary) under the ones given
    spec = replace(spec, data_options={**task.presets[spec.preset].get("data_options", {}), **spec.data_options})
    hidden, config = spec.config(task)
    rank, world = rank_and_world()
    say = print if rank == 0 and spec.out is not None else (lambda *a, **k: None)
    out = Path(spec.out) if spec.out is not None else None
    rng = torch.get_rng_state()
    check_model_options(task, spec, hidden)
    torch.set_rng_state(rng)
    if out is not None and rank == 0:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise FitError(f"--out: cannot create the folder {out}: {err.strerror or err}") from None
    say(f"odelab fit {spec.task}: model {spec.model}, hidden {hidden}, preset {spec.preset}, {config.epochs} epochs, "
        f"seed {config.seed}, device {config.device}" + (f", {world} processes" if world > 1 else ""), flush=True)
    tic = time.perf_counter()
    if data is None:
        data = _load(task, spec, rank, world)
    splits = {k: data[k] for k in ("train", "valid", "test")}
    check_classes(task, splits, data.get("meta", {}).get("class_count"))
    say(f"data: {', '.join(f'{k} {tuple(v[0].shape)}' for k, v in splits.items())} "
        f"({time.perf_counter() - tic:.1f} s)", flush=True)
    meta = data.get("meta", {})
    if "columns" in meta:
        say(f"columns modelled: {', '.join(meta['columns'])}" + (" (increments)" if meta.get("difference") else ""))
    for note in meta.get("notes", []):
        say(f"  {note}")
    for warning in meta.get("warnings", []):
        if rank == 0:
            print(f"odelab: warning: {warning}", file=sys.stderr, flush=True)
    x_test, y_test = splits["test"]
    torch.manual_seed(config.seed)
    model_options = model_keywords(task, spec.model, spec.data_options, spec.model_options)
    if spec.engine == "cuda-graph" and not str(config.device).startswith("cuda"):
        raise FitError(f"--engine cuda-graph records CUDA graphs: it needs --device cuda, not {config.device}")
    sizes = architecture(task, x_test.shape[-1], output_size(task, y_test, meta), spec.head(task), meta)
    try:
        model = build_regressor(task, spec.model, sizes["input_size"], hidden, sizes["output_size"], model_options,
                                sizes["head"], meta)
        layers = [layer for layer in model.modules() if isinstance(layer, Recurrent)]
        if spec.engine in ("fused", "cuda-graph") and not layers:
            raise ValueError(f"--engine {spec.engine}: it has no odelab recurrent cell (Recurrent) for an engine to "
                             "run; leave --engine at auto")
        for layer in layers:
            layer.engine = spec.engine
            if spec.engine == "fused":  # refuse before training, not at the first batch
                layer.kernel(x_test[:1].to(device=config.device))
    except (TypeError, ValueError) as err:
        raise FitError(f"{spec.model} with options {model_options}: {err}") from None
    settings = run_settings(spec, task, hidden, model_options, meta)
    try:
        result = fit(model, splits, config, out_dir=out, resume=spec.resume, progress=spec.progress,
                     settings=settings, loss=task.loss)
    except NonFiniteLoss as err:
        raise FitError(f"training stopped: {err}", code=1) from None
    except CheckpointError as err:  # unreadable, or of other settings
        raise FitError(str(err)) from None
    except Interrupted as err:
        if err.checkpoint is None:
            raise FitError(f"interrupted after epoch {err.epochs}; nothing was saved", code=130) from None
        raise FitError(f"interrupted after epoch {err.epochs}; `--resume` continues from {err.checkpoint}",
                       code=130) from None
    result.update(task=spec.task, model=spec.model, engine=spec.engine, hidden_size=hidden, preset=spec.preset, target=task.target,
                  parameters=sum(p.numel() for p in model.parameters()), data_options=spec.data_options,
                  model_options=model_options, wall_seconds=time.perf_counter() - tic,
                  test_sequences=int(x_test.shape[0]), settings=settings, architecture=sizes)
    if out is not None and rank == 0:
        _report(task, spec, model, data, result, out)
    return model, result


def _load(task: Task, spec: FitSpec, rank: int, world: int) -> dict:
    import torch.distributed as dist

    try:
        if rank != 0:
            dist.barrier()  # rank 0 generates and caches the data first
        options = dict(spec.data_options)
        if "progress" in inspect.signature(task.load).parameters:  # a loader with long work to show (or not)
            options["progress"] = spec.progress and rank == 0
        data = task.load(spec.seed, **options)
        if rank == 0 and world > 1:
            dist.barrier()
    except (ValueError, OSError) as err:
        raise DataError(str(err)) from None
    return data


def run_settings(spec: FitSpec, task: Task, hidden: int, model_options: dict, meta: dict) -> dict:
    """What decides the result beside the training configuration, stored in the checkpoint and results.json; a
    resume must match it (the data file by its content, not its path; the seed is in the configuration)."""
    try:  # the loader's defaults, then the options set: every effective data option is compared
        parameters = list(inspect.signature(task.load).parameters.values())[1:]
    except (TypeError, ValueError):
        parameters = []
    defaults = {p.name: p.default for p in parameters if p.default is not p.empty and p.kind is p.POSITIONAL_OR_KEYWORD}
    data_options = {k: v for k, v in {**defaults, **spec.data_options}.items() if k not in ("path", "strict", "encoding", "progress")}
    settings = {"task": spec.task, "preset": spec.preset, "model": spec.model, "hidden_size": hidden,
                "model_options": model_options, **data_options}
    if spec.head(task):
        settings["head"] = spec.head(task)
    if "columns" in meta:
        settings["columns"] = list(meta["columns"])
    if "sha256" in meta:
        settings.update(data_sha256=meta["sha256"], data_file=meta.get("file"))
    return settings


def _report(task: Task, spec: FitSpec, model: nn.Module, data: dict, result: dict, out: Path) -> None:
    """results.json, curves.csv, the PNGs and the terminal table."""
    from .plots import (plot_classes, plot_curves, plot_forecast, plot_phase, plot_predictions, plot_scatter,
                        plot_symbols, plot_token_losses)

    x_test, y_test = data["test"]
    result["baselines"] = {name: baseline(data) for name, baseline in task.baselines.items()}
    if task.classification:
        result["baseline_metrics"] = {name: task.baseline_metrics.get(name, "accuracy") for name in task.baselines}
    model.cpu()
    if "meta" in data:  # without the tensors the model took (pretrained vectors, a suffix)
        result["data"] = {k: v for k, v in data["meta"].items() if not isinstance(v, torch.Tensor)}
    if task.report is not None:
        result.update(task.report(predict(model, x_test, result["config"]["eval_batch_size"], "cpu"), data))
    if task.summary is not None:
        result.update(task.summary(result))
    write_results(result, out)

    if task.classification:
        title = (f"{spec.task}: {spec.model} (test accuracy {100 * result['test_accuracy']:.1f} %, "
                 f"cross-entropy {result['test_loss']:.3g})")
    else:
        title = f"{spec.task}: {spec.model} (test RMSE {result['test_rmse']:.2e})"
    figure = "forecast.png" if task.plot == "forecast" else "predictions.png"
    if task.plot == "classes":
        plot_classes(model, x_test, y_test, output_size(task, y_test, data.get("meta")), out / figure,
                     title=title)
    elif task.plot == "symbols":
        plot_symbols(model, x_test, y_test, out / figure, title=title)
    elif task.plot == "tokens":
        plot_token_losses(model, x_test, y_test, out / figure, title=title)
    elif task.plot == "forecast":
        meta = data["meta"]
        if meta.get("difference"):
            meta = {**meta, "columns": [f"Δ {c}" for c in meta["columns"]]}
        plot_forecast(model, x_test, y_test, meta, out / figure, title=title)
    elif task.plot == "scatter":
        plot_scatter(model, x_test, y_test, out / figure, title=title)
    elif task.plot == "phase":
        plot_phase(model, x_test, y_test, out / figure, dt=task.sample_dt, title=title)
    else:
        plot_predictions(model, x_test, y_test, out / figure, dt=task.sample_dt, title=title)
    plot_curves(result["history"], out / "curves.png", title=title)
    print_table(result, out, figure)
