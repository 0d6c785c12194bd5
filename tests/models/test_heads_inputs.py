"""Dropout over sequences, token inputs (an embedding) and a fixed input suffix in the readout head; dropout between
UnICORNN layers. References are written out here: masks read back from the outputs, lookups by indexing."""
import pytest
import torch
from torch import nn

from odelab.models import SequenceRegressor, cells
from odelab.models.dropout import SequenceDropout
from odelab.models.unicornn import UnICORNNStack


class Recording(nn.Module):
    """A body that returns its input as its outputs and remembers what it was called with."""

    def __init__(self, width):
        super().__init__()
        self.hidden_size = width
        self.calls = []

    def forward(self, x, state=None, lengths=None, dt=None):
        self.calls.append({"x": x, "dt": dt})
        return x, None


def test_dropout_shares_one_mask_over_time_and_scales_the_rest():
    torch.manual_seed(0)
    drop = SequenceDropout(0.25)
    out = drop(torch.ones(64, 7, 50, dtype=torch.float64))
    assert set(out.unique().tolist()) == {0.0, 1 / 0.75}
    assert torch.equal(out, out[:, :1].expand_as(out))  # the same mask at every step
    assert abs(float((out == 0).double().mean()) - 0.25) < 0.03  # 3200 draws: 4 standard deviations
    fresh = SequenceDropout(0.25, shared_over_time=False)(torch.ones(64, 7, 50))
    assert not torch.equal(fresh, fresh[:, :1].expand_as(fresh))
    drop.eval()
    x = torch.randn(2, 3, 4)
    assert drop(x) is x


@pytest.mark.parametrize("p", [-0.1, 1.0, float("nan"), True])
def test_dropout_refuses_a_probability_outside_0_1(p):
    with pytest.raises(ValueError, match="dropout"):
        SequenceDropout(p)


def test_unicornn_dropout_is_one_mask_per_sequence_after_every_layer():
    torch.manual_seed(1)
    plain = UnICORNNStack(3, 5, num_layers=1, dt=0.5, alpha=0.3).double()
    dropped = UnICORNNStack(3, 5, num_layers=1, dt=0.5, alpha=0.3, dropout=0.5).double()
    dropped.load_state_dict(plain.state_dict())
    x = torch.randn(40, 6, 3, dtype=torch.float64)
    reference = plain(x)[0]
    out = dropped(x)[0]
    ratio = out / reference  # the mask: 0 or 2 per (sample, unit), the same at every step
    assert torch.allclose(ratio, ratio[:, :1].expand_as(ratio)) and {round(v, 9) for v in ratio.unique().tolist()} == {0.0, 2.0}
    dropped.eval()
    assert torch.equal(dropped(x)[0], reference)


def test_unicornn_dropout_masks_follow_each_sample_through_its_length():
    """With lengths the stack runs in pieces of time; a sample's masks must be the same in every piece, so the
    outputs before its length equal those of the whole-length run with the same draws."""
    torch.manual_seed(2)
    stack = UnICORNNStack(2, 8, num_layers=2, dt=[0.3, 0.6], alpha=0.1, dropout=0.4).double()
    x = torch.randn(5, 9, 2, dtype=torch.float64)
    torch.manual_seed(7)
    whole, _ = stack(x)
    torch.manual_seed(7)
    lengths = [9, 4, 9, 2, 6]
    pieces, finals = stack(x, lengths=lengths)
    for b, n in enumerate(lengths):
        assert torch.allclose(pieces[b, :n], whole[b, :n], atol=1e-12, rtol=0)
        assert torch.all(pieces[b, n:] == 0)
    top_y = finals[1][1]  # the top layer's y at each sample's length, before its dropout
    last = pieces[torch.arange(5), torch.tensor(lengths) - 1]
    kept = last != 0
    assert kept.sum() > 10 and torch.allclose(top_y[kept] / 0.6, last[kept], atol=1e-12, rtol=0)
    assert len(finals) == 2


