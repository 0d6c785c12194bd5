"""Google12 from a local Speech Commands v2 folder (Rusch et al. 2022, LEM, §3.6): a tiny data set in the archive's
layout written here (2 clips per keyword, 6 of two other words, 2 background-noise files, the list files); the
class mapping and the split written out by hand, the mel filterbank against its closed form, the features against
an independent numpy computation, a pure tone's energy in its mel band and values of the official librosa
pipeline, the cache, the errors, the task's protocol and one ``odelab fit google12`` run."""
import json
import math
import os
import time

import numpy as np
import pytest
import torch
from scipy.io import wavfile

from odelab.cli import main
from odelab.data import speech_commands as sc
from odelab.data.speech_commands import (CLASS_NAMES, class_index, clip_features, hz_to_mel, list_clips, log_mel,
                                         mel_filterbank, mel_spectrogram, mel_to_hz, read_wav, speech_commands)
from odelab.data.tasks import TASKS, settings
from odelab.training import FitSpec

RATE = 16000
KEYWORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
# (folder, file name, samples): every clip of the tiny data set
FILES = ([(word, f"{i:02d}a{k}_nohash_{k}.wav", 16000) for i, word in enumerate(KEYWORDS) for k in (0, 1)]
         + [("bed", "b1_nohash_0.wav", 16000), ("bed", "b2_nohash_0.wav", 9000), ("bed", "b3_nohash_0.wav", 16000),
            ("bed", "b4_nohash_0.wav", 16000),
            ("marvin", "m1_nohash_0.wav", 16000), ("marvin", "m2_nohash_0.wav", 16000),
            ("_background_noise_", "running_tap.wav", 3 * RATE), ("_background_noise_", "white_noise.wav", 3 * RATE)])
VALIDATION = ["yes/00a1_nohash_1.wav", "go/09a0_nohash_0.wav", "bed/b1_nohash_0.wav"]
TESTING = ["no/01a0_nohash_0.wav", "stop/08a1_nohash_1.wav", "bed/b3_nohash_0.wav", "marvin/m1_nohash_0.wav"]
# the class and split of every clip, in the official loader's order (folders sorted: "_" before the letters)
EXPECTED = [
    ("_background_noise_/running_tap.wav", 1, "train"), ("_background_noise_/white_noise.wav", 1, "train"),
    ("bed/b1_nohash_0.wav", 0, "valid"), ("bed/b2_nohash_0.wav", 0, "train"), ("bed/b3_nohash_0.wav", 0, "test"),
    ("bed/b4_nohash_0.wav", 0, "train"),
    ("down/03a0_nohash_0.wav", 5, "train"), ("down/03a1_nohash_1.wav", 5, "train"),
    ("go/09a0_nohash_0.wav", 11, "valid"), ("go/09a1_nohash_1.wav", 11, "train"),
    ("left/04a0_nohash_0.wav", 6, "train"), ("left/04a1_nohash_1.wav", 6, "train"),
    ("marvin/m1_nohash_0.wav", 0, "test"), ("marvin/m2_nohash_0.wav", 0, "train"),
    ("no/01a0_nohash_0.wav", 3, "test"), ("no/01a1_nohash_1.wav", 3, "train"),
    ("off/07a0_nohash_0.wav", 9, "train"), ("off/07a1_nohash_1.wav", 9, "train"),
    ("on/06a0_nohash_0.wav", 8, "train"), ("on/06a1_nohash_1.wav", 8, "train"),
    ("right/05a0_nohash_0.wav", 7, "train"), ("right/05a1_nohash_1.wav", 7, "train"),
    ("stop/08a0_nohash_0.wav", 10, "train"), ("stop/08a1_nohash_1.wav", 10, "test"),
    ("up/02a0_nohash_0.wav", 4, "train"), ("up/02a1_nohash_1.wav", 4, "train"),
    ("yes/00a0_nohash_0.wav", 2, "train"), ("yes/00a1_nohash_1.wav", 2, "valid"),
]


def tone(index: int, samples: int) -> np.ndarray:
    """A tone of 200 + 37·index Hz plus a little noise, int16 (the file's identity is its frequency)."""
    t = np.arange(samples) / RATE
    noise = np.random.default_rng(index).standard_normal(samples)
    return (8000 * np.sin(2 * np.pi * (200 + 37 * index) * t) + 300 * noise).astype(np.int16)


