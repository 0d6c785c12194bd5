"""Fused implementations of one (system, scheme) pair: derived from the definition, never a second one.

A kernel runs a whole sequence of ``Recurrent(system, scheme, dt, unfolds)`` at once::

    kernel(system, x, state, dt, unfolds, lags) -> (outputs, final_state)

with ``x`` the raw input ``(batch, time, input)``, ``state`` the initial state tuple, ``lags`` the ring-buffer
offsets m_i = ⌊τ_i/h⌋ of a delay system (``()`` otherwise); a kernel registered with ``gaps=True`` also takes ``dt``
as a ``(batch, time)`` tensor of per-sample steps (irregular sampling; with ``gap_grads=True`` its backward gives
their gradient too), one with ``dropout=True`` the keyword ``drop=``, state-dropout factors
(``registry.register``). It returns exactly what the generic loop returns
(``odelab.models.Recurrent`` with ``engine="generic"``), values and gradients, and is tested against it. A kernel
module may define ``available() -> bool`` (its compiler or Triton is missing: False, and the generic loop runs).

Kernels are registered here by *module path*, so nothing is imported until a kernel is used: a CPU-only
install never imports Triton. A kernel applies to the registered system class itself (a user subclass may
change the field, so it falls back to the generic loop).
"""

from .registry import REGISTRY, Implementation, find, register

# The tables: each registers module paths only (importing them imports neither Triton nor a compiler).
from . import cpu, cuda  # noqa: E402,F401

__all__ = ["Implementation", "REGISTRY", "register", "find"]
