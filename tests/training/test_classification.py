"""Classification in the training loop (``loss="cross_entropy"``): cross-entropy and accuracy against a hand
computation, the training loss is the mean cross-entropy per predicted symbol, best-epoch selection on validation
accuracy (ties: lower loss), exact resume, data-parallel = single process, clear errors, and ``odelab fit frequency``
/ ``copy`` end to end on tiny data."""
import csv
import json
import math
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from helpers import fresh_cache

import odelab.data.tasks
import odelab.training.loop as loop
from odelab import SequenceRegressor, TrainConfig, cells, fit
from odelab.cli import main
from odelab.data import copy_task, frequency
from odelab.training import FitError, FitSpec, run_fit

CONFIG = dict(lr=1e-2, batch_size=5, seed=3, eval_batch_size=4)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", fresh_cache(tmp_path / "cache"))  # the spawned workers load the kernels


def sequence_data(classes=4, steps=6):
    """Random inputs with a class at every step, 11 train rows (the last batch of 5 has 1 row)."""
    g = torch.Generator().manual_seed(0)
    return {split: (torch.randn(n, steps, 2, generator=g), torch.randint(0, classes, (n, steps), generator=g))
            for split, n in (("train", 11), ("valid", 6), ("test", 5))}


def tiny_model(classes=4, last=False):
    torch.manual_seed(1)
    return SequenceRegressor(cells.LEM(2, 3), 3, classes, last)


class Logits(nn.Module):
    """A 'model' whose output is its input: the inputs are the logits."""

    def forward(self, x):
        return x


def hand_scores(logits, targets):
    """Mean of −log softmax(logits)[target] and the fraction of argmax = target, with plain Python floats."""
    total, correct, count = 0.0, 0, 0
    for row, target in zip(logits.reshape(-1, logits.shape[-1]).tolist(), targets.reshape(-1).tolist()):
        total += math.log(sum(math.exp(v) for v in row)) - row[target]
        correct += max(range(len(row)), key=row.__getitem__) == target
        count += 1
    return total / count, correct / count


@pytest.mark.parametrize("shape", [(7,), (3, 5)], ids=["one class per sequence", "a class per step"])
def test_cross_entropy_and_accuracy_match_a_hand_computation(shape):
    g = torch.Generator().manual_seed(2)
    logits = 3 * torch.randn(*shape, 6, generator=g)
    targets = torch.randint(0, 6, shape, generator=g)
    targets.view(-1)[:2] = logits.reshape(-1, 6)[:2].argmax(-1)  # at least two right
    loss, accuracy = loop.classification_scores(Logits(), logits, targets, batch_size=2, device="cpu")
    expected_loss, expected_accuracy = hand_scores(logits.double(), targets)
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    assert accuracy == expected_accuracy and 0 < accuracy < 1


def test_the_training_loss_is_the_mean_cross_entropy_per_predicted_symbol(monkeypatch):
    """With plain gradient descent and one batch, one epoch moves the weights by −lr ∇(mean cross-entropy)."""
    data = sequence_data()
    monkeypatch.setitem(loop.OPTIMIZERS, "adam", torch.optim.SGD)
    model, start = tiny_model(), tiny_model()
    fit(model, data, TrainConfig(epochs=1, lr=0.5, batch_size=11, seed=3), progress=False, loss="cross_entropy")
    x, y = data["train"]
    logits = start(x)
    mean = -(logits - logits.exp().sum(-1, keepdim=True).log()).gather(-1, y[..., None]).sum() / y.numel()
    mean.backward()
    for (name, trained), before in zip(model.named_parameters(), start.parameters()):
        assert torch.allclose(trained, before - 0.5 * before.grad, atol=1e-6), name


def test_best_epoch_has_the_highest_validation_accuracy_ties_to_the_lower_loss(monkeypatch):
    data = sequence_data()
    valid = iter([(0.9, 0.5), (0.5, 0.7), (0.4, 0.7), (0.3, 0.6), (0.6, 0.7)])  # (loss, accuracy) per epoch
    real = loop.classification_scores

    def scripted(model, x, y, batch_size, device, stateful=False):
        if x is data["valid"][0]:
            return next(valid)
        return real(model, x, y, batch_size, device, stateful)

    monkeypatch.setattr(loop, "classification_scores", scripted)
    model = tiny_model()
    result = fit(model, data, TrainConfig(epochs=5, **CONFIG), progress=False, loss="cross_entropy")
    assert result["best_epoch"] == 3 and (result["valid_accuracy"], result["valid_loss"]) == (0.7, 0.4)
    assert result["history"]["valid_accuracy"] == [0.5, 0.7, 0.7, 0.6, 0.7]
    monkeypatch.setattr(loop, "classification_scores", real)
    three = tiny_model()
    fit(three, data, TrainConfig(epochs=3, **CONFIG), progress=False, loss="cross_entropy")
    for name, value in three.state_dict().items():  # the returned model holds epoch 3's weights
        assert torch.equal(model.state_dict()[name], value), name
    expected = real(three, *data["test"], 4, "cpu")
    assert (result["test_loss"], result["test_accuracy"]) == pytest.approx(expected)
    assert result["metric"] == "accuracy" and set(result["history"]) == {
        "epoch", "train_loss", "valid_loss", "train_accuracy", "valid_accuracy", "seconds", "skipped_steps"}


