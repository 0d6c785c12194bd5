"""Where odelab keeps what it builds or generates: ``$ODELAB_CACHE``, by default ``~/.cache/odelab`` (data sets,
the CPU kernels' shared library, torch.compile's generated code for ``compile=True``, the adaptive loop's compiled
Triton kernels)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$ODELAB_CACHE`` or ``~/.cache/odelab``."""
    return Path(os.environ.get("ODELAB_CACHE", Path.home() / ".cache" / "odelab"))


def keep_compiled_code() -> None:
    """Put torch.compile's inductor cache (generated kernels, compiled graphs) under ``$ODELAB_CACHE/inductor``,
    which outlives ``/tmp``, unless ``TORCHINDUCTOR_CACHE_DIR`` is set (by the user, or by torch itself once
    something in this process imported torch._dynamo or compiled, which fixes it): ``compile=True``'s first call
    in a later process then loads, not compiles."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))


def keep_triton_code() -> None:
    """Put Triton's cache of compiled kernels under ``$ODELAB_CACHE/triton`` unless ``TRITON_CACHE_DIR`` is set
    (Triton reads it when it compiles, so this works after Triton was imported)."""
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache_root() / "triton"))


def inductor_options() -> dict[str, bool]:
    """torch.compile options for odelab's compiled steps, which are called thousands of times per solve on small
    tensors, so that per-call overhead counts:

    - no size asserts: inductor's wrapper checks every input's sizes and strides on each call, which dynamo's
      guards have already checked (Van der Pol sweep, 256 samples, ~940 compiled steps: 0.164 → 0.157 s);
    - the CPU kernels are built without inductor's precompiled header. With it, every process preprocesses the
      header again (a g++ -E run, ~0.3 s of a later process's first call) before it even looks the kernel up;
      without it the kernel's first build takes 7-8 s of g++ CPU instead of 5-6 s where the header is already
      precompiled, 13-15 s where it is not (FHN dopri5 step)."""
    from torch._inductor import config

    options = {"size_asserts": False}
    if hasattr(config, "cpp_cache_precompile_headers"):
        options["cpp_cache_precompile_headers"] = False
    return options
