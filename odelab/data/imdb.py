"""IMDB sentiment (Maas et al. 2011): 50 000 movie reviews, positive or negative, as token ids, the class read at the
last step (Rusch & Mishra 2021, coRNN, §4 / Rusch 2023 thesis §2.4(e), §3.3(e); Farsang et al. 2024, LRC, §4.2(b);
Erichson et al. 2025, τ-GRU, §5), from files the user already has on disk (``odelab fit imdb --data-root PATH``);
nothing is ever downloaded.

* Files, either of:

  - the raw archive ``aclImdb/`` (``aclImdb_v1.tar.gz`` unpacked): ``train/pos``, ``train/neg``, ``test/pos``,
    ``test/neg``, one review per ``*.txt`` (``{id}_{rating}.txt``, UTF-8), looked up in ``PATH/aclImdb`` then
    ``PATH`` itself; ``train/unsup`` (unlabelled) is not read. Reviews are read neg then pos, each folder in the
    order of its files' numeric ids: class 0 = negative, 1 = positive. Tokenised here (below);
  - Keras' ``imdb.npz`` (what ``keras.datasets.imdb.load_data`` downloads to ``~/.keras/datasets``), looked up as
    ``PATH/imdb.npz``, ``PATH/datasets/imdb.npz``, or ``PATH`` itself when it is the file: arrays ``x_train``,
    ``y_train``, ``x_test``, ``y_test``, the reviews as object arrays of Python lists of ints (read with
    ``allow_pickle=True``, as Keras does: open only a file you trust), the labels 0 / 1. The file holds each word's
    frequency rank (1 = "the", 2 = "and", …; Keras' ranking, over its own tokenisation of all 50 000 reviews, which
    drops punctuation); ``load_data`` adds its offsets only when it reads it (0 padding, 1 start, 2 OOV, word rank
    r -> r + 3). A file saved from ``load_data``'s output instead (every review, after any leading 0 padding,
    starting with the start marker 1) is recognised and its offsets undone (0 and the marker 1 dropped, 2 -> OOV,
    w -> rank w − 3). GloVe vectors need the words: ``imdb_word_index.json`` (Keras' ``get_word_index``, word ->
    rank) next to the ``.npz``.

  When both are there, ``aclImdb/`` is read; pass the ``.npz`` itself as ``--data-root`` to read it.
* Tokenisation (``aclImdb/`` only; :func:`tokenize`): lower-case; ``<br />`` (any ``<br>``, ``<br/>``) -> a space;
  the curly apostrophes ’ ‘ and ` ´ -> '; tokens are runs of letters and digits (Unicode, no underscore) joined by
  inner apostrophes (``rock'n'roll``), with the English clitics split off as spaCy and the Stanford tokenizer that
  built GloVe do: ``don't`` -> ``do`` ``n't``, ``can't`` -> ``ca`` ``n't``, ``it's`` -> ``it`` ``'s`` (also ``'re``,
  ``'ve``, ``'ll``, ``'d``, ``'m``); all punctuation is dropped. The coRNN / UnICORNN code (torchtext's legacy
  ``Field(tokenize='spacy')``) differs: spaCy keeps punctuation as tokens (``.``, ``,``, ``!``, ``"`` …: longer
  sequences), splits ``<br />`` into pieces (``<``, ``br``, ``/><br``, …) and does not lower-case (``The`` and ``the``
  are two words; glove.6B is lower-case, so capitalised words got torchtext's random vectors). Keras' own
  ``imdb.npz`` holds lower-cased words without punctuation, as here, but contractions whole (``everyone's``) and
  ``br`` for the line breaks.
* Ids (int64): 0 = padding, 1 = out of vocabulary (OOV), the words from 2 in order of falling frequency in the
  training part's reviews (ties alphabetically, as torchtext): ``vocabulary`` ids in all, ``vocabulary − 2`` words
  (default 25 000 ids: coRNN's dictionary of 25 000 words, whose torchtext vocabulary adds ``<unk>`` and ``<pad>``,
  25 002 rows; LRC's Keras ``num_words=20000`` keeps ids < 20 000 of ``load_data``'s layout, i.e. 19 996 words, as
  ``start``, OOV and the unused id 3 take rows there). The vocabulary is counted on the training part only (the
  validation reviews taken out, as torchtext's ``build_vocab(train_data)`` after ``train_data.split()``), the same
  for every run seed and ``train_size``. From the ``.npz``: rank r -> id r + 1, kept when r + 1 < ``vocabulary``
  (Keras' ranking, whole data set). With fewer words than that, the vocabulary shrinks to them:
  ``data["meta"]["vocabulary"]`` is the size the model must embed (the task's ``vocabulary`` field holds the default).
  No start marker is added (``load_data`` prepends one; with "pre" truncation it survives only in short reviews).
* Length: every review becomes ``length`` ids (default 256, LRC's ``maxlen``): longer ones keep their LAST
  ``length`` tokens, shorter ones are pre-padded with 0, i.e. Keras' ``pad_sequences(padding="pre",
  truncating="pre")``, its default and LRC's; the last step is then always the review's last token. The coRNN /
  UnICORNN code reads whole reviews (torchtext's ``BucketIterator`` post-pads each batch to its longest review and
  the recurrence runs over the padding too; the reviews average ≈ 240 words, τ-GRU §5): a ``length`` as long as
  the longest review comes closest (``meta["mean_tokens"]`` is the mean token count, ``meta["truncated"]`` the
  fraction of reviews cut). Memory: 50 000 × ``length`` × 8 bytes (256: 100 MB).
* Split: the 25 000 training reviews into 17 500 training / 7 500 validation (coRNN: "7.5k of them used for
  validation", torchtext's ``split()`` default 0.7 / 0.3), the 25 000 test reviews whole. Validation =
  ``np.random.RandomState(1234).permutation(n)``'s first round(0.3 n) reviews, the rest train, each kept in file
  order; the same for every run seed (the seeds vary the initialisation and the batches). ``train_size`` trains on a
  random subset of the training part (``RandomState(seed).permutation``, for short runs; vocabulary, validation and
  test unchanged). LRC's code validates on the first 2 500 of Keras' shuffled training reviews instead and
  reports the test accuracy of the best validation epoch, as odelab does.
* GloVe (``glove``: the path of a GloVe text file, e.g. ``glove.6B.100d.txt``, plain or ``.gz``, read locally; a
  relative path not found from the working folder is looked up in ``PATH``): one word and its E numbers per line,
  separated by spaces (a first line "count E", word2vec's header, is skipped; lines whose word holds spaces, as in
  glove.840B, are skipped). Row i of ``meta["embedding"]`` (float32 ``(vocabulary, E)``, a torch tensor) is the
  vector of word i; padding (0) and OOV (1) rows are zeros (coRNN's ``zero_words_in_embedding``); vocabulary words
  absent from the file get N(0, s²) vectors, s the standard deviation of the vectors found, drawn from
  ``RandomState(5544)`` (the same for every run; torchtext: N(0, 1)). ``meta["freeze_embedding"]``: True (the
  interface's default; the coRNN paper's 46k parameters leave the embedding out) — the official coRNN and
  UnICORNN code in fact fine-tune the GloVe-initialised embedding (Adam over every parameter):
  ``freeze_embedding=False``, a keyword of the loader (no command-line option; from Python
  ``FitSpec(..., data_options={"freeze_embedding": False})``).
  The embedding's width E is the file's: the preset's ``embedding_size`` must agree, else ``--embedding-size E``
  (``paper``: 100, glove.6B.100d; τ-GRU's 220k parameters imply 300-d vectors).

Reading ``aclImdb/`` (50 000 files) takes ≈ 25 s on a busy 2-core machine (≈ 6 s the ``.npz``; measured on synthetic
files of the real size, ≈ 12 million tokens), and glove.6B.100d (400 000 lines) a few seconds more: not cached.
The splits are int64 ids (n, ``length``) and int64 targets (n,).
"""
from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from .local import finite_numbers, local_root

