"""On-disk cache for generated data sets: atomic writes, ``weights_only`` loads; an unreadable cache file
(truncated, corrupt) is named on stderr, deleted and generated again."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import torch

from ..solvers.cache import cache_root


def cache_dir() -> Path:
    """``$ODELAB_CACHE`` or ``~/.cache/odelab``."""
    return cache_root()


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
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                data = torch.load(path, weights_only=True)
        except Exception as err:  # truncated, random bytes, another format: the cache is regenerated
            data, reason = None, type(err).__name__
        else:
            reason = None if isinstance(data, dict) else f"a {type(data).__name__}, not a dict"
        if reason is None:
            return data
        print(f"odelab: the cached data file {path} is unreadable ({reason}: truncated or corrupt); "
              "deleting it and generating the data again", file=sys.stderr, flush=True)
        path.unlink(missing_ok=True)
    data = build()
    atomic_save(data, path)
    return data
