"""Readout heads: a recurrent body followed by a linear map to the task's outputs (or none, for a body whose
outputs are already the prediction)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .recurrent import Recurrent


class SequenceRegressor(nn.Module):
    """A recurrent body ``(outputs, state) = body(x)`` followed by a linear readout: at every step
    (``last=False``, output ``(batch, time, out)``) or at the last step only (``last=True``, ``(batch, out)``).

    A body with ``predicts_outputs = True`` (e.g. :class:`~odelab.models.neural_ode.NeuralODE`, whose state is
    the observation) gets no readout (``nn.Identity``): ``hidden_size`` is then not used, and ``output_size``
    must equal the body's ``output_size`` (ValueError otherwise). The readout's weight is Kaiming-normal, as the
    official LEM code initialises it, unless the body sets ``readout_init = "default"`` (nn.Linear's own
    uniform initialisation, as the official coRNN code leaves it).

    ``time_gaps=True`` (irregularly sampled sequences): the inputs' last feature is the time each sample lasts. A
    body that steps by it (:func:`takes_time_gaps`: an odelab ``Recurrent`` without delays) gets it as its per-sample
    step ``dt`` and the other features as its input; any other body (LSTM, GRU, a delay cell) gets it as one more
    input feature (Farsang et al. 2024, App. A.3.2: the time gap concatenated to the baselines' inputs)."""

    def __init__(self, body: nn.Module, hidden_size: int, output_size: int, last: bool = False,
                 time_gaps: bool = False):
        super().__init__()
        self.body = body
        self.last = last
        self.gaps_as_step = time_gaps and takes_time_gaps(body)
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
        step = {}
        if self.gaps_as_step:
            x, step = x[..., :-1], {"dt": x[..., -1]}
        if lengths is None:
            outputs = self.body(x, **step)[0]
            return self.readout(outputs[:, -1] if self.last else outputs)
        outputs = self.body(x, lengths=lengths, **step)[0]
        if not self.last:
            return self.readout(outputs)
        ends = torch.as_tensor(lengths, dtype=torch.int64, device=outputs.device) - 1
        return self.readout(outputs[torch.arange(outputs.shape[0], device=outputs.device), ends])


def takes_time_gaps(body: nn.Module) -> bool:
    """Whether ``body`` steps each sample by its own time gap (``forward(..., dt=gaps)``): an odelab ``Recurrent``
    whose system has no delays."""
    return isinstance(body, Recurrent) and not body.system.is_delay
