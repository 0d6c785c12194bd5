"""Sequence models: ``Recurrent`` (a system + a scheme + a step), the published cells (``cells``), the UnICORNN
stack, torch.nn baselines and readout heads."""
from . import cells
from .baselines import GRU, LSTM, RNN
from .cells import PRESETS, build
from .heads import SequenceRegressor
from .recurrent import Recurrent
from .unicornn import ReversibleUnICORNN, UnICORNNStack

__all__ = ["Recurrent", "cells", "PRESETS", "build", "SequenceRegressor", "UnICORNNStack", "ReversibleUnICORNN",
           "LSTM", "GRU", "RNN"]
