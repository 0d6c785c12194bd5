"""Schemes and drivers: how a system is stepped. ``solve`` (solve.py) dispatches to the drivers: fixed.py (ODEs),
fixed_delay.py (DDEs, method of steps), adaptive.py (embedded RK pairs); breakpoints.py says where every
driver must step (input knots, ``tstops``/``jump_times``, their propagation through delays), reverse.py turns a
solve backwards in time into a forward one; recurrence.py is the sequence loop of a recurrent model."""
from .adaptive import ADAPTIVE_METHODS
from .derivatives import SecondDerivativeError
from .events import Event
from .inputs import FunctionInput, Hold, InputPath, Linear
from .recurrence import DelayedState, run_sequence
from .schemes import FIXED_SCHEMES, ExplicitRK, PartitionedEuler, Scheme, resolve_scheme
from .solution import Solution, SolveError, Status
from .solve import available_methods, solve

__all__ = ["solve", "Solution", "Event", "SolveError", "SecondDerivativeError", "Status", "Scheme", "ExplicitRK",
           "PartitionedEuler", "FIXED_SCHEMES", "ADAPTIVE_METHODS", "available_methods", "resolve_scheme",
           "run_sequence", "DelayedState", "Hold", "Linear", "FunctionInput", "InputPath"]