def test_token_inputs_are_embedded_by_lookup_with_padding_as_zeros():
    torch.manual_seed(3)
    body = Recording(4)
    model = SequenceRegressor(body, 4, 2, last=True, vocabulary=11, embedding_size=4)
    ids = torch.tensor([[0, 0, 3, 10], [5, 1, 2, 3]])
    logits = model(ids)
    table = model.embedding.weight
    assert torch.equal(body.calls[0]["x"], table[ids])
    assert torch.all(table[0] == 0)
    assert torch.allclose(logits, table[ids[:, -1]] @ model.readout.weight.T + model.readout.bias)
    with pytest.raises(ValueError, match="int64 ids"):
        model(ids.double())


def test_pretrained_vectors_are_loaded_and_frozen():
    model = SequenceRegressor(Recording(3), 3, 2, last=True, vocabulary=4, embedding_size=3)
    vectors = torch.arange(12.0).reshape(4, 3)
    model.load_embedding(vectors)
    assert torch.equal(model.embedding.weight, vectors) and not model.embedding.weight.requires_grad
    with pytest.raises(ValueError, match="shape"):
        model.load_embedding(torch.zeros(5, 3))
    with pytest.raises(ValueError, match="no token inputs"):
        SequenceRegressor(Recording(3), 3, 2).load_embedding(vectors)


@pytest.mark.parametrize("keywords, message", [
    (dict(vocabulary=1, embedding_size=3), "vocabulary >= 2"),
    (dict(vocabulary=10), "embedding_size"),
    (dict(embedding_size=3), "token inputs"),
    (dict(vocabulary=10, embedding_size=3, time_gaps=True), "time gaps"),
    (dict(suffix=torch.zeros(3)), "steps, features"),
])
def test_head_refuses_inconsistent_inputs(keywords, message):
    with pytest.raises(ValueError, match=message):
        SequenceRegressor(Recording(3), 3, 2, last=True, **keywords)


def test_the_suffix_follows_every_sequence_and_is_saved_with_the_model():
    torch.manual_seed(4)
    lem = cells.LEM(2, 5, dt=0.5).double()
    suffix = torch.randn(6, 2, dtype=torch.float64)
    model = SequenceRegressor(lem, 5, 3, last=True, suffix=suffix).double()
    x = torch.randn(4, 3, 2, dtype=torch.float64)
    y = lem(torch.cat((x, suffix.expand(4, -1, -1)), dim=1))[0][:, -1]
    assert torch.allclose(model(x), y @ model.readout.weight.T + model.readout.bias, atol=1e-13)
    assert torch.equal(model.state_dict()["suffix"], suffix)
    with pytest.raises(ValueError, match="last step"):
        SequenceRegressor(Recording(2), 2, 1, last=False, suffix=suffix)


def test_input_dropout_leaves_the_time_gaps_alone():
    torch.manual_seed(5)
    model = SequenceRegressor(cells.LEM(3, 3, dt=0.5), 3, 1, time_gaps=True, input_dropout=0.5)
    record = model.body = Recording(3)  # the head's own steps, with a body that shows what it gets
    x = torch.rand(8, 5, 4) + 0.5
    model(x)
    seen = record.calls[0]
    assert torch.equal(seen["dt"], x[..., -1])
    ratio = seen["x"] / x[..., :-1]
    assert torch.equal(ratio, ratio[:, :1].expand_as(ratio)) and set(ratio.unique().tolist()) == {0.0, 2.0}
    model.eval()
    model(x)
    assert torch.equal(record.calls[1]["x"], x[..., :-1])


def test_output_dropout_acts_on_the_outputs_before_the_readout():
    torch.manual_seed(6)
    model = SequenceRegressor(Recording(3), 3, 3, output_dropout=0.25, variational_dropout=False)
    with torch.no_grad():
        model.readout.weight.copy_(torch.eye(3))
        model.readout.bias.zero_()
    x = torch.rand(16, 5, 3) + 0.5
    ratio = model(x) / x
    assert {round(v, 5) for v in ratio.unique().tolist()} == {0.0, round(4 / 3, 5)}
    assert not torch.equal(ratio, ratio[:, :1].expand_as(ratio))  # a fresh mask at every step
