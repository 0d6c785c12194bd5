"""Frequency classification (Erichson et al. 2025, §5, Table 5): the generator against the paper's equations written
out here (eq. 21 and X_j(t_n) = cos(2π f_j t_n) + σ ε), the class-stratified split, the noise, and the task's wiring."""
import math

import numpy as np
import pytest
import torch

import odelab.data.tasks
from odelab.data import frequency
from odelab.data.frequency import class_frequencies

SMALL = (("train", 2), ("valid", 1), ("test", 1))


def paper_frequencies() -> np.ndarray:
    """f_j = 1 + (j − 1)(2^12 − 1)/99 for j = 1, …, 100 (eq. 21)."""
    return np.array([1 + (j - 1) * (2**12 - 1) / 99 for j in range(1, 101)])


def test_class_frequencies_are_eq_21():
    f = paper_frequencies()
    assert f[0] == 1 and f[-1] == 4096
    assert np.allclose(class_frequencies().numpy(), f, rtol=0, atol=1e-9)


def test_noise_free_samples_are_the_cosines_of_their_class_at_equally_spaced_times_in_0_1():
    data = frequency(noise=0.0, seed=3)
    f = paper_frequencies()
    t = np.arange(1000) / 999  # 1000 equally spaced times, both ends of [0, 1] included
    for split, per_class in (("train", 6), ("valid", 2), ("test", 2)):
        x, y = data[split]
        assert x.shape == (100 * per_class, 1000, 1) and x.dtype == torch.float32
        assert y.shape == (100 * per_class,) and y.dtype == torch.int64
        assert torch.equal(torch.bincount(y, minlength=100), torch.full((100,), per_class))  # class-stratified
        reference = np.cos(2 * np.pi * f[y.numpy()][:, None] * t[None, :])
        assert np.abs(x[..., 0].double().numpy() - reference).max() < 1e-6
    x, y = data["train"]
    for label in (0, 57, 99):  # no random phase: the samples of a class are identical without noise
        rows = x[y == label]
        assert torch.equal(rows, rows[:1].expand_as(rows))


def test_aliased_classes_stay_distinguishable():
    x, y = frequency(noise=0.0, per_class=SMALL)["test"]
    signals = x[torch.argsort(y), :, 0].double()  # one per class
    distance = torch.cdist(signals, signals) / math.sqrt(1000)
    distance.fill_diagonal_(math.inf)
    assert distance.min() > 0.1  # RMS difference of the closest pair of classes (folded 0.55 Hz apart)


def test_noise_is_gaussian_with_standard_deviation_sigma_and_follows_the_seed():
    clean = frequency(noise=0.0, seed=1)
    noisy = frequency(noise=0.1, seed=1)
    residual = torch.cat([noisy[s][0] - clean[s][0] for s in ("train", "valid", "test")]).double()
    assert abs(float(residual.std()) - 0.1) < 0.001 and abs(float(residual.mean())) < 0.001
    assert abs(float((residual[:, 1:] * residual[:, :-1]).mean())) < 1e-4  # independent in time
    for split in ("train", "valid", "test"):
        assert torch.equal(noisy[split][1], clean[split][1])
    again = frequency(noise=0.1, seed=1, per_class=SMALL)
    assert torch.equal(again["train"][0], frequency(noise=0.1, seed=1, per_class=SMALL)["train"][0])
    assert not torch.equal(again["train"][0], frequency(noise=0.1, seed=2, per_class=SMALL)["train"][0])
    assert not torch.equal(again["train"][0][:100], again["valid"][0])  # each split its own noise


@pytest.mark.parametrize("noise", [-0.1, float("nan"), float("inf"), "0.1", True])
def test_bad_noise_is_refused(noise):
    with pytest.raises(ValueError, match="noise: expected a finite number >= 0"):
        frequency(noise=noise, per_class=SMALL)


def test_the_task_is_a_100_class_last_step_classification_with_chance_baseline_and_a_delay():
    task = odelab.data.tasks.TASKS["frequency"]
    assert (task.loss, task.classes, task.target, task.options) == ("cross_entropy", 100, "last", {"noise": "noise"})
    data = frequency(noise=0.1, per_class=SMALL)
    assert task.baselines["chance"](data) == pytest.approx(0.01)
    assert task.model_options("taugru", {}) == task.model_options("delaygru", {}) == {"tau": 10.0}
    assert task.model_options("lstm", {}) == {}
    assert task.presets["paper"]["hidden_size"] == 128
    x, _ = task.load(7, noise=0)["valid"]
    assert torch.equal(x, frequency(noise=0.0, seed=7)["valid"][0])


def test_small_preset_clips_the_gradient_norm_at_1_for_every_model_of_table_5(tmp_path, monkeypatch):
    """The ``small`` preset (our CPU protocol for Table 5): one protocol for every model of the table, gradient-norm
    clipping at 1.0 applied at every optimiser step of ``odelab fit``, overridable by ``--clip``."""
    import json

    from odelab.cli import main
    from odelab.training.reproduce import TABLES
    from odelab.training.run import FitSpec

    task = odelab.data.tasks.TASKS["frequency"]
    configs = {model: FitSpec("frequency", model, "small").config(task) for model in TABLES["frequency"].models}
    hidden, config = configs["taugru"]
    assert all(c == (hidden, config) for c in configs.values())
    assert (hidden, config.clip, config.epochs, config.lr, config.batch_size) == (32, 1.0, 25, 3e-3, 32)
    assert task.presets["quick"].get("clip") is None  # the committed quick runs are unclipped
    assert FitSpec("frequency", "taugru", "small", clip=0.5).config(task)[1].clip == 0.5

    data = frequency(noise=0.1, seed=3, per_class=(("train", 2), ("valid", 1), ("test", 1)), samples=40)
    monkeypatch.setattr(task, "load", lambda seed, **options: data)
    import odelab.training.loop as loop

    calls = []
    clip = loop.clip_gradient_norm
    monkeypatch.setattr(loop, "clip_gradient_norm", lambda p, max_norm: calls.append(max_norm) or clip(p, max_norm))
    assert main(["fit", "frequency", "--model", "taugru", "--preset", "small", "--epochs", "1", "--hidden", "4",
                 "--no-progress", "--out", str(tmp_path)]) == 0
    assert calls == [1.0] * math.ceil(200 / 32)  # 200 training sequences, batch 32: every step clipped at 1.0
    assert json.loads((tmp_path / "results.json").read_text())["config"]["clip"] == 1.0
