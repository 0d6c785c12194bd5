"""nCIFAR / sCIFAR from local CIFAR-10 python batches (Rusch et al. 2022, §3.2; Erichson et al. 2025, §5): tiny files
written here (5 × 10 training and 20 test images), in the folder or its parent; the row and pixel layouts against
the official expression, the fixed noise tail (never padded into the data), the split, the refused pickles and
errors, the tasks' protocol and ``odelab fit`` runs."""
import json
import os
import pickle
import struct

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.data.cifar import (FOLDER, NOISE_SEED, TEST_FILE, TRAIN_FILES, ArrayUnpickler, cifar, ncifar, noise_tail,
                               read_batch, scifar)
from odelab.data.mnist import majority_class_accuracy
from odelab.data.tasks import TASKS, settings

PER_BATCH, TEST = 10, 20


class Python2Pickler(pickle._Pickler):
    """Pickles as Python 2's cPickle wrote the CIFAR-10 files: str and bytes as BINSTRING (no ``_codecs.encode``),
    numpy's module as ``numpy.core`` (see :func:`python2_pickle`)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_string(self, obj):
        raw = obj.encode("latin-1") if isinstance(obj, str) else obj
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(obj)

    dispatch[str] = save_string
    dispatch[bytes] = save_string


def python2_pickle(obj) -> bytes:
    import io

    buffer = io.BytesIO()
    Python2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue().replace(b"cnumpy._core.", b"cnumpy.core.")  # GLOBAL opcodes: 'c' module '\n' name


def write_batch(path, images, labels, python2=False):
    batch = {b"batch_label": b"batch", b"labels": [int(v) for v in labels], b"data": images,
             b"filenames": [b"x.png"] * len(labels)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(python2_pickle(batch) if python2 else pickle.dumps(batch))


def write_cifar(folder, python2=False):
    """Random images whose first byte (red, row 0, column 0) holds the image's index in the training set (0 … 49)
    or the test file (0 … 19); returns (training images, labels), (test images, labels)."""
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, (5 * PER_BATCH, 3072), dtype=np.uint8), rng.integers(0, 10, 5 * PER_BATCH)
    test = rng.integers(0, 256, (TEST, 3072), dtype=np.uint8), rng.integers(0, 10, TEST)
    train[0][:, 0], test[0][:, 0] = np.arange(5 * PER_BATCH), np.arange(TEST)
    for i, name in enumerate(TRAIN_FILES):
        part = slice(i * PER_BATCH, (i + 1) * PER_BATCH)
        write_batch(folder / name, train[0][part], train[1][part], python2)
    write_batch(folder / TEST_FILE, *test, python2)
    return train, test


def image_index(inputs):
    """Each nCIFAR sequence's index, from its step 0, feature 0 (red, row 0, column 0)."""
    return (inputs[:, 0, 0] * 255).round().long().tolist()


def official_rows(images):
    """The official code's steps: ToTensor's (n, 3, 32, 32) in [0, 1], ``permute(0, 2, 1, 3).reshape(n, 32, 96)``."""
    tensor = torch.from_numpy(images).reshape(-1, 3, 32, 32).to(torch.float32) / 255
    return tensor.permute(0, 2, 1, 3).reshape(len(images), 32, 96)


@pytest.mark.parametrize("parent", [False, True])
@pytest.mark.parametrize("python2", [False, True])
def test_reads_the_folder_or_its_parent_as_the_official_rows_in_0_1(tmp_path, parent, python2):
    train, test = write_cifar(tmp_path / FOLDER if parent else tmp_path, python2)
    data = ncifar(path=tmp_path)
    for split, count in (("train", 48), ("valid", 2), ("test", 20)):
        x, y = data[split]
        assert x.shape == (count, 32, 96) and x.dtype == torch.float32
        assert y.shape == (count,) and y.dtype == torch.int64
    assert torch.equal(data["test"][0], official_rows(test[0]))  # the test file in order, the official layout
    assert data["test"][1].tolist() == test[1].tolist()
    assert 0 <= float(data["train"][0].min()) and float(data["train"][0].max()) <= 1
    index = image_index(data["train"][0])
    assert torch.equal(data["train"][0], official_rows(train[0][index]))
    assert data["train"][1].tolist() == train[1][index].tolist()


