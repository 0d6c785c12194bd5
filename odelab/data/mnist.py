"""Sequential and permuted sequential MNIST (Rusch et al. 2022, LEM, §3.2, App. A, Tables 1 and 8) from MNIST files
the user already has on disk (``odelab fit smnist|psmnist --data-root PATH``); nothing is ever downloaded.

* Files: LeCun et al.'s four IDX files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each plain or gzipped (``.gz``), looked up in ``PATH``,
  ``PATH/raw`` and ``PATH/MNIST/raw`` (torchvision's layout). IDX: magic number 0x00000803 (unsigned bytes, 3
  dimensions; labels 0x00000801, 1 dimension), the sizes as big-endian uint32, then the bytes; a wrong magic
  number, size or length, images other than 28 × 28 or labels other than 0 … 9 are a ValueError naming the file.
* sMNIST: the image read row by row, one pixel per step: step 28 r + c is pixel (r, c), N = 784 steps of input
  size 1; pixels / 255 in [0, 1], no normalisation (torchvision's ``ToTensor``, as the official code). The class
  (10) is read from the last step.
* psMNIST: step t reads pixel perm[t] of that row-major sequence (the official ``images[perm]``), one fixed
  permutation for every run seed: perm = ``torch.randperm(784)`` drawn right after ``torch.manual_seed(5544)``, the
  first draw of the official psMNIST_task.py (its default seed); drawn here from a ``torch.Generator`` seeded with
  5544, the same numbers (:func:`psmnist_permutation`). The coRNN code seeds 12008: another permutation.
* Split: the official ``random_split`` of the 60 000 training images into 57 000 / 3 000 (train / validation) and
  the 10 000 test images in file order. ``random_split`` takes the validation images from a ``randperm`` of the
  global generator after seeding, the permutation and the model's initialisation, so its 3 000 depend on the
  random numbers that initialisation drew (the model and its width); ours: ``torch.randperm(n)`` of a generator seeded with the run's
  ``seed``, its first n − ``valid_size`` images train and the rest validate (``random_split``'s order), with
  ``valid_size`` n // 20 by default (3 000 of 60 000; 2 of a 50-image test file). ``train_size`` keeps the first
  images of the training part only (a random subset, for short runs); validation and test stay whole.

Images stay uint8 until the split is made (60 000 × 784 bytes); the splits are returned as float32 inputs
(n, 784, 1) and int64 targets (n,). Reading all four files (gzipped) takes about a second: not cached.
"""
from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .local import local_root

SIDE = 28
PIXELS = SIDE * SIDE  # N = 784 steps
CLASSES = 10
PERMUTATION_SEED = 5544  # the official psMNIST_task.py's seed
VALID_FRACTION = 20  # 1 / 20 of the training file validates: 3 000 of 60 000
FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
         "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
IMAGE_MAGIC, LABEL_MAGIC = 0x803, 0x801  # 0x08 (unsigned bytes) << 8 | number of dimensions


def find_files(root: str | Path | None) -> dict[str, Path]:
    """The path of each of :data:`FILES` (plain before ``.gz``) in ``root``, ``root/raw`` or ``root/MNIST/raw``;
    FileNotFoundError naming every missing file and the folders searched."""
    root = local_root(root, "the MNIST tasks read the IDX files")
    folders = [root, root / "raw", root / "MNIST" / "raw"]
    found, missing = {}, []
    for key, name in FILES.items():
        path = next((folder / (name + ext) for folder in folders for ext in ("", ".gz")
                     if (folder / (name + ext)).is_file()), None)
        if path is None:
            missing.append(f"{name}[.gz]")
        else:
            found[key] = path
    if missing:
        raise FileNotFoundError(
            f"MNIST: missing {len(missing)} file(s) under --data-root {str(root)!r}: {', '.join(missing)} "
            f"(searched {', '.join(map(str, folders))}); odelab never downloads -- copy the files there")
    return found