VOCABULARY = 25_000  # ids, padding and OOV included (coRNN's dictionary of 25 000 words)
LENGTH = 256  # LRC's maxlen
PAD, OOV, FIRST_WORD = 0, 1, 2
CLASSES = 2
CLASS_NAMES = ("negative", "positive")
LABELS = ("neg", "pos")  # class 0, class 1: aclImdb's folders
TRAIN, VALID, TEST = 17_500, 7_500, 25_000  # coRNN: 25k training reviews of which 7.5k validate, 25k test
VALID_FRACTION = VALID / (TRAIN + VALID)
SPLIT_SEED = 1234
EMBEDDING_SEED = 5544  # the vectors of vocabulary words GloVe lacks
FOLDER = "aclImdb"
NPZ = "imdb.npz"
WORD_INDEX = "imdb_word_index.json"
KERAS_START, KERAS_OOV, KERAS_INDEX_FROM = 1, 2, 3  # keras.datasets.imdb.load_data's defaults

_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "`": "'", "´": "'"})
_CLITICS = r"(?:s|re|ve|ll|d|m)"
_WORD = r"[^\W_]+"
# in order: a stem before n't, n't, a clitic, a stem before a clitic, a word with inner apostrophes
_TOKEN = re.compile(rf"{_WORD}(?=n't\b)|n't\b|'{_CLITICS}\b|{_WORD}(?='{_CLITICS}\b)|{_WORD}(?:'{_WORD})*")


