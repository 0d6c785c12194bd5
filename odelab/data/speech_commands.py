"""Google12: keyword spotting on Google Speech Commands v2 with 12 classes (Rusch et al. 2022, LEM, §3.6, Table 5),
the features of the official LEM code (``src/Google12/google12_data_loader.py``, ``data.py``), from the extracted
``speech_commands_v0.02`` folder the user already has on disk (``odelab fit google12 --data-root PATH``); nothing is
ever downloaded.

* Data: 105 829 one-second utterances of 35 words at 16 kHz by 2 618 speakers (Warden 2018), in the archive's
  layout: one folder per word of ``.wav`` files, ``_background_noise_/`` (six long noise recordings and a
  README), ``validation_list.txt`` and ``testing_list.txt`` (one ``word/file.wav`` per line). Looked up in ``PATH``,
  ``PATH/speech_commands_v0.02`` and ``PATH/raw`` (the official code's ``data/google_speech_command/raw``); the
  folder is never written to.
* Classes, the official ``GSCmdV2Categs``: 0 unknown (every word folder other than the ten below), 1 silence
  (``_background_noise_``; also folders named ``silence`` / ``_silence_``), 2 … 11 yes, no, up, down, left, right,
  on, off, stop, go (:data:`CLASS_NAMES`).
* Split, as the official ``data.py`` moves the files: those listed in ``testing_list.txt`` test (11 005), those in
  ``validation_list.txt`` validate (9 981), every other ``.wav`` / ``.WAV`` file under a sub-folder of the dataset
  trains (84 843 utterances + the 6 noise files = 84 849), each split in the official loader's order (folders
  sorted, then files sorted). The same for every run seed. A listed file that does not exist is an error (the
  official ``shutil.move`` fails too), so is a file listed for both.
  - Silence, as the official loader has it: each ``_background_noise_`` file (≈ 1 min) is ONE training example, its
    first 126 frames (≈ 1 s); no silence example validates or tests (the list files name none). This is not the
    TensorFlow KWS recipe (1-s silence clips cut from the noise, ~10 % of each split, unknown words subsampled):
    the official code scores the 11 005 test utterances, of 11 classes, ≈ 63 % of them "unknown" (the 25 other
    words), which is the majority-class baseline.
* Features, per clip, as the official ``spect_loader`` (librosa 0.8.1, the repository's pin), computed in torch:
  - samples as float in [-1, 1) (int16 / 32768, as ``librosa.load(path, sr=None)`` reads them; int32 / 2^31,
    uint8 (x − 128) / 128, float as stored; channels averaged), at the file's own rate;
  - magnitude STFT (``power=1``): periodic Hann window of 1 024 samples, hop 128, the signal reflect-padded by 512 at
    both ends (librosa 0.8's ``center=True, pad_mode="reflect"``): 1 + ⌊L / 128⌋ frames, 126 for a full clip;
  - 80 mel filters from 40 Hz to rate / 2 (librosa's defaults: Slaney's mel scale, area-normalised triangles,
    :func:`mel_filterbank`), applied to the magnitudes;
  - ``power_to_db(ref=np.max)``: 10 log10(max(S, 1e-10)) minus the same of the clip's largest value, floored at
    80 dB below the clip's maximum (0 dB);
  - padded with zeros (0 dB, after the dB conversion) or cut to 126 frames; then z-scored over the clip's 80 × 126
    values (mean, unbiased standard deviation; left alone when the deviation is 0).
  The model reads N = 126 steps of m = 80 features: inputs float32 (n, 126, 80), targets int64 (n,) read at the
  last step. Computed in float64 (see :func:`mel_spectrogram`), stored in float32; against librosa 0.11 with
  ``pad_mode="reflect"`` (0.8.1's default) on chirps, noise, clips of 300 samples to 60 s: ≤ 3e-6 apart after the
  z-score (the tests hold a few of its values).
* Cache: the features of every clip are computed once (a tqdm bar over the clips) and kept in
  ``$ODELAB_CACHE/google12-<key>.pt`` (:func:`odelab.data.cache.cached`; float32, ≈ 4.3 GB for the whole data set),
  the key made of the feature settings and a fingerprint of the folder (every ``.wav``'s path, size and modification
  time, and both list files' contents): a changed file computes them again.
  Measured on this project's 2-core CPU (torch 2.13, one torch thread, 2 000 clips written as 16-bit WAV, 10 %
  shorter than 1 s, files in the page cache): ≈ 2.6 s of CPU per 1 000 clips (3.8–5.8 s of wall time on the busy
  machine), so ≈ 4.5 min of CPU for the 105 835 clips; the STFT and its magnitude in float64 take ~85 % of it,
  reading the files ~3 % (a cold disk adds its own time). Two threads did not help there (the machine was loaded).
* ``train_size``: train on that many training clips (a subset drawn with the run's seed, kept in the split's order;
  for short runs); validation and test stay whole.
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from scipy.io import wavfile
from torch import Tensor
from tqdm.auto import tqdm

from .cache import cached, cache_dir
from .local import local_root

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
CLASS_NAMES = ("unknown", "silence") + WORDS  # class index = position (the official GSCmdV2Categs)
CLASSES = len(CLASS_NAMES)
UNKNOWN, SILENCE = 0, 1
SILENCE_FOLDERS = ("_background_noise_", "silence", "_silence_")
SPLITS = ("train", "valid", "test")
LISTS = {"valid": "validation_list.txt", "test": "testing_list.txt"}
FOLDERS = ("", "speech_commands_v0.02", "raw")  # looked up under --data-root
AUDIO_EXTENSIONS = (".wav", ".WAV")

# the official spect_loader's settings (librosa 0.8.1 defaults where it sets none)
N_FFT = 1024
HOP = 128
N_MELS = 80
FMIN = 40.0
FRAMES = 126  # GCommandLoader's max_len
TOP_DB = 80.0
AMIN = 1e-10
FEATURES = dict(n_fft=N_FFT, hop=HOP, n_mels=N_MELS, fmin=FMIN, fmax="rate/2", frames=FRAMES, top_db=TOP_DB,
                amin=AMIN, window="hann-periodic", pad="reflect", mel="slaney", norm="slaney", power=1.0,
                scale="power_to_db(ref=max)", normalize="z-score(unbiased)", dtype="float32")

# Slaney's mel scale (Auditory Toolbox; librosa's htk=False): 3 mels per 200 Hz up to 1 kHz (15 mels), then
# logarithmic, 27 mels per factor 6.4
_LINEAR_HZ_PER_MEL = 200.0 / 3
_BREAK_HZ = 1000.0
_BREAK_MEL = _BREAK_HZ / _LINEAR_HZ_PER_MEL
_LOG_STEP = math.log(6.4) / 27.0


def class_index(folder: str) -> int:
    """The class of a clip in ``folder`` (the word): 2 … 11 for the ten words, 1 silence, 0 unknown."""
    if folder in SILENCE_FOLDERS:
        return SILENCE
    return CLASS_NAMES.index(folder) if folder in WORDS else UNKNOWN


def hz_to_mel(hz) -> np.ndarray:
    """Slaney's mel scale: f / (200/3) below 1 kHz, 15 + ln(f / 1000) / (ln 6.4 / 27) above."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / _LINEAR_HZ_PER_MEL
    log = _BREAK_MEL + np.log(np.maximum(hz, _BREAK_HZ) / _BREAK_HZ) / _LOG_STEP
    return np.where(hz >= _BREAK_HZ, log, linear)


