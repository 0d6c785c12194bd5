"""Noise-padded CIFAR-10 (nCIFAR; Rusch et al. 2022, LEM, §3.2, Tables 1 and 8; Rusch 2023, thesis §2.4(c); Erichson
et al. 2025, τ-GRU, §5, Tables 3 and 10) and sequential CIFAR-10 (sCIFAR; τ-GRU, §5) from the CIFAR-10 files the
user already has on disk (``odelab fit ncifar|scifar --data-root PATH``); nothing is ever downloaded.

* Files: the "CIFAR-10 python version" (``cifar-10-python.tar.gz`` unpacked): ``data_batch_1`` … ``data_batch_5``
  (the 50 000 training images) and ``test_batch`` (10 000), looked up in ``PATH`` and ``PATH/cifar-10-batches-py``
  (torchvision's layout, whose reader odelab does not use). Each is a pickled dict: ``b"data"`` a uint8 array
  (n, 3072), one image per row, channel-first and row-major (the 1024 red pixels row by row, then green, then
  blue), and ``b"labels"`` n integers 0 … 9. The pickles are read by an unpickler that builds nothing but numpy
  arrays, lists, dicts and strings (:class:`ArrayUnpickler`): a file that asks for any other object is refused
  (a pickle can otherwise run code). A missing file is a FileNotFoundError naming it and the folders searched;
  another content (no dict, no ``b"data"``, rows of other than 3072 bytes, labels outside 0 … 9 or of another count)
  a ValueError naming the file.
* Pixels / 255 in [0, 1], no normalisation: torchvision's ``ToTensor``, as both official nCIFAR codes (LEM
  ``nCIFAR/utils.py``, coRNN ``noisy_CIFAR10/utils.py``).
* nCIFAR: the image (3, 32, 32) permuted to (row, channel, column) and reshaped to 32 × 96 (the official
  ``images.permute(0, 2, 1, 3).reshape(batch, 32, 96)``): step r is row r, feature 32 k + c is channel k of column
  c. Then 968 steps of noise to N = 1000 (the model classifies, then holds the class through the noise), the same
  for every image, training and test. The official code concatenates ``torch.randn(1, 968, 96)``, drawn once per
  run and repeated over the batch: **Gaussian N(0, 1)** (``noise="gaussian"``, the default). The thesis
  (§2.4(c)) says "uniform random numbers" with no range: ``noise="uniform"`` is U[0, 1) (``torch.rand``, the
  pixels' own range; our choice), likewise one fixed tail.
* The tail is NOT materialised here: 50 000 × 1000 × 96 float32 would be 19 GB. The loader returns the 32-step
  images (n, 32, 96) and the tail in ``meta["suffix"]``, a float32 tensor (968, 96) that the model appends after
  every input sequence (``odelab.models.SequenceRegressor(suffix=...)``, a buffer saved with the checkpoint), so
  training and test see the same tail. It is drawn from its own generator seeded with :data:`NOISE_SEED` = 5544
  (the official ``nCIFAR_task.py``'s default seed), the first draw: ``torch.randn(968, 96, generator=...)`` (or
  ``torch.rand``), the same for every run seed. The official numbers cannot be matched: its tail is drawn from the
  global generator after ``torch.manual_seed(5544)``, the model's initialisation and ``random_split``'s permutation,
  so it depends on the model and its width; the coRNN code seeds nothing, so its tail differs on every run.
* sCIFAR (τ-GRU, §5: "N = 1024, with p = 3 colour channels per step"): the image read pixel by pixel, row-major,
  step 32 r + c = pixel (r, c) with its (red, green, blue) as the 3 features; no noise. The τ-GRU code is not
  public: the same [0, 1] scaling as nCIFAR (ours).
* Split: the official LEM code ``random_split``\\ s the 50 000 training images into 48 000 / 2 000 (train /
  validation) with the global generator after seeding and the model's initialisation (so its 2 000 depend on the
  model; the coRNN code: 47 000 / 3 000, unseeded); the 10 000 test images in file order. Ours, as the MNIST
  loader: ``torch.randperm(n)`` of a generator seeded with the run's ``seed``, its first n − ``valid_size`` images
  train and the last ``valid_size`` validate, ``valid_size`` = n // 25 (2 000 of 50 000) by default.
  ``train_size`` keeps the first images of the training part only (a random subset, for short runs); validation
  and test stay whole.

Images stay uint8 until the split is made (60 000 × 3072 bytes); the splits are returned as float32 inputs (nCIFAR
(n, 32, 96), sCIFAR (n, 1024, 3): 590 MB for the 48 000 training images) and int64 targets (n,). Reading the six
files and laying them out takes about 3 s (1.3 GB at most, measured on random files of the real size): not
cached.
"""
from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .local import local_root
from .mnist import split_sizes