def tokenize(text: str) -> list[str]:
    """The tokens of one review (see the module docstring): lower-cased words, ``<br />`` a space, clitics split
    off, punctuation dropped."""
    return _TOKEN.findall(_BREAK.sub(" ", text.lower().translate(_APOSTROPHES)))


# ---------------------------------------------------------------------------------------------------------- files
def find_data(root: str | Path | None) -> tuple[str, Path]:
    """``("aclImdb", folder)`` or ``("keras", npz file)`` under ``root`` (see the module docstring);
    FileNotFoundError naming what is missing and the places searched."""
    if root is not None and Path(root).expanduser().is_file():
        path = Path(root).expanduser()
        if path.suffix != ".npz":
            raise ValueError(f"--data-root {str(path)!r}: a file, but not Keras' imdb.npz (expected a folder holding "
                             f"{FOLDER}/ or {NPZ}, or the .npz file itself)")
        return "keras", path
    root = local_root(root, f"the imdb task reads the {FOLDER}/ folder or Keras' {NPZ}")
    folders = [root / FOLDER, root]
    for folder in folders:
        if all((folder / part / label).is_dir() for part in ("train", "test") for label in LABELS):
            return "aclImdb", folder
    files = [root / NPZ, root / "datasets" / NPZ]
    for path in files:
        if path.is_file():
            return "keras", path
    partial = next((f for f in folders if (f / "train").is_dir() or (f / "test").is_dir()), None)
    if partial is not None:
        missing = [f"{part}/{label}" for part in ("train", "test") for label in LABELS
                   if not (partial / part / label).is_dir()]
        detail = f"{partial} lacks {', '.join(missing)}"
    else:
        detail = "found neither"
    raise FileNotFoundError(
        f"IMDB: no {FOLDER}/ folder (train/pos, train/neg, test/pos, test/neg) nor {NPZ} under --data-root "
        f"{str(root)!r}: {detail} (searched {', '.join(map(str, folders + files))}); odelab never downloads -- "
        f"unpack aclImdb_v1.tar.gz there, or copy Keras' {NPZ}")


def _file_order(path: Path) -> tuple:
    stem = path.stem.split("_", 1)[0]
    return (0, int(stem), path.name) if stem.isdigit() else (1, 0, path.name)


