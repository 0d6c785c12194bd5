"""sMNIST / psMNIST from local IDX files (Rusch et al. 2022, §3.2): tiny files written here (50 training and 20
test images), read plain or gzipped from the three layouts; row-major order, scaling, the official permutation,
the split, the errors, the tasks' protocol and one ``odelab fit smnist`` run."""
import gzip
import json

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.data.mnist import FILES, majority_class_accuracy, mnist, psmnist_permutation, split_sizes
from odelab.data.tasks import TASKS, settings
from odelab.training.reproduce import TABLES


def write_idx(path, array, gz=False):
    """``array`` (uint8) as an IDX file: magic 0x08 << 8 | dims, the sizes big-endian, the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    data = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with (gzip.open if gz else open)(str(path) + (".gz" if gz else ""), "wb") as fh:
        fh.write(data)


def write_mnist(folder, train=50, test=20, gz=False):
    """Random images whose pixel (0, 0) holds the image's index in its file; returns the arrays written."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, count in (("train", train), ("test", test)):
        images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        images[:, 0, 0] = np.arange(count)
        arrays[split] = images, rng.integers(0, 10, count, dtype=np.uint8)
    write_idx(folder / FILES["train_images"], arrays["train"][0], gz)
    write_idx(folder / FILES["train_labels"], arrays["train"][1], gz)
    write_idx(folder / FILES["test_images"], arrays["test"][0], gz)
    write_idx(folder / FILES["test_labels"], arrays["test"][1], gz)
    return arrays


def image_index(inputs):
    """The file index of each sequence, from its pixel (0, 0) (step 0 in row-major order)."""
    return (inputs[:, 0, 0] * 255).round().long().tolist()


@pytest.mark.parametrize("layout", ["", "raw", "MNIST/raw"])
@pytest.mark.parametrize("gz", [False, True])
def test_reads_the_three_layouts_plain_or_gzipped_as_row_major_pixels_in_0_1(tmp_path, layout, gz):
    arrays = write_mnist(tmp_path / layout if layout else tmp_path, gz=gz)
    data = mnist(tmp_path)
    for split, count in (("train", 48), ("valid", 2), ("test", 20)):
        x, y = data[split]
        assert x.shape == (count, 784, 1) and x.dtype == torch.float32
        assert y.shape == (count,) and y.dtype == torch.int64
    images, labels = arrays["test"]  # the test set keeps the file's order
    expected = torch.from_numpy(images.reshape(20, 784).astype(np.float32) / 255)
    assert torch.equal(data["test"][0][..., 0], expected) and data["test"][0].min() >= 0 and data["test"][0].max() <= 1
    assert data["test"][1].tolist() == labels.tolist()
    index = image_index(data["train"][0])
    assert data["train"][1].tolist() == arrays["train"][1][index].tolist()


def test_a_pixel_at_row_r_column_c_is_step_28_r_plus_c(tmp_path):
    arrays = write_mnist(tmp_path)
    images = arrays["test"][0]
    images[:] = 0
    images[3, 5, 17] = 255  # image 3, row 5, column 17
    write_idx(tmp_path / FILES["test_images"], images)
    x = mnist(tmp_path)["test"][0]
    assert x[3, 28 * 5 + 17, 0] == 1.0 and x.sum() == 1.0


def test_psmnist_is_the_official_permutation_of_the_row_major_sequence(tmp_path):
    write_mnist(tmp_path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5544)  # the official psMNIST_task.py: the seed, then its first draw
        official = torch.randperm(784)
    state = torch.get_rng_state()
    assert torch.equal(psmnist_permutation(), official)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is left alone
    rows, permuted = mnist(tmp_path), mnist(tmp_path, permuted=True)
    for split in ("train", "valid", "test"):
        assert torch.equal(permuted[split][0], rows[split][0][:, official])  # step t reads pixel perm[t]
        assert torch.equal(permuted[split][1], rows[split][1])


def test_the_split_is_1_in_20_for_validation_drawn_with_the_seed(tmp_path):
    write_mnist(tmp_path)
    assert split_sizes(60000) == (57000, 3000)  # the official 57 000 / 3 000
    data = mnist(tmp_path, seed=7, valid_size=10)
    train, valid = image_index(data["train"][0]), image_index(data["valid"][0])
    assert len(train) == 40 and len(valid) == 10 and sorted(train + valid) == list(range(50))
    assert image_index(mnist(tmp_path, seed=7, valid_size=10)["valid"][0]) == valid  # reproducible
    assert image_index(mnist(tmp_path, seed=8, valid_size=10)["valid"][0]) != valid
    subset = mnist(tmp_path, seed=7, valid_size=10, train_size=5)
    assert image_index(subset["train"][0]) == train[:5] and image_index(subset["valid"][0]) == valid
    assert len(subset["test"][0]) == 20
    for options, message in (({"valid_size": 50}, "valid_size: expected an integer in 1 … 49"),
                             ({"train_size": 49}, "train_size: expected an integer in 1 … 48")):
        with pytest.raises(ValueError, match=message):
            mnist(tmp_path, **options)