SIDE = 32
CHANNELS = 3
PIXELS = SIDE * SIDE  # sCIFAR: N = 1024 steps of 3 features
ROW_FEATURES = CHANNELS * SIDE  # nCIFAR: 96 features per row
IMAGE_BYTES = CHANNELS * PIXELS  # 3072
LENGTH = 1000  # nCIFAR: 32 rows + 968 steps of noise
NOISE_STEPS = LENGTH - SIDE
CLASSES = 10
NOISE_SEED = 5544  # the official nCIFAR_task.py's default seed
NOISES = ("gaussian", "uniform")
VALID_FRACTION = 25  # 2 000 of the 50 000 training images validate
FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"

# What a CIFAR-10 pickle may build: numpy arrays (from Python 2's numpy.core or numpy 2's numpy._core) and, in
# pickles written by Python 3 at protocol 2, bytes through _codecs.encode. Nothing else is looked up.
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype"),
            ("numpy.core.numeric", "_frombuffer"), ("_codecs", "encode")}


class ArrayUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays and Python's plain containers only: any other global a pickle names is
    an UnpicklingError (a pickle can otherwise call anything)."""

    def find_class(self, module: str, name: str):
        legacy = module.replace("numpy._core", "numpy.core")
        if (legacy, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refused to build {module}.{name}: a CIFAR-10 file holds numpy arrays only")
        if legacy.startswith("numpy.core"):  # numpy 2 keeps these in numpy._core (numpy.core warns on access)
            for candidate in (legacy.replace("numpy.core", "numpy._core"), legacy):
                try:
                    return getattr(importlib.import_module(candidate), name)
                except (ImportError, AttributeError):
                    continue
        return super().find_class(module, name)


def find_files(root: str | Path | None) -> dict[str, Path]:
    """``{"data_batch_1": path, …, "test_batch": path}`` in ``root`` or ``root/cifar-10-batches-py`` (the first
    holding all six); FileNotFoundError naming the missing files and the folders searched."""
    root = local_root(root, "the CIFAR-10 tasks read the python-version batches (cifar-10-batches-py)")
    folders = [root, root / FOLDER]
    names = TRAIN_FILES + (TEST_FILE,)
    missing = {folder: [name for name in names if not (folder / name).is_file()] for folder in folders}
    for folder in folders:
        if not missing[folder]:
            return {name: folder / name for name in names}
    closest = min(folders, key=lambda folder: len(missing[folder]))
    raise FileNotFoundError(
        f"CIFAR-10: missing {len(missing[closest])} file(s) under --data-root {str(root)!r}: "
        f"{', '.join(missing[closest])} (searched {', '.join(map(str, folders))}); odelab never downloads -- unpack "
        f"the python version, cifar-10-python.tar.gz, there (its folder {FOLDER})")


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 3072) uint8, labels (n,) uint8) of one CIFAR-10 python batch file, checked; ValueError naming
    the file."""
    try:
        with open(path, "rb") as fh:
            batch = ArrayUnpickler(fh, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
        raise ValueError(f"{path}: not a CIFAR-10 python batch file ({type(err).__name__}: {err})") from None
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: not a CIFAR-10 python batch file (a pickled {type(batch).__name__}, not a dict)")
    batch = {key.decode("latin-1") if isinstance(key, bytes) else key: value for key, value in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise ValueError(f"{path}: a CIFAR-10 batch holds 'data' and 'labels', found {sorted(map(str, batch))}"
                         + (" (a CIFAR-100 file: fine_labels)" if "fine_labels" in batch else ""))
    images = batch["data"]
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 2 \
            or images.shape[1] != IMAGE_BYTES:
        described = (f"{images.dtype} of shape {images.shape}" if isinstance(images, np.ndarray)
                     else type(images).__name__)
        raise ValueError(f"{path}: 'data' is {described}; expected uint8 images of shape (n, {IMAGE_BYTES})")
    try:
        labels = np.asarray(batch["labels"], dtype=np.int64)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: 'labels' are not integers") from None
    if labels.shape != (len(images),):
        raise ValueError(f"{path}: {labels.size} labels for the {len(images)} images")
    if labels.size and (labels.min() < 0 or labels.max() >= CLASSES):
        bad = labels[(labels < 0) | (labels >= CLASSES)][0]
        raise ValueError(f"{path}: label {int(bad)}, expected classes 0 … {CLASSES - 1}")
    return images, labels.astype(np.uint8)


def read_cifar(files: dict[str, Path]) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((training images, labels), (test images, labels)): the five training batches in order, then the test batch."""
    parts = [read_batch(files[name]) for name in TRAIN_FILES]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return train, read_batch(files[TEST_FILE])


def noise_tail(noise: str = "gaussian") -> Tensor:
    """nCIFAR's fixed tail (968, 96) float32: the first draw of a generator seeded with :data:`NOISE_SEED`,
    ``torch.randn`` (``"gaussian"``, the official code's N(0, 1)) or ``torch.rand`` (``"uniform"``, U[0, 1), the
    thesis's "uniform random numbers" in the pixels' range); the global generator is left alone."""
    if noise not in NOISES:
        raise ValueError(f"noise: expected one of {', '.join(NOISES)}, got {noise!r}")
    generator = torch.Generator().manual_seed(NOISE_SEED)
    draw = torch.randn if noise == "gaussian" else torch.rand
    return draw(NOISE_STEPS, ROW_FEATURES, generator=generator, dtype=torch.float32)


def as_rows(images: np.ndarray) -> np.ndarray:
    """nCIFAR's steps: (n, 3072) -> (n, 32, 96), step r = row r, feature 32 k + c = channel k, column c (uint8)."""
    return images.reshape(-1, CHANNELS, SIDE, SIDE).transpose(0, 2, 1, 3).reshape(-1, SIDE, ROW_FEATURES)


def as_pixels(images: np.ndarray) -> np.ndarray:
    """sCIFAR's steps: (n, 3072) -> (n, 1024, 3), step 32 r + c = pixel (r, c), features (red, green, blue)."""
    return images.reshape(-1, CHANNELS, PIXELS).transpose(0, 2, 1)


def _sequences(images: np.ndarray, labels: np.ndarray, layout) -> tuple[Tensor, Tensor]:
    """float32 inputs in [0, 1] of the ``layout`` and int64 targets (n,); the uint8 steps are laid out first."""
    steps = np.ascontiguousarray(layout(images))
    inputs = torch.from_numpy(steps).to(torch.float32).div_(255.0)
    return inputs, torch.from_numpy(labels).to(torch.int64)


def cifar(path: str | Path | None, sequence: str = "rows", seed: int = 1234, noise: str = "gaussian",
          valid_size: int | None = None, train_size: int | None = None) -> dict:
    """nCIFAR (``sequence="rows"``) or sCIFAR (``"pixels"``) from the batches under ``path`` (see the module
    docstring): ``{"train"|"valid"|"test": (inputs float32, targets (n,) int64), "meta": {...}}``, the split drawn
    with ``seed``; nCIFAR's ``meta["suffix"]`` is the noise tail (968, 96) the model appends to every sequence."""
    if sequence not in ("rows", "pixels"):
        raise ValueError(f"sequence: expected 'rows' (nCIFAR) or 'pixels' (sCIFAR), got {sequence!r}")
    tail = noise_tail(noise) if sequence == "rows" else None  # checks ``noise`` before any file is read
    files = find_files(path)
    (train_images, train_labels), (test_images, test_labels) = read_cifar(files)
    count = len(train_images)
    train, valid = split_sizes(count, count // VALID_FRACTION if valid_size is None else valid_size, train_size)
    shuffled = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).numpy()
    train_index, valid_index = shuffled[:train], shuffled[count - valid:]
    layout = as_rows if sequence == "rows" else as_pixels
    meta = {"files": {name: str(file) for name, file in files.items()}, "sequence": sequence}
    if tail is None:
        meta["notes"] = [f"sCIFAR: {PIXELS} steps of the (red, green, blue) of one pixel, row by row, in [0, 1]"]
    else:
        what = "N(0, 1)" if noise == "gaussian" else "U[0, 1)"
        meta.update(noise=noise, suffix=tail, notes=[
            f"nCIFAR: {SIDE} rows of {ROW_FEATURES} features in [0, 1], then {NOISE_STEPS} steps of one fixed {what} "
            f"tail (seed {NOISE_SEED}), appended by the model: {LENGTH} steps"])
    return {"train": _sequences(train_images[train_index], train_labels[train_index], layout),
            "valid": _sequences(train_images[valid_index], train_labels[valid_index], layout),
            "test": _sequences(test_images, test_labels, layout),
            "meta": meta}


def ncifar(seed: int = 1234, path: str | Path | None = None, noise: str = "gaussian",
           train_size: int | None = None) -> dict:
    """The nCIFAR task's loader: 32-step images (n, 32, 96) and ``meta["suffix"]``, the (968, 96) noise tail."""
    return cifar(path, "rows", seed, noise=noise, train_size=train_size)


def scifar(seed: int = 1234, path: str | Path | None = None, train_size: int | None = None) -> dict:
    """The sCIFAR task's loader: (n, 1024, 3), no noise."""
    return cifar(path, "pixels", seed, train_size=train_size)