def mel_to_hz(mel) -> np.ndarray:
    """The inverse of :func:`hz_to_mel`."""
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * _LINEAR_HZ_PER_MEL
    log = _BREAK_HZ * np.exp(_LOG_STEP * (np.maximum(mel, _BREAK_MEL) - _BREAK_MEL))
    return np.where(mel >= _BREAK_MEL, log, linear)


def mel_filterbank(rate: float, n_fft: int = N_FFT, n_mels: int = N_MELS, fmin: float = FMIN,
                   fmax: float | None = None) -> Tensor:
    """(n_mels, n_fft // 2 + 1) float32 weights of the STFT bins (bin k at k · rate / n_fft Hz): filter i is the
    triangle over [f_i, f_{i+2}] peaking at f_{i+1}, where f_0 … f_{n_mels+1} are equally spaced in mel from fmin
    to fmax (default rate / 2), scaled to area 1 in Hz (height 2 / (f_{i+2} − f_i): Slaney's normalisation).
    librosa's ``filters.mel`` with its defaults (htk=False, norm="slaney")."""
    fmax = rate / 2 if fmax is None else fmax
    if not 0 <= fmin < fmax:
        raise ValueError(f"mel_filterbank: expected 0 <= fmin < fmax, got fmin {fmin}, fmax {fmax}")
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    bins = np.linspace(0.0, rate / 2, n_fft // 2 + 1)
    lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins - lower) / (center - lower)
    falling = (upper - bins) / (upper - center)
    weights = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (upper - lower))
    return torch.from_numpy(weights.astype(np.float32))


