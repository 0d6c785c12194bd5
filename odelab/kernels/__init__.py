"""Fused implementations of one (system, scheme) pair: derived from the definition, never a second one.

A kernel runs a whole sequence of ``Recurrent(system, scheme, dt, unfolds)`` at once::

    kernel(system, x, state, dt, unfolds, lags) -> (outputs, final_state)

with ``x`` the raw input ``(batch, time, input)``, ``state`` the initial state tuple, ``lags`` the ring-buffer
offsets m_i = ⌊τ_i/h⌋ of a delay system (``()`` otherwise). It returns exactly what the generic loop returns
(``odelab.models.Recurrent`` with ``engine="generic"``), values and gradients, and is tested against it.

Kernels are registered here by *module path*, so nothing is imported until a kernel is used: a CPU-only
install never imports Triton. A kernel applies to the registered system class itself (a user subclass may
change the field, so it falls back to the generic loop).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

from .. import systems


@dataclass(frozen=True)
class Implementation:
    """Where the kernel for (``system``, ``scheme``) on ``device`` lives: ``target`` = "module:function"."""

    system: type
    scheme: str
    device: str
    target: str
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64)

    def load(self) -> Callable:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module, __name__), name)


REGISTRY: dict[tuple[type, str, str], Implementation] = {}


def register(system: type, scheme: str, device: str, target: str,
             dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64)) -> None:
    """Declare a kernel; ``target`` is ``"module:function"`` relative to this package (``".cuda.lem:run"``)."""
    REGISTRY[(system, scheme, device)] = Implementation(system, scheme, device, target, dtypes)


def find(system, scheme: str, x: torch.Tensor) -> Implementation | None:
    """The kernel for this exact system class, scheme name, and ``x``'s device type and dtype, if any."""
    impl = REGISTRY.get((type(system), scheme, x.device.type))
    if impl is None or x.dtype not in impl.dtypes:
        return None
    return impl


# The tables: each registers module paths only (importing them imports neither Triton nor a compiler).
from . import cpu, cuda  # noqa: E402,F401

__all__ = ["Implementation", "REGISTRY", "register", "find"]
