"""Mackey--Glass (001 App. F.3): the chaotic delay equation solved with fixed-step and adaptive methods, then
one-step prediction with τ-GRU against LEM and an LSTM.

    python examples/mackey_glass.py [--tiny] [--epochs N]

x' = a x(t−δ) / (1 + x(t−δ)ⁿ) − b x with a = 0.2, b = 0.1, n = 10, δ = 17. Command line:
``odelab fit mackey-glass --model taugru``; the paper's table: ``odelab reproduce mackey-glass``.
"""
import argparse

import torch

import odelab
from odelab import cells
from odelab.data import mackey_glass
from odelab.systems import MackeyGlass
from odelab import SequenceRegressor, TrainConfig, fit

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tiny", action="store_true")
parser.add_argument("--epochs", type=int, default=30)
args = parser.parse_args()
torch.set_num_threads(1)

# the same DDE by RK4 with a delay ring buffer and by adaptive dopri5 with a dense history
x0 = torch.tensor([[0.5], [1.2]], dtype=torch.float64)
t = torch.linspace(0, 50 if args.tiny else 200, 201, dtype=torch.float64)
fixed = odelab.solve(MackeyGlass(), x0, t, method="rk4", dt=0.25)
adaptive = odelab.solve(MackeyGlass(), x0, t, method="dopri5", rtol=1e-8, atol=1e-10)
print(f"rk4 (dt 0.25) vs dopri5 (rtol 1e-8): max difference {(fixed.y - adaptive.y).abs().max():.2e}; "
      f"dopri5 steps per sample {adaptive.stats['steps'].tolist()}")

data = mackey_glass(seed=1234)
if args.tiny:
    data = {k: (x[:8, :100], y[:8, :100]) for k, (x, y) in data.items()}
models = {"tau-GRU": cells.TauGRU(1, 16, tau=10), "LEM": cells.LEM(1, 16), "LSTM": cells.LSTM(1, 16)}
for name, body in models.items():
    torch.manual_seed(1234)
    model = SequenceRegressor(body, 16, 1)
    result = fit(model, data, TrainConfig(epochs=1 if args.tiny else args.epochs, lr=0.01, batch_size=32),
                 progress=False)
    print(f"{name:8s} test MSE {result['test_rmse'] ** 2:.3e}")
