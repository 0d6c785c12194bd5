"""IMDB from a local ``aclImdb/`` folder or Keras' ``imdb.npz`` (coRNN §4, LRC §4.2(b)): tiny files written here; the
tokeniser, the vocabulary of the training part counted by hand, padding and truncation by hand, Keras' two layouts,
the fixed validation draw, GloVe vectors, the errors, the task's protocol and ``odelab fit imdb`` runs."""
import gzip
import json

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.data.imdb import (OOV, PAD, find_data, imdb, imdb_models, pad, read_glove, read_keras, split_indices,
                              tokenize)
from odelab.data.tasks import TASKS, settings
from odelab.training import FitSpec, run_fit


# ----------------------------------------------------------------------------------------------------- helpers
def letters(i):
    """A word of letters only (the tokeniser keeps digits too, but these stay distinct and sort predictably)."""
    return "u" + "".join("abcdefghij"[int(d)] for d in f"{i:02d}")


def review(i):
    """Training-file review i: "alpha" 3 times, "beta" twice, "gamma" once, and the review's own word; the counts of
    alpha, beta, gamma over any 7 reviews are 21, 14, 7 whichever validate."""
    return f"Alpha beta, ALPHA.<br /><br />Gamma alpha! {letters(i)} -- beta"


def write_acl(root, train=10, test=4, texts=None):
    """aclImdb/ under ``root``: training reviews i = 0 … train − 1 (neg: even i, pos: odd i; named ``{i}_{r}.txt``
    in each folder), test reviews "{test word} delta". Returns the folder."""
    folder = root / "aclImdb"
    for part in ("train", "test"):
        for label in ("pos", "neg"):
            (folder / part / label).mkdir(parents=True, exist_ok=True)
    for i in range(train):
        label = "pos" if i % 2 else "neg"
        (folder / "train" / label / f"{i}_{7 if i % 2 else 2}.txt").write_text((texts or review)(i), encoding="utf-8")
    for i in range(test):
        label = "pos" if i % 2 else "neg"
        (folder / "test" / label / f"{i}_1.txt").write_text(f"beta delta {letters(i)}", encoding="utf-8")
    (folder / "train" / "unsup").mkdir(exist_ok=True)
    (folder / "train" / "unsup" / "0_0.txt").write_text("never read")
    return folder


def file_order(train=10):
    """The loader's order of the training file: neg (even i) then pos (odd i), each by the files' numeric id."""
    return [i for i in range(train) if i % 2 == 0] + [i for i in range(train) if i % 2]


def save_npz(path, x_train, y_train, x_test, y_test):
    """As Keras stores imdb.npz: object arrays of Python lists of ints, integer labels."""
    def objects(reviews):
        out = np.empty(len(reviews), dtype=object)
        out[:] = [list(map(int, r)) for r in reviews]
        return out
    np.savez(path, x_train=objects(x_train), y_train=np.asarray(y_train, dtype=np.int64), x_test=objects(x_test),
             y_test=np.asarray(y_test, dtype=np.int64))


RANKS_TRAIN = [[1, 5, 2, 9], [3, 3, 1], [7, 1, 2, 4, 6, 8], [2], [5, 4, 3, 2, 1], [1, 1, 1, 1, 1, 1, 1, 2],
               [9, 8, 7], [4, 4], [6, 2, 6], [3, 9, 1, 1]]
RANKS_TEST = [[2, 7, 1], [9, 9], [1, 4, 5, 6, 7], [8]]


# ----------------------------------------------------------------------------------------------------- tokeniser
def test_tokenize_lower_cases_splits_clitics_and_drops_punctuation():
    assert tokenize("I didn't LIKE it.<br /><br />It's a B-movie; can't, won't!") == \
        ["i", "did", "n't", "like", "it", "it", "'s", "a", "b", "movie", "ca", "n't", "wo", "n't"]
    assert tokenize("We’re 7/10 <BR/>rock'n'roll students' café I'd snake_case") == \
        ["we", "'re", "7", "10", "rock'n'roll", "students", "café", "i", "'d", "snake", "case"]
    assert tokenize("<br>") == [] and tokenize("... !!! ") == []


