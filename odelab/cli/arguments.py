"""Argument types of the ``odelab`` command: every number is checked by argparse, which names the argument
(``argument --epochs: expected an integer >= 1, got '0'``) and exits with code 2 before anything runs."""
from __future__ import annotations

import argparse
import codecs
import re

import torch

SEED_RANGE = (0, 2**32 - 1)  # numpy's RandomState, which seeds the data generators


def integer(minimum: int | None = None, maximum: int | None = None):
    """An argparse type: an integer in [minimum, maximum]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if minimum is not None and value < minimum or maximum is not None and value > maximum:
            bound = (f">= {minimum}" if maximum is None else f"<= {maximum}" if minimum is None
                     else f"in [{minimum}, {maximum}]")
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def _finite(text: str, strict: bool) -> float:
    """A finite number > 0 (``strict``) or >= 0, else argparse's error naming the bound."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 if strict else value >= 0) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number {'>' if strict else '>='} 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    return _finite(text, strict=True)


def fraction(closed_upper: bool = True):
    """An argparse type: a number in [0, 1] (or [0, 1) with ``closed_upper=False``: a dropout probability)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (0.0 <= value <= 1.0) or (not closed_upper and value == 1.0):
            raise argparse.ArgumentTypeError(f"expected a number in [0, 1{']' if closed_upper else ')'}, got {text!r}")
        return value

    parse.__name__ = "fraction"
    return parse


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    return _finite(text, strict=False)


def power_of_two(text: str) -> int:
    value = integer(1)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"expected a power of 2 (1, 2, 4, 8, ...), got {text!r}")
    return value


seed = integer(*SEED_RANGE)


def device(text: str) -> str:
    """An argparse type: cpu, cuda or cuda:N (N < the number of GPUs), checked against this machine."""
    name = text.strip().lower()
    if name == "cpu":
        return name
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    if not torch.cuda.is_available():
        why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise argparse.ArgumentTypeError(f"{text!r} requested but {why}; use --device cpu")
    if match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                                         f"(cuda:0 … cuda:{torch.cuda.device_count() - 1})")
    return name


def encoding(text: str) -> str:
    """An argparse type: a text encoding Python knows (utf-8, latin-1, cp1252, ...)."""
    try:
        return codecs.lookup(text).name
    except LookupError:
        raise argparse.ArgumentTypeError(f"unknown encoding {text!r} (e.g. utf-8, latin-1, cp1252)") from None
