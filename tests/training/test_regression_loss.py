"""``TrainConfig(regression_loss=...)``: the training loss of a regression is the mean squared error ("mse") or the
mean absolute error ("l1", the LRC authors' neural-ODE code), checked by one plain gradient step on a constant
model whose two gradients point in opposite directions."""
import pytest
import torch
from torch import nn

import odelab.training.loop as loop
from odelab import TrainConfig, fit


class Constant(nn.Module):
    """Predicts one learnable value c at every step."""

    def __init__(self, c: float):
        super().__init__()
        self.c = nn.Parameter(torch.tensor([c]))

    def forward(self, x):
        return self.c.expand(x.shape[0], x.shape[1], 1)


def data():
    targets = torch.tensor([0.0, 0.0, 0.0, 10.0]).reshape(4, 1, 1)  # median 0 < c = 1 < mean 2.5
    return {split: (torch.zeros(4, 1, 1), targets) for split in ("train", "valid", "test")}


@pytest.mark.parametrize("kind, gradient", [("mse", 2 * (1.0 - 2.5)), ("l1", (3 - 1) / 4)])
def test_one_gradient_step_follows_the_chosen_loss(kind, gradient, monkeypatch):
    monkeypatch.setitem(loop.OPTIMIZERS, "adam", torch.optim.SGD)
    model = Constant(1.0)
    fit(model, data(), TrainConfig(epochs=1, lr=0.1, batch_size=4, regression_loss=kind), progress=False)
    # ∂/∂c mean (c − y)² = 2 (c − mean y); ∂/∂c mean |c − y| = mean sign(c − y)
    assert float(model.c.detach()) == pytest.approx(1.0 - 0.1 * gradient, abs=1e-6)


def test_an_unknown_regression_loss_is_refused():
    with pytest.raises(ValueError, match="regression_loss"):
        fit(Constant(1.0), data(), TrainConfig(epochs=1, regression_loss="huber"), progress=False)
