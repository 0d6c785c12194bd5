"""Irregularly sampled FitzHugh--Nagumo: a continuous-time cell steps by each sample's own time gap, an LSTM reads the
gap as one more input feature (the LRC paper's treatment of its baselines), through the Python API.

    python examples/irregular_sampling.py [--tiny] [--epochs N] [--device cpu|cuda] [--out DIR]

The data (``odelab.data.fitzhugh_nagumo_irregular``): FHN's sequences observed at gaps drawn from U[0.04, 0.76],
inputs [v(t_n), t_{n+1} − t_n], targets v(t_{n+1}). ``SequenceRegressor(..., time_gaps=True)`` hands the last input
feature to LEM as its per-sample step (``cell(x, dt=gaps)``, on LEM's kernel: C++ on the CPU, Triton on CUDA) and
to the LSTM as a feature. The
figure draws one test sequence against its own observation times. The same runs from the command line:
``odelab fit fhn-irregular --model lem`` (and ``--model lstm``).
"""
import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from odelab import SequenceRegressor, TrainConfig, cells, fit  # noqa: E402
from odelab.data.fhn import fitzhugh_nagumo_irregular  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run on a slice of the data")
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
parser.add_argument("--out", default="runs/example-irregular")
args = parser.parse_args()
if args.device == "cuda" and not torch.cuda.is_available():
    parser.error("--device cuda: no CUDA device here")
torch.set_num_threads(1)  # small recurrent models: one thread is fastest on a CPU

data = fitzhugh_nagumo_irregular(seed=1234)  # 128 / 128 / 1024 sequences of 1000 samples, cached after the first call
if args.tiny:
    data = {k: (x[:8, :100], y[:8, :100]) for k, (x, y) in data.items()}
epochs = 1 if args.tiny else args.epochs
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

x_test, y_test = data["test"]
times = torch.cat([torch.zeros(1), x_test[0, :, 1].cumsum(0)])[1:]  # the first test sequence's target times
fig, ax = plt.subplots(figsize=(9, 3.6))
ax.plot(times, y_test[0, :, 0], "k.", ms=3, label="observed v")
models = {"LEM, steps by the gap": cells.LEM(1, 16), "LSTM, gap as a feature": cells.LSTM(2, 16)}
for name, body in models.items():
    torch.manual_seed(1234)
    model = SequenceRegressor(body, 16, 1, time_gaps=True)
    config = TrainConfig(epochs=epochs, lr=0.01545927736419477, batch_size=32, device=args.device)
    result = fit(model, data, config, progress=False)
    print(f"{name:24s} test RMSE {result['test_rmse']:.3e} (best epoch {result['best_epoch']}, "
          f"{result['train_seconds']:.0f} s)")
    with torch.no_grad():
        prediction = model(x_test[:1].to(args.device))[0, :, 0].cpu()
        ax.plot(times, prediction, lw=1, label=f"{name} (test RMSE {result['test_rmse']:.2e})")
ax.set(xlabel="t (each sample at its own time)", ylabel="v", title="FitzHugh–Nagumo observed at irregular times")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "irregular.png", dpi=110)
print(f"figure in {out}/irregular.png")
