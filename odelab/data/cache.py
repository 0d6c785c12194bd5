"""On-disk cache for generated data sets: atomic writes, ``weights_only`` loads."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import torch


def cache_dir() -> Path:
    """``$ODELAB_CACHE`` or ``~/.cache/odelab``."""
    return Path(os.environ.get("ODELAB_CACHE", Path.home() / ".cache" / "odelab"))


def atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary file in the same folder, then rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached(name: str, config: dict, build: Callable[[], dict], directory: Path | None = None) -> dict:
    """Load ``name`` generated with ``config`` from the cache, or build, save and return it."""
    key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(directory or cache_dir()) / f"{name}-{key}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    data = build()
    atomic_save(data, path)
    return data