def read_reviews(folder: str | Path, part: str) -> tuple[list[str], np.ndarray]:
    """The texts of ``folder/part/neg`` then ``folder/part/pos`` (each in the order of the files' numeric ids) and
    their classes (int64: 0 negative, 1 positive); ValueError when a folder holds no review."""
    texts, labels = [], []
    for cls, label in enumerate(LABELS):
        directory = Path(folder) / part / label
        files = sorted(directory.glob("*.txt"), key=_file_order)
        if not files:
            raise ValueError(f"IMDB: {directory} holds no review (*.txt)")
        for file in files:
            texts.append(file.read_text(encoding="utf-8", errors="replace"))
        labels += [cls] * len(files)
    return texts, np.array(labels, dtype=np.int64)


def _npz_reviews(path: Path, name: str, reviews) -> list[np.ndarray]:
    out = []
    for n, review in enumerate(reviews):
        try:
            ids = np.asarray(review, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: {name}[{n}] is not a sequence of integer ids") from None
        if ids.size and (not np.isfinite(ids).all() or (ids != np.round(ids)).any()):
            raise ValueError(f"{path}: {name}[{n}] holds a value that is not an integer id")
        out.append(ids.astype(np.int64))
    return out


def read_keras(path: str | Path) -> dict[str, tuple[list[np.ndarray], np.ndarray]]:
    """``{"train"|"test": (reviews as arrays of word ranks >= 1, labels int64 0/1)}`` from Keras' ``imdb.npz``
    (either layout, see the module docstring); ValueError naming the file and the array."""
    path = Path(path)
    try:
        archive = np.load(path, allow_pickle=True)
    except Exception as err:  # not an archive: numpy tries it as a pickle, whose errors vary
        raise ValueError(f"{path}: not a readable .npz file ({type(err).__name__}: {err})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: a single array, not a .npz archive of x_train, y_train, x_test, y_test")
    with archive:
        missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in archive.files]
        if missing:
            raise ValueError(f"{path}: no array {', '.join(missing)} (Keras' imdb.npz holds x_train, y_train, x_test, "
                             f"y_test; found {', '.join(archive.files) or 'none'})")
        parts = {part: (_npz_reviews(path, f"x_{part}", archive[f"x_{part}"]), archive[f"y_{part}"])
                 for part in ("train", "test")}
    for part, (reviews, labels) in parts.items():
        labels = np.asarray(labels).reshape(-1)
        if len(labels) != len(reviews):
            raise ValueError(f"{path}: y_{part} has {len(labels)} labels for the {len(reviews)} reviews of x_{part}")
        if not len(reviews):
            raise ValueError(f"{path}: x_{part} holds no review")
        if not np.isin(labels, (0, 1)).all():
            bad = labels[~np.isin(labels, (0, 1))][0]
            raise ValueError(f"{path}: y_{part} holds the label {bad.item()!r}, expected 0 (negative) or 1 "
                             f"(positive)")
        parts[part] = (reviews, labels.astype(np.int64))
    everything = [r for part in parts.values() for r in part[0]]
    unpadded = [r[np.argmax(r != 0):] if (r != 0).any() else r[:0] for r in everything]
    if all(len(r) and r[0] == KERAS_START for r in unpadded):  # load_data's layout: undo its offsets
        def ranks(r: np.ndarray) -> np.ndarray:
            r = r[(r != 0) & (r != KERAS_START)]
            return np.where(r > KERAS_INDEX_FROM, r - KERAS_INDEX_FROM, 0)  # 0: OOV (2 and the unused 3)
        return {part: ([ranks(r) for r in reviews], labels) for part, (reviews, labels) in parts.items()}
    for part, (reviews, _) in parts.items():
        for n, review in enumerate(reviews):
            if review.size and review.min() < 1:
                raise ValueError(f"{path}: x_{part}[{n}] holds the id {int(review.min())}; Keras' imdb.npz holds word "
                                 f"ranks >= 1 (or load_data's layout, every review starting with {KERAS_START})")
    return parts


