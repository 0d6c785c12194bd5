"""torch.nn recurrent baselines behind the odelab interface: ``forward(x, state) -> (outputs, state)``, batch first."""
from __future__ import annotations

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .lengths import check_lengths


class _TorchRNN(nn.Module):
    """torch.nn.LSTM/GRU behind the odelab interface: ``forward(x) -> (outputs, final_state)``, batch first."""

    rnn_class: type[nn.RNNBase]
    rnn_options: dict = {}
    state_batch_dim = 1  # torch's states are (layers, batch, hidden)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1):
        super().__init__()
        self.rnn = self.rnn_class(input_size, hidden_size, num_layers=num_layers, batch_first=True, **self.rnn_options)
        self.hidden_size = hidden_size

    def forward(self, x: Tensor, state=None, lengths=None):
        """``lengths``: one per sample, through ``pack_padded_sequence`` (outputs past a length: zeros; final state
        after it), as odelab's models take them."""
        if lengths is None:
            return self.rnn(x, state)
        lengths = check_lengths(lengths, x.shape[0], x.shape[1])
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        outputs, final = self.rnn(packed, state)
        return pad_packed_sequence(outputs, batch_first=True, total_length=x.shape[1])[0], final


class LSTM(_TorchRNN):
    rnn_class = nn.LSTM


class GRU(_TorchRNN):
    rnn_class = nn.GRU


class RNN(_TorchRNN):
    """The tanh RNN h_n = tanh(W h_{n−1} + U x_n + b) (torch.nn.RNN)."""

    rnn_class = nn.RNN
    rnn_options = {"nonlinearity": "tanh"}