# -------------------------------------------------------------------------------------------- aclImdb, vocabulary
def test_vocabulary_is_counted_by_hand_on_the_training_part_only(tmp_path):
    write_acl(tmp_path)
    order = file_order()
    train_rows, valid_rows = split_indices(10)
    assert (len(train_rows), len(valid_rows)) == (7, 3)
    perm = np.random.RandomState(1234).permutation(10)  # the documented rule, written out
    assert list(valid_rows) == sorted(perm[:3]) and list(train_rows) == sorted(perm[3:])
    train_words = sorted(letters(order[r]) for r in train_rows)  # each once: ties, alphabetical
    data = imdb(tmp_path, vocabulary=100, length=12)
    # alpha 21, beta 14, gamma 7 (ids 2, 3, 4), then the 7 training reviews' own words, count 1, alphabetically
    expected = {"alpha": 2, "beta": 3, "gamma": 4, **{w: 5 + k for k, w in enumerate(train_words)}}
    assert data["meta"]["vocabulary"] == 2 + 3 + 7  # shrunk to the words there are
    for part, rows in (("train", train_rows), ("valid", valid_rows)):
        x, y = data[part]
        assert x.dtype == torch.int64 and y.dtype == torch.int64 and x.shape == (len(rows), 12)
        for row, r in zip(x.tolist(), rows):
            i = order[r]
            own = expected.get(letters(i), OOV)  # a validation review's own word is out of vocabulary
            assert row == [PAD] * 5 + [2, 3, 2, 4, 2, own, 3]
            assert (own == OOV) == (r in valid_rows)
        assert y.tolist() == [order[r] % 2 for r in rows]  # neg 0, pos 1
    x, y = data["test"]
    assert y.tolist() == [0, 0, 1, 1]  # neg (test 0, 2) then pos (1, 3)
    assert x[:, -3:].tolist() == [[3, OOV, expected.get(letters(i), OOV)] for i in (0, 2, 1, 3)]
    assert data["meta"]["source"] == "aclImdb" and data["meta"]["warnings"]


def test_a_small_vocabulary_keeps_the_most_frequent_words(tmp_path):
    write_acl(tmp_path)
    data = imdb(tmp_path, vocabulary=4, length=7)  # padding, OOV, alpha, beta
    assert data["meta"]["vocabulary"] == 4
    assert data["train"][0][0].tolist() == [2, 3, 2, OOV, 2, OOV, 3]  # gamma and the own word: OOV
    assert int(data["train"][0].max()) == 3


def test_padding_and_truncation_by_hand(tmp_path):
    assert pad([[5, 6, 7]], 5).tolist() == [[0, 0, 5, 6, 7]]
    assert pad([[1, 2, 3, 4, 5, 6]], 4).tolist() == [[3, 4, 5, 6]]  # the LAST tokens kept
    assert pad([[], [9]], 2).tolist() == [[0, 0], [0, 9]]
    assert pad([np.array([4, 5])], 2).dtype == np.int64
    write_acl(tmp_path)
    data = imdb(tmp_path, length=3)  # alpha beta alpha gamma alpha OWN beta -> its last 3
    row = data["train"][0][0].tolist()
    assert row[0] == 2 and row[2] == 3 and len(row) == 3
    meta = imdb(tmp_path, length=3)["meta"]
    assert meta["truncated"] == 10 / 14 and meta["length"] == 3  # the 10 training reviews (7 tokens), not the test's 3
    assert imdb(tmp_path, length=20)["meta"]["truncated"] == 0.0


