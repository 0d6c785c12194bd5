"""Presets: the published cells as (system, scheme, dt), the torch.nn baselines by name, and model specs.

``PRESETS`` maps a name to a constructor ``(input_size, hidden_size, **keywords)``; :func:`build` makes one from
a spec such as ``"lem"`` or ``"lem[dt=0.01]"`` (the one builder of the command line, the studies and tasks)."""
from __future__ import annotations

import ast
import inspect
from functools import partial
from typing import Sequence

from torch import nn

from .. import systems
from .baselines import GRU, LSTM, RNN
from .lrc_ode import lrc_ode
from .neural_ode import node
from .recurrent import Recurrent
from .unicornn import UnICORNNStack


def LEM(input_size: int, hidden_size: int, dt: float = 1.0, chrono: float | None = None, **kwargs) -> Recurrent:
    """LEM cell (Rusch et al. 2022, eq. 3) = LEM field (eq. 2) + partitioned Euler with explicit decay ("imex") + dt;
    ``chrono`` = T_max (steps): the chrono initialisation of App. B.3 (``systems.LEM``'s chrono_horizon T_max Δt);
    ``kwargs``: ``systems.LEM``'s official_bias, min_gate."""
    if chrono is not None:
        if "chrono_horizon" in kwargs:
            raise ValueError("chrono, chrono_horizon: give T_max (chrono, steps) or T_max·Δt (chrono_horizon), not both")
        kwargs["chrono_horizon"] = chrono * dt
    return Recurrent(systems.LEM(input_size, hidden_size, **kwargs), "imex", dt)


def SingleScaleLEM(input_size: int, hidden_size: int, dt: float = 1.0) -> Recurrent:
    """LEM without multiscale steps (Rusch et al. 2022, Table 9): the gates fixed to 1, the same IMEX step + Δt."""
    return Recurrent(systems.SingleScaleLEM(input_size, hidden_size), "imex", dt)


def CoRNN(input_size: int, hidden_size: int, dt: float = 0.45, gamma: float = 1.0, epsilon: float = 3.0,
          damping: str = "explicit", learn_dt: bool = False, **kwargs) -> Recurrent:
    """coRNN cell (Rusch 2023, eq. 2.3) = CoRNN field (eq. 2.2) + partitioned Euler, z then y, with the damping
    explicit (n̄ = n−1, official code: "imex") or implicit (n̄ = n: "imex-implicit"). The defaults
    (Δt, γ, ε) = (0.45, 1, 3) are our FitzHugh–Nagumo choice (the papers give none for it; best of five
    settings after 10 epochs); they satisfy the explicit-damping stability condition (2.47)
    Δt < (2ε − 1)/(γ + ε²) = 0.5. The thesis's trainable variant (training details): ``learn_dt=True`` (Δt = σ(θ)
    in (0, 1)) and ``learn_coefficients=True`` (γ, ε through ReLU)."""
    schemes = {"explicit": "imex", "implicit": "imex-implicit"}
    if damping not in schemes:
        raise ValueError(f"damping: expected 'explicit' or 'implicit', got {damping!r}")
    return Recurrent(systems.CoRNN(input_size, hidden_size, gamma, epsilon, **kwargs), schemes[damping], dt,
                     learn_dt=learn_dt)


def UnICORNN(input_size: int, hidden_size: int, dt: float | Sequence[float] = 2.0, alpha: float = 0.5,
             num_layers: int = 1, reversible: bool = False, dropout: float = 0.0) -> UnICORNNStack:
    """Multi-layer UnICORNN (Rusch 2023, eq. 3.6): per layer the UnICORNN field with time scale σ̂(c) + symplectic
    Euler + Δt (one per layer allowed); ``reversible=True`` trains with the exact-inverse backward (eq. 3.7).
    Defaults (Δt, α, L) = (2, 0.5, 1): our FitzHugh–Nagumo choice (the papers give none for it; best of
    nine settings after 10 epochs; the effective step is Δt σ̂(c) ≈ 1 at initialisation). ``dropout``: after every
    layer, one mask per sequence shared over time (the official code's ``Dropout_overtime``)."""
    return UnICORNNStack(input_size, hidden_size, num_layers, dt, alpha, reversible, dropout=dropout)