def write_dataset(root):
    """The tiny data set in ``root/speech_commands_v0.02``; noise files: white_noise.wav as float32, the rest int16."""
    folder = root / "speech_commands_v0.02"
    for index, (word, name, samples) in enumerate(FILES):
        (folder / word).mkdir(parents=True, exist_ok=True)
        data = tone(index, samples)
        if name == "white_noise.wav":
            data = np.random.default_rng(99).uniform(-0.5, 0.5, samples).astype(np.float32)
        wavfile.write(folder / word / name, RATE, data)
    (folder / "_background_noise_" / "README.md").write_text("noise recordings\n")
    (folder / "LICENSE").write_text("CC-BY-4.0\n")
    (folder / "validation_list.txt").write_text("".join(f"{p}\n" for p in VALIDATION))
    (folder / "testing_list.txt").write_text("".join(f"{p}\n" for p in TESTING))
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ---------------------------------------------------------------------------------------------------------------
# an independent computation, written from the definitions: Slaney's mel scale in closed form, the triangles by
# linear interpolation, numpy's FFT of explicitly framed windows


def closed_form_mel(hz):
    hz = np.asarray(hz, dtype=np.float64)
    return np.where(hz < 1000, 3 * hz / 200, 15 + 27 * np.log(np.maximum(hz, 1e-9) / 1000) / np.log(6.4))


def closed_form_hz(mel):
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel < 15, 200 * mel / 3, 1000 * 6.4 ** ((mel - 15) / 27))


def closed_form_filterbank(rate=RATE, n_fft=1024, n_mels=80, fmin=40.0):
    edges = closed_form_hz(np.linspace(closed_form_mel(fmin), closed_form_mel(rate / 2), n_mels + 2))
    bins = np.arange(n_fft // 2 + 1) * rate / n_fft
    return np.stack([np.interp(bins, edges[i:i + 3], [0, 2 / (edges[i + 2] - edges[i]), 0], left=0, right=0)
                     for i in range(n_mels)]), edges


def numpy_features(samples: np.ndarray, rate=RATE) -> np.ndarray:
    x = np.pad(samples.astype(np.float64), 512, mode="reflect")
    frames = 1 + (len(x) - 1024) // 128
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(1024) / 1024)  # periodic Hann
    spectra = np.abs(np.fft.rfft(np.stack([x[128 * f:128 * f + 1024] * window for f in range(frames)]), axis=1))
    mel = closed_form_filterbank(rate)[0] @ spectra.T  # (80, frames)
    db = 10 * np.log10(np.maximum(mel, 1e-10)) - 10 * np.log10(max(1e-10, mel.max()))
    db = np.maximum(db, db.max() - 80)
    db = np.concatenate([db, np.zeros((80, max(0, 126 - frames)))], axis=1)[:, :126]
    return ((db - db.mean()) / db.std(ddof=1)).T


# ---------------------------------------------------------------------------------------------------------------


def test_slaney_mel_scale():
    assert float(hz_to_mel(1000.0)) == pytest.approx(15.0) and float(hz_to_mel(6400.0)) == pytest.approx(42.0)
    assert float(hz_to_mel(200.0)) == pytest.approx(3.0)  # 3 mels per 200 Hz below 1 kHz
    hz = np.array([0.0, 40.0, 500.0, 999.0, 1000.0, 1001.0, 3000.0, 8000.0])
    np.testing.assert_allclose(hz_to_mel(hz), closed_form_mel(hz), rtol=1e-12)
    np.testing.assert_allclose(mel_to_hz(hz_to_mel(hz)), hz, rtol=1e-12, atol=1e-9)


def test_filterbank_is_area_normalised_triangles_on_the_mel_scale():
    bank = mel_filterbank(RATE)
    expected, edges = closed_form_filterbank()
    assert bank.shape == (80, 513) and bank.dtype == torch.float32 and bool((bank >= 0).all())
    np.testing.assert_allclose(bank.numpy(), expected, rtol=1e-5, atol=1e-9)
    # edges equally spaced in mel from 40 Hz to 8 kHz; filter i rises on [f_i, f_i+1], falls on [f_i+1, f_i+2]
    np.testing.assert_allclose(np.diff(closed_form_mel(edges)), np.diff(closed_form_mel(edges))[0], rtol=1e-9)
    assert edges[0] == pytest.approx(40.0) and edges[-1] == pytest.approx(8000.0)
    assert bank[0, :3].tolist() == [0.0, 0.0, 0.0] and bank[0, 3] > 0  # bins 0, 15.6, 31.3 Hz lie below 40 Hz
    wide = slice(40, 79)  # triangles many bins wide: the area (sum × bin width) is 1
    np.testing.assert_allclose(bank[wide].double().sum(1).numpy() * RATE / 1024, 1.0, rtol=0.02)
    # librosa.filters.mel(sr=16000, n_fft=1024, n_mels=80, fmin=40, fmax=8000) (librosa 0.11, run once offline)
    assert float(bank.double().sum()) == pytest.approx(5.12094058289631, rel=1e-6)
    assert float(bank[0, 3]) == pytest.approx(0.005091750994324684, rel=1e-6)
    assert float(bank[40].max()) == pytest.approx(0.013387206941843033, rel=1e-6) and int(bank[40].argmax()) == 112