def test_the_split_is_fixed_and_train_size_draws_with_the_seed(tmp_path):
    train, valid = split_indices(25000)
    assert (len(train), len(valid)) == (17500, 7500) and not set(train) & set(valid)
    write_acl(tmp_path, train=20)
    a, b = imdb(tmp_path, seed=1), imdb(tmp_path, seed=2)
    for part in ("train", "valid", "test"):  # the same for every run seed
        assert torch.equal(a[part][0], b[part][0]) and torch.equal(a[part][1], b[part][1])
    small = [imdb(tmp_path, seed=s, train_size=5) for s in (1, 2)]
    assert [len(d["train"][1]) for d in small] == [5, 5]
    assert torch.equal(small[0]["valid"][0], a["valid"][0])  # validation unchanged
    assert small[0]["meta"]["vocabulary"] == a["meta"]["vocabulary"]  # the vocabulary too
    rows = {tuple(r) for r in a["train"][0].tolist()}
    assert all(tuple(r) in rows for d in small for r in d["train"][0].tolist())
    assert not torch.equal(small[0]["train"][0], small[1]["train"][0])
    with pytest.raises(ValueError, match="train_size: expected at most 14"):
        imdb(tmp_path, train_size=15)


# ------------------------------------------------------------------------------------------------------- Keras
def test_keras_npz_ranks_become_ids_from_2(tmp_path):
    save_npz(tmp_path / "imdb.npz", RANKS_TRAIN, [0, 1] * 5, RANKS_TEST, [1, 0, 1, 0])
    loaded = np.load(tmp_path / "imdb.npz", allow_pickle=True)
    assert loaded["x_train"].dtype == object and isinstance(loaded["x_train"][0], list)  # Keras' layout
    data = imdb(tmp_path, vocabulary=7, length=4)  # ids 0 … 6: ranks 1 … 5 kept (id r + 1), 6 … 9 OOV
    train_rows, valid_rows = split_indices(10)
    expected = {0: [2, 6, 3, OOV], 1: [0, 4, 4, 2], 2: [3, 5, OOV, OOV], 3: [0, 0, 0, 3], 4: [5, 4, 3, 2],
                5: [2, 2, 2, 3], 6: [0, OOV, OOV, OOV], 7: [0, 0, 5, 5], 8: [0, OOV, 3, OOV], 9: [4, OOV, 2, 2]}
    assert data["train"][0].tolist() == [expected[r] for r in train_rows]
    assert data["valid"][0].tolist() == [expected[r] for r in valid_rows]
    assert data["train"][1].tolist() == [r % 2 for r in train_rows]
    assert data["test"][0].tolist() == [[0, 3, OOV, 2], [0, 0, OOV, OOV], [5, 6, OOV, OOV], [0, 0, 0, OOV]]
    assert data["meta"]["source"] == "keras" and data["meta"]["vocabulary"] == 7
    assert imdb(tmp_path)["meta"]["vocabulary"] == 2 + 9  # shrunk: the largest rank is 9
    again = imdb(tmp_path / "imdb.npz", vocabulary=7, length=4)  # the file itself as --data-root
    assert torch.equal(again["train"][0], data["train"][0])


def test_keras_load_data_layout_is_recognised(tmp_path):
    """``load_data``'s output saved as a file (start 1, OOV 2, rank r -> r + 3, pre-padded with 0) reads as the raw
    ranks do (its OOV stays OOV)."""
    def offset(reviews, pad_to=None, oov=False):
        out = [[1] + [r + 3 for r in rev] for rev in reviews]
        if oov:
            out[0][1] = 2  # an OOV of load_data
        return [[0] * (pad_to - len(r)) + r for r in out] if pad_to else out
    save_npz(tmp_path / "imdb.npz", RANKS_TRAIN, [0, 1] * 5, RANKS_TEST, [1, 0, 1, 0])
    raw = imdb(tmp_path, vocabulary=7, length=4)
    for pad_to in (None, 9):
        (tmp_path / "imdb.npz").unlink()
        save_npz(tmp_path / "imdb.npz", offset(RANKS_TRAIN, pad_to, oov=True), [0, 1] * 5, offset(RANKS_TEST, pad_to),
                 [1, 0, 1, 0])
        data = imdb(tmp_path, vocabulary=7, length=4)
        assert torch.equal(data["test"][0], raw["test"][0])
        full, raw_full = in_file_order(data), in_file_order(raw)
        assert full[0].tolist() == [OOV, 6, 3, OOV]  # review 0: ranks 1 5 2 9, its 1 made OOV
        assert torch.equal(full[1:], raw_full[1:])


