"""CPU kernels: registrations (module paths only; see ``odelab.kernels``).

The kernels are one C++ source (:mod:`.source`) compiled on first use (:mod:`.extension`; it needs a C++
compiler, nothing else) and wrapped in autograd Functions with hand-derived backward passes, one module per
cell. :func:`available` says whether the compiled library loads here; when it does not, callers use the
generic path. Importing this package compiles nothing.
"""
from ... import systems
from ..registry import register


def available() -> bool:
    """Whether the compiled CPU kernels can run here (builds them once, on the first call)."""
    from .extension import available as _available

    return _available()


register(systems.LEM, "imex", "cpu", ".cpu.lem:run", gaps=True, gap_grads=True)
register(systems.CoRNN, "imex", "cpu", ".cpu.cornn:run_explicit", gaps=True, gap_grads=True)
register(systems.CoRNN, "imex-implicit", "cpu", ".cpu.cornn:run_implicit", gaps=True, gap_grads=True)
register(systems.UnICORNN, "symplectic-euler", "cpu", ".cpu.unicornn:run")
register(systems.UnICORNN, "symplectic-euler", "cpu", ".cpu.unicornn:run_reversible", reversible=True)
register(systems.GRU, "euler", "cpu", ".cpu.gru:run", gaps=True, gap_grads=True)
register(systems.NeuralOscillator, "symplectic-euler", "cpu", ".cpu.oscillator:run", gaps=True, gap_grads=True)
register(systems.DelayGRU, "euler", "cpu", ".cpu.taugru:run_delay_gru", dropout=True)
register(systems.TauGRU, "euler", "cpu", ".cpu.taugru:run_tau_gru", dropout=True)
register(systems.LTC, "imex-implicit", "cpu", ".cpu.liquid:run_ltc", gaps=True, gap_grads=True)
register(systems.STC, "imex-implicit", "cpu", ".cpu.liquid:run_stc", gaps=True, gap_grads=True)
register(systems.LRC, "euler", "cpu", ".cpu.liquid:run_lrc", gaps=True, gap_grads=True)
