"""`odelab.load_run`: a finished `odelab fit` run folder rebuilt as its trained model -- the same test metric as the
run reported, the run's model options (constants no state dict holds), token and suffix heads, runs written before
the architecture record, and errors that name the file."""
import json

import pytest
import torch

import odelab
from odelab.cli import main
from odelab.data.tasks import TASKS, Task
from odelab.training import FitSpec, RunError, load_run, rmse, run_fit
from odelab.training.loop import classification_scores

from helpers import random_task_data


@pytest.fixture
def tiny_fhn(monkeypatch, tmp_path):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    return random_task_data(monkeypatch, "fhn", 15, (8, 4, 6), 3)


def test_a_loaded_run_gives_its_test_rmse_with_its_step(tiny_fhn, tmp_path):
    run = tmp_path / "run"
    assert main(["fit", "fhn", "--model", "lem", "--model-option", "dt=2", "--hidden", "4", "--epochs", "3",
                 "--no-progress", "--out", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    rng = torch.get_rng_state()
    model, info = odelab.load_run(run)
    assert torch.equal(torch.get_rng_state(), rng)  # the caller's random stream is untouched
    assert info["test_rmse"] == results["test_rmse"] and not model.training
    assert float(model.body.dt) == 2.0  # a constructor constant: not in the state dict, taken from the run
    assert rmse(model, *tiny_fhn["test"], 256, "cpu") == results["test_rmse"]
    x, y = odelab.training.run_data(info)["test"]  # the run's loader, seed and data options
    assert torch.equal(x, tiny_fhn["test"][0]) and torch.equal(y, tiny_fhn["test"][1])
    last, _ = load_run(run, best=False)
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    for name, value in last.state_dict().items():
        assert torch.equal(value, checkpoint["model"][name])
    for name, value in model.state_dict().items():
        assert torch.equal(value, checkpoint["best"]["state"][name])


def test_a_run_without_the_architecture_record_is_rebuilt_from_its_data(tiny_fhn, tmp_path):
    run = tmp_path / "run"
    assert main(["fit", "fhn", "--model", "cornn", "--hidden", "3", "--epochs", "1", "--no-progress",
                 "--out", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["architecture"] == {"input_size": 1, "output_size": 1, "head": {}}
    del results["architecture"]  # as a run written before the record existed
    (run / "results.json").write_text(json.dumps(results))
    model, _ = load_run(run)
    assert rmse(model, *tiny_fhn["test"], 256, "cpu") == results["test_rmse"]


def _tokens(seed, vectors, tail):
    g = torch.Generator().manual_seed(seed)
    splits = {name: (torch.randint(0, 10, (n, 6), generator=g), torch.randint(0, 2, (n,), generator=g))
              for name, n in (("train", 16), ("valid", 8), ("test", 8))}
    meta = {"vocabulary": 10}
    if vectors is not None:
        meta.update(embedding=vectors, freeze_embedding=True)
    if tail is not None:
        meta["suffix"] = tail
    return {**splits, "meta": meta}


@pytest.mark.parametrize("pretrained", [False, True])
def test_a_token_run_keeps_its_embedding(monkeypatch, tmp_path, pretrained):
    vectors = torch.randn(10, 5, generator=torch.Generator().manual_seed(9)) if pretrained else None
    task = Task("toy-tokens", load=lambda seed: _tokens(seed, vectors, None), target="last", loss="cross_entropy",
                classes=2, plot="classes", vocabulary=10,
                presets={"quick": dict(hidden_size=4, epochs=2, lr=1e-2, batch_size=4,
                                       **({} if pretrained else {"embedding_size": 3}))})
    monkeypatch.setitem(TASKS, task.name, task)
    trained, result = run_fit(FitSpec("toy-tokens", "gru", out=tmp_path, progress=False))
    record = json.loads((tmp_path / "results.json").read_text())["architecture"]
    assert record["vocabulary"] == 10 and ("embedding" in record) == pretrained
    model, _ = load_run(tmp_path)
    assert torch.equal(model.embedding.weight, trained.embedding.weight)
    if pretrained:
        assert torch.equal(model.embedding.weight, vectors) and not model.embedding.weight.requires_grad
    loss, accuracy = classification_scores(model, *_tokens(1234, vectors, None)["test"], 256, "cpu")
    assert (loss, accuracy) == (result["test_loss"], result["test_accuracy"])


def test_a_suffix_run_keeps_its_suffix(monkeypatch, tmp_path):
    tail = torch.randn(7, 2, generator=torch.Generator().manual_seed(1))

    def load(seed):
        g = torch.Generator().manual_seed(seed)
        return {**{name: (torch.randn(n, 3, 2, generator=g), torch.randint(0, 3, (n,), generator=g))
                   for name, n in (("train", 8), ("valid", 4), ("test", 4))}, "meta": {"suffix": tail}}

    task = Task("toy-suffix", load=load, target="last", loss="cross_entropy", classes=3, plot="classes",
                presets={"quick": dict(hidden_size=4, epochs=1, lr=1e-2, batch_size=4)})
    monkeypatch.setitem(TASKS, task.name, task)
    _, result = run_fit(FitSpec("toy-suffix", "lem", out=tmp_path, progress=False))
    assert json.loads((tmp_path / "results.json").read_text())["architecture"]["suffix"] == [7, 2]
    model, _ = load_run(tmp_path)
    assert torch.equal(model.suffix, tail)
    assert classification_scores(model, *load(1234)["test"], 256, "cpu")[0] == result["test_loss"]


def test_load_run_errors_name_the_file(tiny_fhn, tmp_path):
    with pytest.raises(RunError, match="results.json is missing"):
        load_run(tmp_path / "nowhere")
    run = tmp_path / "run"
    assert main(["fit", "fhn", "--model", "lem", "--hidden", "4", "--epochs", "1", "--no-progress",
                 "--out", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**results, "hidden_size": 5}))
    with pytest.raises(RunError, match=r"checkpoint.pt does not hold the weights of lem with hidden size 5"):
        load_run(run)
    (run / "results.json").write_text(json.dumps({**results, "model": "no-such-model"}))
    with pytest.raises(RunError, match="'no-such-model' on 'fhn', which this odelab does not know"):
        load_run(run)
    (run / "results.json").unlink()  # a run stopped before its end keeps only its checkpoint
    with pytest.raises(RunError, match="the run stopped before its end: .* --resume finishes it"):
        load_run(run)
    (run / "results.json").write_text(json.dumps(results))
    (run / "checkpoint.pt").write_bytes(b"truncated")
    with pytest.raises(RunError, match="checkpoint.pt is not a readable checkpoint"):
        load_run(run)
    (run / "checkpoint.pt").unlink()
    with pytest.raises(RunError, match="no such checkpoint"):
        load_run(run)


def test_compare_schemes_evaluates_a_run_at_its_own_step(tiny_fhn, tmp_path):
    """The run's Δt = 2 (a model option) is the trained step: factor 1 under the trained scheme is the run's model
    on the run's test data, so its test RMSE is the one the run reported."""
    run = tmp_path / "run"
    assert main(["fit", "fhn", "--model", "lem", "--model-option", "dt=2", "--hidden", "4", "--epochs", "2",
                 "--no-progress", "--out", str(run)]) == 0
    out = tmp_path / "cmp"
    assert main(["compare-schemes", "--run", str(run), "--no-retrain", "--schemes", "imex,rk4", "--finest", "2",
                 "--out", str(out)]) == 0
    result = json.loads((out / "compare_schemes.json").read_text())
    trained = next(r for r in result["evaluation"]["rows"] if r["scheme"] == "imex" and r["factor"] == "1")
    assert trained["step"] == 2.0
    reported = json.loads((run / "results.json").read_text())["test_rmse"]
    assert trained["test_rmse"] == pytest.approx(reported, rel=1e-6)
    assert result["trained"]["test_rmse"] == reported


def test_compare_schemes_takes_a_checkpoints_model_options(tiny_fhn, tmp_path):
    run = tmp_path / "run"
    assert main(["fit", "fhn", "--model", "lem", "--model-option", "dt=2", "--hidden", "4", "--epochs", "1",
                 "--no-progress", "--out", str(run)]) == 0
    out = tmp_path / "cmp"
    assert main(["compare-schemes", "--checkpoint", str(run / "checkpoint.pt"), "--task", "fhn", "--model", "lem",
                 "--hidden", "4", "--model-option", "dt=2", "--no-retrain", "--schemes", "imex", "--finest", "2",
                 "--out", str(out)]) == 0
    rows = json.loads((out / "compare_schemes.json").read_text())["evaluation"]["rows"]
    trained = next(r for r in rows if r["factor"] == "1")
    assert trained["step"] == 2.0
    assert trained["test_rmse"] == pytest.approx(json.loads((run / "results.json").read_text())["test_rmse"], rel=1e-6)
    with pytest.raises(SystemExit, match="--run takes the run's model options"):
        main(["compare-schemes", "--run", str(run), "--model-option", "dt=1"])
    with pytest.raises(SystemExit, match="unexpected keyword argument 'gamma'"):
        main(["compare-schemes", "--model", "lem", "--model-option", "gamma=2"])