def test_regression_results_only_gain_the_metric():
    g = torch.Generator().manual_seed(0)
    data = {s: (torch.randn(4, 5, 2, generator=g), torch.randn(4, 5, 1, generator=g)) for s in ("train", "valid", "test")}
    result = fit(tiny_model(1), data, TrainConfig(epochs=1, **CONFIG), progress=False)
    assert result["metric"] == "rmse" and set(result["history"]) == {"epoch", "train_rmse", "valid_rmse", "seconds",
                                                                 "skipped_steps"}
    assert {"test_rmse", "valid_rmse"} <= set(result) and "test_accuracy" not in result


def test_bad_targets_are_named():
    data = sequence_data()
    floats = {**data, "valid": (data["valid"][0], data["valid"][1].float())}
    with pytest.raises(ValueError, match="valid targets: a classification task .* needs int64 class indices, got "
                                         "torch.float32"):
        fit(tiny_model(), floats, TrainConfig(epochs=1), progress=False, loss="cross_entropy")
    shaped = {**data, "test": (data["test"][0], data["test"][1][:, :2])}
    with pytest.raises(ValueError, match=r"test targets: expected class indices of shape \(5,\) .* or \(5, 6\)"):
        fit(tiny_model(), shaped, TrainConfig(epochs=1), progress=False, loss="cross_entropy")
    with pytest.raises(ValueError, match="loss: expected one of mse, cross_entropy, got 'nll'"):
        fit(tiny_model(), data, TrainConfig(epochs=1), progress=False, loss="nll")
    tiny = frequency(noise=0.1, per_class=(("train", 1), ("valid", 1), ("test", 1)), samples=12)
    float_targets = {**tiny, "train": (tiny["train"][0], tiny["train"][1].float())}
    with pytest.raises(FitError, match="frequency: the train targets are torch.float32; a classification task needs "
                                       "int64"):
        run_fit(FitSpec("frequency", "lstm", hidden=2, epochs=1, progress=False), data=float_targets)
    too_large = {**tiny, "test": (tiny["test"][0], tiny["test"][1] + 1)}
    with pytest.raises(FitError, match=r"test targets hold classes 1 … 100; expected 0 … 99"):
        run_fit(FitSpec("frequency", "lstm", hidden=2, epochs=1, progress=False), data=too_large)


def test_resumed_classification_run_ends_with_the_uninterrupted_result(tmp_path):
    data = frequency(noise=0.1, seed=5, per_class=(("train", 1), ("valid", 1), ("test", 1)), samples=16)
    common = dict(task="frequency", model="gru", hidden=4, lr=1e-2, batch_size=16, progress=False)
    _, whole = run_fit(FitSpec(**common, epochs=4, out=tmp_path / "whole"), data=data)
    run_fit(FitSpec(**common, epochs=2, out=tmp_path / "split"), data=data)
    _, resumed = run_fit(FitSpec(**common, epochs=4, out=tmp_path / "split", resume=True), data=data)
    assert resumed["history"]["epoch"] == [1, 2, 3, 4]
    for key in ("train_loss", "valid_loss", "train_accuracy", "valid_accuracy"):
        assert resumed["history"][key] == whole["history"][key], key
    for key in ("best_epoch", "test_loss", "test_accuracy", "valid_accuracy", "valid_loss"):
        assert resumed[key] == whole[key], key
    regression = {"train": (data["train"][0], data["train"][0]), "valid": (data["valid"][0], data["valid"][0]),
                  "test": (data["test"][0], data["test"][0])}
    with pytest.raises(FitError, match="cannot resume"):  # a regression run in a classification run's folder
        run_fit(FitSpec("enso", "gru", hidden=4, epochs=5, out=tmp_path / "split", resume=True, progress=False),
                data=regression)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_step_data():
    """One class per sequence (``target="last"``)."""
    return {split: (x, y[:, -1].clone()) for split, (x, y) in sequence_data().items()}


CASES = {"sequence": (sequence_data, False), "last": (last_step_data, True)}


