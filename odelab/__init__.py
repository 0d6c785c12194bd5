"""odelab: continuous-time neural ODE and delay-equation sequence models in PyTorch.

The public API is what this module exports (``__all__``); everything else is internal and may move. Layers, each
importing only those before it: ``systems`` (vector fields) ← ``solvers`` (schemes, drivers, ``solve``) ←
``kernels`` (fused implementations of one system–scheme pair) ← ``models`` (``Recurrent``, the published cells)
← ``interop``, ``data`` ← ``training`` ← ``analysis`` ← ``cli``.
"""
import sys as _sys

from . import interop, systems
from .models import Recurrent, SequenceRegressor, UnICORNNStack, cells
from .solvers import DelayedState, SecondDerivativeError, Solution, SolveError, Status, solve
from .training import RunError, TrainConfig, fit, load_run

_sys.modules[__name__ + ".cells"] = cells  # `import odelab.cells` / `from odelab.cells import LEM`, as documented

__version__ = "0.1.0"
__all__ = ["solve", "Solution", "SolveError", "SecondDerivativeError", "Status", "Recurrent", "UnICORNNStack", "cells",
           "systems", "interop", "fit", "TrainConfig", "SequenceRegressor", "DelayedState",
           "load_run", "RunError"]
