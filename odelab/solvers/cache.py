"""Where odelab keeps what it builds or generates: ``$ODELAB_CACHE``, by default ``~/.cache/odelab`` (data sets,
the CPU kernels' shared library, torch.compile's generated code for ``compile=True``)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$ODELAB_CACHE`` or ``~/.cache/odelab``."""
    return Path(os.environ.get("ODELAB_CACHE", Path.home() / ".cache" / "odelab"))


def keep_compiled_code() -> None:
    """Put torch.compile's inductor cache (generated kernels, compiled graphs) under ``$ODELAB_CACHE/inductor``,
    which outlives ``/tmp``, unless ``TORCHINDUCTOR_CACHE_DIR`` is set (by the user, or by a compilation earlier
    in this process, which fixes it): ``compile=True``'s first call in a later process then loads, not compiles."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
