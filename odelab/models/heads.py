"""Readout heads: a recurrent body followed by a linear map to the task's outputs (or none, for a body whose
outputs are already the prediction)."""
from __future__ import annotations

import torch
from torch import Tensor, nn


class SequenceRegressor(nn.Module):
    """A recurrent body ``(outputs, state) = body(x)`` followed by a linear readout: at every step
    (``last=False``, output ``(batch, time, out)``) or at the last step only (``last=True``, ``(batch, out)``).

    A body with ``predicts_outputs = True`` (e.g. :class:`~odelab.models.neural_ode.NeuralODE`, whose state is
    the observation) gets no readout (``nn.Identity``): ``hidden_size`` is then not used, and ``output_size``
    must equal the body's ``output_size`` (ValueError otherwise). The readout's weight is Kaiming-normal, as the
    official LEM code initialises it, unless the body sets ``readout_init = "default"`` (nn.Linear's own
    uniform initialisation, as the official coRNN code leaves it)."""

    def __init__(self, body: nn.Module, hidden_size: int, output_size: int, last: bool = False):
        super().__init__()
        self.body = body
        self.last = last
        if getattr(body, "predicts_outputs", False):
            produced = getattr(body, "output_size", None)
            if produced != output_size:
                raise ValueError(f"{type(body).__name__} predicts the outputs itself ({produced} features) and takes "
                                 f"no readout, but the task has {output_size} output features; it fits tasks whose "
                                 f"targets have the inputs' features")
            self.readout = nn.Identity()
        else:
            self.readout = nn.Linear(hidden_size, output_size)
            init = getattr(body, "readout_init", "kaiming")
            if init == "kaiming":
                nn.init.kaiming_normal_(self.readout.weight)  # as the official LEM code
            elif init != "default":
                raise ValueError(f"readout_init: expected 'kaiming' or 'default', got {init!r}")

    def forward(self, x: Tensor, lengths=None) -> Tensor:
        """``lengths`` (one per sample; the body must take them): with ``last=True`` the readout of each sample's
        own last step; otherwise of every step (zeros past a length, read out as the readout's bias)."""
        if lengths is None:
            outputs = self.body(x)[0]
            return self.readout(outputs[:, -1] if self.last else outputs)
        outputs = self.body(x, lengths=lengths)[0]
        if not self.last:
            return self.readout(outputs)
        ends = torch.as_tensor(lengths, dtype=torch.int64, device=outputs.device) - 1
        return self.readout(outputs[torch.arange(outputs.shape[0], device=outputs.device), ends])
