"""Same model, other discretization: train a LEM on FitzHugh--Nagumo, then step its vector field with every
applicable scheme and step, and retrain it under each scheme (the Python API behind `odelab compare-schemes`).

    python examples/compare_schemes.py [--model lem] [--tiny] [--out DIR]

Default: 200-step windows, 128/64/64 sequences, 20 epochs + 8 epochs per scheme (a few minutes on 2 CPU cores).
"""
import argparse
import json
from pathlib import Path

import torch

from odelab import cells
from odelab.analysis import schemes
from odelab.analysis.plots import plot_scheme_comparison
from odelab.data import fitzhugh_nagumo
from odelab import SequenceRegressor, TrainConfig, fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="lem", help="a Recurrent-based preset: lem, cornn, unicornn, ltc, lrcu-a, ...")
    parser.add_argument("--tiny", action="store_true", help="seconds instead of minutes (a smoke run)")
    parser.add_argument("--out", default="runs/example-compare-schemes")
    args = parser.parse_args()
    length, sizes, epochs, retrain_epochs = (24, (16, 8, 8), 1, 1) if args.tiny else (200, (128, 64, 64), 20, 8)

    data = fitzhugh_nagumo(seed=1234)  # {split: (v(t_0..t_999), v(t_1..t_1000))}, cached on disk
    data = {split: (x[:n, :length], y[:n, :length]) for (split, (x, y)), n in zip(data.items(), sizes)}

    def build() -> SequenceRegressor:
        torch.manual_seed(0)
        return SequenceRegressor(cells.PRESETS[args.model](1, 16), 16, 1)

    model = build()
    fitted = fit(model, data, TrainConfig(epochs=epochs, seed=0), progress=False)
    print(f"{args.model} trained under its own scheme: test RMSE {fitted['test_rmse']:.3e}")

    # (a) the trained weights under every scheme and step, against rk4 with 64x the sub-steps (float64)
    names = schemes.applicable_schemes(model.body)
    evaluation = schemes.evaluate_trained(model, *data["test"], schemes=names, finest=2 if args.tiny else 8)
    # (b) retrained from the same initialisation under each scheme
    training = schemes.train_under_schemes(build, data, TrainConfig(epochs=retrain_epochs, seed=0), names)
    print(schemes.format_table(evaluation, training))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = schemes.json_ready({"evaluation": evaluation, "training": training})
    (out / "compare_schemes.json").write_text(json.dumps(result, indent=1))
    plot_scheme_comparison(evaluation, training, out / "compare_schemes.png", title=f"fhn: {args.model}")
    print(f"wrote {out}/compare_schemes.json and compare_schemes.png")


if __name__ == "__main__":
    main()