def in_file_order(data):
    train, valid = split_indices(10)
    full = torch.empty(10, data["train"][0].shape[1], dtype=torch.int64)
    full[train], full[valid] = data["train"][0], data["valid"][0]
    return full


def test_keras_npz_errors_name_the_file(tmp_path):
    path = tmp_path / "imdb.npz"
    np.savez(path, x_train=np.zeros(3), y_train=np.zeros(3))
    with pytest.raises(ValueError, match=r"no array x_test, y_test"):
        read_keras(path)
    save_npz(path, RANKS_TRAIN, [0, 1, 2] + [0] * 7, RANKS_TEST, [1, 0, 1, 0])
    with pytest.raises(ValueError, match=r"y_train holds the label 2"):
        read_keras(path)
    save_npz(path, RANKS_TRAIN, [0] * 9, RANKS_TEST, [1, 0, 1, 0])
    with pytest.raises(ValueError, match=r"y_train has 9 labels for the 10 reviews"):
        read_keras(path)
    save_npz(path, RANKS_TRAIN[:-1] + [[3, 0, 2]], [0, 1] * 5, RANKS_TEST, [1, 0, 1, 0])
    with pytest.raises(ValueError, match=r"x_train\[9\] holds the id 0; Keras' imdb.npz holds word ranks >= 1"):
        read_keras(path)
    (tmp_path / "not.npz").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable .npz file"):
        imdb(tmp_path / "not.npz")
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(ValueError, match="a file, but not Keras' imdb.npz"):
        imdb(tmp_path / "x.txt")


# ------------------------------------------------------------------------------------------------------- GloVe
def write_glove(path, rows, header=None):
    lines = ([header] if header else []) + [w + " " + " ".join(f"{v:.4f}" for v in vec) for w, vec in rows]
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def test_read_glove_rows_by_id(tmp_path):
    words = {"alpha": 2, "beta": 3, "gamma": 4}
    path = tmp_path / "glove.txt"
    write_glove(path, [("zeta", [9, 9, 9]), ("beta", [1, 2, 3]), ("alpha", [-1, 0.5, 0.25]), ("beta", [7, 7, 7]),
                       ("new york", [1, 1, 1, 1])], header="5 3")
    table, hits = read_glove(path, words, 5)
    assert table.dtype == np.float32 and table.shape == (5, 3) and hits == 2
    assert table[PAD].tolist() == [0, 0, 0] and table[OOV].tolist() == [0, 0, 0]
    assert table[2].tolist() == [-1, 0.5, 0.25] and table[3].tolist() == [1, 2, 3]  # the first "beta" wins
    found = np.array([[-1, 0.5, 0.25], [1, 2, 3]])
    scale = found.std()
    np.testing.assert_allclose(table[4], np.random.RandomState(5544).normal(0, scale, (5, 3))[4], rtol=1e-6)
    gz = tmp_path / "glove.txt.gz"
    write_glove(gz, [("gamma", [4, 5, 6])])
    table, hits = read_glove(gz, words, 5)
    assert hits == 1 and table[4].tolist() == [4, 5, 6]