def test_a_pixel_of_channel_k_row_r_column_c_is_where_each_layout_puts_it(tmp_path):
    train, test = write_cifar(tmp_path)
    images = np.zeros_like(test[0])
    images[3, 2 * 1024 + 32 * 5 + 17] = 255  # image 3: blue (k = 2), row 5, column 17
    write_batch(tmp_path / TEST_FILE, images, test[1])
    rows, pixels = ncifar(path=tmp_path)["test"][0], scifar(path=tmp_path)["test"][0]
    assert rows[3, 5, 32 * 2 + 17] == 1.0 and rows.sum() == 1.0  # step = row, feature 32 k + c
    assert pixels.shape == (20, 1024, 3)
    assert pixels[3, 32 * 5 + 17, 2] == 1.0 and pixels.sum() == 1.0  # step 32 r + c, feature k


def test_scifar_reads_pixel_by_pixel_with_no_noise(tmp_path):
    train, test = write_cifar(tmp_path)
    data = scifar(seed=5, path=tmp_path)
    expected = torch.from_numpy(test[0]).reshape(-1, 3, 1024).permute(0, 2, 1).to(torch.float32) / 255
    assert torch.equal(data["test"][0], expected)
    assert "suffix" not in data["meta"] and data["meta"]["sequence"] == "pixels"
    rows = ncifar(seed=5, path=tmp_path)  # the same split as nCIFAR
    assert torch.equal(data["train"][1], rows["train"][1]) and torch.equal(data["valid"][1], rows["valid"][1])


def test_the_noise_is_one_fixed_tail_in_meta_never_padded_into_the_data(tmp_path):
    write_cifar(tmp_path)
    state = torch.get_rng_state()
    first, second = ncifar(seed=1, path=tmp_path), ncifar(seed=2, path=tmp_path)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is left alone
    tail = first["meta"]["suffix"]
    assert tail.shape == (968, 96) and tail.dtype == torch.float32
    assert torch.equal(tail, torch.randn(968, 96, generator=torch.Generator().manual_seed(NOISE_SEED)))
    assert torch.equal(second["meta"]["suffix"], tail)  # independent of the run seed
    assert abs(float(tail.mean())) < 0.02 and abs(float(tail.std()) - 1) < 0.02  # N(0, 1)
    assert all(first[split][0].shape[1] == 32 for split in ("train", "valid", "test"))  # 32 steps, not 1000
    assert first["meta"]["noise"] == "gaussian" and "968 steps" in first["meta"]["notes"][0]
    # what the model reads, the images then the tail: the official torch.cat((rows, rands.repeat(n, 1, 1)), dim=1)
    x = first["test"][0]
    padded = torch.cat((x, tail.expand(len(x), -1, -1)), dim=1)
    assert padded.shape == (20, 1000, 96) and torch.equal(padded[:, 32:], tail.repeat(20, 1, 1))


def test_the_uniform_tail_is_in_0_1_and_a_bad_noise_is_refused_before_reading(tmp_path):
    write_cifar(tmp_path)
    tail = ncifar(path=tmp_path, noise="uniform")["meta"]["suffix"]
    assert torch.equal(tail, noise_tail("uniform"))
    assert torch.equal(tail, torch.rand(968, 96, generator=torch.Generator().manual_seed(NOISE_SEED)))
    assert 0 <= float(tail.min()) and float(tail.max()) < 1 and abs(float(tail.mean()) - 0.5) < 0.01
    with pytest.raises(ValueError, match="noise: expected one of gaussian, uniform, got 'normal'"):
        ncifar(path=None, noise="normal")  # before the missing folder