def test_a_pure_tone_lands_in_the_mel_band_of_its_frequency():
    """A sinusoid at an STFT bin's frequency b·rate/1024: inside the clip, every frame's periodic-Hann spectrum is
    A·1024/4 at bin b and A·1024/8 at b ± 1, zero elsewhere; so the mel energies are those three bins through the
    closed-form triangles, and the largest is the filter whose peak is nearest."""
    expected_bank, edges = closed_form_filterbank()
    k = 50
    b = round(edges[k + 1] * 1024 / RATE)  # the STFT bin nearest filter k's peak
    amplitude = 0.3
    wave = amplitude * np.sin(2 * np.pi * b * RATE / 1024 * np.arange(RATE) / RATE + 0.7)
    mel = mel_spectrogram(torch.from_numpy(wave)[None], RATE)[0]
    assert mel.shape == (80, 126)
    magnitude = np.zeros(513)
    magnitude[b], magnitude[b - 1], magnitude[b + 1] = amplitude * 256, amplitude * 128, amplitude * 128
    for frame in (20, 63, 110):  # frames away from the reflect-padded ends
        np.testing.assert_allclose(mel[:, frame].numpy(), expected_bank @ magnitude, rtol=1e-5, atol=1e-9)
        assert int(mel[:, frame].argmax()) == k
    db = log_mel(torch.from_numpy(wave)[None], RATE)[0]  # dB relative to the clip's largest value, floor −80
    relative = 10 * np.log10(np.maximum(expected_bank @ magnitude, 1e-10) / float(mel.max()))
    np.testing.assert_allclose(db[:, 63].numpy(), np.maximum(relative, -80.0), atol=1e-6)
    assert float(db.max()) == 0.0 and float(db.min()) == -80.0


def test_features_match_an_independent_computation():
    rng = np.random.default_rng(3)
    full = (0.2 * rng.standard_normal(RATE) * np.sin(np.linspace(0, 3, RATE)) ** 2).astype(np.float32)
    for samples in (full, full[:9000], np.concatenate([full, full])):  # 126 frames; 71 padded; 251 cut
        features = clip_features(torch.from_numpy(samples)[None], RATE)[0]
        assert features.shape == (126, 80) and features.dtype == torch.float32
        np.testing.assert_allclose(features.numpy(), numpy_features(samples), rtol=0, atol=2e-5)
    short = clip_features(torch.from_numpy(full[:9000])[None], RATE)[0]  # 1 + 9000 // 128 = 71 frames, then 0 dB
    assert torch.all(short[71:] == short[71, 0]) and not torch.all(short[70] == short[71, 0])
    assert float(short.mean()) == pytest.approx(0.0, abs=1e-5) and float(short.std()) == pytest.approx(1.0, abs=1e-5)
    silent = clip_features(torch.zeros(1, RATE), RATE)[0]  # all 0 dB: a zero deviation, left alone
    assert torch.equal(silent, torch.zeros(126, 80))


