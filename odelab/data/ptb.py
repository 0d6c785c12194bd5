"""Penn Treebank language modelling at the character and word level (Rusch et al. 2022, LEM, §3.7, the PTB tables:
test bits per character and test perplexity; Rusch 2023 thesis §5 (g), (h); coRNN 1.46 bpc), from Mikolov's
preprocessed files the user already has on disk (``odelab fit ptb-char|ptb-word --data-root PATH``); nothing is
ever downloaded.

* Files (Mikolov's ``simple-examples.tgz``, ``data/`` folder; also what DeepMind's lamb reads, which LEM's PTB runs
  used): words ``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt`` (one sentence per line, words separated by
  spaces, 10 000 word types with ``<unk>``, numbers as ``N``); characters ``ptb.char.train.txt``,
  ``ptb.char.valid.txt``, ``ptb.char.test.txt`` (the same sentences spelled out: one character per token, separated
  by spaces, ``_`` between words, ``<unk>`` as the five characters ``< u n k >``). Looked up in ``PATH``,
  ``PATH/data`` and ``PATH/simple-examples/data``. Read as UTF-8 and split on whitespace, as lamb's word-based
  reader (``word_based=True`` for both levels: "there are spaces between characters").
* Token stream of each split, as lamb's non-episodic batches: an end-of-sentence marker (``<eos>``) first, then
  each line's tokens followed by ``<eos>``. Every token is predicted, the markers included (lamb's cross-entropy,
  hence its bits per character, counts them too).
* Vocabulary: the training file's tokens and ``<eos>``, in order of falling training count (ties by the token's
  text): V tokens, V = ``meta["class_count"]`` (about 50 characters; 10 000 words). A validation or test token that
  the training file lacks is a ValueError (Mikolov's files are closed: every test word is a training word).
  Inputs are int64 ids ``index + 1`` (id 0 is the embedding's padding row, a fixed zero vector, and never
  occurs: every token has its own trained vector; ``meta["vocabulary"]`` = V + 1 rows); targets are the next
  token's index 0 … V − 1 (exactly V classes, none unused).
* Windows: each split's stream cut into consecutive windows of ``length`` steps (default lamb's BPTT: 150
  characters, 70 words): input ``stream[i : i + L]``, target ``stream[i + 1 : i + L + 1]``, i = 0, L, 2L, …; the
  last (length − 1 or fewer) tokens of a split, which do not fill a window, are not scored
  (``meta["dropped"]``: at most L − 1 of the ≈ 82 000 test words or ≈ 450 000 test characters). The windows are
  in stream order, so the tasks' presets train and evaluate them as lamb does, statefully
  (``TrainConfig.stateful``: the batch size is the number of parallel streams of consecutive windows, whose states
  carry from one batch to the next, detached: truncated back-propagation); ``odelab.models.SequenceRegressor``
  alone runs each window from a zero state (the ``tokens`` plot: the loss against the position in a window read
  from zero, highest at its first steps). ``train_size``: the first
  ``train_size`` training windows (a prefix of the text), for short runs; the vocabulary and the unigram counts
  stay those of the whole training file.
* Metrics: the runs' cross-entropy is in nats per predicted token; bits per character = CE / ln 2, perplexity =
  exp(CE) (:func:`bits_per_character`, :func:`perplexity`). Baseline: the unigram model of the training file
  (``meta["unigram"]``, the counts of every target of the training stream; :func:`unigram_cross_entropy`).

Reading the word files (≈ 1.1 M tokens) or the character files (≈ 5.9 M) takes ≈ 1 s / ≈ 2 s (measured on
synthetic files of the real size): not cached.
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .local import local_root

FILES = {"char": ("ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt"),
         "word": ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")}
SPLITS = ("train", "valid", "test")
LENGTH = {"char": 150, "word": 70}  # lamb's max_time_steps in LEM's configs (BPTT)
FOLDERS = (".", "data", "simple-examples/data")
EOS = "<eos>"


def find_files(root: str | Path | None, level: str) -> dict[str, Path]:
    """The three files of ``level`` ("char" or "word") by split, from the first folder of :data:`FOLDERS` under
    ``root`` that holds them all; ValueError naming the files, the folders searched and where to get them."""
    root = local_root(root, f"the ptb-{level} task reads Mikolov's PTB files ({', '.join(FILES[level])})")
    folders = [(root / sub) if sub != "." else root for sub in FOLDERS]
    for folder in folders:
        if all((folder / name).is_file() for name in FILES[level]):
            return {split: folder / name for split, name in zip(SPLITS, FILES[level])}
    raise ValueError(f"ptb-{level}: expected the files {', '.join(FILES[level])} in one of "
                     f"{', '.join(map(str, folders))}; odelab never downloads -- unpack Mikolov's simple-examples.tgz "
                     f"(its data/ folder, the PTB files that DeepMind's lamb and most LM code read) there")


def read_lines(path: str | Path) -> list[list[str]]:
    """The tokens of each line (split on whitespace; an empty line has none); ValueError naming a file that is
    not UTF-8 text."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [line.split() for line in fh]
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def build_vocabulary(lines: list[list[str]]) -> list[str]:
    """The tokens of ``lines`` and :data:`EOS` (one per line), by falling count, ties by the token's text."""
    counts = Counter(token for line in lines for token in line)
    counts[EOS] += len(lines)
    return sorted(counts, key=lambda token: (-counts[token], token))