def test_glove_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text("alpha 1 2 3\nbeta 1 2\n")
    with pytest.raises(ValueError, match=r"glove.txt, line 2: 2 numbers after 'beta', expected 3"):
        read_glove(path, {"alpha": 2}, 3)
    path.write_text("alpha 1 2 3\nbeta 1 x 2\n")
    with pytest.raises(ValueError, match=r"line 2: 'x' is not a number"):
        read_glove(path, {"beta": 2}, 3)
    path.write_text("zeta 1 2 3\n")
    with pytest.raises(ValueError, match="none of the vocabulary's 1 words"):
        read_glove(path, {"beta": 2}, 3)
    path.write_text("justaword\n")
    with pytest.raises(ValueError, match="line 1: a word without numbers"):
        read_glove(path, {"beta": 2}, 3)


def test_the_loader_attaches_glove_vectors(tmp_path):
    write_acl(tmp_path)
    write_glove(tmp_path / "glove.6B.4d.txt", [("alpha", [1, 2, 3, 4]), ("gamma", [0, 0, 1, 0]), ("the", [5, 5, 5, 5])])
    data = imdb(tmp_path, glove="glove.6B.4d.txt", vocabulary=5)  # relative: found in the data root
    table = data["meta"]["embedding"]
    assert isinstance(table, torch.Tensor) and table.dtype == torch.float32 and tuple(table.shape) == (5, 4)
    assert table[2].tolist() == [1, 2, 3, 4] and table[4].tolist() == [0, 0, 1, 0] and table[3].abs().sum() > 0
    assert data["meta"]["freeze_embedding"] is True and data["meta"]["glove_words"] == 2
    assert not imdb(tmp_path, glove=tmp_path / "glove.6B.4d.txt", vocabulary=5,
                    freeze_embedding=False)["meta"]["freeze_embedding"]
    with pytest.raises(FileNotFoundError, match="glove: no file"):
        imdb(tmp_path, glove="missing.txt")
    # Keras' file: the words come from imdb_word_index.json beside it
    keras = tmp_path / "keras"
    keras.mkdir()
    save_npz(keras / "imdb.npz", RANKS_TRAIN, [0, 1] * 5, RANKS_TEST, [1, 0, 1, 0])
    with pytest.raises(FileNotFoundError, match="imdb_word_index.json"):
        imdb(keras, glove=tmp_path / "glove.6B.4d.txt")
    (keras / "imdb_word_index.json").write_text(json.dumps({"the": 1, "alpha": 2, "gamma": 9}))
    data = imdb(keras, glove=tmp_path / "glove.6B.4d.txt", vocabulary=6)  # ranks 1 … 4 kept: gamma (9) is OOV
    table = data["meta"]["embedding"]
    assert tuple(table.shape) == (6, 4) and table[2].tolist() == [5, 5, 5, 5] and table[3].tolist() == [1, 2, 3, 4]
    assert data["meta"]["glove_words"] == 2


# ------------------------------------------------------------------------------------------------------ errors
def test_missing_files_and_bad_options(tmp_path):
    with pytest.raises(ValueError, match="--data-root PATH"):
        imdb(None)
    with pytest.raises(FileNotFoundError, match=r"no aclImdb/ folder .* nor imdb.npz .*found neither"):
        imdb(tmp_path)
    folder = write_acl(tmp_path)
    for file in (folder / "test" / "pos").iterdir():
        file.unlink()
    with pytest.raises(ValueError, match=r"test/pos holds no review"):
        imdb(tmp_path)
    (folder / "test" / "pos").rmdir()
    with pytest.raises(FileNotFoundError, match=r"lacks test/pos"):
        imdb(tmp_path)
    write_acl(tmp_path)
    assert find_data(folder) == ("aclImdb", folder)  # the folder itself, or its parent
    for option, value, message in (("vocabulary", 2, "vocabulary: expected an integer >= 3"),
                                   ("length", 0, "length: expected an integer >= 1"),
                                   ("train_size", 0, "train_size: expected an integer >= 1")):
        with pytest.raises(ValueError, match=message):
            imdb(tmp_path, **{option: value})