def read_word_index(path: Path) -> dict[str, int]:
    """Keras' ``imdb_word_index.json``: word -> rank (>= 1)."""
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable JSON word index ({err})") from None
    if not isinstance(index, dict) or not all(isinstance(v, int) and v >= 1 for v in index.values()):
        raise ValueError(f"{path}: expected a JSON object word -> rank (an integer >= 1)")
    return index


# ------------------------------------------------------------------------------------------------ vocabulary, ids
def build_vocabulary(reviews: list[list[str]], size: int) -> dict[str, int]:
    """word -> id (2 …) of the ``size − 2`` most frequent tokens of ``reviews`` (ties alphabetically)."""
    counts = Counter()
    for tokens in reviews:
        counts.update(tokens)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:max(0, size - FIRST_WORD)]
    return {word: FIRST_WORD + i for i, (word, _) in enumerate(ranked)}


def pad(sequences: list, length: int) -> np.ndarray:
    """int64 ``(n, length)``: each sequence's last ``length`` ids, pre-padded with 0 (Keras' ``pad_sequences`` with
    ``padding="pre", truncating="pre"``)."""
    out = np.zeros((len(sequences), length), dtype=np.int64)
    for row, ids in zip(out, sequences):
        ids = ids[-length:] if len(ids) else ids
        if len(ids):
            row[length - len(ids):] = ids
    return out


def _encode_texts(tokens: list[list[str]], index: dict[str, int], length: int) -> np.ndarray:
    get = index.get
    return pad([[get(t, OOV) for t in review[-length:]] for review in tokens], length)


def _encode_ranks(reviews: list[np.ndarray], vocabulary: int, length: int) -> np.ndarray:
    def ids(ranks: np.ndarray) -> np.ndarray:
        ranks = ranks[-length:]
        return np.where((ranks >= 1) & (ranks + 1 < vocabulary), ranks + 1, OOV)
    return pad([ids(r) for r in reviews], length)


# -------------------------------------------------------------------------------------------------------- GloVe
def find_glove(glove: str | Path, root: str | Path | None) -> Path:
    """``glove`` as given, else (relative) under the data root; FileNotFoundError naming both."""
    path = Path(glove).expanduser()
    if path.is_file():
        return path
    tried = [str(path)]
    if root is not None and not path.is_absolute():
        base = Path(root).expanduser()
        base = base.parent if base.is_file() else base
        if (base / path).is_file():
            return base / path
        tried.append(str(base / path))
    raise FileNotFoundError(f"glove: no file {' or '.join(tried)} (a GloVe text file such as glove.6B.100d.txt, read "
                            f"locally; odelab never downloads)")


def read_glove(path: str | Path, words: dict[str, int], vocabulary: int) -> tuple[np.ndarray, int]:
    """(float32 ``(vocabulary, E)`` rows by id: the GloVe vectors of ``words`` (word -> id), zeros for padding and
    OOV, N(0, s²) for words the file lacks (see the module docstring); the number of words found). ValueError naming
    the file and line of a malformed line, or when no word of the vocabulary is in the file."""
    path = Path(path)
    found: dict[int, np.ndarray] = {}
    dim = None
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                line = line.rstrip("\n\r")
                if not line.strip():
                    continue
                word, sep, rest = line.partition(" ")
                if number == 1 and re.fullmatch(r"\d+ \d+\s*", line):
                    continue  # word2vec's header: count and width
                values = rest.split()
                if dim is None:
                    if not sep or not values:
                        raise ValueError(f"{path}, line {number}: a word without numbers; expected a GloVe text file "
                                         f"(a word, then its vector's numbers, separated by spaces)")
                    dim = len(values)
                if len(values) < dim:
                    raise ValueError(f"{path}, line {number}: {len(values)} numbers after {word[:30]!r}, expected "
                                     f"{dim} as on the first line")
                if len(values) > dim:
                    continue  # a word holding spaces (glove.840B): never one of our tokens
                i = words.get(word)
                if i is not None and i not in found:
                    found[i] = finite_numbers(values, f"{path}, line {number}")
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise ValueError(f"{path}: not a readable GloVe file ({err})") from None
    if dim is None:
        raise ValueError(f"{path}: no vector in the file")
    if not found:
        raise ValueError(f"{path}: none of the vocabulary's {len(words)} words is in the file (GloVe files are "
                         f"lower-case words, one per line, then their numbers)")
    vectors = np.stack([found[i] for i in sorted(found)])
    scale = float(vectors.std()) or 1.0
    table = np.random.RandomState(EMBEDDING_SEED).normal(0.0, scale, (vocabulary, dim))
    table[[PAD, OOV]] = 0.0
    table[sorted(found)] = vectors
    return table.astype(np.float32), len(found)


