"""Sequence models: ``Recurrent`` (a system + a scheme + a step), the published cells (``cells``), the UnICORNN
stack, torch.nn baselines, the MLP and LRC neural ODEs and readout heads."""
from . import cells
from .baselines import GRU, LSTM, RNN
from .cells import PRESETS, build
from .heads import SequenceRegressor
from .lrc_ode import LRCODE
from .neural_ode import NeuralODE
from .recurrent import Recurrent
from .unicornn import ReversibleUnICORNN, UnICORNNStack

__all__ = ["Recurrent", "cells", "PRESETS", "build", "SequenceRegressor", "UnICORNNStack", "ReversibleUnICORNN",
           "LSTM", "GRU", "RNN", "NeuralODE", "LRCODE"]
