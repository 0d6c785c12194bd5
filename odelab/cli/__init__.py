"""The ``odelab`` command: one module per subcommand, each with ``add_command(subparsers)`` registering its
parser and its ``run``; ``main`` parses and dispatches. Nothing in the package imports this layer.

    odelab fit TASK --model M ...          train a model on a task (fit.py)
    odelab forecast --run DIR              the rows after a CSV series' end, from an `odelab fit csv` run (forecast.py)
    odelab reproduce TASK --seeds N ...    a paper's table over seeds, ours beside theirs (reproduce.py)
    odelab reproduce --report              every table as one markdown report + figures (reproduce.py)
    odelab compare-schemes ...             one trained model under every scheme and step (compare_schemes.py)
    odelab gates --run DIR                 a trained gated cell's multiscale steps (gates.py)
    odelab stability ...                   gradients, state bounds, energy, eigenvalues, damping (stability.py)
    odelab graph ...                       GraphCON / G²: node classification, sweeps, oversmoothing (graph.py)

Every number is checked by argparse (``arguments.py``); a user's mistake is one line on stderr and exit code 2,
Ctrl-C exits with 130.
"""
from __future__ import annotations

import argparse
import sys

from . import compare_schemes, fit, forecast, gates, graph, reproduce, stability, sweep

COMMANDS = (fit, forecast, reproduce, sweep, compare_schemes, gates, stability, graph)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odelab", description="Continuous-time neural ODE/DDE sequence models.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_command(subparsers)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:  # outside a training loop (which reports its last checkpoint itself)
        print(f"odelab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