# ---------------------------------------------------------------------------------------------------------- split
def split_indices(count: int, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) rows of the ``count`` training-file reviews, each in file order: the first
    round(0.3 · count) of ``RandomState(seed).permutation(count)`` validate (7 500 of 25 000)."""
    valid = round(VALID_FRACTION * count)
    if valid < 1 or count - valid < 1:
        raise ValueError(f"IMDB: {count} training reviews, too few to carve a validation set from")
    perm = np.random.RandomState(seed).permutation(count)
    return np.sort(perm[valid:]), np.sort(perm[:valid])


def _check(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return int(value)


def imdb(path: str | Path | None, seed: int = 1234, vocabulary: int = VOCABULARY, length: int = LENGTH,
         glove: str | Path | None = None, train_size: int | None = None, freeze_embedding: bool = True) -> dict:
    """IMDB from ``aclImdb/`` or Keras' ``imdb.npz`` under ``path`` (see the module docstring): ``{"train"|"valid"|
    "test": (ids (n, length) int64, classes (n,) int64), "meta": {...}}``, 17 500 / 7 500 / 25 000 reviews;
    ``meta["vocabulary"]`` the ids' range, with ``glove`` ``meta["embedding"]`` (float32 (vocabulary, E)) and
    ``meta["freeze_embedding"]``."""
    vocabulary = _check("vocabulary", vocabulary, 3)
    length = _check("length", length, 1)
    source, location = find_data(path)
    glove_path = find_glove(glove, path) if glove is not None else None  # a wrong path fails before the reading
    if source == "aclImdb":
        train_text, train_y = read_reviews(location, "train")
        test_text, test_y = read_reviews(location, "test")
        rows = dict(zip(("train", "valid"), split_indices(len(train_text))))
        train_tokens = [tokenize(t) for t in train_text]
        test_tokens = [tokenize(t) for t in test_text]
        del train_text, test_text
        index = build_vocabulary([train_tokens[i] for i in rows["train"]], vocabulary)
        vocabulary = FIRST_WORD + len(index)
        lengths = np.array([len(t) for t in train_tokens + test_tokens])
        train_x, test_x = _encode_texts(train_tokens, index, length), _encode_texts(test_tokens, index, length)
        words = index
        kept = f"the {len(index)} most frequent words of the {len(rows['train'])} training reviews"
    else:
        parts = read_keras(location)
        (train_ranks, train_y), (test_ranks, test_y) = parts["train"], parts["test"]
        rows = dict(zip(("train", "valid"), split_indices(len(train_ranks))))
        top = max((int(r.max()) for r in train_ranks + test_ranks if r.size), default=0)
        vocabulary = min(vocabulary, FIRST_WORD + top)  # rank r -> id r + 1
        lengths = np.array([len(r) for r in train_ranks + test_ranks])
        train_x, test_x = _encode_ranks(train_ranks, vocabulary, length), _encode_ranks(test_ranks, vocabulary, length)
        words = None
        kept = f"Keras' word ranks 1 … {vocabulary - FIRST_WORD}"
    if vocabulary <= FIRST_WORD:
        raise ValueError(f"IMDB: the training reviews hold no word ({location})")
    if train_size is not None:
        train_size = _check("train_size", train_size, 1)
        if train_size > len(rows["train"]):
            raise ValueError(f"train_size: expected at most {len(rows['train'])} (the training part), got {train_size}")
        pick = np.random.RandomState(seed).permutation(len(rows["train"]))[:train_size]
        rows["train"] = np.sort(rows["train"][pick])
    data = {"train": (torch.from_numpy(train_x[rows["train"]]), torch.from_numpy(train_y[rows["train"]])),
            "valid": (torch.from_numpy(train_x[rows["valid"]]), torch.from_numpy(train_y[rows["valid"]])),
            "test": (torch.from_numpy(test_x), torch.from_numpy(test_y))}
    sizes = "/".join(str(len(data[k][1])) for k in ("train", "valid", "test"))
    notes = [f"IMDB from {source} ({location}): {len(train_y)} training reviews split "
             f"{len(train_y) - len(rows['valid'])}/{len(rows['valid'])} (RandomState({SPLIT_SEED}), the same for every "
             f"run seed), {len(test_y)} test: split {sizes}"
             + (f" (train_size {train_size}, drawn with the run seed)" if train_size is not None else ""),
             f"vocabulary {vocabulary} ids: 0 padding, 1 OOV, {kept}; {length} steps, the last tokens of each review, "
             f"pre-padded with 0 ({float((lengths > length).mean()):.1%} of the reviews cut; mean "
             f"{float(lengths.mean()):.0f} tokens)"]
    data["meta"] = {"source": source, "location": str(location), "vocabulary": vocabulary, "length": length,
                    "classes": list(CLASS_NAMES), "truncated": float((lengths > length).mean()),
                    "mean_tokens": float(lengths.mean()), "notes": notes}
    if (len(train_y), len(rows["valid"]), len(test_y)) != (TRAIN + VALID, VALID, TEST):
        data["meta"]["warnings"] = [f"IMDB: {len(train_y)} training ({len(rows['valid'])} validating) and "
                                    f"{len(test_y)} test reviews; the data set has {TRAIN + VALID} ({VALID}) and "
                                    f"{TEST}"]
    if glove_path is not None:
        if words is None:
            index_path = location.parent / WORD_INDEX
            if not index_path.is_file():
                raise FileNotFoundError(f"glove: the words of {location} are in Keras' {WORD_INDEX}, not found next to "
                                        f"it ({index_path}); copy it there (keras.datasets.imdb.get_word_index)")
            words = {w: r + 1 for w, r in read_word_index(index_path).items() if r + 1 < vocabulary}
        table, hits = read_glove(glove_path, words, vocabulary)
        data["meta"].update(embedding=torch.from_numpy(table), freeze_embedding=bool(freeze_embedding),
                            glove=str(glove_path), glove_words=hits)
        notes.append(f"GloVe {glove_path.name}: {table.shape[1]}-d vectors for {hits} of the {len(words)} words "
                     f"(the others N(0, s²), padding and OOV zeros), "
                     f"{'frozen' if freeze_embedding else 'trained'}")
    return data


def imdb_models(model: str, options: dict) -> dict:
    """Per-model keywords on IMDB (every preset): coRNN (Δt, γ, ε) = (0.054, 4.9, 4.8), the official IMDB code's
    defaults (the thesis' Table 2.8 is missing); UnICORNN 2 layers, Δt (6.6e-3, 0.205), α 0, dropout 0.61 after
    each layer (Rusch 2023, Table 3.8 and the official code); τ-GRU / Delay GRU τ = 1 step and dropout 0.04 (Erichson
    et al. 2025, Table 10; its code drops h and h(t − τ) before every step: ``state_dropout``). LEM (no IMDB in its paper) and the LRCUs (LRC's code: Δt 1, one unfolding, odelab's defaults) take
    their defaults."""
    if model in ("cornn", "cornn-official"):
        return {"dt": 5.4e-2, "gamma": 4.9, "epsilon": 4.8}
    if model == "unicornn":
        return {"dt": [6.6e-3, 0.205], "alpha": 0.0, "num_layers": 2, "dropout": 0.61}
    if model in ("taugru", "delaygru"):
        return {"tau": 1.0, "state_dropout": 0.04}
    return {}
