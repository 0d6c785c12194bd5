"""Stability studies through the Python API (the `odelab stability` command does the same with more options):

* gradient norm ‖∂L/∂h_k‖ against the lag for odelab cells vs LSTM and a tanh RNN;
* the LEM hidden-state bound (000 Prop. 4.1) along trajectories;
* UnICORNN energy (thesis eq. 3.4) under symplectic Euler vs euler/rk4, and its exact inverse step (3.7);
* eigenvalues of h·J against the stability regions of euler/rk2/rk4/implicit Euler;
* LRC vs STC oscillation damping (lrc.md §5.1 surrogates).

    python examples/stability.py [--steps 2000] [--tiny] [--out DIR]
"""
import argparse
import json
from pathlib import Path

import torch

from odelab import systems
from odelab.analysis import plots, stability
from odelab.analysis.schemes import json_ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--tiny", action="store_true", help="seconds instead of minutes (a smoke run)")
    parser.add_argument("--out", default="runs/example-stability")
    args = parser.parse_args()
    steps, seeds, hidden = (20, (0,), 4) if args.tiny else (args.steps, (0, 1, 2), 16)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save(name: str, result) -> None:
        (out / f"{name}.json").write_text(json.dumps(json_ready(result), indent=1))

    gradients = stability.gradients_vs_lag(["lem", "cornn", "unicornn", "lrcu-a", "lstm", "rnn"], steps, hidden, seeds=seeds)
    save("gradients", gradients)
    plots.plot_gradients(gradients, out / "gradients.png")
    for name, row in gradients.items():
        ratio = row["log10_ratio_last_to_lag0"]
        print(f"{name:10s} ‖∂L/∂h_1‖ / ‖∂L/∂h_T‖ = " + (f"10^{ratio:.1f}" if ratio is not None else
                                                      f"0 (underflow from lag {row['underflow_lag']})")
              + f", {row['decades_per_1000_steps']:.1f} decades per 1000 steps")

    bound = stability.lem_state_bound(steps=steps, hidden_size=hidden, seeds=seeds)
    save("lem_bound", bound)
    plots.plot_lem_bound(bound, out / "lem_bound.png")
    for row in bound:
        print(f"LEM Δt = {row['dt']}: max state {row['max_state']:.4f}, bound holds: {row['bound_holds']}")

    torch.manual_seed(0)
    energy = stability.energy_drift(systems.UnICORNN(1, hidden, alpha=0.5).double(), steps=max(steps, 50))
    inverse = stability.inverse_study(sorted({10, steps}), hidden_size=hidden)
    save("unicornn", {"energy": energy, "inverse": inverse})
    plots.plot_unicornn(energy, inverse, out / "unicornn.png")
    print("UnICORNN max |H_n − H_0|: " + ", ".join(f"{k} {v['max_drift']:.2e}" for k, v in energy.items()))

    eigen = stability.eigen_study(["lem", "cornn", "unicornn", "ltc", "lrcu-a"], steps=min(steps, 200),
                                  hidden_size=hidden)
    save("eigen", eigen)
    plots.plot_eigen(eigen, out / "eigen.png")
    for name, row in eigen.items():
        print(f"{name:10s} fraction of hλ inside: " + ", ".join(f"{k} {v:.2f}" for k, v in row["inside"].items()))

    damping = stability.damping_study(surrogates=("S1",) if args.tiny else ("S1", "S2"))
    save("lrc_damping", damping)
    plots.plot_damping(damping, out / "lrc_damping.png")
    for label, setup in damping.items():
        for name, row in setup["models"].items():
            print(f"{label} {name:22s} zero crossings {row['zero_crossings_fine']:3d}, "
                  f"explicit Euler sign changes {row['sign_changes_e1']:3d}")
    print(f"wrote JSON + PNG to {out}/")


if __name__ == "__main__":
    main()