def test_missing_files_are_named_with_the_folders_searched(tmp_path):
    with pytest.raises(ValueError, match="--data-root PATH"):
        mnist(None)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        mnist(tmp_path / "nowhere")
    write_mnist(tmp_path)
    (tmp_path / FILES["test_labels"]).unlink()
    with pytest.raises(FileNotFoundError) as error:
        mnist(tmp_path)
    message = str(error.value)
    assert "missing 1 file(s)" in message and "t10k-labels-idx1-ubyte[.gz]" in message
    assert str(tmp_path / "MNIST" / "raw") in message and "never downloads" in message


@pytest.mark.parametrize("damage, message", [
    (lambda raw: b"\x00\x00\x08\x01" + raw[4:], "magic number 0x00000801, expected 0x00000803"),
    (lambda raw: raw[:-5], "data bytes, expected 39200"),
    (lambda raw: raw[:10], "shorter than its 16-byte IDX header"),
])
def test_a_corrupt_images_file_is_a_value_error_naming_it(tmp_path, damage, message):
    write_mnist(tmp_path)
    path = tmp_path / FILES["train_images"]
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=message) as error:
        mnist(tmp_path)
    assert str(path) in str(error.value)


def test_bad_gzip_shapes_and_labels_are_value_errors_naming_the_file(tmp_path):
    write_mnist(tmp_path, gz=True)
    gz = tmp_path / (FILES["test_images"] + ".gz")
    gz.write_bytes(gz.read_bytes()[:30])
    with pytest.raises(ValueError, match=f"{gz}: not a readable gzip file"):
        mnist(tmp_path)
    write_mnist(tmp_path)  # plain files come before .gz
    write_idx(tmp_path / FILES["test_images"], np.zeros((20, 28, 27), np.uint8))
    with pytest.raises(ValueError, match="images of 28 × 27 pixels"):
        mnist(tmp_path)
    write_mnist(tmp_path)
    write_idx(tmp_path / FILES["test_labels"], np.full(19, 3, np.uint8))
    with pytest.raises(ValueError, match="19 labels for the 20 images"):
        mnist(tmp_path)
    write_idx(tmp_path / FILES["test_labels"], np.full(20, 10, np.uint8))
    with pytest.raises(ValueError, match="label 10, expected digits 0 … 9"):
        mnist(tmp_path)


def test_majority_class_baseline():
    data = {"train": (None, torch.tensor([1, 1, 2])), "test": (None, torch.tensor([1, 2, 3, 1]))}
    assert majority_class_accuracy(data) == 0.5


def test_the_tasks_follow_the_papers_protocol():
    for name, lr, clip, dt in (("smnist", 1.8e-3, 1.0, 0.21), ("psmnist", 3.5e-3, 1.1, 1.9)):
        task = TASKS[name]
        assert settings(task, "paper", "lem") == dict(hidden_size=128, epochs=120, lr=lr, batch_size=128, clip=clip,
                                                      lr_milestones=(100,))
        assert settings(task, "quick", "gru")["hidden_size"] == 32
        assert task.model_options("lem", {}) == {"dt": dt} and task.model_options("lstm", {}) == {}
        assert task.classes == 10 and task.target == "last" and task.options["path"] == "data_root"
        table = TABLES[name]
        assert set(table.models) == {"lem", "cornn", "lstm", "gru"} and table.metric == "accuracy"
        assert table.paper_for("path=/data/mnist") == table.paper[""]  # the folder is not a reading
    assert TABLES["smnist"].paper[""]["lem"] == 99.5 and TABLES["psmnist"].paper[""]["cornn"] == 96.6
    assert TASKS["psmnist"].model_options("cornn", {}) == {"dt": 0.076, "gamma": 0.4, "epsilon": 8.0}


def test_cli_fit_smnist_on_tiny_files(tmp_path, capsys):
    write_mnist(tmp_path / "mnist" / "raw", gz=True)
    out = tmp_path / "run"
    argv = ["fit", "smnist", "--data-root", str(tmp_path / "mnist"), "--preset", "quick", "--hidden", "4",
            "--epochs", "1", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert "train (48, 784, 1), valid (2, 784, 1), test (20, 784, 1)" in capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    assert result["model_options"] == {"dt": 0.21} and result["config"]["clip"] == 1.0
    assert result["test_sequences"] == 20 and 0 <= result["baselines"]["majority class"] <= 1


@pytest.mark.parametrize("argv, message", [
    (["fit", "smnist"], "--data-root: the smnist task reads its files from a local folder"),
    (["fit", "fhn", "--data-root", "x"],
     "--data-root: only for the task(s) bidmc-hr, bidmc-rr, bidmc-spo2, eigenworms, google12, har2, imdb, ncifar, "
     "person-activity, psmnist, ptb-char, ptb-word, scifar, smnist"),
    (["fit", "psmnist", "--data-root", "x", "--train-size", "0"], "argument --train-size: expected an integer >= 1"),
])
def test_cli_refuses_a_missing_or_misplaced_data_root(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_missing_files_are_one_line_naming_them(tmp_path, capsys):
    argv = ["fit", "psmnist", "--data-root", str(tmp_path), "--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "missing 4 file(s)" in line and "train-images-idx3-ubyte[.gz]" in line