def read_idx(path: Path, magic: int) -> np.ndarray:
    """The uint8 array of the IDX file ``path`` (gzipped if it ends in ``.gz``) whose magic number must be
    ``magic``; ValueError naming the file when it is not such a file or its length disagrees with its sizes."""
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
            raw = bytearray(fh.read())  # writable: the arrays viewing it need no copy for torch
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ValueError(f"{path}: not a readable gzip file ({err})") from None
    found = int.from_bytes(raw[:4], "big")
    if len(raw) < 4 or found != magic:
        raise ValueError(f"{path}: not an MNIST IDX file: magic number 0x{found:08x}, expected 0x{magic:08x}")
    dims = magic & 0xFF
    header = 4 + 4 * dims
    if len(raw) < header:
        raise ValueError(f"{path}: {len(raw)} bytes, shorter than its {header}-byte IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    if len(raw) - header != math.prod(shape):
        raise ValueError(f"{path}: {len(raw) - header} data bytes, expected {math.prod(shape)} for the sizes "
                         f"{shape} of its header (a truncated or corrupt file)")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def read_split(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 784) uint8 in row-major pixel order, labels (n,) uint8) of one IDX pair, checked."""
    images, labels = read_idx(images_path, IMAGE_MAGIC), read_idx(labels_path, LABEL_MAGIC)
    if images.shape[1:] != (SIDE, SIDE):
        raise ValueError(f"{images_path}: images of {images.shape[1]} × {images.shape[2]} pixels, expected "
                         f"{SIDE} × {SIDE}")
    if len(labels) != len(images):
        raise ValueError(f"{labels_path}: {len(labels)} labels for the {len(images)} images of {images_path}")
    if len(labels) and labels.max() >= CLASSES:
        raise ValueError(f"{labels_path}: label {int(labels.max())}, expected digits 0 … {CLASSES - 1}")
    return images.reshape(len(images), PIXELS), labels


def psmnist_permutation() -> Tensor:
    """psMNIST's fixed order (Rusch et al. 2022, §3.2): step t reads pixel perm[t] of the row-major image, perm =
    ``torch.randperm(784)`` right after ``torch.manual_seed(5544)`` (official psMNIST_task.py); drawn from its own
    generator, the global one untouched."""
    return torch.randperm(PIXELS, generator=torch.Generator().manual_seed(PERMUTATION_SEED))


def split_sizes(count: int, valid_size: int | None = None, train_size: int | None = None) -> tuple[int, int]:
    """(training, validation) images of a training file of ``count`` images: ``valid_size`` (default count // 20:
    57 000 / 3 000 of 60 000, the official split) validate, ``train_size`` (default: all the others) train."""
    valid = count // VALID_FRACTION if valid_size is None else valid_size
    if not isinstance(valid, int) or not 1 <= valid < count:
        raise ValueError(f"valid_size: expected an integer in 1 … {count - 1} (the training file has {count} images), "
                         f"got {valid!r}")
    train = count - valid if train_size is None else train_size
    if not isinstance(train, int) or not 1 <= train <= count - valid:
        raise ValueError(f"train_size: expected an integer in 1 … {count - valid} (the training file's {count} images "
                         f"less {valid} for validation), got {train!r}")
    return train, valid


def _sequences(images: np.ndarray, labels: np.ndarray) -> tuple[Tensor, Tensor]:
    """float32 inputs (n, 784, 1) in [0, 1] and int64 targets (n,)."""
    inputs = torch.from_numpy(images).to(torch.float32).div_(255.0).unsqueeze(-1)
    return inputs, torch.from_numpy(labels).to(torch.int64)


def mnist(path: str | Path | None, permuted: bool = False, seed: int = 1234, valid_size: int | None = None,
          train_size: int | None = None) -> dict:
    """sMNIST (``permuted=False``) or psMNIST from the IDX files under ``path`` (see the module docstring):
    ``{"train"|"valid"|"test": (inputs (n, 784, 1) float32, targets (n,) int64), "meta": {...}}``, the split
    drawn with ``seed``."""
    files = find_files(path)
    train_images, train_labels = read_split(files["train_images"], files["train_labels"])
    test_images, test_labels = read_split(files["test_images"], files["test_labels"])
    train, valid = split_sizes(len(train_images), valid_size, train_size)
    if permuted:
        order = psmnist_permutation().numpy()
        train_images, test_images = train_images[:, order], test_images[:, order]
    shuffled = torch.randperm(len(train_images), generator=torch.Generator().manual_seed(seed)).numpy()
    train_index, valid_index = shuffled[:train], shuffled[len(shuffled) - valid:]
    return {"train": _sequences(train_images[train_index], train_labels[train_index]),
            "valid": _sequences(train_images[valid_index], train_labels[valid_index]),
            "test": _sequences(test_images, test_labels),
            "meta": {"files": {key: str(file) for key, file in files.items()}, "permuted": permuted}}


def majority_class_accuracy(data: dict) -> float:
    """Test accuracy of always naming the most frequent training class (an accuracy, not an RMSE; MNIST: the
    digit 1, 11.35 % of the test set)."""
    majority = torch.bincount(data["train"][1], minlength=CLASSES).argmax()
    return float((data["test"][1] == majority).float().mean())
