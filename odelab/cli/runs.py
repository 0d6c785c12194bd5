"""Reading a finished ``odelab fit`` run folder (results.json, checkpoint.pt) for the commands that analyse a trained
model (:mod:`odelab.training.saved`); every failure is a SystemExit naming the command and the file."""
from __future__ import annotations

from pathlib import Path

from ..training import saved


def load_state(path: Path, command: str):
    """A checkpoint's tensors (``weights_only``)."""
    try:
        return saved.read_checkpoint(path)
    except saved.RunError as err:
        raise SystemExit(f"odelab: {command}: {err}") from None


def load_run(run: Path, command: str):
    """(the trained model of the run's best validation epoch, in eval mode on the CPU; the run's results)."""
    try:
        return saved.load_run(run)
    except saved.RunError as err:
        raise SystemExit(f"odelab: {command}: --run: {err}") from None


def run_data(info: dict, command: str) -> dict:
    """The run's data, loaded again with its seed and data options."""
    try:
        return saved.run_data(info)
    except saved.RunError as err:
        raise SystemExit(f"odelab: {command}: {err}") from None