def test_features_match_the_official_librosa_pipeline():
    """librosa.feature.melspectrogram(y, sr=16000, n_fft=1024, hop_length=128, power=1.0, n_mels=80, fmin=40,
    fmax=8000, pad_mode="reflect"), power_to_db(ref=np.max), z-scored as the official spect_loader (librosa 0.11,
    run once offline; its pad_mode given explicitly: librosa 0.8.1's default, 0.10's is "constant")."""
    t = np.arange(RATE) / RATE
    chirp = 0.5 * np.sin(2 * np.pi * (300 * t + 1500 * t ** 2)) + 0.1 * np.sin(2 * np.pi * 3000 * t)
    chirp = chirp.astype(np.float32)
    features = clip_features(torch.from_numpy(chirp)[None], RATE)[0]  # (time, mel)
    official = {(0, 0): 2.2320704460144043, (10, 5): 0.8553093075752258, (63, 10): -0.6102981567382812,
                (63, 40): 2.4940848350524902, (100, 60): -0.20965392887592316, (125, 79): 1.324367880821228}
    for (frame, band), value in official.items():
        assert float(features[frame, band]) == pytest.approx(value, abs=2e-6)
    assert float(log_mel(torch.from_numpy(chirp)[None], RATE)[0, 10, 63]) == pytest.approx(-67.18669128417969, abs=1e-4)
    short = clip_features(torch.from_numpy(chirp[:9000])[None], RATE)[0]
    assert float(short[30, 20]) == pytest.approx(-0.06210687384009361, abs=2e-6)
    assert float(short[100, 20]) == pytest.approx(0.9537471532821655, abs=2e-6)  # a padded frame


def test_read_wav_scales_like_librosa(tmp_path):
    wavfile.write(tmp_path / "a.wav", RATE, np.array([-32768, 0, 16384, 32767], dtype=np.int16))
    samples, rate = read_wav(tmp_path / "a.wav")
    assert rate == RATE and samples.dtype == np.float32
    assert samples.tolist() == [-1.0, 0.0, 0.5, 32767 / 32768]
    wavfile.write(tmp_path / "u8.wav", 8000, np.array([0, 128, 192], dtype=np.uint8))
    assert read_wav(tmp_path / "u8.wav")[0].tolist() == [-1.0, 0.0, 0.5]
    wavfile.write(tmp_path / "i32.wav", RATE, np.array([-2 ** 31, 2 ** 30], dtype=np.int32))
    assert read_wav(tmp_path / "i32.wav")[0].tolist() == [-1.0, 0.5]
    stereo = np.array([[0.5, -0.5], [0.25, 0.75]], dtype=np.float32)  # (samples, channels): averaged
    wavfile.write(tmp_path / "s.wav", RATE, stereo)
    assert read_wav(tmp_path / "s.wav")[0].tolist() == [0.0, 0.5]
    wavfile.write(tmp_path / "empty.wav", RATE, np.zeros(0, dtype=np.int16))
    with pytest.raises(ValueError, match="empty.wav: a WAV file without samples"):
        read_wav(tmp_path / "empty.wav")
    (tmp_path / "bad.wav").write_bytes(b"not a wave file at all")
    with pytest.raises(ValueError, match="bad.wav: not a readable WAV file"):
        read_wav(tmp_path / "bad.wav")


def test_class_mapping_and_split_are_the_official_ones(tmp_path):
    assert CLASS_NAMES == ("unknown", "silence") + KEYWORDS
    assert [class_index(w) for w in ("bed", "_background_noise_", "yes", "go", "silence", "_unknown_")] == \
        [0, 1, 2, 11, 1, 0]
    folder = write_dataset(tmp_path)
    assert list_clips(folder) == EXPECTED  # README.md, LICENSE and the list files are no clips


