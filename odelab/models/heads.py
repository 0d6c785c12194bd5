"""Readout heads: a recurrent body followed by a linear map to the task's outputs (or none, for a body whose
outputs are already the prediction)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .dropout import SequenceDropout
from .lengths import map_state
from .recurrent import Recurrent


class SequenceRegressor(nn.Module):
    """A recurrent body ``(outputs, state) = body(x)`` followed by a linear readout: at every step
    (``last=False``, output ``(batch, time, out)``) or at the last step only (``last=True``, ``(batch, out)``).

    A body with ``predicts_outputs = True`` (e.g. :class:`~odelab.models.neural_ode.NeuralODE`, whose state is
    the observation) gets no readout (``nn.Identity``): ``hidden_size`` is then not used, and ``output_size``
    must equal the body's ``output_size`` (ValueError otherwise). The readout's weight is Kaiming-normal, as the
    official LEM code initialises it, unless the body sets ``readout_init = "default"`` (nn.Linear's own
    uniform initialisation, as the official coRNN code leaves it); ``readout_init`` overrides the body's choice.

    ``time_gaps=True`` (irregularly sampled sequences): the inputs' last feature is the time each sample lasts. A
    body that steps by it (:func:`takes_time_gaps`: an odelab ``Recurrent`` without delays) gets it as its per-sample
    step ``dt`` and the other features as its input; any other body (LSTM, GRU, a delay cell) gets it as one more
    input feature (Farsang et al. 2024, App. A.3.2: the time gap concatenated to the baselines' inputs).

    Token inputs (``vocabulary``): x holds int64 ids ``(batch, time)`` in 0 … vocabulary − 1 (0: padding, embedded as
    zeros), embedded into ``embedding_size`` features (``nn.Embedding``; :meth:`load_embedding` sets pretrained
    vectors). ``suffix`` ``(steps, features)``: a fixed sequence appended after every input sequence (a buffer,
    saved with the model; e.g. nCIFAR's noise, which would cost N × 968 × 96 floats as data).
    ``input_dropout`` (on what the body reads: the embeddings or the features, not the time gaps) and
    ``output_dropout`` (on the body's outputs, before the readout): :class:`SequenceDropout`, while training only,
    one mask per sequence shared over time unless ``variational_dropout=False`` (a fresh mask at every step).
    ``tie_embedding``: the readout of a token model is its embedding (:class:`TiedReadout`)."""

    def __init__(self, body: nn.Module, hidden_size: int, output_size: int, last: bool = False,
                 time_gaps: bool = False, *, vocabulary: int | None = None, embedding_size: int | None = None,
                 suffix: Tensor | None = None, input_dropout: float = 0.0, output_dropout: float = 0.0,
                 variational_dropout: bool = True, readout_init: str | None = None, tie_embedding: bool = False):
        super().__init__()
        self.body = body
        self.last = last
        self.gaps_as_step = time_gaps and takes_time_gaps(body)
        if vocabulary is not None:
            if not (isinstance(vocabulary, int) and vocabulary >= 2 and isinstance(embedding_size, int)
                    and embedding_size >= 1):
                raise ValueError(f"token inputs need a vocabulary >= 2 and an embedding_size >= 1, got {vocabulary!r} "
                                 f"and {embedding_size!r}")
            if time_gaps or suffix is not None:
                raise ValueError("token inputs take neither time gaps nor a suffix")
            self.embedding = nn.Embedding(vocabulary, embedding_size, padding_idx=0)
        elif embedding_size is not None:
            raise ValueError("embedding_size is for token inputs (a vocabulary)")
        if suffix is not None:
            if not (isinstance(suffix, Tensor) and suffix.dim() == 2 and suffix.is_floating_point()):
                raise ValueError(f"suffix: expected a floating (steps, features) tensor, got {suffix!r:.80}")
            if not last or time_gaps:
                raise ValueError("suffix: for a readout at the last step (last=True) of inputs without time gaps")
            self.register_buffer("suffix", suffix.detach().clone())
        else:
            self.suffix = None
        self.input_dropout = SequenceDropout(input_dropout, variational_dropout)
        self.output_dropout = SequenceDropout(output_dropout, variational_dropout)
        if getattr(body, "predicts_outputs", False):
            produced = getattr(body, "output_size", None)
            if produced != output_size:
                raise ValueError(f"{type(body).__name__} predicts the outputs itself ({produced} features) and takes "
                                 f"no readout, but the task has {output_size} output features; it fits tasks whose "
                                 f"targets have the inputs' features")
            self.readout = nn.Identity()
        elif tie_embedding:
            if self.vocabulary is None or self.vocabulary != output_size + 1 or embedding_size != hidden_size:
                raise ValueError(f"tie_embedding: the readout of the classes 0 … V − 1 is the embedding of the ids 1 … V: "
                                 f"it needs token inputs with vocabulary = classes + 1 and embedding_size = hidden_size, "
                                 f"got vocabulary {self.vocabulary}, {output_size} classes, embedding {embedding_size}, "
                                 f"hidden {hidden_size}")
            self.readout = TiedReadout(self.embedding)
        else:
            self.readout = nn.Linear(hidden_size, output_size)
            init = readout_init or getattr(body, "readout_init", "kaiming")
            if init == "kaiming":
                nn.init.kaiming_normal_(self.readout.weight)  # as the official LEM code
            elif init != "default":
                raise ValueError(f"readout_init: expected 'kaiming' or 'default', got {init!r}")

    @property
    def vocabulary(self) -> int | None:
        return self.embedding.num_embeddings if hasattr(self, "embedding") else None

    @torch.no_grad()
    def load_embedding(self, vectors: Tensor, freeze: bool = True) -> None:
        """Pretrained token vectors ``(vocabulary, embedding_size)`` (e.g. GloVe); ``freeze``: not trained."""
        if self.vocabulary is None:
            raise ValueError("load_embedding: this model takes no token inputs")
        if tuple(vectors.shape) != tuple(self.embedding.weight.shape):
            raise ValueError(f"load_embedding: expected vectors of shape {tuple(self.embedding.weight.shape)}, got "
                             f"{tuple(vectors.shape)}")
        self.embedding.weight.copy_(vectors)
        self.embedding.weight.requires_grad_(not freeze)

    def body_inputs(self, x: Tensor, lengths=None) -> tuple[Tensor, dict]:
        """(what the body reads, its step keywords): the tokens embedded, the time gaps split off as the step ``dt``,
        the suffix appended; no dropout."""
        step = {}
        if self.vocabulary is not None:
            if x.dtype != torch.int64 or x.dim() != 2:
                raise ValueError(f"token inputs: expected int64 ids of shape (batch, time), got {x.dtype} of shape "
                                 f"{tuple(x.shape)}")
            x = self.embedding(x)
        if self.gaps_as_step:
            x, step = x[..., :-1], {"dt": x[..., -1]}
        if self.suffix is not None:
            if lengths is not None:
                raise ValueError("lengths: a model with a suffix reads whole sequences")
            x = torch.cat((x, self.suffix.to(x.dtype).expand(x.shape[0], -1, -1)), dim=1)
        return x, step

    def stream(self, x: Tensor, state=None) -> tuple[Tensor, object]:
        """(the readout at every step, the body's final state) from ``state`` (None: zeros): one window of a long
        stream, whose final state starts the next window (truncated back-propagation through time)."""
        if self.last:
            raise ValueError("stream: a model read at the last step predicts one value per sequence, not a stream")
        if self.suffix is not None:
            raise ValueError("stream: a model with a suffix reads whole sequences")
        x, step = self.body_inputs(x)
        outputs, final = self.body(self.input_dropout(x), state, **step)
        return self.readout(self.output_dropout(outputs)), final

    def carried(self, state, rows: int | None = None):
        """``state`` detached from its graph (the gradient stops at the window's start), its first ``rows`` samples
        where given (a stream that ended drops out of the batch)."""
        dim = getattr(self.body, "state_batch_dim", 0)
        if rows is None:
            return map_state(state, lambda t: t.detach())
        return map_state(state, lambda t: t.detach().narrow(dim, 0, rows))

    def forward(self, x: Tensor, lengths=None) -> Tensor:
        """``lengths`` (one per sample; the body must take them): with ``last=True`` the readout of each sample's
        own last step; otherwise of every step (zeros past a length, read out as the readout's bias). With a suffix
        the readout is of its last step."""
        x, step = self.body_inputs(x, lengths)
        x = self.input_dropout(x)
        if lengths is None:
            outputs = self.output_dropout(self.body(x, **step)[0])
            return self.readout(outputs[:, -1] if self.last else outputs)
        outputs = self.output_dropout(self.body(x, lengths=lengths, **step)[0])
        if not self.last:
            return self.readout(outputs)
        ends = torch.as_tensor(lengths, dtype=torch.int64, device=outputs.device) - 1
        return self.readout(outputs[torch.arange(outputs.shape[0], device=outputs.device), ends])


class TiedReadout(nn.Module):
    """Logits of the classes 0 … V − 1 from the embedding rows of their ids 1 … V (row 0 is the padding) and a bias:
    the input and output embeddings tied (Press & Wolf 2017; lamb's word-level model)."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.embedding = embedding  # the head's own module: one parameter, two names in the state dict
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings - 1))

    def forward(self, outputs: Tensor) -> Tensor:
        return nn.functional.linear(outputs, self.embedding.weight[1:], self.bias)


def takes_time_gaps(body: nn.Module) -> bool:
    """Whether ``body`` steps each sample by its own time gap (``forward(..., dt=gaps)``): an odelab ``Recurrent``
    whose system has no delays."""
    return isinstance(body, Recurrent) and not body.system.is_delay
