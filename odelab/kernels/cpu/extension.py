"""Build-on-first-use of the CPU kernels' C++ source (:mod:`.source`), cached per machine.

The source is plain C++17 on raw pointers, so it needs a C++ compiler (``$CXX``, else ``c++``/``g++``) and
nothing else: no ninja, no pybind11, no torch headers. It is compiled in one call (2-5 s on 2 cores) into
``$ODELAB_CACHE/torch_extensions/odelab_cpu_<key>.so`` (``$ODELAB_CACHE`` defaults to ``~/.cache/odelab``), the
key hashing the source, the flags, the compiler, torch's version and the CPU's instruction sets (the build uses
``-march=native``), and loaded with :mod:`ctypes`. It links against ``libtorch_cpu`` for the BLAS inside it
(MKL's ``sgemm_``/``dgemm_``); without those symbols the kernels use their own loops.

:func:`available` builds (once per process) and returns whether the library loaded; a failure warns once with
the reason and the callers fall back to the generic path. ``ODELAB_CPU_KERNELS=0`` disables the kernels.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

from ...solvers import cache as solver_cache
from .source import SOURCE

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failure: str | None = None
_done = False
build_seconds: float | None = None  # wall time of this process's compile (None: loaded from the cache)
library_path: Path | None = None

# -fno-math-errno -fno-trapping-math (as torch's own build): lets GCC vectorise the branch-free gate loops;
# no -ffast-math (the kernels must keep IEEE semantics to match the generic path to 1e-10 in float64)
FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]


def cache_root() -> Path:
    """``$ODELAB_CACHE/torch_extensions`` (``$ODELAB_CACHE`` defaults to ``~/.cache/odelab``), as the data cache."""
    return solver_cache.cache_root() / "torch_extensions"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_signature() -> str:
    """The instruction sets of this CPU (the build uses -march=native, so a cache shared between machines
    must not hand one machine's library to another)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _native_flags(compiler: str) -> list[str]:
    """-march=native where the compiler accepts it (x86-64 and arm64 gcc/clang)."""
    try:
        ok = subprocess.run([compiler, "-march=native", "-x", "c++", "-E", "-", "-o", os.devnull], input=b"",
                            capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return ["-march=native"] if ok else []


def _build() -> ctypes.CDLL:
    global build_seconds, library_path
    if sys.platform.startswith("win"):
        raise RuntimeError("the CPU kernels are built with a Unix C++ toolchain; none on Windows")
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C++ compiler found (set $CXX or install g++)")
    torch_lib = Path(torch.__file__).parent / "lib"
    flags = FLAGS + _native_flags(compiler)
    # link libtorch_cpu for its BLAS (--no-as-needed: the references are weak, the linker would drop it)
    if (torch_lib / "libtorch_cpu.so").exists():
        links = [f"-L{torch_lib}", "-Wl,--no-as-needed", "-ltorch_cpu", f"-Wl,-rpath,{torch_lib}"]
    elif sys.platform == "darwin":
        links = ["-undefined", "dynamic_lookup"]  # weak symbols resolved in the process, else the plain loops
    else:
        links = []
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise RuntimeError(f"the C++ compiler {compiler} does not run: {err}") from err
    key = hashlib.sha256("\n".join([SOURCE, " ".join(flags + links), version, torch.__version__, _cpu_signature(),
                                    platform.machine()]).encode()).hexdigest()[:16]
    root = cache_root()
    path = root / f"odelab_cpu_{key}.so"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix="build-") as tmp:
            src = Path(tmp) / "odelab_cpu.cpp"
            src.write_text(SOURCE)
            out = Path(tmp) / path.name
            tic = time.perf_counter()
            proc = subprocess.run([compiler, *flags, str(src), "-o", str(out), *links], capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"compiling the CPU kernels failed ({compiler}):\n{proc.stderr[-2000:]}")
            build_seconds = time.perf_counter() - tic
            os.replace(out, path)  # atomic: a concurrent build of the same key writes the same file
    library = ctypes.CDLL(str(path))
    library_path = path
    return library


def available() -> bool:
    """Whether the compiled CPU kernels can run here (builds them on the first call; warns once on failure)."""
    global _library, _failure, _done
    if _done:
        return _library is not None
    with _lock:
        if not _done:
            if os.environ.get("ODELAB_CPU_KERNELS", "1").strip().lower() in ("0", "false", "no", "off"):
                _failure = "disabled by ODELAB_CPU_KERNELS=0"
            else:
                try:
                    _library = _build()
                except Exception as err:  # noqa: BLE001 -- any failure means: use the generic path
                    _failure = str(err)
                    warnings.warn(f"odelab: the fused CPU kernels are unavailable, using the generic path: {err}",
                                  RuntimeWarning, stacklevel=2)
            _done = True
    return _library is not None


def failure() -> str | None:
    """Why :func:`available` is False (None when the kernels loaded or were not tried yet)."""
    return _failure


def library() -> ctypes.CDLL:
    if not available():
        raise RuntimeError(f"the fused CPU kernels are unavailable: {_failure}")
    return _library


def call(name: str, tensors, sizes=(), scalars=()) -> None:
    """``NAME(f64, sizes, pointers, scalars)`` of the C++ source: ``tensors`` (or None for a null pointer) must
    be contiguous CPU tensors of one dtype, float32 or float64 (the caller guarantees it)."""
    lib = library()
    dtype = next(t.dtype for t in tensors if t is not None)
    n = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
    p = (ctypes.c_void_p * len(tensors))(*[None if t is None else t.data_ptr() for t in tensors])
    s = (ctypes.c_double * max(len(scalars), 1))(*scalars)
    getattr(lib, name)(ctypes.c_int(dtype == torch.float64), n, p, s)


def set_blas_threshold(flops: int) -> None:
    """Products with M·N·K at or above ``flops`` go to the BLAS, smaller ones run as plain loops."""
    library().odelab_set_blas_threshold(ctypes.c_int64(flops))
