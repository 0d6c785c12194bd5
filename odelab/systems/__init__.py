"""Vector fields: the learnable sequence models and the classical dynamical systems."""
from .base import FunctionSystem, StateDelay, System
from .classical import FitzHughNagumo, HarmonicOscillator, Lorenz63, Lorenz96, LotkaVolterra, VanDerPol
from .delay_oscillators import ENSO, MackeyGlass
from .cornn import CoRNN
from .graph import GradientGating, GraphCON
from .gru import GRU, MGU
from .lem import LEM, SingleScaleLEM
from .liquid import LRC, LTC, STC
from .oscillator import NeuralOscillator
from .taugru import DelayGRU, TauGRU
from .unicornn import UnICORNN

__all__ = ["System", "FunctionSystem", "StateDelay", "LEM", "SingleScaleLEM", "CoRNN", "UnICORNN", "NeuralOscillator", "LTC", "STC", "LRC", "GRU", "MGU", "FitzHughNagumo", "VanDerPol", "LotkaVolterra", "HarmonicOscillator", "Lorenz63", "Lorenz96", "TauGRU", "DelayGRU", "ENSO", "MackeyGlass", "GraphCON", "GradientGating"]
