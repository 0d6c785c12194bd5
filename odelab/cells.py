"""Presets: the published cells as (system, scheme, dt), plus torch.nn baselines with the same interface."""
from __future__ import annotations

from torch import Tensor, nn

from . import systems
from .models import Recurrent


def LEM(input_size: int, hidden_size: int, dt: float = 1.0, **kwargs) -> Recurrent:
    """LEM cell (000 eq. 3) = LEM field (eq. 2) + partitioned Euler with explicit decay ("imex") + dt."""
    return Recurrent(systems.LEM(input_size, hidden_size, **kwargs), "imex", dt)


class _TorchRNN(nn.Module):
    """torch.nn.LSTM/GRU behind the odelab interface: ``forward(x) -> (outputs, final_state)``, batch first."""

    rnn_class: type[nn.RNNBase]

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1):
        super().__init__()
        self.rnn = self.rnn_class(input_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.hidden_size = hidden_size

    def forward(self, x: Tensor, state=None):
        return self.rnn(x, state)


class LSTM(_TorchRNN):
    rnn_class = nn.LSTM


class GRU(_TorchRNN):
    rnn_class = nn.GRU


# CLI name -> constructor (input_size, hidden_size) -> module returning (outputs (batch, time, hidden), state).
PRESETS = {
    "lem": LEM,
    "lstm": LSTM,
    "gru": GRU,
}