_FILTERBANKS: dict[float, Tensor] = {}


def _filterbank(rate: float) -> Tensor:
    if rate not in _FILTERBANKS:
        _FILTERBANKS[rate] = mel_filterbank(rate)
    return _FILTERBANKS[rate]


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(samples float32 (L,) in [-1, 1), sample rate) of a WAV file, as ``librosa.load(path, sr=None)`` gives
    them: integer PCM scaled by its full range, channels averaged; ValueError naming the file when it cannot be
    read as WAV or holds no sample."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", wavfile.WavFileWarning)  # chunks scipy skips (LIST, ...)
            rate, data = wavfile.read(path)
    except (ValueError, EOFError, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise ValueError(f"{path}: not a readable WAV file ({err})") from None
    if data.dtype == np.uint8:
        samples = (data.astype(np.float32) - 128.0) / 128.0
    elif np.issubdtype(data.dtype, np.integer):
        samples = data.astype(np.float32) / float(2 ** (8 * data.dtype.itemsize - 1))
    else:
        samples = data.astype(np.float32)
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    if samples.size == 0:
        raise ValueError(f"{path}: a WAV file without samples")
    return np.ascontiguousarray(samples, dtype=np.float32), int(rate)


def mel_spectrogram(waves: Tensor, rate: float) -> Tensor:
    """Magnitude mel spectrogram (batch, 80, 1 + ⌊L / 128⌋), float64, of ``waves`` (batch, L): reflect padding of
    512, periodic Hann window of 1 024, hop 128, |STFT| through :func:`mel_filterbank` (librosa 0.8's
    ``melspectrogram(n_fft=1024, hop_length=128, power=1, n_mels=80, fmin=40, fmax=rate/2)``). In float64: the
    80 dB that :func:`log_mel` keeps span 8 decades of magnitude, below float32's resolution (torch's float32 FFT
    leaves rounding noise near −74 dB where librosa's float32 path, like float64, reaches the −80 dB floor)."""
    waves = waves.to(torch.float64)
    # numpy's reflect (as librosa's np.pad) also pads a clip shorter than the 512 samples, which torch's refuses
    padded = np.pad(waves.numpy(), ((0, 0), (N_FFT // 2, N_FFT // 2)), mode="reflect")
    window = torch.hann_window(N_FFT, periodic=True, dtype=torch.float64)
    spectrum = torch.stft(torch.from_numpy(padded), N_FFT, HOP, window=window, center=False, return_complex=True)
    return _filterbank(rate).to(torch.float64) @ spectrum.abs()


def log_mel(waves: Tensor, rate: float) -> Tensor:
    """:func:`mel_spectrogram` in dB relative to each clip's largest value (``power_to_db(ref=np.max)``: 10 log10
    of max(S, 1e-10), 0 dB at the clip's maximum), floored at 80 dB below the clip's largest dB value."""
    db = 10.0 * torch.log10(mel_spectrogram(waves, rate).clamp_min(AMIN))
    db = db - db.amax(dim=(1, 2), keepdim=True)  # = − 10 log10(max(AMIN, max S)): log10 is increasing
    return torch.maximum(db, db.amax(dim=(1, 2), keepdim=True) - TOP_DB)


def clip_features(waves: Tensor, rate: float) -> Tensor:
    """The model's inputs (batch, 126, 80), float32, of clips ``waves`` (batch, L) of one length: :func:`log_mel`
    cut or zero-padded to 126 frames, z-scored over each clip's values, time first."""
    db = log_mel(waves, rate)
    frames = db.shape[-1]
    if frames < FRAMES:
        db = torch.cat([db, db.new_zeros(db.shape[0], N_MELS, FRAMES - frames)], dim=-1)
    db = db[..., :FRAMES]
    flat = db.reshape(db.shape[0], -1)
    mean, std = flat.mean(1, keepdim=True), flat.std(1, keepdim=True)
    flat = torch.where(std != 0, (flat - mean) / torch.where(std != 0, std, torch.ones_like(std)), flat)
    return flat.reshape(db.shape).transpose(1, 2).to(torch.float32).contiguous()


def find_dataset(root: str | Path | None) -> Path:
    """The dataset folder (holding both list files) among ``root``, ``root/speech_commands_v0.02`` and
    ``root/raw``; FileNotFoundError naming the folders searched."""
    root = local_root(root, "the google12 task reads the Speech Commands v2 folder")
    folders = [root / name if name else root for name in FOLDERS]
    for folder in folders:
        if all((folder / name).is_file() for name in LISTS.values()):
            return folder
    raise FileNotFoundError(
        f"google12: no folder with {LISTS['valid']} and {LISTS['test']} under --data-root {str(root)!r} (searched "
        f"{', '.join(map(str, folders))}); extract speech_commands_v0.02.tar.gz there -- odelab never downloads")


def _read_list(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def list_clips(folder: Path) -> list[tuple[str, int, str]]:
    """(path relative to ``folder`` with ``/``, class, split) of every clip, in the official loader's order: the
    sub-folders sorted, then their files sorted (``os.walk``); ValueError / FileNotFoundError for list files that
    name a file twice or a missing one."""
    listed = {split: _read_list(folder / name) for split, name in LISTS.items()}
    both = set(listed["valid"]) & set(listed["test"])
    if both:
        raise ValueError(f"google12: {len(both)} file(s) listed in both {LISTS['valid']} and {LISTS['test']}, e.g. "
                         f"{sorted(both)[0]!r}")
    split_of = {path: split for split in ("valid", "test") for path in listed[split]}
    clips = []
    for word in sorted(os.listdir(folder)):
        top = folder / word
        if not top.is_dir():
            continue
        for directory, _, names in sorted(os.walk(top)):
            for name in sorted(names):
                if name.endswith(AUDIO_EXTENSIONS):
                    relative = Path(directory, name).relative_to(folder).as_posix()
                    clips.append((relative, class_index(word), split_of.get(relative, "train")))
    present = {clip[0] for clip in clips}
    for split, paths in listed.items():
        missing = [p for p in paths if p not in present]
        if missing:
            raise FileNotFoundError(f"google12: {len(missing)} file(s) of {folder / LISTS[split]} are not in "
                                    f"{folder}, e.g. {missing[0]!r} (a partly extracted archive?)")
    return clips


def fingerprint(folder: Path, clips: list[tuple[str, int, str]]) -> str:
    """sha256 of every clip's path, size and modification time (whole seconds) and of both list files."""
    digest = hashlib.sha256()
    for name in LISTS.values():
        digest.update((folder / name).read_bytes())
    for relative, _, _ in clips:
        stat = (folder / relative).stat()
        digest.update(f"{relative}\t{stat.st_size}\t{int(stat.st_mtime)}\n".encode())
    return digest.hexdigest()


def compute_features(folder: Path, clips: list[tuple[str, int, str]], progress: bool = True,
                     chunk: int = 32) -> dict:
    """``{split: (inputs (n, 126, 80) float32, targets (n,) int64)}`` and ``files``: ``{split: [relative paths]}``
    of ``clips`` (:func:`list_clips`), read and featurised ``chunk`` clips at a time (those of one rate and length
    batched)."""
    rows = {split: [i for i, clip in enumerate(clips) if clip[2] == split] for split in SPLITS}
    place = {i: (split, row) for split in SPLITS for row, i in enumerate(rows[split])}
    inputs = {split: torch.empty(len(rows[split]), FRAMES, N_MELS) for split in SPLITS}
    bar = tqdm(total=len(clips), desc="google12 features", unit="clip", disable=not progress, file=sys.stderr)
    for start in range(0, len(clips), chunk):
        groups: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}
        for i in range(start, min(start + chunk, len(clips))):
            samples, rate = read_wav(folder / clips[i][0])
            groups.setdefault((rate, samples.size), []).append((i, samples))
        for (rate, _), members in groups.items():
            batch = clip_features(torch.from_numpy(np.stack([samples for _, samples in members])), rate)
            for (i, _), features in zip(members, batch):
                split, row = place[i]
                inputs[split][row] = features
        bar.update(min(start + chunk, len(clips)) - start)
    bar.close()
    data = {split: (inputs[split], torch.tensor([clips[i][1] for i in rows[split]], dtype=torch.int64))
            for split in SPLITS}
    data["files"] = {split: [clips[i][0] for i in rows[split]] for split in SPLITS}
    return data


def speech_commands(path: str | Path | None, seed: int = 1234, train_size: int | None = None,
                    progress: bool = True) -> dict:
    """Google12 from the Speech Commands v2 folder under ``path`` (see the module docstring):
    ``{"train"|"valid"|"test": (inputs (n, 126, 80) float32, targets (n,) int64), "files": {split: [paths]},
    "meta": {...}}``; the features come from the cache, or are computed and cached on the first call."""
    folder = find_dataset(path)
    clips = list_clips(folder)
    if not clips:
        raise FileNotFoundError(f"google12: no .wav file in the sub-folders of {folder}")
    config = {"task": "google12", "version": 1, "features": FEATURES, "data": fingerprint(folder, clips)}
    tic = time.perf_counter()
    computed = []

    def build() -> dict:
        computed.append(True)
        if progress:
            print(f"google12: computing the features of {len(clips)} clips once (cached under {cache_dir()})",
                  file=sys.stderr, flush=True)
        return compute_features(folder, clips, progress)

    stored = cached("google12", config, build)
    counts = {split: len(stored[split][1]) for split in SPLITS}
    x_train, y_train = stored["train"]
    train_files = stored["files"]["train"]
    if train_size is not None:
        if not isinstance(train_size, int) or not 1 <= train_size <= counts["train"]:
            raise ValueError(f"train_size: expected an integer in 1 … {counts['train']} (the training clips), got "
                             f"{train_size!r}")
        keep = torch.randperm(counts["train"], generator=torch.Generator().manual_seed(seed))[:train_size].sort()[0]
        x_train, y_train, train_files = x_train[keep], y_train[keep], [train_files[i] for i in keep.tolist()]
    by_class = {split: torch.bincount(stored[split][1], minlength=CLASSES).tolist() for split in SPLITS}
    notes = [f"split {counts['train']} / {counts['valid']} / {counts['test']} clips (the rest / {LISTS['valid']} / "
             f"{LISTS['test']}); silence: {by_class['train'][SILENCE]} background-noise file(s), first 126 frames, "
             f"training only (the official loader)"]
    if train_size is not None:
        notes.append(f"training on {train_size} of the {counts['train']} training clips (drawn with seed {seed})")
    if computed:
        notes.append(f"features computed in {time.perf_counter() - tic:.0f} s and cached")
    return {"train": (x_train, y_train), "valid": stored["valid"], "test": stored["test"],
            "files": {"train": train_files, "valid": stored["files"]["valid"], "test": stored["files"]["test"]},
            "meta": {"folder": str(folder), "class_names": list(CLASS_NAMES), "clips_per_class": by_class,
                     "notes": notes}}
