"""Readout heads: a recurrent body followed by a linear map to the task's outputs."""
from __future__ import annotations

from torch import Tensor, nn


class SequenceRegressor(nn.Module):
    """A recurrent body ``(outputs, state) = body(x)`` followed by a linear readout: at every step
    (``last=False``, output ``(batch, time, out)``) or at the last step only (``last=True``, ``(batch, out)``)."""

    def __init__(self, body: nn.Module, hidden_size: int, output_size: int, last: bool = False):
        super().__init__()
        self.body = body
        self.readout = nn.Linear(hidden_size, output_size)
        self.last = last
        nn.init.kaiming_normal_(self.readout.weight)  # as the official LEM code

    def forward(self, x: Tensor) -> Tensor:
        outputs = self.body(x)[0]
        return self.readout(outputs[:, -1] if self.last else outputs)
