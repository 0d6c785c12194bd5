"""The folder a task reads its files from (``odelab fit TASK --data-root PATH``): odelab never downloads a data set."""
from __future__ import annotations

from pathlib import Path


def local_root(root: str | Path | None, reads: str) -> Path:
    """``root`` as a folder; ValueError when none was given (``reads``: what the task reads, for the message),
    FileNotFoundError when it is not a folder."""
    if root is None:
        raise ValueError(f"path: {reads} from a local folder (--data-root PATH); nothing is downloaded")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"--data-root {str(root)!r}: no such folder")
    return root
