"""BIDMC32 vital-sign regression (Rusch et al. 2022, LEM, §3.4, Table 3; Rusch 2023, UnICORNN, §3.5(d), Table 3.4)
from the Monash / UEA / UCR Time Series Extrinsic Regression archive's files the user already has on disk
(``odelab fit bidmc-hr --data-root PATH``); nothing is ever downloaded.

* Data: 7949 windows of 32 s (4000 samples at 125 Hz) of 2 channels, the PPG and ECG recordings of ICU patients
  collected at the Beth Israel Deaconess Medical Center (Tan et al. 2020; the thesis's "125 Hz for 8 minutes"
  recordings cut into the archive's 32 s windows); one target per window: the heart rate (``hr``, beats per minute),
  the respiratory rate (``rr``, breaths per minute) or the blood-oxygen saturation (``spo2``, %). LEM's paper has
  HR only, UnICORNN's RR and HR; SpO2 is the archive's third problem on the same windows (no paper of ours uses it).
* Files: ``BIDMC32HR_TRAIN.ts`` and ``BIDMC32HR_TEST.ts`` (``BIDMC32RR_…``, ``BIDMC32SpO2_…``), the sktime ``.ts``
  format with ``@targetLabel true`` (odelab/data/ts_files.py: the channels separated by ``:``, the values by ``,``, the
  float target after the last ``:``), looked up in ``PATH``, ``PATH/BIDMC32HR`` (the archive's zip unpacked into it),
  ``PATH/raw/BIDMC32HR`` and ``PATH/raw`` (the LEM code's ``data/heart_rate/raw``). Every case must have 2 channels of
  one length; values and targets must be finite numbers (``?``, a missing value, is an error: odelab fills no gaps).
* Split, the LEM code's (``src/heart_rate/data.py``; the UnICORNN code reads a 70 / 15 / 15 split of ``.npy`` files
  the user prepares, not published, so the LEM split serves all three targets): the training cases then the test
  cases merged (7949), then ``torch.utils.data.random_split(merged, [5565, 2384],
  generator=torch.Generator().manual_seed(123456))`` and the 2384 split again by ``random_split(·, [1192, 1192])``
  with a fresh generator of the same seed, its FIRST part testing, its second validating: 5565 / 1192 / 1192
  (train / valid / test). ``random_split(lengths, generator)`` is ``perm = torch.randperm(sum(lengths),
  generator=generator)`` cut into consecutive pieces of those lengths; ``randperm(n)`` on the CPU (n < 2³² / 20) swaps
  r[i] and r[i + u_i mod (n − i)] for i = 0 … n − 2 starting from r = 0 … n − 1, u_i the generator's successive 32-bit
  MT19937 outputs (seeded by the standard ``init_genrand``): done here with ``torch.randperm`` itself
  (:func:`split_indices`; tests/data/test_bidmc.py checks it against that rule written out in pure Python and against
  ``random_split``). Other case counts (test fixtures, partial files): ⌈0.7 n⌉ training cases, the rest halved
  (test ⌈·/2⌉, as ``random_split``'s first part). The split is the same for every run seed; the run's seed draws the
  initialisation and the batches only.
* Inputs: the raw values, float32 (n, 4000, 2), not normalised (the LEM code does not normalise). Targets, float32
  (n, 1): by default the raw values in the target's own unit, as both codes (neither normalises): the training loss is
  the MSE in (beats per minute)², and every RMSE odelab reports (``test_rmse``, the validation curve, the mean-predictor
  baseline) is in beats (breaths) per minute, the papers' "test L² error" (the codes' sqrt(sum of squared errors / n)
  over the whole set). ``standardise=True`` (``odelab fit … --standardise``) trains on (y − mean) / std with the
  training split's mean and standard deviation (sample std): the RMSEs are then in standard deviations, and the tasks'
  ``report`` adds ``test_rmse_original_units`` and ``mean_predictor_rmse_original_units`` (the same numbers without
  standardising) to results.json. Options for short runs: ``length`` keeps the first N steps of every window, then
  ``stride`` every K-th of them (steps 0, K, 2K, …: ⌈N / K⌉ steps; the tasks multiply LEM's and UnICORNN's Δt by K, so
  that a step still spans K samples' time).

Why raw targets by default, and why the option: raw is the papers' protocol, and keeps ``test_rmse`` comparable with
their tables; but the readout must reach the targets' level (HR ≈ 85 bpm, std ≈ 15) from bounded hidden states (LEM's
y is a convex combination of tanh values) while Adam moves each readout weight by about lr per step, which costs the
first epochs of a 500-epoch run and all of a short one. Measured on synthetic files of the real size (7949 windows,
channel 0 a noisy sine at the heart rate, channel 1 spikes; ``--stride 8``, LEM d = 32, lr 1.56e-3, seed 1234),
validation RMSE in bpm after epochs 1 … 4: raw targets 72.5, 63.8, 56.0, 49.0 (the mean predictor: 14.5); targets
centred on the training mean but not scaled: 14.5 at every epoch (the readout cannot yet swing ±15); standardised:
14.5, 7.3, 3.3, 1.06 (test 1.07).

Time (one epoch with ``--threads 1``, LEM d = 32, on synthetic files of the real size, on a busy 2-core machine): 160 s
at the full 4000 steps, 21 s with ``--stride 8`` (500 steps; UnICORNN, 3 layers: 18 s); reading the two files takes
30–75 s more. The tasks' ``quick`` preset (d = 32, 4 epochs) is thus ≈ 11 min at full length, ≈ 2.5 min with
``--stride 8``.

The papers' numbers (test RMSE in bpm, HR): LEM Table 3 / Table 5.3 of the LEM thesis chapter: LSTM 9.93, chrono-LSTM
3.31, expRNN 1.63, IndRNN (3 layers) 1.94, coRNN 1.61, UnICORNN (3 layers) 1.31, LEM 0.85 (the LEM code's log: 0.8539;
the UnICORNN code's HR log: 1.31). RR: UnICORNN 1.06 (a secondary source: the body of the UnICORNN thesis's Table 3.4 is
missing from our extraction; its code's RR log ends at 1.0). Protocols: LEM Table 8 (healthcare: lr 1.56e-3, batch 32,
Δt 0.19; 250 epochs then lr / 10 for 250 more; d = 128; the LEM code's defaults lr 0.00211, Δt 0.2371); UnICORNN Table
3.8 (3 layers of 128, batch 32, dropout 0.1; RR: lr 3.98e-3, Δt 1.1e-2, α 9.0 (the code's defaults); HR: lr 2.88e-3, Δt
4.6e-2, α 10.0 (its HR log's header)).

Reading the two ``.ts`` files (≈ 64 million numbers, ≈ 0.5 GB of text) takes about half a minute (2 ms per channel
of 4000 values, the time of numpy's own text parsing): not cached.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .local import local_root
from .ts_files import count_option, keep_steps, read_series_file

CASES = 7949  # the archive's training + test windows
SERIES_LENGTH = 4000
CHANNELS = 2
SPLIT_SEED = 123456  # the LEM code's generator seed, both random_split calls
SPLIT = (5565, 1192, 1192)  # the LEM code's sizes (train, valid, test) for the 7949 windows
PROBLEMS = {"hr": "BIDMC32HR", "rr": "BIDMC32RR", "spo2": "BIDMC32SpO2"}
UNITS = {"hr": "beats per minute", "rr": "breaths per minute", "spo2": "%"}
LEM_DT = 0.19  # Rusch et al. 2022, Table 8, healthcare (the code's default 0.2371)
# UnICORNN (Δt, α) per target: Rusch 2023, Table 3.8 (HR: also the code's HR log header; RR: the code's defaults);
# SpO2 has no published setting: the code's defaults
UNICORNN = {"hr": (4.6e-2, 10.0), "rr": (1.1e-2, 9.0), "spo2": (1.1e-2, 9.0)}
UNICORNN_LAYERS, UNICORNN_DROPOUT = 3, 0.1


def _target(target: str) -> str:
    if target not in PROBLEMS:
        raise ValueError(f"target: expected one of {', '.join(PROBLEMS)}, got {target!r}")
    return target


def find_files(root: str | Path | None, target: str = "hr") -> dict[str, Path]:
    """The training and test ``.ts`` file of ``target`` in ``root``, ``root/BIDMC32HR``, ``root/raw/BIDMC32HR`` or
    ``root/raw`` (for HR; likewise for RR and SpO2); FileNotFoundError naming the missing files and the folders
    searched."""
    problem = PROBLEMS[_target(target)]
    root = local_root(root, f"the bidmc-{target} task reads the regression archive's {problem} files")
    folders = [root, root / problem, root / "raw" / problem, root / "raw"]
    stems = {"train": f"{problem}_TRAIN.ts", "test": f"{problem}_TEST.ts"}
    found = {key: next((folder / name for folder in folders if (folder / name).is_file()), None)
             for key, name in stems.items()}
    if all(found.values()):
        return found
    raise FileNotFoundError(
        f"{problem}: missing {' and '.join(name for key, name in stems.items() if found[key] is None)} under "
        f"--data-root {str(root)!r} (searched {', '.join(map(str, folders))}); odelab never downloads -- unpack the "
        f"Monash / UEA / UCR regression archive (zenodo record 3902651, Monash_UEA_UCR_Regression_Archive.zip) there")


def read_file(path: str | Path, target: str = "hr") -> tuple[np.ndarray, np.ndarray]:
    """(series (n, steps, 2) float32, targets (n,) float64) of one ``.ts`` file of ``target``, checked
    (odelab/data/ts_files.py); ValueError naming the file and line."""
    series, targets, _ = read_series_file(path, PROBLEMS[_target(target)], CHANNELS)
    return series, targets


def split_sizes(count: int) -> tuple[int, int, int]:
    """(training, validation, test) cases of ``count`` merged ones: the LEM code's 5565 / 1192 / 1192 of 7949 =
    ⌈0.7 n⌉ and the rest halved, the test part (``random_split``'s first) taking ⌈·/2⌉."""
    train = math.ceil(0.7 * count)
    test = math.ceil((count - train) / 2)
    if count - train - test < 1:
        raise ValueError(f"BIDMC32: {count} cases, too few for a 70 / 15 / 15 split")
    return train, count - train - test, test


def split_indices(count: int, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(training, validation, test) indices into the ``count`` merged cases, in the order the LEM code's subsets list
    them: ``train, rest = random_split(·, [n_train, n − n_train], generator(seed))`` then ``test, valid =
    random_split(rest, [n_test, n_valid], generator(seed))``, each call = consecutive pieces of ``torch.randperm``
    drawn with a fresh ``torch.Generator().manual_seed(seed)``."""
    train, valid, test = split_sizes(count)
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).numpy()
    rest = perm[train:]
    inner = torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed)).numpy()
    return perm[:train], rest[inner[test:]], rest[inner[:test]]


def bidmc(path: str | Path | None, target: str = "hr", length: int | str | None = None, stride: int | str = 1,
          standardise: bool = False) -> dict:
    """BIDMC32 ``target`` (``hr``, ``rr`` or ``spo2``) from the archive's files under ``path`` (see the module
    docstring): ``{"train"|"valid"|"test": (inputs (n, steps, 2) float32, targets (n, 1) float32), "meta": {...}}``,
    5565 / 1192 / 1192 windows; ``length`` keeps the first N steps, ``stride`` every K-th of them; ``standardise``:
    targets (y − mean) / std with the training split's mean and standard deviation (``meta["offset"]``,
    ``meta["scale"]``; 0 and 1 without)."""
    target = _target(target)
    if not isinstance(standardise, bool):
        raise ValueError(f"standardise: expected True or False, got {standardise!r}")
    if length is not None:
        count_option("length", length, 1)
    count_option("stride", stride, 1)
    problem = PROBLEMS[target]
    files = find_files(path, target)
    train_x, train_y = read_file(files["train"], target)
    test_x, test_y = read_file(files["test"], target)
    if test_x.shape[1] != train_x.shape[1]:
        raise ValueError(f"{files['test']}: series of {test_x.shape[1]} steps, {files['train']} has "
                         f"{train_x.shape[1]}; the series must all have one length")
    steps = train_x.shape[1]
    inputs, kept = keep_steps(np.concatenate([train_x, test_x]), length, stride)
    targets = np.concatenate([train_y, test_y])[:, None]
    split = dict(zip(("train", "valid", "test"), split_indices(len(inputs))))
    offset, scale = 0.0, 1.0
    if standardise:
        offset, scale = float(targets[split["train"]].mean()), float(targets[split["train"]].std(ddof=1))
        scale = scale if scale > 0 else 1.0
    targets = ((targets - offset) / scale).astype(np.float32)
    data = {key: (torch.from_numpy(inputs[rows]), torch.from_numpy(targets[rows])) for key, rows in split.items()}
    unit = UNITS[target]
    note = (f"{problem}: {len(train_y)} + {len(test_y)} cases merged, split "
            f"{'/'.join(str(len(rows)) for rows in split.values())} (the LEM code's random_split, seed {SPLIT_SEED}, "
            f"the same for every run seed); {inputs.shape[1]} of {steps} steps{kept}; inputs not normalised, "
            + (f"targets standardised (training mean {offset:.4g}, std {scale:.4g} {unit}): RMSEs in standard "
               f"deviations, results.json's test_rmse_original_units in {unit}" if standardise else
               f"targets not normalised: RMSEs in {unit}"))
    data["meta"] = {"files": {key: str(file) for key, file in files.items()}, "problem": problem, "target": target,
                    "unit": unit, "standardised": standardise, "offset": offset, "scale": scale,
                    "series_length": steps, "steps": int(inputs.shape[1]), "notes": [note]}
    if len(targets) != CASES or steps != SERIES_LENGTH:
        data["meta"]["warnings"] = [f"{problem}: {len(targets)} cases of {steps} steps; the archive's files hold "
                                    f"{CASES} of {SERIES_LENGTH}"]
    return data


def bidmc_report(prediction: torch.Tensor, data: dict) -> dict:
    """The test RMSE and the mean predictor's in the target's own unit (beats or breaths per minute, %): the data's
    RMSEs × ``meta["scale"]`` (the same numbers when the targets are not standardised)."""
    scale, train, (_, test) = data["meta"]["scale"], data["train"][1].double(), data["test"]
    return {"test_rmse_original_units": float((prediction.double() - test.double()).pow(2).mean().sqrt()) * scale,
            "mean_predictor_rmse_original_units": float((test.double() - train.mean()).pow(2).mean().sqrt()) * scale,
            "unit": data["meta"]["unit"]}


def bidmc_models(target: str) -> Callable[[str, dict], dict]:
    """Per-model keywords on BIDMC32 ``target``: LEM Δt 0.19 (Rusch et al. 2022, Table 8, healthcare; carried over to
    RR and SpO2, which LEM's paper does not run); UnICORNN 3 layers, dropout 0.1 and its (Δt, α) of Rusch 2023,
    Table 3.8 (HR (4.6e-2, 10), RR (1.1e-2, 9); SpO2: RR's, the code's defaults); each Δt times the task's
    ``stride``. coRNN and the rest: no published setting, their defaults."""
    dt, alpha = UNICORNN[_target(target)]

    def options(model: str, data_options: dict) -> dict:
        stride = count_option("stride", data_options.get("stride", 1), 1)
        if model in ("lem", "lem-official"):
            return {"dt": LEM_DT * stride}
        if model == "unicornn":
            return {"dt": dt * stride, "alpha": alpha, "num_layers": UNICORNN_LAYERS, "dropout": UNICORNN_DROPOUT}
        return {}
    return options
