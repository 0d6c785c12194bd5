"""A circuit as a differential-algebraic system: learn a resistor and a diode's law from two node voltages, by
gradient descent through ``odelab.solve(..., method="rodas4", mass=...)``.

    python examples/diode_circuit.py [--tiny] [--steps N] [--out DIR]

A source u(t) drives node 1 through R1 = 1, node 1 holds a capacitor C = 1 to ground, and a resistor r joins it to
node 2, where a diode i(v) = a (e^(b v) − 1) leads to ground. Kirchhoff's current law at the two nodes:

    v1' = (u − v1) − (v1 − v2) / r                  (node 1: a capacitor, a differential equation)
    0   = (v1 − v2) / r − a (e^(b v2) − 1)          (node 2: no capacitor, an algebraic one)

so y = (v1, v2) solves M y' = f with M = diag(1, 0), and v2 is known only implicitly (no closed form). Three
sources u(t) = A (sin t + 0.4 sin 2.3 t), A = 1, 2, 3, excite the diode over its range, each from v1(0) = 0.5: v2(0)
is the root of the node-2 equation, which moves with the parameters, so every solve starts with
``initialize="algebraic"`` (Newton's method on v2, its gradient by the implicit function theorem). The data: v1 and
v2 at 61 times over t ∈ [0, 12] with noise 0.01. The parameters: log r, the diode's turn-on voltage v_on (where it
carries a current of 0.1: a = 0.1 / (e^(b v_on) − 1); a and b themselves trade off along a narrow valley) and log b,
started well off; the loss: the mean squared error on both voltages. The figure shows the voltages under the first
guess, the fit and the truth, the diode's law learnt against the true one, and the loss.
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
parser.add_argument("--out", default="runs/example-diode-circuit")
args = parser.parse_args()
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

TRUE = {"r": 0.5, "a": 1e-3, "b": 4.0}
ON_CURRENT = 0.1  # the turn-on voltage's current
NOISE = 0.01
amplitudes = torch.tensor([[1.0], [2.0], [3.0]])
times = torch.linspace(0.0, 12.0, 61)
MASS = [1.0, 0.0]  # v1 differential, v2 algebraic


def physical(params):
    """(r, a, b) from (log r, v_on, log b)."""
    b = params[2].exp()
    return params[0].exp(), ON_CURRENT / torch.expm1(b * params[1]), b


def fitted_form(r, a, b):
    """(log r, v_on, log b) from (r, a, b)."""
    return torch.tensor([math.log(r), math.log1p(ON_CURRENT / a) / b, math.log(b)])


def voltages(params, t=times):
    """(3, len(t), 2): v1 and v2 under the three sources, for the parameters (log r, v_on, log b)."""
    r, a, b = physical(params)

    def kirchhoff(s, y):
        v1, v2 = y[:, :1], y[:, 1:]
        source = amplitudes * (torch.sin(s) + 0.4 * torch.sin(2.3 * s))
        through = (v1 - v2) / r
        return torch.cat([source - v1 - through, through - a * torch.expm1(b * v2)], 1)

    start = torch.tensor([[0.5, 0.0]]).expand(3, -1)  # v2(0) is solved for
    return odelab.solve(kirchhoff, start, t, method="rodas4", mass=MASS, initialize="algebraic", rtol=1e-4,
                        atol=1e-7).y


truth = fitted_form(*TRUE.values())
torch.manual_seed(0)
with torch.no_grad():
    clean = voltages(truth)
    observed = clean + NOISE * torch.randn_like(clean)

params = (truth + torch.tensor([math.log(2.5), -0.45, -math.log(1.6)])).requires_grad_(True)
first_guess = params.detach().clone()
optimizer = torch.optim.Adam([params], lr=0.05)
steps = 3 if args.tiny else args.steps
losses = []
for step in range(steps):
    optimizer.zero_grad()
    loss = (voltages(params) - observed).square().mean()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 25 == 0 or step == steps - 1:
        shown = ", ".join(f"{k} {float(v):.4g}" for k, v in zip(TRUE, physical(params.detach())))
        print(f"step {step:4d}  loss {loss.item():.3e}  {shown}")

fitted = {k: float(v) for k, v in zip(TRUE, physical(params.detach()))}
with torch.no_grad():
    rms = float((voltages(params.detach()) - clean).square().mean().sqrt())
report = {"true": TRUE, "first_guess": {k: float(v) for k, v in zip(TRUE, physical(first_guess))}, "fitted": fitted,
          "turn_on_voltage": {"true": float(truth[1]), "fitted": float(params.detach()[1])},
          "relative_error": {k: abs(fitted[k] - v) / v for k, v in TRUE.items()}, "final_loss": losses[-1],
          "rms_to_clean": rms, "noise": NOISE, "steps": steps}
(out / "results.json").write_text(json.dumps(report, indent=1))
print("fitted " + ", ".join(f"{k} {fitted[k]:.4g} (true {v:g}, {100 * report['relative_error'][k]:.2f}% off)"
                            for k, v in TRUE.items()))
print(f"voltages' RMS against the noise-free ones: {rms:.2e} (noise {NOISE})")

fig, (ax, ax_law, ax_loss) = plt.subplots(1, 3, figsize=(13, 3.8), gridspec_kw={"width_ratios": [2.2, 1, 1]})
grid = torch.linspace(0.0, 12.0, 400)
settings = (("first guess", first_guess, ":"), ("fitted", params.detach(), "-"), ("true", truth, "--"))
for label, setting, line in settings:
    with torch.no_grad():
        curves = voltages(setting, grid)[2]
    ax.plot(grid, curves[:, 0], line, color="tab:blue", lw=1.2, label=f"v1, {label}")
    ax.plot(grid, curves[:, 1], line, color="tab:red", lw=1.2, label=f"v2, {label}")
ax.plot(times, observed[2, :, 0], "x", color="tab:blue", ms=4)
ax.plot(times, observed[2, :, 1], "x", color="tab:red", ms=4)
ax.set(xlabel="t", ylabel="voltage", title="the largest source (A = 3): observations (x), rodas4 solutions")
ax.legend(fontsize=7, ncol=3, loc="lower left")
v = torch.linspace(-0.5, float(observed[:, :, 1].max()) + 0.1, 200)
for label, setting, line in settings:
    _, a, b = physical(setting)
    ax_law.plot(v, a * torch.expm1(b * v), line, color="k", lw=1.2, label=label)
ax_law.set(xlabel="v2", ylabel="diode current", title="the diode's law", ylim=(-0.1, 2.0))
ax_law.legend(fontsize=7)
ax_loss.semilogy(losses)
ax_loss.set(xlabel="Adam step", ylabel="mean squared error", title="fit")
fig.tight_layout()
fig.savefig(out / "diode_circuit.png", dpi=110)
print(f"results in {out}/ (results.json, diode_circuit.png)")
