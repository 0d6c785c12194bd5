"""Your own vector field as a sequence model: a System subclass and a plain nn.Module f(t, y, u), both trained
on FitzHugh--Nagumo one-step prediction with odelab.Recurrent + odelab.fit, then re-stepped by rk4.

    python examples/custom_system.py [--tiny] [--epochs N]

The System subclass below is a learnable fast-slow pair (a neural FitzHugh--Nagumo):

    dy/dt = tanh(A y + B w + V u + b) − y          forcing tanh(·), decay 1
    dw/dt = ε (C y − w),  ε = σ(e) per unit        forcing ε C y, decay ε

It declares its blocks, observable, the forcing/decay split (so the IMEX schemes apply) and an affine input
encoding (so V u + b is one matmul for the whole sequence).
"""
import argparse

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from odelab import Recurrent
from odelab.analysis.schemes import discretized
from odelab.data import fitzhugh_nagumo
from odelab.systems import System
from odelab import SequenceRegressor, TrainConfig, fit
from odelab.training import rmse


class NeuralFitzHughNagumo(System):
    """A learnable fast (y) / slow (w) vector field; state ("y", "w"), observable y."""

    blocks = ("y", "w")
    observable = "y"
    split_blocks = ("y", "w")

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.A = nn.Parameter(torch.randn(hidden_size, hidden_size) / hidden_size ** 0.5)
        self.B = nn.Parameter(torch.randn(hidden_size, hidden_size) / hidden_size ** 0.5)
        self.C = nn.Parameter(torch.randn(hidden_size, hidden_size) / hidden_size ** 0.5)
        self.V = nn.Parameter(torch.randn(hidden_size, input_size))
        self.b = nn.Parameter(torch.zeros(hidden_size))
        self.e = nn.Parameter(torch.full((hidden_size,), -2.0))  # slow scale ε = σ(−2) ≈ 0.12 at init

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.V, self.b  # the input map u -> V u + b (System.encode applies it)

    def split(self, i, t, state, inp, *delayed):
        y, w = state
        if i == 0:
            drive = F.linear(y, self.A) + F.linear(w, self.B) + (self.b if inp is None else inp)
            return torch.tanh(drive), torch.ones_like(y)
        eps = torch.sigmoid(self.e)
        return eps * F.linear(y, self.C), eps.expand_as(w)

    def block_derivative(self, i, t, state, inp, *delayed):
        forcing, decay = self.split(i, t, state, inp)
        return forcing - decay * state[i]

    def derivative(self, t, state, inp, *delayed):
        return self.block_derivative(0, t, state, inp), self.block_derivative(1, t, state, inp)


class MLPField(nn.Module):
    """A plain callable f(t, y, u) = MLP([y, u]) − y: no System subclass needed (Recurrent wraps it)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden_size + input_size, 32), nn.Tanh(), nn.Linear(32, hidden_size))

    def forward(self, t: float, y: Tensor, u: Tensor) -> Tensor:
        return self.net(torch.cat((y, u), -1)) - y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="seconds instead of minutes (a smoke run)")
    parser.add_argument("--epochs", type=int)
    args = parser.parse_args()
    length, sizes, epochs = (24, (16, 8, 8), 1) if args.tiny else (200, (128, 64, 128), 30)
    epochs = args.epochs or epochs
    data = fitzhugh_nagumo(seed=1234)
    data = {split: (x[:n, :length], y[:n, :length]) for (split, (x, y)), n in zip(data.items(), sizes)}
    hidden = 16
    bodies = {
        "NeuralFitzHughNagumo + imex": lambda: Recurrent(NeuralFitzHughNagumo(1, hidden), "imex", dt=0.5),
        "MLPField + rk4": lambda: Recurrent(MLPField(1, hidden), "rk4", dt=0.5, hidden_size=hidden),
    }
    for name, make in bodies.items():
        torch.manual_seed(0)
        model = SequenceRegressor(make(), hidden, 1)
        result = fit(model, data, TrainConfig(epochs=epochs, lr=3e-3, seed=0), progress=False)
        with discretized(model.body, "rk4", 4):  # the same trained field, rk4 with 4 sub-steps per sample
            fine = rmse(model, *data["test"], 256, "cpu")
        print(f"{name:30s} test RMSE {result['test_rmse']:.3e} (trained scheme), {fine:.3e} (rk4 × 4), "
              f"{result['train_seconds']:.0f} s")


if __name__ == "__main__":
    main()
