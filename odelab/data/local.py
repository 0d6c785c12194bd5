"""The folder a task reads its files from (``odelab fit TASK --data-root PATH``): odelab never downloads a data set."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def local_root(root: str | Path | None, reads: str) -> Path:
    """``root`` as a folder; ValueError when none was given (``reads``: what the task reads, for the message),
    FileNotFoundError when it is not a folder."""
    if root is None:
        raise ValueError(f"path: {reads} from a local folder (--data-root PATH); nothing is downloaded")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"--data-root {str(root)!r}: no such folder")
    return root


def finite_numbers(tokens: list[str], where: str, missing_hint: str = "") -> np.ndarray:
    """``tokens`` as float64; ValueError starting with ``where`` (the file and line) naming the first token that is
    not a number (with ``missing_hint`` when it is ``?``, the UEA files' missing-value marker) or the first
    non-finite value."""
    try:
        values = np.array(tokens, dtype=np.float64)
    except ValueError:
        bad = next(t.strip() for t in tokens if not _is_number(t))
        raise ValueError(f"{where}: {bad[:30]!r} is not a number{missing_hint if bad == '?' else ''}") from None
    if not np.isfinite(values).all():
        raise ValueError(f"{where}: a non-finite value ({values[~np.isfinite(values)][0]})")
    return values


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False