def encode(lines: list[list[str]], index: dict[str, int], where: str) -> np.ndarray:
    """The int64 stream of token indices: :data:`EOS`, then each line's tokens and :data:`EOS`; ValueError naming
    ``where`` (the file), the line and the first token not in ``index``."""
    eos = index[EOS]
    stream = [eos]
    for number, line in enumerate(lines, 1):
        try:
            stream.extend(index[token] for token in line)
        except KeyError as err:
            raise ValueError(f"{where}, line {number}: the token {err.args[0]!r} is not in the training file's "
                             f"vocabulary") from None
        stream.append(eos)
    return np.asarray(stream, dtype=np.int64)


def windows(stream: np.ndarray, length: int) -> tuple[Tensor, Tensor]:
    """(inputs, targets): consecutive windows of ``length`` steps, inputs the ids ``stream[i : i + L] + 1``, targets
    the indices ``stream[i + 1 : i + L + 1]``, int64 (n, L) with n = (len(stream) − 1) // L."""
    n = (len(stream) - 1) // length
    x = torch.from_numpy(stream[:n * length].reshape(n, length) + 1)
    y = torch.from_numpy(stream[1:n * length + 1].reshape(n, length).copy())
    return x, y


def ptb(path: str | Path | None, level: str, length: int | None = None, train_size: int | None = None) -> dict:
    """``{"train"|"valid"|"test": (ids (n, L), next-token indices (n, L)), "meta": ...}`` of PTB at ``level``
    ("char" or "word"; see the module docstring); ``length`` defaults to :data:`LENGTH`."""
    if level not in FILES:
        raise ValueError(f"level: expected 'char' or 'word', got {level!r}")
    length = LENGTH[level] if length is None else int(length)
    if length < 1:
        raise ValueError(f"length: expected a window of >= 1 steps, got {length}")
    files = find_files(path, level)
    lines = {split: read_lines(files[split]) for split in SPLITS}
    tokens = build_vocabulary(lines["train"])
    index = {token: i for i, token in enumerate(tokens)}
    streams = {split: encode(lines[split], index, str(files[split])) for split in SPLITS}
    data, dropped = {}, {}
    for split, stream in streams.items():
        if len(stream) <= length:
            raise ValueError(f"{files[split]}: {len(stream) - 1} tokens with the end-of-sentence markers, fewer than "
                             f"one window of --length {length}")
        data[split] = windows(stream, length)
        dropped[split] = (len(stream) - 1) % length
    unigram = torch.from_numpy(np.bincount(streams["train"][1:], minlength=len(tokens)).astype(np.float64))
    if train_size is not None:
        if train_size < 1:
            raise ValueError(f"train_size: expected >= 1 windows, got {train_size}")
        data["train"] = tuple(t[:train_size] for t in data["train"])
    unit = "characters" if level == "char" else "words"
    data["meta"] = {"level": level, "location": str(files["train"].parent), "vocabulary": len(tokens) + 1,
                    "class_count": len(tokens), "length": length, "dropped": dropped, "unigram": unigram,
                    "notes": [f"PTB {unit}: {len(tokens)} tokens (<eos> included), ids 1 … {len(tokens)} in, "
                              f"classes 0 … {len(tokens) - 1} out; windows of {length} in stream order"]}
    return data


def bits_per_character(cross_entropy: float) -> float:
    """Nats per predicted symbol -> bits: CE / ln 2."""
    return cross_entropy / math.log(2.0)


def perplexity(cross_entropy: float) -> float:
    """Nats per predicted word -> perplexity: exp(CE)."""
    return math.exp(cross_entropy)


def unigram_cross_entropy(data: dict) -> float:
    """Mean cross-entropy (nats per token) on the test targets of the training file's unigram frequencies."""
    counts = data["meta"]["unigram"]
    log_p = torch.log(counts / counts.sum())
    return float(-log_p[data["test"][1].reshape(-1)].mean())


def metrics(level: str):
    """``f(result) -> extra entries``: the test and best validation cross-entropy and the baselines' in bits per
    character (char) or as perplexities (word), from the result alone (no predictions)."""
    name, convert = ("bits_per_character", bits_per_character) if level == "char" else ("perplexity", perplexity)

    def entries(result: dict) -> dict:
        out = {f"test_{name}": convert(result["test_loss"]), f"valid_{name}": convert(result["valid_loss"])}
        kinds = result.get("baseline_metrics", {})
        out[f"baseline_{name}"] = {k: convert(v) for k, v in result.get("baselines", {}).items()
                                   if kinds.get(k) == "cross-entropy"}
        return out
    return entries
