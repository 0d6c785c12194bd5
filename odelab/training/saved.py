"""A finished ``odelab fit`` run as a model again: :func:`load_run` rebuilds the trained
:class:`~odelab.models.SequenceRegressor` from the run folder's results.json and checkpoint.pt.

The model is rebuilt from what the run recorded (the task, the preset's model with the run's model options, which
may be constants no state dict holds, e.g. LEM's Δt, and the head) and then given the checkpoint's tensors. A run
records its readout's sizes under ``"architecture"`` (:func:`~odelab.training.run.architecture`); for a run
written before that record existed the sizes come from the task's data, loaded again with the run's seed and data
options (:func:`run_data`).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from ..data.tasks import TASKS
from ..models import SequenceRegressor, cells
from .run import architecture, build_regressor, output_size


class RunError(ValueError):
    """A run folder that cannot be loaded: the message names the file and what is wrong with it."""


def read_results(run: str | Path) -> dict:
    """The run's results.json, checked to name a task, a model and a hidden size."""
    path = Path(run) / "results.json"
    try:
        info = json.loads(path.read_text())
        if not all(isinstance(info.get(key), kind) for key, kind in (("task", str), ("model", str),
                                                                     ("hidden_size", int))):
            raise KeyError("task, model, hidden_size")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        stopped = not path.exists() and (Path(run) / "checkpoint.pt").is_file()
        raise RunError(f"{path} is missing or not the results of a finished `odelab fit` run "
                       f"({type(err).__name__})" + ("; the run stopped before its end: `odelab fit` with the same "
                                                    "options and --resume finishes it" if stopped else "")) from None
    if info["task"] not in TASKS or info["model"] not in cells.PRESETS:
        raise RunError(f"{path}: the run trained {info['model']!r} on {info['task']!r}, which this odelab does not "
                       "know")
    return info


def read_checkpoint(path: str | Path) -> object:
    """A checkpoint's contents, tensors only (``weights_only``)."""
    path = Path(path)
    if not path.is_file():
        raise RunError(f"no such checkpoint {str(path)!r}")
    try:
        with warnings.catch_warnings():  # e.g. torch's note on an unexpected pickle protocol
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # truncated (OSError, RuntimeError), random bytes (UnpicklingError), another format
        raise RunError(f"{path} is not a readable checkpoint ({type(err).__name__}: truncated or corrupt)") from None


def trained_state(run: str | Path, best: bool = True) -> dict:
    """The model state of checkpoint.pt: of the run's best validation epoch (``best``, the model a run reports
    and tests), else of its last epoch."""
    path = Path(run) / "checkpoint.pt"
    checkpoint = read_checkpoint(path)
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise RunError(f"{path} is not an odelab training checkpoint")
    return ((checkpoint.get("best") or {}).get("state") if best else None) or checkpoint["model"]


def run_data(info: dict) -> dict:
    """The data a run trained and was tested on (``info``: its results, :func:`load_run`'s second value): its task's
    loader with the run's seed and data options, ``{"train"|"valid"|"test": (x, y), "meta": ...}``."""
    try:
        return TASKS[info["task"]].load(info.get("config", {}).get("seed", 1234), **info.get("data_options", {}))
    except (ValueError, OSError, TypeError) as err:
        raise RunError(f"the run's data ({info['task']}, options {info.get('data_options', {})}): {err}") from None


def _sizes_from_data(info: dict) -> dict:
    """:func:`architecture` of a run that did not record it, from its task's data loaded again."""
    task = TASKS[info["task"]]
    data = run_data(info)
    x_test, y_test = data["test"]
    meta = data.get("meta") or {}
    head = (info.get("settings") or {}).get("head", {})
    return architecture(task, x_test.shape[-1], output_size(task, y_test, meta), head, meta)


def load_run(run: str | Path, *, best: bool = True, device: str | torch.device = "cpu") \
        -> tuple[SequenceRegressor, dict]:
    """(the trained model, the run's results) of an ``odelab fit`` run folder, the model in eval mode on
    ``device``: its best validation epoch's weights (the model whose test metric the results give), or the last
    epoch's with ``best=False``. The caller's random state is left as it was. :class:`RunError` names the file
    when the folder holds no finished run, an unreadable checkpoint, or weights of another model."""
    info = read_results(run)
    state = trained_state(run, best)
    sizes = info.get("architecture") or _sizes_from_data(info)
    meta = {key: torch.zeros(sizes[key]) for key in ("embedding", "suffix") if key in sizes}
    for key in ("vocabulary", "freeze_embedding", "time_gaps"):
        if key in sizes:
            meta[key] = sizes[key]
    with torch.random.fork_rng(devices=[]):
        try:
            model = build_regressor(TASKS[info["task"]], info["model"], sizes["input_size"], info["hidden_size"],
                                    sizes["output_size"], info.get("model_options"), sizes.get("head"), meta)
            model.load_state_dict(state)
        except (RuntimeError, TypeError, ValueError, KeyError) as err:
            raise RunError(f"{Path(run) / 'checkpoint.pt'} does not hold the weights of {info['model']} with hidden "
                           f"size {info['hidden_size']} and options {info.get('model_options')} "
                           f"({str(err).strip().splitlines()[0][:200]})") from None
    return model.to(device).eval(), info