# ------------------------------------------------------------------------------------------------------- task
def test_the_task_follows_the_papers():
    task = TASKS["imdb"]
    assert task.vocabulary == 25000 and task.classes == 2 and task.target == "last" and task.plot == "classes"
    assert task.loss == "cross_entropy" and set(task.baselines) == {"majority class"}
    assert task.options == {"path": "data_root", "vocabulary": "vocabulary", "length": "length", "glove": "glove",
                            "train_size": "train_size"}
    assert settings(task, "paper", "cornn") == dict(hidden_size=128, embedding_size=100, epochs=100, lr=6e-4,
                                                    batch_size=64)
    assert settings(task, "lrc", "lrcu-a") == dict(hidden_size=64, embedding_size=64, epochs=30, lr=1e-3,
                                                   batch_size=64, data_options={"vocabulary": 20_000})
    assert settings(task, "unicornn", "unicornn")["input_dropout"] == 0.65
    assert settings(task, "quick", "lem")["hidden_size"] == 32
    assert task.model_options("cornn", {}) == {"dt": 5.4e-2, "gamma": 4.9, "epsilon": 4.8}
    assert task.model_options("unicornn", {}) == {"dt": [6.6e-3, 0.205], "alpha": 0.0, "num_layers": 2,
                                                  "dropout": 0.61}
    assert task.model_options("taugru", {}) == {"tau": 1.0, "state_dropout": 0.04} and imdb_models("lem", {}) == {}


def test_cli_fit_imdb_on_tiny_files(tmp_path, capsys):
    write_acl(tmp_path / "data", train=20, test=6)
    out = tmp_path / "run"
    argv = ["fit", "imdb", "--data-root", str(tmp_path / "data"), "--hidden", "3", "--embedding-size", "4",
            "--length", "9", "--epochs", "1", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "train (14, 9), valid (6, 9), test (6, 9)" in printed and "vocabulary 19 ids" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["config"]["batch_size"] == 64 and result["test_sequences"] == 6
    assert result["data"]["vocabulary"] == 19 and result["settings"]["length"] == 9
    assert 0 <= result["baselines"]["majority class"] <= 1


def test_fit_imdb_with_glove_keeps_the_vectors_frozen(tmp_path):
    write_acl(tmp_path, train=20, test=6)
    rng = np.random.default_rng(0)
    write_glove(tmp_path / "g.txt", [(w, rng.normal(size=100)) for w in ("alpha", "beta", "gamma", "delta")])
    spec = FitSpec("imdb", "gru", "paper", hidden=3, epochs=1, progress=False,
                   data_options={"path": str(tmp_path), "glove": str(tmp_path / "g.txt"), "length": 9})
    model, result = run_fit(spec)
    vectors = imdb(tmp_path, glove=tmp_path / "g.txt", length=9)["meta"]["embedding"]
    assert torch.equal(model.embedding.weight, vectors) and not model.embedding.weight.requires_grad
    spec.data_options["freeze_embedding"] = False  # the official code's fine-tuning
    model, _ = run_fit(spec)
    assert model.embedding.weight.requires_grad and not torch.equal(model.embedding.weight, vectors)


@pytest.mark.parametrize("argv, message", [
    (["fit", "fhn", "--vocabulary", "100"], "--vocabulary: only for the task(s) imdb"),
    (["fit", "fhn", "--glove", "g.txt"], "--glove: only for the task(s) imdb"),
    (["fit", "imdb", "--data-root", "x", "--vocabulary", "2"], "argument --vocabulary: expected an integer >= 3"),
    (["fit", "imdb"], "--data-root: the imdb task reads its files from a local folder"),
])
def test_cli_refuses_misplaced_options(argv, message, capsys, monkeypatch):
    for task in TASKS.values():
        monkeypatch.setattr(task, "load", lambda *a, **k: pytest.fail("data loaded"))
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err
