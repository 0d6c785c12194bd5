"""odelab: continuous-time neural ODE and delay-equation sequence models in PyTorch."""
from . import cells, systems
from .models import Recurrent
from .solvers import Solution, SolveError, Status, solve

__version__ = "0.1.0"
__all__ = ["solve", "Solution", "SolveError", "Status", "Recurrent", "cells", "systems"]