def NeuralOscillator(input_size: int, hidden_size: int, dt: float = 0.01) -> Recurrent:
    """Neural oscillator (Rusch 2023, eq. 4.1) + symplectic Euler (z then y) + Δt. The field has no restoring or
    damping term, so |y| may grow like t²; Δt = 0.01 (our choice) keeps a 1000-step FitzHugh–Nagumo
    sequence within t ≤ 10."""
    return Recurrent(systems.NeuralOscillator(input_size, hidden_size), "symplectic-euler", dt)


def LTC(input_size: int, hidden_size: int, dt: float = 1.0, unfolds: int = 6) -> Recurrent:
    """LTC with the ncps fused solver (Farsang et al. 2024, §2.3 "H6"): LTC field (eq. 1) + semi-implicit Euler (decay
    implicit), ``unfolds`` sub-steps of Δ/L per input sample."""
    return Recurrent(systems.LTC(input_size, hidden_size), "imex-implicit", dt, unfolds=unfolds)


def STC(input_size: int, hidden_size: int, dt: float = 1.0, unfolds: int = 6, scheme: str = "imex-implicit") -> Recurrent:
    """STC (Farsang et al. 2024, eq. 2) with the fused solver (STC-H6, default) or ``scheme="euler", unfolds=1`` (STC-E1)."""
    return Recurrent(systems.STC(input_size, hidden_size), scheme, dt, unfolds=unfolds)


def LRCU(input_size: int, hidden_size: int, elastance: str = "asymmetric", dt: float = 1.0) -> Recurrent:
    """LRCU-A / LRCU-S (Farsang et al. 2024, App. A.2.1, eq. 52) = LRC field (eqs. 3–5) + explicit Euler, one unfolding, Δt = 1."""
    return Recurrent(systems.LRC(input_size, hidden_size, elastance), "euler", dt)


def GRUODE(input_size: int, hidden_size: int, dt: float = 1.0, **kwargs) -> Recurrent:
    """GRU as an ODE (Farsang et al. 2024, App. A.2.2, eq. 54) + explicit Euler with Δt = 1 = the GRU (eq. 53)."""
    return Recurrent(systems.GRU(input_size, hidden_size, **kwargs), "euler", dt)


def MGU(input_size: int, hidden_size: int, dt: float = 1.0) -> Recurrent:
    """The minimal gated unit (Zhou et al. 2016) = the MGU field + explicit Euler with Δt = 1: a baseline of Farsang et
    al. 2024 (Tables 1 and 2)."""
    return Recurrent(systems.MGU(input_size, hidden_size), "euler", dt)


def TauGRU(input_size: int, hidden_size: int, tau: float, dt: float = 1.0, state_dropout: float = 0.0,
           **kwargs) -> Recurrent:
    """τ-GRU cell (Erichson et al. 2025, eq. 14) = TauGRU delay field (eq. 1) + Euler + Δt = 1, h_{n−⌊τ/Δt⌋} from a ring
    buffer with zero history; ``kwargs``: the ablation switches alpha, beta, weighting, gating; ``state_dropout``:
    the code's dropout of h and h(t − τ) at every step (its IMDB runs: 0.04; ``Recurrent``)."""
    return Recurrent(systems.TauGRU(input_size, hidden_size, tau, **kwargs), "euler", dt, state_dropout=state_dropout)


def DelayGRU(input_size: int, hidden_size: int, tau: float, dt: float = 1.0, state_dropout: float = 0.0,
             **kwargs) -> Recurrent:
    """Delay GRU cell (Erichson et al. 2025, eq. 12) = DelayGRU delay field (eq. 9) + Euler + Δt = 1 + ring buffer;
    ``state_dropout`` as :func:`TauGRU`."""
    return Recurrent(systems.DelayGRU(input_size, hidden_size, tau, **kwargs), "euler", dt,
                     state_dropout=state_dropout)


def CoRNNOfficial(input_size: int, hidden_size: int, dt: float = 0.45, gamma: float = 1.0, epsilon: float = 3.0,
                  damping: str = "explicit", **kwargs) -> Recurrent:
    """:func:`CoRNN` whose readout keeps nn.Linear's default initialisation, as the official coRNN code (the
    recurrent weights already follow it; every other model's readout is Kaiming-normal, as the official LEM code)."""
    model = CoRNN(input_size, hidden_size, dt, gamma, epsilon, damping, **kwargs)
    model.readout_init = "default"
    return model


