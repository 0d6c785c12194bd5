"""The ``odelab`` command: one module per subcommand, each with ``add_command(subparsers)`` registering its
parser and its ``run``; ``main`` parses and dispatches. Nothing in the package imports this layer.

    odelab fit TASK --model M ...          train a model on a task (fit.py)
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
import os
import sys

from . import compare_schemes, fit, gates, graph, reproduce, stability, sweep

COMMANDS = (fit, reproduce, sweep, compare_schemes, gates, stability, graph)


def use_huge_pages() -> None:
    """Ask torch to back its CPU buffers of 2 MiB and more with transparent huge pages (``THP_MEM_ALLOC_ENABLE``,
    read at torch's first large allocation). A training step allocates its sequence buffers afresh, and the
    allocator returns them to the system after it, so with 4 KiB pages every step faults them in again, a page
    at a time: LEM at (128, 1000, 128) takes 0.62 s a step so, 0.35 s with huge pages, at the same peak memory.
    A value already in the environment is kept (``THP_MEM_ALLOC_ENABLE=0`` turns it off)."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def main(argv: list[str] | None = None) -> int:
    use_huge_pages()
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