def _fit_worker(rank: int, world: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    for name, (make, last) in CASES.items():
        model = tiny_model(last=last)
        result = fit(model, make(), TrainConfig(epochs=2, **CONFIG), progress=False, loss="cross_entropy")
        torch.save({"state": model.state_dict(), "result": result}, f"{out}/{name}-rank{rank}.pt")
    dist.destroy_process_group()


def test_two_processes_train_the_same_classifiers_as_one(tmp_path):
    """Class targets at every step and at the last step; batches of 5 rows (shards of 3 and 2, a last batch of 1)."""
    mp.spawn(_fit_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for name, (make, last) in CASES.items():
        single = tiny_model(last=last)
        expected = fit(single, make(), TrainConfig(epochs=2, **CONFIG), progress=False, loss="cross_entropy")
        for rank in range(2):
            saved = torch.load(tmp_path / f"{name}-rank{rank}.pt", weights_only=True)
            for key, value in single.state_dict().items():
                assert torch.allclose(saved["state"][key], value, atol=1e-5, rtol=0), (name, key)
            result = saved["result"]
            assert result["world_size"] == 2 and result["best_epoch"] == expected["best_epoch"]
            assert result["test_accuracy"] == expected["test_accuracy"]
            assert result["test_loss"] == pytest.approx(expected["test_loss"], abs=1e-6)
            assert result["history"]["train_loss"] == pytest.approx(expected["history"]["train_loss"], abs=1e-6)
            assert result["history"]["valid_accuracy"] == expected["history"]["valid_accuracy"]


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_fit_frequency_end_to_end_writes_the_classification_contract(tmp_path, monkeypatch, capsys):
    seen = {}

    def load(seed, noise=0.1):
        seen.update(seed=seed, noise=noise)
        return frequency(noise=noise, seed=seed, per_class=(("train", 1), ("valid", 1), ("test", 1)), samples=20)

    monkeypatch.setattr(odelab.data.tasks.TASKS["frequency"], "load", load)
    out = tmp_path / "freq"
    assert main(["fit", "frequency", "--model", "taugru", "--noise", "0", "--hidden", "4", "--epochs", "2",
                 "--no-progress", "--out", str(out)]) == 0
    assert seen == {"seed": 1234, "noise": 0.0}
    result = json.loads((out / "results.json").read_text())
    assert result["metric"] == "accuracy" and result["model_options"] == {"tau": 10.0}
    assert 0 <= result["test_accuracy"] <= 1 and 0 <= result["valid_accuracy"] <= 1 and result["test_loss"] > 0
    assert result["baselines"] == {"chance": 0.01} and result["baseline_metrics"] == {"chance": "accuracy"}
    assert result["data_options"] == {"noise": 0.0} and result["settings"]["noise"] == 0.0
    assert result["test_sequences"] == 100
    rows = _read_csv(out / "curves.csv")
    assert rows[0] == ["epoch", "train_loss", "valid_loss", "train_accuracy", "valid_accuracy", "seconds"]
    assert len(rows) == 3
    assert (out / "predictions.png").stat().st_size > 0 and (out / "curves.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "baseline: chance" in printed and "1.00%" in printed


def test_fit_copy_end_to_end_reports_recall_and_the_memoryless_loss(tmp_path, monkeypatch, capsys):
    seen = {}

    def load(seed, length=1000):
        seen["length"] = length
        return copy_task(length=length, seed=seed, sizes=(("train", 8), ("valid", 4), ("test", 4)))

    monkeypatch.setattr(odelab.data.tasks.TASKS["copy"], "load", load)
    out = tmp_path / "copy"
    _, result = run_fit(FitSpec("copy", "taugru", hidden=4, epochs=1, data_options={"length": 5}, out=out,
                                progress=False))
    assert seen == {"length": 5} and result["model_options"] == {"tau": 14.0}  # T + 9
    saved = json.loads((out / "results.json").read_text())
    assert saved["baselines"]["memoryless"] == pytest.approx(10 * math.log(8) / 25)
    assert saved["baseline_metrics"] == {"memoryless": "cross-entropy"}
    assert 0 <= saved["test_recalled_accuracy"] <= 1 and saved["test_accuracy"] == result["test_accuracy"]
    assert (out / "predictions.png").exists()
    printed = capsys.readouterr().out
    assert "baseline: memoryless" in printed and "recalled accuracy (test)" in printed


def test_a_language_model_keeps_the_epoch_of_the_lowest_validation_loss(monkeypatch):
    data = sequence_data()
    valid = iter([(0.9, 0.5), (0.5, 0.7), (0.4, 0.7), (0.3, 0.6), (0.6, 0.7)])  # (loss, accuracy) per epoch
    real = loop.classification_scores

    def scripted(model, x, y, batch_size, device, stateful=False):
        return next(valid) if x is data["valid"][0] else real(model, x, y, batch_size, device, stateful)

    monkeypatch.setattr(loop, "classification_scores", scripted)
    result = fit(tiny_model(), data, TrainConfig(epochs=5, **CONFIG, select="loss"), progress=False,
                 loss="cross_entropy")
    assert result["best_epoch"] == 4 and (result["valid_accuracy"], result["valid_loss"]) == (0.6, 0.3)
    with pytest.raises(ValueError, match="select: expected 'accuracy' or 'loss'"):
        TrainConfig(select="perplexity").check()
