"""The table of fused kernels: (system class, scheme name, device type) -> where the kernel lives."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch


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
        return getattr(importlib.import_module(module, __package__), name)

    def available(self) -> bool:
        """False when the kernel's module cannot run here (e.g. its compiler or Triton is missing): the
        module's own ``available()`` decides; a module without one is always available."""
        try:
            module = importlib.import_module(self.target.partition(":")[0], __package__)
        except ImportError:  # e.g. a CUDA machine without Triton: the generic loop runs
            return False
        check = getattr(module, "available", None)
        return True if check is None else bool(check())


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


