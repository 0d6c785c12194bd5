"""Schemes and drivers: how a system is stepped."""
from .inputs import FunctionInput, Hold, InputPath, Linear
from .schemes import FIXED_SCHEMES, ExplicitRK, PartitionedEuler, Scheme
from .solution import Solution, SolveError, Status
from .solve import ADAPTIVE_METHODS, available_methods, solve
from . import adaptive  # registers dopri5, tsit5, bosh3 in ADAPTIVE_METHODS

__all__ = ["solve", "Solution", "SolveError", "Status", "Scheme", "ExplicitRK", "PartitionedEuler",
           "FIXED_SCHEMES", "ADAPTIVE_METHODS", "available_methods", "Hold", "Linear", "FunctionInput", "InputPath"]