def test_loads_splits_and_caches_the_features(tmp_path, cache, monkeypatch):
    folder = write_dataset(tmp_path)
    data = speech_commands(tmp_path, progress=False)  # the parent of speech_commands_v0.02
    for split in ("train", "valid", "test"):
        expected = [(path, label) for path, label, s in EXPECTED if s == split]
        x, y = data[split]
        assert data["files"][split] == [path for path, _ in expected]
        assert y.tolist() == [label for _, label in expected] and y.dtype == torch.int64
        assert x.shape == (len(expected), 126, 80) and x.dtype == torch.float32
        for row, (path, _) in enumerate(expected):  # every row is its own file's features
            samples, rate = read_wav(folder / path)
            assert torch.allclose(x[row], clip_features(torch.from_numpy(samples)[None], rate)[0], atol=1e-6)
    assert [len(data[s][1]) for s in ("train", "valid", "test")] == [21, 3, 4]
    row = data["files"]["train"].index("_background_noise_/running_tap.wav")  # silence: the first 126 frames
    long_features = numpy_features(read_wav(folder / "_background_noise_/running_tap.wav")[0])
    np.testing.assert_allclose(data["train"][0][row].numpy(), long_features, atol=2e-5)
    meta = data["meta"]
    assert meta["class_names"] == list(CLASS_NAMES) and meta["clips_per_class"]["train"][1] == 2
    assert "split 21 / 3 / 4 clips" in meta["notes"][0]
    assert len(list(cache.glob("google12-*.pt"))) == 1

    monkeypatch.setattr(sc, "compute_features", lambda *a, **k: pytest.fail("computed again, not read from the cache"))
    again = speech_commands(folder, progress=False)  # the folder itself
    assert all(torch.equal(again[s][0], data[s][0]) for s in ("train", "valid", "test"))
    subset = speech_commands(folder, seed=5, train_size=4, progress=False)
    keep = torch.randperm(21, generator=torch.Generator().manual_seed(5))[:4].sort()[0]
    assert torch.equal(subset["train"][0], data["train"][0][keep])
    assert subset["files"]["train"] == [data["files"]["train"][i] for i in keep.tolist()]
    assert torch.equal(subset["test"][0], data["test"][0]) and "training on 4 of the 21" in subset["meta"]["notes"][1]
    with pytest.raises(ValueError, match=r"train_size: expected an integer in 1 … 21"):
        speech_commands(folder, train_size=22, progress=False)

    monkeypatch.undo()
    monkeypatch.setenv("ODELAB_CACHE", str(cache))
    path = folder / "up" / "02a0_nohash_0.wav"  # a changed file: computed again, under another key
    wavfile.write(path, RATE, tone(0, 12000))
    stamp = time.time() + 5
    os.utime(path, (stamp, stamp))
    changed = speech_commands(folder, progress=False)
    assert len(list(cache.glob("google12-*.pt"))) == 2
    row = changed["files"]["train"].index("up/02a0_nohash_0.wav")
    assert not torch.allclose(changed["train"][0][row], data["train"][0][row])


def test_missing_or_inconsistent_files_are_named(tmp_path, cache):
    with pytest.raises(ValueError, match="--data-root PATH"):
        speech_commands(None)
    with pytest.raises(FileNotFoundError, match="no folder with validation_list.txt and testing_list.txt"):
        speech_commands(tmp_path)
    folder = write_dataset(tmp_path)
    (folder / "marvin" / "m1_nohash_0.wav").unlink()
    with pytest.raises(FileNotFoundError, match=r"1 file\(s\) of .*testing_list.txt .* 'marvin/m1_nohash_0.wav'"):
        speech_commands(folder, progress=False)
    write_dataset(tmp_path)
    (folder / "testing_list.txt").write_text("".join(f"{p}\n" for p in TESTING + VALIDATION[:1]))
    with pytest.raises(ValueError, match="listed in both .* 'yes/00a1_nohash_1.wav'"):
        speech_commands(folder, progress=False)


def test_the_task_follows_the_paper():
    task = TASKS["google12"]
    assert settings(task, "paper", "lem") == dict(hidden_size=128, epochs=60, lr=8.9e-4, batch_size=100,
                                                  lr_milestones=(50,), input_dropout=0.03, variational_dropout=False,
                                                  readout_init="default")
    assert settings(task, "quick", "lem") == dict(hidden_size=32, epochs=2, lr=8.9e-4, batch_size=100)
    assert task.classes == 12 and task.target == "last" and task.loss == "cross_entropy" and task.plot == "classes"
    assert task.options == {"path": "data_root", "train_size": "train_size"}
    assert task.model_options("lem", {}) == {}  # Δt = 1, LEM's default
    assert FitSpec("google12", preset="paper").head(task) == {"input_dropout": 0.03, "variational_dropout": False,
                                                              "readout_init": "default"}
    hidden, config = FitSpec("google12", preset="paper").config(task)
    assert hidden == 128 and config.lr_at(49) == pytest.approx(8.9e-4) and config.lr_at(50) == pytest.approx(8.9e-5)
    assert math.isclose(config.lr_at(59), 8.9e-5) and config.clip is None


def test_cli_fit_google12_on_tiny_files(tmp_path, cache, capsys):
    write_dataset(tmp_path / "data")
    out = tmp_path / "run"
    argv = ["fit", "google12", "--data-root", str(tmp_path / "data"), "--preset", "paper", "--hidden", "3",
            "--epochs", "1", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "google12 features" not in captured.err  # --no-progress reaches the loader's bar
    assert "train (21, 126, 80), valid (3, 126, 80), test (4, 126, 80)" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["config"]["batch_size"] == 100 and result["test_sequences"] == 4
    assert result["baselines"]["majority class"] == pytest.approx(2 / 4)  # "unknown": bed and marvin of 4
    assert (out / "predictions.png").exists()
