"""Stiff kinetics: learn the three rate constants of Robertson's reaction from noisy concentrations, by gradient
descent through ``odelab.solve(..., method="rodas4")``.

    python examples/stiff_kinetics.py [--tiny] [--steps N] [--out DIR]

Robertson's reaction (HNW II §IV.1) A → B (k1), B + B → C + B (k2), B + C → A + C (k3):

    a' = −k1 a + k3 b c,   b' = k1 a − k3 b c − k2 b²,   c' = k2 b²,    (k1, k2, k3) = (0.04, 3e7, 1e4)

from (1, 0, 0) over t ∈ [0, 1e5], rates eleven orders of magnitude apart: an explicit solver is held to steps of
~1e-4 by stability for the whole span (dopri5 needs hundreds of thousands of steps), the L-stable rodas4 takes
about a hundred. The observations: a, 1e4 b and c at 16 log-spaced times with 1 % noise. The parameters: the
log-rates, started a factor 3–5 off; the loss: the mean squared error on the three observed series, its gradient
through the steps (the Jacobian's graph included). The figure shows the concentrations under the first guess, the
fitted and the true rates against the observations (log time), and the loss.
"""
import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import odelab  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (3 steps)")
parser.add_argument("--steps", type=int, default=80, help="Adam steps")
parser.add_argument("--out", default="runs/example-stiff-kinetics")
args = parser.parse_args()
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

TRUE = {"k1": 0.04, "k2": 3e7, "k3": 1e4}
SCALE = torch.tensor([1.0, 1e4, 1.0])  # b is observed as 1e4 b, the scale it is plotted at
times = torch.cat([torch.zeros(1), torch.logspace(-3, 5, 16)])
y0 = torch.tensor([[1.0, 0.0, 0.0]])


def concentrations(log_rates, t=times):
    """(a, b, c) at the times t, under the rates exp(log_rates)."""
    k1, k2, k3 = log_rates.exp()

    def field(s, y):
        a, b, c = y[:, :1], y[:, 1:2], y[:, 2:]
        return torch.cat([-k1 * a + k3 * b * c, k1 * a - k3 * b * c - k2 * b * b, k2 * b * b], 1)

    return odelab.solve(field, y0, t, method="rodas4", rtol=1e-5, atol=1e-10).y[0]


truth = torch.tensor([math.log(v) for v in TRUE.values()])
torch.manual_seed(0)
with torch.no_grad():
    observed = concentrations(truth) * SCALE
    observed = observed * (1 + 0.01 * torch.randn_like(observed))

log_rates = (truth + torch.tensor([math.log(3.0), -math.log(4.0), math.log(5.0)])).requires_grad_(True)
first_guess = log_rates.detach().clone()
optimizer = torch.optim.Adam([log_rates], lr=0.1)
steps = 3 if args.tiny else args.steps
losses = []
for step in range(steps):
    optimizer.zero_grad()
    loss = (concentrations(log_rates) * SCALE - observed)[1:].square().mean()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 25 == 0 or step == steps - 1:
        rates = ", ".join(f"{k} {v:.4g}" for k, v in zip(TRUE, log_rates.detach().exp().tolist()))
        print(f"step {step:4d}  loss {loss.item():.3e}  {rates}")

fitted = dict(zip(TRUE, log_rates.detach().exp().tolist()))
with torch.no_grad():
    explicit = odelab.solve(lambda s, y: torch.cat([-0.04 * y[:, :1] + 1e4 * y[:, 1:2] * y[:, 2:],
                                                    0.04 * y[:, :1] - 1e4 * y[:, 1:2] * y[:, 2:] - 3e7 * y[:, 1:2] ** 2,
                                                    3e7 * y[:, 1:2] ** 2], 1), y0, [0.0, 1.0], rtol=1e-6, atol=1e-10)
report = {"true": TRUE, "first_guess": dict(zip(TRUE, first_guess.exp().tolist())), "fitted": fitted,
          "relative_error": {k: abs(fitted[k] - v) / v for k, v in TRUE.items()}, "final_loss": losses[-1],
          "steps": steps, "dopri5_steps_to_t1": int(explicit.stats["steps"])}
(out / "results.json").write_text(json.dumps(report, indent=1))
print("fitted " + ", ".join(f"{k} {fitted[k]:.4g} (true {v:g}, {100 * report['relative_error'][k]:.2f}% off)"
                            for k, v in TRUE.items()))
print(f"(dopri5 needs {report['dopri5_steps_to_t1']} steps for t <= 1 alone)")

fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
grid = torch.cat([torch.zeros(1), torch.logspace(-4, 5, 200)])
colors = ("tab:blue", "tab:orange", "tab:green")
for label, params, line in (("first guess", first_guess, ":"), ("fitted", log_rates.detach(), "-"),
                            ("true", truth, "--")):
    with torch.no_grad():
        curves = concentrations(params, grid) * SCALE
    for j, name in enumerate(("a", "1e4 b", "c")):
        ax.semilogx(grid[1:], curves[1:, j], line, color=colors[j], lw=1.2,
                    label=f"{name}, {label}" if label != "first guess" or j == 0 else None)
for j in range(3):
    ax.semilogx(times[1:], observed[1:, j], "x", color=colors[j], ms=5)
ax.set(xlabel="t", ylabel="concentration", title="Robertson's reaction: observations (x) and rodas4 solutions")
ax.legend(fontsize=7, ncol=2)
ax_loss.semilogy(losses)
ax_loss.set(xlabel="Adam step", ylabel="mean squared error", title="fit")
fig.tight_layout()
fig.savefig(out / "stiff_kinetics.png", dpi=110)
print(f"results in {out}/ (results.json, stiff_kinetics.png)")
