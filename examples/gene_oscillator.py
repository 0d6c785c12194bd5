"""A stiff delay equation: learn the transcription rate and the Hill coefficient of a delayed negative-feedback gene
oscillator (Hes1-like) from noisy protein levels, by gradient descent through ``odelab.solve(..., method="rodas4p2")``.

    python examples/gene_oscillator.py [--tiny] [--steps N] [--out DIR]

The protein p represses its own gene with a delay τ = 1 (transcription, splicing and transport), and the mRNA m
decays a thousand times faster than the protein (dimensionless, after Monk 2003's model of Hes1):

    m' = μ a / (1 + p(t − τ)ⁿ) − μ m,   p' = m − p,   μ = 1000,   (a, n) = (3, 6),

from m = 0, p = 0.2 (and the same history) over t ∈ [0, 10]. The fast mRNA makes the equation stiff: an explicit
pair is held to steps of ~3.3/μ by stability (dopri5 takes thousands of steps), the L-stable rodas4p2 follows the
slow oscillation in a couple of hundred; the delayed protein level is a time-dependent forcing of the fast mRNA, under
which RODAS's order drops and RODASP's (rodas4p2) does not. The observations: p at 41 times with noise 0.02. The
parameters: log a and log n, started at half their values; the loss: the mean squared error, its gradient through
the steps and the delayed reads. The figure shows the protein under the first guess, the fit and the truth against
the observations, the loss, and the steps rodas4p2, rodas4 and dopri5 take at the true parameters.
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
from odelab.systems import System  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (2 steps on a shorter span)")
parser.add_argument("--steps", type=int, default=100, help="Adam steps")
parser.add_argument("--out", default="runs/example-gene-oscillator")
args = parser.parse_args()
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

MU, TRUE = 1000.0, {"a": 3.0, "n": 6.0}


class Repressor(System):
    """m' = μ a / (1 + p(t − 1)ⁿ) − μ m, p' = m − p, with (log a, log n) as parameters."""

    blocks = ("m", "p")
    delays = (1.0,)

    def __init__(self, log_params: torch.Tensor):
        super().__init__()
        self.log_params = log_params

    def derivative(self, t, state, inp, delayed):
        m, p = state
        a, n = self.log_params.exp()
        return (MU * a / (1 + delayed[1].clamp_min(0) ** n) - MU * m, m - p)


end = 3.0 if args.tiny else 10.0
times = torch.linspace(0.0, end, 41)
start = (torch.zeros(1, 1), torch.full((1, 1), 0.2))


def protein(log_params, t=times, method="rodas4p2"):
    """p at the times t under the parameters exp(log_params), and the solve's statistics."""
    sol = odelab.solve(Repressor(log_params), start, t, method=method, rtol=1e-5, atol=1e-8, history=start,
                       max_steps=100_000)
    return sol["p"][0, :, 0], sol.stats


truth = torch.tensor([math.log(v) for v in TRUE.values()])
torch.manual_seed(0)
with torch.no_grad():
    observed = protein(truth)[0]
    observed = observed + 0.02 * torch.randn_like(observed)

log_params = (truth - math.log(2.0)).requires_grad_(True)
first_guess = log_params.detach().clone()
optimizer = torch.optim.Adam([log_params], lr=0.05)
steps = 2 if args.tiny else args.steps
losses = []
for step in range(steps):
    optimizer.zero_grad()
    fit, stats = protein(log_params)
    loss = (fit - observed).square().mean()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 10 == 0 or step == steps - 1:
        values = ", ".join(f"{k} {v:.4g}" for k, v in zip(TRUE, log_params.detach().exp().tolist()))
        print(f"step {step:4d}  loss {loss.item():.3e}  {values}  ({int(stats['steps'][0])} rodas4p2 steps)")

fitted = dict(zip(TRUE, log_params.detach().exp().tolist()))
with torch.no_grad():
    _, implicit = protein(truth)
    _, rodas = protein(truth, method="rodas4")
    _, explicit = protein(truth, method="dopri5")
report = {"true": TRUE, "first_guess": dict(zip(TRUE, first_guess.exp().tolist())), "fitted": fitted,
          "relative_error": {k: abs(fitted[k] - v) / v for k, v in TRUE.items()}, "final_loss": losses[-1],
          "noise_variance": 0.02 ** 2, "adam_steps": steps, "span": end,
          "rodas4p2_steps": int(implicit["steps"][0]), "rodas4_steps": int(rodas["steps"][0]),
          "dopri5_steps": int(explicit["steps"][0])}
(out / "results.json").write_text(json.dumps(report, indent=1))
print("fitted " + ", ".join(f"{k} {fitted[k]:.4g} (true {v:g}, {100 * report['relative_error'][k]:.1f}% off)"
                            for k, v in TRUE.items()))
print(f"steps at the true parameters: rodas4p2 {report['rodas4p2_steps']}, rodas4 {report['rodas4_steps']}, "
      f"dopri5 {report['dopri5_steps']}")

fig, (ax, ax_loss, ax_steps) = plt.subplots(1, 3, figsize=(13, 3.8), gridspec_kw={"width_ratios": [2.2, 1, 1]})
grid = torch.linspace(0.0, end, 400)
for label, params, line in (("first guess", first_guess, ":"), ("fitted", log_params.detach(), "-"),
                            ("true", truth, "--")):
    with torch.no_grad():
        ax.plot(grid, protein(params, grid)[0], line, lw=1.3, label=label)
ax.plot(times, observed, "x", color="k", ms=4, label="observed")
ax.set(xlabel="t", ylabel="protein p", title="delayed repression (τ = 1), mRNA 1000× faster")
ax.legend(fontsize=7)
ax_loss.semilogy(losses)
ax_loss.axhline(0.02 ** 2, color="gray", lw=0.8, ls="--", label="noise variance")
ax_loss.set(xlabel="Adam step", ylabel="mean squared error", title="fit")
ax_loss.legend(fontsize=7)
ax_steps.bar(["rodas4p2", "rodas4", "dopri5"], [report[f"{m}_steps"] for m in ("rodas4p2", "rodas4", "dopri5")],
             color=["tab:green", "tab:olive", "gray"])
ax_steps.set(ylabel="steps", title=f"steps on [0, {end:g}] (rtol 1e-5)")
fig.tight_layout()
fig.savefig(out / "gene_oscillator.png", dpi=110)
print(f"results in {out}/ (results.json, gene_oscillator.png)")
