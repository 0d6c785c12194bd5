"""Sequence tasks, generated offline with odelab's solvers and cached on disk."""
from .fhn import fitzhugh_nagumo

__all__ = ["fitzhugh_nagumo"]
