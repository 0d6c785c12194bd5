"""Vector fields: the learnable sequence models and the classical dynamical systems."""
from .base import FunctionSystem, System
from .classical import FitzHughNagumo, HarmonicOscillator, LotkaVolterra, VanDerPol
from .lem import LEM

__all__ = ["System", "FunctionSystem", "LEM", "FitzHughNagumo", "VanDerPol", "LotkaVolterra", "HarmonicOscillator"]