def test_the_split_is_1_in_25_for_validation_drawn_with_the_seed(tmp_path):
    write_cifar(tmp_path)
    data = ncifar(seed=7, path=tmp_path)
    train, valid = image_index(data["train"][0]), image_index(data["valid"][0])
    assert (len(train), len(valid)) == (48, 2) and sorted(train + valid) == list(range(50))  # 48 000 / 2 000
    drawn = torch.randperm(50, generator=torch.Generator().manual_seed(7)).tolist()  # the documented rule
    assert train == drawn[:48] and valid == drawn[48:]
    assert image_index(ncifar(seed=8, path=tmp_path)["train"][0]) != train
    subset = ncifar(seed=7, path=tmp_path, train_size=5)
    assert image_index(subset["train"][0]) == train[:5] and image_index(subset["valid"][0]) == valid
    assert len(subset["test"][0]) == 20
    other = cifar(tmp_path, seed=7, valid_size=10)
    assert len(other["valid"][0]) == 10 and image_index(other["valid"][0]) == drawn[40:]
    with pytest.raises(ValueError, match="train_size: expected an integer in 1 … 48"):
        ncifar(path=tmp_path, train_size=49)


def test_missing_files_are_named_with_the_folders_searched(tmp_path):
    with pytest.raises(ValueError, match="--data-root PATH"):
        ncifar(path=None)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        scifar(path=tmp_path / "nowhere")
    write_cifar(tmp_path / FOLDER)
    (tmp_path / FOLDER / "data_batch_4").unlink()
    with pytest.raises(FileNotFoundError) as error:
        ncifar(path=tmp_path)
    message = str(error.value)
    assert "missing 1 file(s)" in message and "data_batch_4" in message and "data_batch_3" not in message
    assert str(tmp_path / FOLDER) in message and "never downloads" in message


class Executes:
    def __reduce__(self):
        return os.getcwd, ()  # harmless here; a real attack would name os.system


def test_a_pickle_asking_for_anything_but_arrays_is_refused_unbuilt(tmp_path):
    write_cifar(tmp_path)
    path = tmp_path / "data_batch_2"
    path.write_bytes(pickle.dumps({b"data": Executes(), b"labels": []}))
    with pytest.raises(ValueError, match="refused to build posix.getcwd|refused to build nt.getcwd") as error:
        ncifar(path=tmp_path)
    assert str(path) in str(error.value)
    with pytest.raises(pickle.UnpicklingError, match="refused to build builtins.eval"):
        ArrayUnpickler(__import__("io").BytesIO(b"cbuiltins\neval\n(S'1'\ntR."), encoding="bytes").load()


@pytest.mark.parametrize("content, message", [
    (b"not a pickle", "not a CIFAR-10 python batch file"),
    (pickle.dumps([1, 2]), "a pickled list, not a dict"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 1]}), "CIFAR-100 file"),
    (pickle.dumps({b"data": np.zeros((2, 3071), np.uint8), b"labels": [0, 1]}), "expected uint8 images of shape"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}), "'data' is float32"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}), "1 labels for the 2 images"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}), "label 10, expected classes 0 … 9"),
])
def test_a_bad_batch_file_is_a_value_error_naming_it(tmp_path, content, message):
    path = tmp_path / TEST_FILE
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        read_batch(path)
    assert str(path) in str(error.value)


def test_str_keys_of_a_python_3_pickle_are_read_too(tmp_path):
    path = tmp_path / TEST_FILE
    path.write_bytes(pickle.dumps({"data": np.full((2, 3072), 7, np.uint8), "labels": np.array([3, 4])}))
    images, labels = read_batch(path)
    assert images.shape == (2, 3072) and labels.tolist() == [3, 4]


def test_the_tasks_follow_the_papers_protocol():
    ncifar_task, scifar_task = TASKS["ncifar"], TASKS["scifar"]
    assert settings(ncifar_task, "paper", "lem") == dict(hidden_size=128, epochs=120, lr=1.8e-3, batch_size=120,
                                                         lr_milestones=(100,))  # Rusch et al. 2022, Table 8
    assert ncifar_task.model_options("lem", {}) == {"dt": 0.95}
    assert ncifar_task.model_options("cornn", {}) == {"dt": 0.034, "gamma": 1.3, "epsilon": 12.7}
    assert ncifar_task.model_options("taugru", {}) == {"tau": 965.0} and ncifar_task.model_options("gru", {}) == {}
    assert settings(scifar_task, "paper", "taugru") == dict(hidden_size=128, epochs=50, lr=3.5e-3, batch_size=120)
    assert scifar_task.model_options("taugru", {}) == {"tau": 30.0} and scifar_task.model_options("lem", {}) == {}
    assert ncifar_task.options == {"path": "data_root", "train_size": "train_size", "noise": "padding_noise"}
    assert scifar_task.options == {"path": "data_root", "train_size": "train_size"}
    for task in (ncifar_task, scifar_task):
        assert settings(task, "quick", "gru")["hidden_size"] == 32 and settings(task, "quick", "gru")["epochs"] <= 2
        assert task.classes == 10 and task.target == "last" and task.loss == "cross_entropy" and task.plot == "classes"
        assert task.baselines == {"majority class": majority_class_accuracy}


