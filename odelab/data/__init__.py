"""Sequence tasks, generated offline with odelab's solvers and cached on disk."""
from .adding import adding
from .csv_series import csv_series
from .delay_oscillators import enso, mackey_glass
from .fhn import fitzhugh_nagumo
from .neural_ode import duffing, spiral

__all__ = ["fitzhugh_nagumo", "enso", "mackey_glass", "adding", "spiral", "duffing", "csv_series"]
