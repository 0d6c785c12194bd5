"""Build-on-first-use of the CPU kernels' C++ source (:mod:`.source`), cached per machine.

The source is plain C++17 on raw pointers, compiled in one call (2-5 s on 2 cores) by
:class:`odelab.solvers.native.NativeLibrary` into ``$ODELAB_CACHE/torch_extensions/odelab_cpu_<key>.so`` and loaded
with :mod:`ctypes`. It links against ``libtorch_cpu`` for the BLAS inside it (MKL's ``sgemm_``/``dgemm_``); without
those symbols the kernels use their own loops.

:func:`available` builds (once per process) and returns whether the library loaded; a failure warns once with
the reason and the callers fall back to the generic path. ``ODELAB_CPU_KERNELS=0`` disables the kernels.
"""
from __future__ import annotations

import ctypes

import torch

from ...solvers.native import NativeLibrary
from .source import SOURCE

LIBRARY = NativeLibrary("odelab_cpu", SOURCE, link_torch=True, optional_flags=("-fopenmp",))


def available() -> bool:
    """Whether the compiled CPU kernels can run here (builds them on the first call; warns once on failure)."""
    return LIBRARY.available()


def failure() -> str | None:
    """Why :func:`available` is False (None when the kernels loaded or were not tried yet)."""
    return LIBRARY.failure()


def library() -> ctypes.CDLL:
    return LIBRARY.library()


def call(name: str, tensors, sizes=(), scalars=()) -> None:
    """``NAME(f64, sizes, pointers, scalars)`` of the C++ source: ``tensors`` (or None for a null pointer) must
    be contiguous CPU tensors of one dtype, float32 or float64. The C++ side reads them as raw arrays of that
    dtype, so another dtype or a strided tensor is refused here (RuntimeError) rather than read out of bounds."""
    dtype = next(t.dtype for t in tensors if t is not None)
    if dtype not in _FLOATS or any(_misread(t, dtype) for t in tensors):
        _refuse(name, tensors, dtype)
    _follow_torch_threads()
    LIBRARY.call(name, tensors, sizes, scalars)


_threads = [1]  # the thread count the library was last given


def _follow_torch_threads() -> None:
    """The kernels split their batch rows between torch's threads (``torch.set_num_threads``), as its ops do."""
    threads = torch.get_num_threads()
    if threads != _threads[0]:
        library().odelab_set_threads(ctypes.c_int(threads))
        _threads[0] = threads


_FLOATS = (torch.float32, torch.float64)


def _misread(t, dtype: torch.dtype) -> bool:
    """Whether the C++ side would misread ``t`` (None: a null pointer, fine) as a contiguous array of ``dtype``."""
    return t is not None and (t.dtype is not dtype or not t.is_contiguous())


def _refuse(name: str, tensors, dtype: torch.dtype) -> None:
    if dtype not in _FLOATS:
        raise RuntimeError(f"odelab: CPU kernel {name}: takes float32 or float64 tensors, got {dtype}")
    i, t = next((i, t) for i, t in enumerate(tensors) if _misread(t, dtype))
    raise RuntimeError(f"odelab: CPU kernel {name}: argument {i} is a {t.dtype} tensor (contiguous: "
                       f"{t.is_contiguous()}); the kernel takes contiguous tensors of one dtype ({dtype})")


def set_blas_threshold(flops: int) -> None:
    """Products with M·N·K at or above ``flops`` go to the BLAS, smaller ones run as plain loops (float32 products
    on a CPU with AVX-512 run as the kernels' register blocks at every size, unless :func:`set_simd` turns them off)."""
    library().odelab_set_blas_threshold(ctypes.c_int64(flops))


def has_simd() -> bool:
    """Whether the float32 products run as the kernels' AVX-512 register blocks (compiled where the CPU has it)."""
    return bool(library().odelab_has_simd())


def set_simd(on: bool) -> None:
    """Float32 products to the AVX-512 register blocks (True, the default where compiled) or, as without AVX-512, to
    the BLAS and the loops."""
    library().odelab_set_simd(int(on))
