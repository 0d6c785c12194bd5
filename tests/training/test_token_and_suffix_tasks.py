"""`odelab fit` on tasks with token inputs (an embedding, pretrained vectors), a fixed input suffix, and the head's
dropout settings from a preset or the command line."""
import json

import pytest
import torch

from odelab.cli import main
from odelab.data.tasks import TASKS, Task
from odelab.training import FitError, FitSpec, run_fit


def tokens(seed, vectors=None):
    g = torch.Generator().manual_seed(seed)
    splits = {}
    for name, n in (("train", 16), ("valid", 8), ("test", 8)):
        x = torch.randint(0, 10, (n, 6), generator=g)
        splits[name] = (x, (x[:, -1] >= 5).long())
    meta = {"vocabulary": 10, "notes": ["toy"]}
    if vectors is not None:
        meta.update(embedding=vectors, freeze_embedding=True)
    return {**splits, "meta": meta}


@pytest.fixture
def token_task(monkeypatch):
    task = Task("toy-tokens", load=lambda seed: tokens(seed), target="last", loss="cross_entropy", classes=2,
                plot="classes", vocabulary=10,
                presets={"quick": dict(hidden_size=4, epochs=2, lr=1e-2, batch_size=4, embedding_size=3,
                                       input_dropout=0.2)})
    monkeypatch.setitem(TASKS, task.name, task)
    return task


def test_a_token_task_trains_an_embedding_with_the_presets_dropout(token_task, tmp_path):
    model, result = run_fit(FitSpec("toy-tokens", "lem", out=tmp_path, progress=False))
    assert tuple(model.embedding.weight.shape) == (10, 3) and model.input_dropout.p == 0.2
    lem = 4 * 4 * 3 + 4 * 4 * 4 + 4 * 4  # LEM: four input maps (3 → 4), four recurrent maps (4 → 4), four biases
    assert result["parameters"] == lem + 10 * 3 + (4 * 2 + 2)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["settings"]["head"] == {"embedding_size": 3, "input_dropout": 0.2}
    assert saved["data"] == {"vocabulary": 10, "notes": ["toy"]}


def test_the_command_line_overrides_the_heads_settings(token_task, tmp_path):
    assert main(["fit", "toy-tokens", "--embedding-size", "5", "--input-dropout", "0", "--output-dropout", "0.5",
                 "--no-progress", "--out", str(tmp_path)]) == 0
    head = json.loads((tmp_path / "results.json").read_text())["settings"]["head"]
    assert head == {"embedding_size": 5, "output_dropout": 0.5}


def test_pretrained_vectors_set_the_width_and_stay_frozen(monkeypatch, tmp_path):
    vectors = torch.randn(10, 5, generator=torch.Generator().manual_seed(9))
    task = Task("toy-glove", load=lambda seed: tokens(seed, vectors), target="last", loss="cross_entropy", classes=2,
                vocabulary=10, presets={"quick": dict(hidden_size=4, epochs=2, lr=1e-2, batch_size=4)})
    monkeypatch.setitem(TASKS, task.name, task)
    model, result = run_fit(FitSpec("toy-glove", "gru", progress=False))
    assert torch.equal(model.embedding.weight, vectors) and not model.embedding.weight.requires_grad


def test_a_fixed_suffix_is_appended_by_the_model(monkeypatch):
    g = torch.Generator().manual_seed(1)
    tail = torch.randn(7, 2, generator=g)

    def load(seed):
        data = {name: (torch.randn(n, 3, 2, generator=g), torch.randint(0, 3, (n,), generator=g))
                for name, n in (("train", 8), ("valid", 4), ("test", 4))}
        return {**data, "meta": {"suffix": tail}}

    task = Task("toy-suffix", load=load, target="last", loss="cross_entropy", classes=3,
                presets={"quick": dict(hidden_size=4, epochs=1, lr=1e-2, batch_size=4)})
    monkeypatch.setitem(TASKS, task.name, task)
    model, result = run_fit(FitSpec("toy-suffix", "lem", progress=False))
    assert torch.equal(model.suffix, tail)
    x = torch.randn(2, 3, 2)
    model.eval()
    with torch.no_grad():
        padded = torch.cat((x, tail.expand(2, -1, -1)), dim=1)
        assert torch.allclose(model(x), model.readout(model.body(padded)[0][:, -1]))


def test_head_settings_are_refused_where_they_do_not_apply(capsys):
    with pytest.raises(FitError, match="--embedding-size: .*token inputs"):
        FitSpec("fhn", embedding_size=3).check()
    with pytest.raises(FitError, match="--output-dropout"):
        FitSpec("fhn", output_dropout=1.5).check()
    with pytest.raises(SystemExit):
        main(["fit", "fhn", "--input-dropout", "1"])
    assert "--input-dropout: expected a number in [0, 1)" in capsys.readouterr().err


def test_a_preset_can_leave_the_readout_at_nn_linears_initialisation(token_task):
    """nn.Linear's U(−1/√fan_in, 1/√fan_in) = U(−0.5, 0.5) here, against Kaiming-normal's std √(2/4) ≈ 0.71 (all
    eight weights inside ±0.5 by chance: 0.5 %)."""
    from odelab.training.run import build_regressor

    token_task.presets["default-readout"] = dict(token_task.presets["quick"], readout_init="default")
    head = FitSpec("toy-tokens", preset="default-readout").head(token_task)
    assert head["readout_init"] == "default"
    torch.manual_seed(0)
    model = build_regressor(token_task, "lem", 6, 4, 2, head=head, meta={"vocabulary": 10})
    assert float(model.readout.weight.detach().abs().max()) <= 0.5
    torch.manual_seed(0)
    kaiming = build_regressor(token_task, "lem", 6, 4, 2, head={"embedding_size": 3}, meta={"vocabulary": 10})
    assert float(kaiming.readout.weight.detach().abs().max()) > 0.5


def test_a_tied_readout_is_the_embedding_of_the_next_tokens_id():
    """Logit of class c = ⟨output, E[c + 1]⟩ + b_c (ids are classes + 1; row 0 pads); one parameter trained by both."""
    from odelab.models import SequenceRegressor, cells

    torch.manual_seed(4)
    model = SequenceRegressor(cells.LEM(5, 5, dt=0.5), 5, 6, vocabulary=7, embedding_size=5, tie_embedding=True)
    ids = torch.randint(1, 7, (2, 4))
    outputs = model.body(model.embedding(ids))[0]
    expected = outputs @ model.embedding.weight[1:].T + model.readout.bias
    assert torch.allclose(model(ids), expected, atol=1e-6)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in model.body.parameters()) + 7 * 5 + 6
    model(ids).sum().backward()
    assert model.embedding.weight.grad[1:].abs().sum() > 0
    with pytest.raises(ValueError, match="tie_embedding"):
        SequenceRegressor(cells.LEM(5, 4), 4, 6, vocabulary=7, embedding_size=5, tie_embedding=True)