# the best setting of the random search examples/cornn_fhn_search.py (trial 7 of 36, search seed 2021; selected on
# validation after 150 epochs; docs/cornn_fhn_search.md), for FitzHugh–Nagumo with 24 units and lr 0.0584
CORNN_SEARCHED = dict(dt=1.4363418013024873, gamma=1.660989001144332, epsilon=3.601021293391422, damping="implicit")


# CLI name -> constructor (input_size, hidden_size) -> module returning (outputs (batch, time, hidden), state).
PRESETS = {
    "lem": LEM,
    "lem-official": partial(LEM, official_bias=True),  # the official code's layout: two bias vectors (8d)
    "lem-single": SingleScaleLEM,  # Table 9's "LEM w/o multi-scale"
    "lstm": LSTM,
    "gru": GRU,
    "cornn": CoRNN,
    "cornn-official": CoRNNOfficial,  # nn.Linear's default readout initialisation, as the official coRNN code
    "cornn-searched": partial(CoRNN, **CORNN_SEARCHED),
    "unicornn": UnICORNN,
    "oscillator": NeuralOscillator,
    "ltc": LTC,
    "stc": STC,
    "lrcu-a": partial(LRCU, elastance="asymmetric"),
    "lrcu-s": partial(LRCU, elastance="symmetric"),
    "gru-ode": GRUODE,
    "mgu": MGU,  # the minimal gated unit (Zhou et al. 2016), a baseline of Farsang et al. 2024
    "taugru": partial(TauGRU, tau=20.0),  # τ = 20 steps: the paper's ENSO setting (Erichson et al. 2025, Table 10)
    "delaygru": partial(DelayGRU, tau=20.0),
    "rnn": RNN,  # torch's tanh RNN (a baseline of the stability studies and of Erichson et al. 2025, Table 5)
    # MLP neural ODE (Chen et al. 2018) + dopri5, hidden_size = the MLP width: the baseline of Farsang et al. 2024, §4.3
    "node": node,
    # the LRC field (eqs. 3–5) as the vector field of a neural ODE in observation space + explicit Euler: the LRC of
    # Farsang et al. 2024, §4.3 as the authors' code wires it (the recurrent LRCU does not learn a flow there)
    "lrc-ode-a": partial(lrc_ode, elastance="asymmetric"),
    "lrc-ode-s": partial(lrc_ode, elastance="symmetric"),
}


def preset_keywords(model: str, items: Sequence[str]) -> dict:
    """``KEY=VALUE`` strings -> keywords of ``PRESETS[model]`` (values read as Python literals: 0.1, 2, True,
    'implicit'; anything else stays a string). A key the constructor does not name raises ValueError listing its
    keywords, unless it takes ``**kwargs`` (passed on to its system, which checks them)."""
    if model not in PRESETS:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(sorted(PRESETS))}")
    parameters = inspect.signature(PRESETS[model]).parameters.values()
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters)
    accepted = [p.name for p in parameters if p.name not in ("input_size", "hidden_size") and p.kind is not p.VAR_KEYWORD]
    keywords = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        if key not in accepted and not open_ended:
            raise ValueError(f"{model} has no option {key!r}; it accepts: {', '.join(accepted) or 'none'}")
        try:
            keywords[key] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            keywords[key] = text.strip()
    return keywords


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"lem"`` or ``"lem[dt=0.01,alpha=2]"`` -> (preset name, keywords) (see :func:`preset_keywords`)."""
    name, bracket, rest = spec.strip().partition("[")
    if not bracket:
        return name, preset_keywords(name, [])
    if not rest.endswith("]"):
        raise ValueError(f"model spec {spec!r}: expected NAME[KEY=VALUE,...]")
    items = [item for item in rest[:-1].split(",") if item.strip()]
    return name.strip(), preset_keywords(name.strip(), items)


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of model specs, leaving the commas inside ``[...]`` alone."""
    specs, depth, current = [], 0, ""
    for char in text:
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            specs.append(current)
            current = ""
        else:
            current += char
    return [s.strip() for s in specs + [current] if s.strip()]


def build(spec: str, input_size: int, hidden_size: int, **keywords) -> nn.Module:
    """The model of a spec (``"lem"``, ``"lem[dt=0.01]"``, ``"rnn"``, :func:`parse_spec`); ``keywords`` are added
    to the spec's (the spec wins)."""
    name, spec_keywords = parse_spec(spec)
    return PRESETS[name](input_size, hidden_size, **{**keywords, **spec_keywords})
