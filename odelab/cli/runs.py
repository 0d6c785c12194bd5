"""Reading a finished ``odelab fit`` run folder (results.json, checkpoint.pt) for the commands that analyse a trained
model; every failure is a SystemExit naming the command and the file."""
from __future__ import annotations

import json
from pathlib import Path

import torch


def load_state(path: Path, command: str):
    """A checkpoint's tensors (``weights_only``)."""
    if not path.is_file():
        raise SystemExit(f"odelab: {command}: no such checkpoint {str(path)!r}")
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # truncated, random bytes, another format
        raise SystemExit(f"odelab: {command}: {path} is not a readable checkpoint ({type(err).__name__}: "
                         "truncated or corrupt)") from None


def read_run(run: Path, command: str) -> dict:
    """The run's results.json, checked to hold task, model and hidden_size."""
    try:
        info = json.loads((run / "results.json").read_text())
        if not all(isinstance(info.get(key), kind) for key, kind in (("task", str), ("model", str), ("hidden_size", int))):
            raise KeyError("task, model, hidden_size")
        return info
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise SystemExit(f"odelab: {command}: --run: {run / 'results.json'} is missing or not the results of an "
                         f"`odelab fit` run ({type(err).__name__})") from None


def best_state(run: Path, command: str) -> dict:
    """The model state of the run's best validation epoch (else its last) from checkpoint.pt."""
    checkpoint = load_state(run / "checkpoint.pt", command)
    if not isinstance(checkpoint, dict) or "model" not in checkpoint:
        raise SystemExit(f"odelab: {command}: --run: {run / 'checkpoint.pt'} is not an odelab training checkpoint")
    return (checkpoint.get("best") or {}).get("state") or checkpoint["model"]
