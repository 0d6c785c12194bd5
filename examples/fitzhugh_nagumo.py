"""Fit FitzHugh--Nagumo one-step prediction with LEM (000 §5.5) and compare with an LSTM, through the Python API.

    python examples/fitzhugh_nagumo.py [--tiny] [--epochs N] [--out DIR]

The same run from the command line: ``odelab fit fhn --model lem`` (and ``--model lstm``).
"""
import argparse
from pathlib import Path

import torch

from odelab import cells
from odelab.data import fitzhugh_nagumo
from odelab.training.plots import plot_predictions
from odelab import SequenceRegressor, TrainConfig, fit

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run on a slice of the data")
parser.add_argument("--epochs", type=int, default=40)
parser.add_argument("--out", default="runs/example-fhn")
args = parser.parse_args()
torch.set_num_threads(1)  # small recurrent models: one thread is fastest on a CPU

data = fitzhugh_nagumo(seed=1234)  # 128 / 128 / 1024 sequences of 1000 steps, cached after the first call
if args.tiny:
    data = {k: (x[:8, :100], y[:8, :100]) for k, (x, y) in data.items()}
epochs = 1 if args.tiny else args.epochs
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

for name, body in {"LEM": cells.LEM(1, 16, dt=1.0), "LSTM": cells.LSTM(1, 16)}.items():
    torch.manual_seed(1234)
    model = SequenceRegressor(body, 16, 1)
    result = fit(model, data, TrainConfig(epochs=epochs, lr=0.01545927736419477, batch_size=32), progress=False)
    print(f"{name:5s} test RMSE {result['test_rmse']:.3e} (best epoch {result['best_epoch']}, "
          f"{result['train_seconds']:.0f} s)")
    plot_predictions(model, *data["test"], out / f"{name.lower()}.png", dt=0.4, title=f"FitzHugh–Nagumo: {name}")
print(f"plots in {out}/")