def test_the_task_loaders_pass_their_options(tmp_path):
    write_cifar(tmp_path)
    data = TASKS["ncifar"].load(3, path=str(tmp_path), noise="uniform", train_size=4)
    assert len(data["train"][0]) == 4 and torch.equal(data["meta"]["suffix"], noise_tail("uniform"))
    assert image_index(data["valid"][0]) == image_index(ncifar(seed=3, path=tmp_path)["valid"][0])
    data = TASKS["scifar"].load(3, path=str(tmp_path), train_size=6)
    assert data["train"][0].shape == (6, 1024, 3)
    assert 0 <= majority_class_accuracy(data) <= 1


def test_cli_fit_scifar_on_tiny_files(tmp_path, capsys):
    write_cifar(tmp_path / "cifar" / FOLDER)
    out = tmp_path / "run"
    argv = ["fit", "scifar", "--data-root", str(tmp_path / "cifar"), "--model", "taugru", "--hidden", "4",
            "--epochs", "1", "--train-size", "8", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert "train (8, 1024, 3), valid (2, 1024, 3), test (20, 1024, 3)" in capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    assert result["model_options"] == {"tau": 30.0} and result["settings"]["train_size"] == 8
    assert result["test_sequences"] == 20 and 0 <= result["baselines"]["majority class"] <= 1


def test_cli_fit_ncifar_reads_1000_steps_from_32_with_the_tail_in_the_model(tmp_path, capsys):
    """End to end: the loader's 32-step images, the model's suffix buffer (odelab.models.SequenceRegressor)."""
    write_cifar(tmp_path / "cifar")
    out = tmp_path / "run"
    argv = ["fit", "ncifar", "--data-root", str(tmp_path / "cifar"), "--hidden", "4", "--epochs", "1",
            "--train-size", "8", "--batch-size", "4", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "train (8, 32, 96), valid (2, 32, 96), test (20, 32, 96)" in printed and "968 steps" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["model_options"] == {"dt": 0.95} and result["settings"]["noise"] == "gaussian"
    assert "suffix" not in result["data"] and result["test_sequences"] == 20
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert torch.equal(saved["model"]["suffix"], noise_tail("gaussian"))  # saved with the model: the same at test
    assert main(argv[:-1] + [str(tmp_path / "uniform"), "--padding-noise", "uniform"]) == 0
    saved = torch.load(tmp_path / "uniform" / "checkpoint.pt", weights_only=True)
    assert torch.equal(saved["model"]["suffix"], noise_tail("uniform"))


@pytest.mark.parametrize("argv, message", [
    (["fit", "ncifar"], "--data-root: the ncifar task reads its files from a local folder"),
    (["fit", "scifar", "--data-root", "x", "--train-size", "0"], "argument --train-size: expected an integer >= 1"),
    (["fit", "ncifar", "--data-root", "x", "--noise", "0.1"], "--noise: only for the task(s) frequency"),
    (["fit", "scifar", "--data-root", "x", "--padding-noise", "uniform"], "--padding-noise: only for the task(s) ncifar"),
])
def test_cli_refuses_a_missing_data_root_before_loading(argv, message, capsys, monkeypatch):
    for task in TASKS.values():
        monkeypatch.setattr(task, "load", lambda *a, **k: pytest.fail("data loaded"))
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_missing_files_are_one_line_naming_them(tmp_path, capsys):
    argv = ["fit", "scifar", "--data-root", str(tmp_path), "--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "missing 6 file(s)" in line and "data_batch_1" in line and "test_batch" in line
