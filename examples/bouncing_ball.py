"""Bouncing balls: learn gravity, air drag and the restitution coefficient from the times the balls hit the ground,
by gradient descent through terminal events (``odelab.solve(..., event=g)``).

    python examples/bouncing_ball.py [--tiny] [--steps N] [--out DIR]

Between bounces a ball follows x'' = −g − c x' (height x, linear drag c); it lands where x falls through 0, and
leaves the ground with −e times its impact speed. Eight balls dropped from different heights are one batch and
one solve: the landing is an event that resets the state (``reset=``), so every ball bounces at its own times
inside the adaptive loop, and ``solution.event.t`` holds each ball's landings in order. The landing times are
differentiable (the implicit function theorem at each event, the jump and the saltation term across it), so the
sum of squared errors against the observed times (the true parameters' landings plus 5 ms noise) trains log g,
log c and logit e with Adam. The figure shows two balls under the first guess, the fitted and the true parameters,
and the loss.
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
parser.add_argument("--steps", type=int, default=300, help="Adam steps")
parser.add_argument("--bounces", type=int, default=5, help="landings observed per ball")
parser.add_argument("--out", default="runs/example-bouncing-ball")
args = parser.parse_args()
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

TRUE = {"g": 9.81, "c": 0.35, "e": 0.8}
NOISE = 0.005  # s, the observed landing times' noise
heights = torch.linspace(1.0, 4.0, 8).unsqueeze(1)


def landings(g, c, e, bounces, grid=None):
    """The balls' landing times (8, bounces), and with ``grid`` their heights there (8, len(grid))."""
    field = lambda t, y: torch.cat([y[:, 1:], -g - c * y[:, 1:]], 1)
    bounce = lambda t, y: torch.stack([torch.zeros_like(y[:, 0]), -e * y[:, 1]], 1)  # back up, e times slower
    times = torch.tensor([0.0, 20.0]) if grid is None else grid
    sol = odelab.solve(field, torch.cat([heights, torch.zeros_like(heights)], 1), times, event=lambda t, y: y[:, 0],
                       event_direction=-1, reset=bounce, max_events=bounces, rtol=1e-8, atol=1e-10)
    if grid is None and (sol.event.t.shape[1] < bounces or not bool(sol.event.happened.all())):
        raise RuntimeError(f"a ball landed fewer than {bounces} times within {float(times[-1])} s; the parameters left "
                           f"the physical range")
    return sol.event.t, sol.y[:, :, 0]


torch.manual_seed(0)
with torch.no_grad():
    observed = landings(*(torch.tensor(v) for v in TRUE.values()), args.bounces)[0]
    observed += NOISE * torch.randn_like(observed)

raw = {"log_g": torch.tensor(math.log(6.0)), "log_c": torch.tensor(math.log(0.05)), "logit_e": torch.tensor(0.0)}
for value in raw.values():
    value.requires_grad_(True)
physical = lambda: (raw["log_g"].exp(), raw["log_c"].exp(), torch.sigmoid(raw["logit_e"]))
first_guess = [v.item() for v in physical()]
optimizer = torch.optim.Adam(raw.values(), lr=0.1)
steps = 3 if args.tiny else args.steps
losses = []
for step in range(steps):
    optimizer.zero_grad()
    predicted, _ = landings(*physical(), args.bounces)
    loss = (predicted - observed).square().mean()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 25 == 0 or step == steps - 1:
        g, c, e = (v.item() for v in physical())
        print(f"step {step:4d}  loss {loss.item():.3e}  g {g:.3f}  c {c:.3f}  e {e:.3f}")

fitted = [v.item() for v in physical()]
report = {"true": TRUE, "first_guess": dict(zip(TRUE, first_guess)), "fitted": dict(zip(TRUE, fitted)),
          "relative_error": {k: abs(f - TRUE[k]) / TRUE[k] for k, f in zip(TRUE, fitted)},
          "final_loss": losses[-1], "steps": steps, "bounces": args.bounces,
          "landing_rms_error_s": float((landings(*(torch.tensor(v) for v in fitted), args.bounces)[0].detach()
                                        - observed).square().mean().sqrt())}
(out / "results.json").write_text(json.dumps(report, indent=1))
print("fitted " + ", ".join(f"{k} {f:.4f} (true {TRUE[k]}, {100 * report['relative_error'][k]:.2f}% off)"
                            for k, f in zip(TRUE, fitted)))

fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
styles = {"first guess": (first_guess, ":", "tab:gray"), "fitted": (fitted, "-", "tab:blue"),
          "true": (list(TRUE.values()), "--", "k")}
grid = torch.linspace(0.0, 9.0, 1801)
for label, (params, line, color) in styles.items():
    with torch.no_grad():
        _, height = landings(*(torch.tensor(v) for v in params), args.bounces, grid)
    for ball in (0, 7):  # NaN after the last observed landing
        ax.plot(grid, height[ball], line, color=color, lw=1.2, label=label if ball == 7 else None)
ax.plot(observed[[0, 7]].flatten(), torch.zeros(2 * args.bounces), "rx", label="observed landings")
ax.set(xlabel="t (s)", ylabel="height (m)", title="two of the eight balls")
ax.legend(fontsize=8)
ax_loss.semilogy(losses, label="loss")
ax_loss.axhline(NOISE ** 2, color="r", lw=0.8, ls=":", label="noise variance")
ax_loss.legend(fontsize=8)
ax_loss.set(xlabel="Adam step", ylabel="mean squared landing-time error (s²)", title="fit")
fig.tight_layout()
fig.savefig(out / "bouncing_ball.png", dpi=110)
print(f"results in {out}/ (results.json, bouncing_ball.png)")
