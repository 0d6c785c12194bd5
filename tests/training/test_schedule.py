"""The learning-rate step schedule (lr_milestones, lr_gamma) and the optimizer's weight decay of ``fit``."""
import pytest
import torch
from torch import nn

from odelab.training.loop import CheckpointError, TrainConfig, fit
from odelab.training.run import FitError, FitSpec


def _data():
    g = torch.Generator().manual_seed(0)
    return {split: (torch.randn(n, 5, 2, generator=g), torch.randn(n, 5, 1, generator=g))
            for split, n in (("train", 16), ("valid", 4), ("test", 4))}


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 1))


def test_the_rate_steps_down_at_each_milestone_and_survives_a_resume(tmp_path):
    """lr · γ^(milestones ≤ epoch), read from the checkpoint's optimizer after epochs 1, 2 and 4; two epochs then a
    resume to five give the uninterrupted run's result exactly (the rate is a function of the epoch)."""
    config = lambda epochs: TrainConfig(epochs=epochs, lr=0.02, batch_size=8, lr_milestones=(1, 3), lr_gamma=0.5)
    assert [config(1).lr_at(e) for e in range(5)] == [0.02, 0.01, 0.01, 0.005, 0.005]
    rates = []
    for epochs in (1, 2, 4):
        fit(_model(), _data(), config(epochs), out_dir=tmp_path / str(epochs), progress=False)
        saved = torch.load(tmp_path / str(epochs) / "checkpoint.pt", weights_only=True)
        rates.append(saved["optimizer"]["param_groups"][0]["lr"])
    assert rates == [0.02, 0.01, 0.005]

    whole = fit(_model(), _data(), config(5), progress=False)
    fit(_model(), _data(), config(2), out_dir=tmp_path / "resumed", progress=False)
    resumed = fit(_model(), _data(), config(5), out_dir=tmp_path / "resumed", resume=True, progress=False)
    timing = lambda history: {k: v for k, v in history.items() if k != "seconds"}
    assert resumed["test_rmse"] == whole["test_rmse"] and timing(resumed["history"]) == timing(whole["history"])
    other = TrainConfig(epochs=5, lr=0.02, batch_size=8, lr_milestones=(2, 3), lr_gamma=0.5)
    with pytest.raises(CheckpointError, match=r"lr_milestones \(2, 3\) \(checkpoint: \(1, 3\)\)"):
        fit(_model(), _data(), other, out_dir=tmp_path / "resumed", resume=True, progress=False)


def test_weight_decay_is_the_optimizers_l2_penalty():
    """Targets equal to the model's own outputs: the loss gradient is zero, so the one Adam step of a full-batch epoch
    sees the gradient λ θ only and moves every weight by lr · sign(θ) (Adam's first step: m̂ / √v̂ = sign)."""
    data = _data()
    model = _model()
    with torch.no_grad():
        data["train"] = (data["train"][0], model(data["train"][0]))
    before = [p.detach().clone() for p in model.parameters()]
    fit(model, data, TrainConfig(epochs=1, lr=1e-3, batch_size=16, weight_decay=0.1), progress=False)
    for old, new in zip(before, model.parameters()):
        assert torch.allclose(new.detach(), old - 1e-3 * old.sign(), rtol=0, atol=1e-7)


@pytest.mark.parametrize("field,value,message", [
    ("lr_milestones", (3, 2), "lr_milestones: expected strictly increasing epochs >= 1"),
    ("lr_milestones", (0,), "lr_milestones: expected strictly increasing"),
    ("lr_gamma", 1.5, r"lr_gamma: expected a factor in \(0, 1\]"),
    ("weight_decay", -0.1, "weight_decay: expected a finite number >= 0"),
])
def test_bad_settings_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        fit(_model(), _data(), TrainConfig(epochs=1, **{field: value}), progress=False)
    with pytest.raises(FitError, match="--" + message.replace("_", "-", 1)):
        FitSpec("fhn", "lem", "quick", **{field: value}).check()


def test_the_command_line_settings_reach_the_configuration():
    hidden, config = FitSpec("fhn", "lem", "quick", lr_milestones=(5, 8), lr_gamma=0.3, weight_decay=1e-4).config(
        FitSpec("fhn", "lem", "quick").check())
    assert (config.lr_milestones, config.lr_gamma, config.weight_decay) == ((5, 8), 0.3, 1e-4)


@pytest.mark.parametrize("name, rho, eps", [("rmsprop", 0.99, 1e-8), ("rmsprop-keras", 0.9, 1e-7)])
def test_rmsprop_takes_torchs_or_keras_defaults(name, rho, eps):
    """One full-batch step from v = 0: v = (1 − ρ) g², θ −= lr g / (√v + ε) (Keras' and torch's update)."""
    data = _data()
    model = _model()
    x, y = data["train"]
    loss = ((model(x) - y) ** 2).sum() / y.numel()  # the loop's mean squared error over every target
    grads = torch.autograd.grad(loss, list(model.parameters()))
    expected = [p.detach() - 0.01 * g / (((1 - rho) * g * g).sqrt() + eps) for p, g in zip(model.parameters(), grads)]
    fit(model, data, TrainConfig(epochs=1, lr=0.01, batch_size=16, optimizer=name), progress=False)
    for want, got in zip(expected, model.parameters()):
        assert torch.allclose(got.detach(), want, rtol=0, atol=1e-6)


def test_the_optimizer_is_chosen_on_the_command_line(capsys):
    assert FitSpec("fhn", optimizer="rmsprop-keras").config(FitSpec("fhn").check())[1].optimizer == "rmsprop-keras"
    with pytest.raises(FitError, match="--optimizer: expected one of"):
        FitSpec("fhn", optimizer="sgd").check()
