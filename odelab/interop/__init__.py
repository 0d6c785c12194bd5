"""Adapters to other libraries: odelab systems as torchdiffeq and torchdde vector fields."""
from .torchdde import TorchDDEField, torchdde_system
from .torchdiffeq import TorchdiffeqFunc, torchdiffeq_func

__all__ = ["torchdiffeq_func", "TorchdiffeqFunc", "torchdde_system", "TorchDDEField"]
