"""C++ sources compiled on first use into a shared library cached per machine, called through :mod:`ctypes`.

A source is plain C++17 on raw pointers (no torch headers, no pybind11), so it needs a C++ compiler (``$CXX``,
else ``c++``/``g++``/``clang++``) and nothing else, and compiles in seconds. The library lands in
``$ODELAB_CACHE/torch_extensions/NAME_<key>.so``, the key hashing the source, the flags, the compiler, torch's
version and the CPU's instruction sets (the build uses ``-march=native``). Every exported function has the form
``NAME(f64, sizes, pointers, scalars)`` (:meth:`NativeLibrary.call`). ``ODELAB_CPU_KERNELS=0`` disables them all;
a failed build warns once with the reason and the callers use their generic torch path.
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

from .cache import cache_root as _cache_root

# -fno-math-errno -fno-trapping-math (as torch's own build): lets GCC vectorise the branch-free loops; no
# -ffast-math (the kernels keep IEEE semantics, to match the generic path to 1e-10 in float64)
FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]


def cache_root() -> Path:
    """``$ODELAB_CACHE/torch_extensions`` (``$ODELAB_CACHE`` defaults to ``~/.cache/odelab``), as the data cache."""
    return _cache_root() / "torch_extensions"


def disabled() -> bool:
    return os.environ.get("ODELAB_CPU_KERNELS", "1").strip().lower() in ("0", "false", "no", "off")


def compiler() -> str | None:
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


def _native_flags(cxx: str) -> list[str]:
    """-march=native where the compiler accepts it (x86-64 and arm64 gcc/clang)."""
    try:
        ok = subprocess.run([cxx, "-march=native", "-x", "c++", "-E", "-", "-o", os.devnull], input=b"",
                            capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return ["-march=native"] if ok else []


class NativeLibrary:
    """One C++ source, built and loaded once per process on the first :meth:`available` call.

    ``link_torch``: link ``libtorch_cpu`` for the BLAS inside it (MKL's ``sgemm_``/``dgemm_``, declared weak in
    the source). ``flags``: extra compiler flags (e.g. ``-ffp-contract=off`` where results must match torch's
    rounding step by step); ``optional_flags``: tried first, dropped when the build fails with them (``-fopenmp``:
    a compiler without OpenMP builds the serial kernels, whose pragmas it ignores)."""

    def __init__(self, name: str, source: str, *, link_torch: bool = False, flags: tuple[str, ...] = (),
                 optional_flags: tuple[str, ...] = ()):
        self.name, self.source, self.link_torch, self.extra_flags = name, source, link_torch, list(flags)
        self.optional_flags = list(optional_flags)
        self.flags: list[str] = []  # the flags of the loaded build
        self._lock = threading.Lock()
        self._library: ctypes.CDLL | None = None
        self._failure: str | None = None
        self._done = False
        self._functions: dict[str, ctypes._CFuncPtr] = {}
        self.build_seconds: float | None = None  # wall time of this process's compile (None: loaded from the cache)
        self.path: Path | None = None

    def _build(self) -> ctypes.CDLL:
        if sys.platform.startswith("win"):
            raise RuntimeError("the CPU kernels are built with a Unix C++ toolchain; none on Windows")
        cxx = compiler()
        if cxx is None:
            raise RuntimeError("no C++ compiler found (set $CXX or install g++)")
        torch_lib = Path(torch.__file__).parent / "lib"
        flags = FLAGS + self.extra_flags + _native_flags(cxx)
        links = []
        if self.link_torch:  # --no-as-needed: the references are weak, the linker would drop the library
            if (torch_lib / "libtorch_cpu.so").exists():
                links = [f"-L{torch_lib}", "-Wl,--no-as-needed", "-ltorch_cpu", f"-Wl,-rpath,{torch_lib}"]
            elif sys.platform == "darwin":
                links = ["-undefined", "dynamic_lookup"]  # weak symbols resolved in the process, else plain loops
        try:
            version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as err:
            raise RuntimeError(f"the C++ compiler {cxx} does not run: {err}") from err
        # with the optional flags first (OpenMP), then without them; a failed build leaves a marker so that later
        # processes do not retry it
        error = ""
        for extra in ([self.optional_flags, []] if self.optional_flags else [[]]):
            key = hashlib.sha256("\n".join([self.source, " ".join(flags + extra + links), version, torch.__version__,
                                            _cpu_signature(), platform.machine()]).encode()).hexdigest()[:16]
            root = cache_root()
            path = root / f"{self.name}_{key}.so"
            failed = path.with_suffix(".failed")
            if path.exists():
                break
            if failed.exists():
                error = failed.read_text()
                continue
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=root, prefix="build-") as tmp:
                src = Path(tmp) / f"{self.name}.cpp"
                src.write_text(self.source)
                out = Path(tmp) / path.name
                tic = time.perf_counter()
                proc = subprocess.run([cxx, *flags, *extra, str(src), "-o", str(out), *links], capture_output=True,
                                      text=True)
                if proc.returncode != 0:
                    error = f"compiling {self.name} failed ({cxx} {' '.join(extra)}):\n{proc.stderr[-2000:]}"
                    failed.write_text(error)
                    continue
                self.build_seconds = time.perf_counter() - tic
                os.replace(out, path)  # atomic: a concurrent build of the same key writes the same file
                break
        else:
            raise RuntimeError(error)
        self.flags = flags + extra + links
        library = ctypes.CDLL(str(path))
        self.path = path
        return library

    def available(self) -> bool:
        """Whether the library runs here (builds it on the first call; warns once on failure)."""
        if self._done:
            return self._library is not None
        with self._lock:
            if not self._done:
                if disabled():
                    self._failure = "disabled by ODELAB_CPU_KERNELS=0"
                else:
                    try:
                        self._library = self._build()
                    except Exception as err:  # noqa: BLE001 -- any failure means: use the generic path
                        self._failure = str(err)
                        warnings.warn(f"odelab: the fused CPU kernels ({self.name}) are unavailable, using the "
                                      f"generic path: {err}", RuntimeWarning, stacklevel=3)
                self._done = True
        return self._library is not None

    def failure(self) -> str | None:
        """Why :meth:`available` is False (None when the library loaded or was not tried yet)."""
        return self._failure

    def library(self) -> ctypes.CDLL:
        if not self.available():
            raise RuntimeError(f"the fused CPU kernels ({self.name}) are unavailable: {self._failure}")
        return self._library

    def call(self, name: str, tensors, sizes=(), scalars=()) -> None:
        """``NAME(f64, sizes, pointers, scalars)`` of the source: ``tensors`` (None for a null pointer) must be
        contiguous CPU tensors; f64 says whether the first of them is float64 (the caller guarantees the dtypes
        the kernel reads: its templated arrays in that dtype, float32 or float64)."""
        function = self._functions.get(name)
        if function is None:
            function = self._functions[name] = getattr(self.library(), name)
        dtype = next(t.dtype for t in tensors if t is not None)
        n = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
        p = (ctypes.c_void_p * len(tensors))(*[None if t is None else t.data_ptr() for t in tensors])
        s = (ctypes.c_double * max(len(scalars), 1))(*scalars)
        function(ctypes.c_int(dtype == torch.float64), n, p, s)
