"""The table of fused kernels: (system class, scheme name, device type, reversible) -> where the kernel lives.

``reversible`` marks a kernel of the same (system, scheme) pair whose backward rebuilds the states with the
scheme's exact inverse instead of storing them (UnICORNN with symplectic Euler, 002 eq. 3.7): same call, same
results, memory O(input) instead of O(every state); it is asked for explicitly (``find(..., reversible=True)``).
"""
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
    reversible: bool = False
    gaps: bool = False  # also takes dt as a (batch, time) tensor of per-sample steps (irregular sampling)
    dropout: bool = False  # also takes state-dropout factors, ``drop=`` (batch, time · unfolds, 2, width)
    gap_grads: bool = False  # with gaps: also gives their gradient (a learned Δt, time gaps requiring grad)

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


REGISTRY: dict[tuple[type, str, str, bool], Implementation] = {}


def register(system: type, scheme: str, device: str, target: str,
             dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64), reversible: bool = False,
             gaps: bool = False, dropout: bool = False, gap_grads: bool = False) -> None:
    """Declare a kernel; ``target`` is ``"module:function"`` relative to this package (``".cuda.lem:run"``);
    ``gaps``: it also takes per-sample steps, ``dt`` a ``(batch, time)`` tensor (``gap_grads``: its backward also
    gives their gradient, so the gaps may require one: a learned Δt, say; else they must not); ``dropout``: it
    also takes state dropout (a one-block delay cell), ``drop=`` the factors ``(batch, time · unfolds, 2, width)``,
    each 0 or 1/(1 − p): ``drop[:, k, 0]`` multiplies the state sub-step k starts from, ``drop[:, k, 1]`` the
    delayed state it reads."""
    REGISTRY[(system, scheme, device, reversible)] = Implementation(system, scheme, device, target, dtypes, reversible,
                                                                    gaps, dropout, gap_grads)


def find(system, scheme: str, x: torch.Tensor, reversible: bool = False) -> Implementation | None:
    """The kernel for this exact system class, scheme name, and ``x``'s device type and dtype, if any; with
    ``reversible``, its variant with the inverse-step backward."""
    impl = REGISTRY.get((type(system), scheme, x.device.type, reversible))
    if impl is None or x.dtype not in impl.dtypes:
        return None
    return impl


