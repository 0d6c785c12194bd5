"""Penn Treebank language modelling (LEM §3.7): tiny corpora in Mikolov's file formats written here; the vocabulary,
the token stream, the windows and their targets by hand, bits per character and perplexity against closed forms, the
unigram baseline by hand, the errors, a 2 000-word run that never materialises the test logits, and `odelab fit`."""
import json
import math

import pytest
import torch

from odelab.cli import main
from odelab.data.ptb import (EOS, bits_per_character, build_vocabulary, metrics, perplexity, ptb,
                             unigram_cross_entropy)
from odelab.data.tasks import TASKS, settings
from odelab.training import FitSpec, run, run_fit

WORDS = {"train": [" the cat sat ", " the dog ", " a cat ran the "], "valid": [" the cat sat "],
         "test": [" a dog sat "]}


def write_words(folder, lines=WORDS):
    folder.mkdir(parents=True, exist_ok=True)
    for split, text in lines.items():
        (folder / f"ptb.{split}.txt").write_text("\n".join(text) + "\n")
    return folder


def write_chars(folder, lines=WORDS):
    """The character files as Mikolov's: the words spelled out, one character per token, ``_`` between words."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, text in lines.items():
        spelled = [" _ ".join(" ".join(word) for word in line.split()) for line in text]
        (folder / f"ptb.char.{split}.txt").write_text("\n".join(spelled) + "\n")
    return folder


def test_the_vocabulary_the_stream_and_the_windows_by_hand(tmp_path):
    write_words(tmp_path / "simple-examples" / "data")
    # training counts: the 3, <eos> 3, cat 2, a 1, dog 1, ran 1, sat 1 -> ties by text
    assert build_vocabulary([line.split() for line in WORDS["train"]]) == ["<eos>", "the", "cat", "a", "dog", "ran",
                                                                          "sat"]
    data = ptb(tmp_path, "word", length=4)
    index = {t: i for i, t in enumerate(["<eos>", "the", "cat", "a", "dog", "ran", "sat"])}
    stream = [EOS, "the", "cat", "sat", EOS, "the", "dog", EOS, "a", "cat", "ran", "the", EOS]
    ids = [index[t] for t in stream]  # 13 tokens: (13 − 1) // 4 = 3 windows, nothing dropped
    x, y = data["train"]
    assert x.dtype == y.dtype == torch.int64 and tuple(x.shape) == (3, 4)
    assert x.tolist() == [[i + 1 for i in ids[k:k + 4]] for k in (0, 4, 8)]  # ids = index + 1: 0 stays padding
    assert y.tolist() == [ids[k + 1:k + 5] for k in (0, 4, 8)]
    # test: <eos> a dog sat <eos>: one window of 4, nothing left
    assert data["test"][0].tolist() == [[1, 4, 5, 7]] and data["test"][1].tolist() == [[3, 4, 6, 0]]
    meta = data["meta"]
    assert (meta["class_count"], meta["vocabulary"], meta["length"]) == (7, 8, 4)
    assert ptb(tmp_path, "word", length=3)["meta"]["dropped"] == {"train": 0, "valid": 1, "test": 1}


def test_the_character_files_underscores_and_line_ends(tmp_path):
    write_chars(tmp_path)
    (tmp_path / "ptb.char.test.txt").write_text("a _ c a t\n")  # <eos> a _ c a t <eos>: 6 targets
    data = ptb(tmp_path, "char", length=3)
    tokens = build_vocabulary([line.split() for line in (tmp_path / "ptb.char.train.txt").read_text().splitlines()])
    assert "_" in tokens and EOS in tokens and " " not in tokens and data["meta"]["class_count"] == len(tokens)
    index = {t: i for i, t in enumerate(tokens)}
    expected = [index[t] for t in [EOS, "a", "_", "c", "a", "t", EOS]]
    assert data["test"][0].tolist() == [[i + 1 for i in expected[0:3]], [i + 1 for i in expected[3:6]]]
    assert data["test"][1].tolist() == [expected[1:4], expected[4:7]]


def test_train_size_keeps_a_prefix_and_the_whole_files_counts(tmp_path):
    write_words(tmp_path)
    full, short = ptb(tmp_path, "word", length=2), ptb(tmp_path, "word", length=2, train_size=2)
    assert torch.equal(short["train"][0], full["train"][0][:2]) and torch.equal(short["train"][1], full["train"][1][:2])
    assert torch.equal(short["meta"]["unigram"], full["meta"]["unigram"])
    assert torch.equal(short["test"][1], full["test"][1])


def test_bits_per_character_and_perplexity_closed_forms():
    assert bits_per_character(math.log(2.0)) == pytest.approx(1.0)
    assert bits_per_character(math.log(50.0)) == pytest.approx(math.log2(50.0))
    assert perplexity(math.log(72.8)) == pytest.approx(72.8)
    assert perplexity(0.0) == 1.0
    result = {"test_loss": math.log(100.0), "valid_loss": math.log(120.0), "baselines": {"unigram": math.log(700.0)},
              "baseline_metrics": {"unigram": "cross-entropy"}}
    word = metrics("word")(result)
    assert set(word) == {"test_perplexity", "valid_perplexity", "baseline_perplexity"}
    assert (word["test_perplexity"], word["valid_perplexity"]) == pytest.approx((100.0, 120.0))
    assert word["baseline_perplexity"]["unigram"] == pytest.approx(700.0)
    char = metrics("char")({**result, "test_loss": 1.25 * math.log(2.0)})
    assert char["test_bits_per_character"] == pytest.approx(1.25)
    assert char["baseline_bits_per_character"]["unigram"] == pytest.approx(math.log2(700.0))


def test_the_unigram_baseline_by_hand(tmp_path):
    write_words(tmp_path)
    data = ptb(tmp_path, "word", length=4)
    # training targets (the stream after its first <eos>): the 3, <eos> 3, cat 2, a, dog, ran, sat 1: 12 in all;
    # test targets a dog sat <eos>
    expected = -(math.log(1 / 12) * 3 + math.log(3 / 12)) / 4
    assert unigram_cross_entropy(data) == pytest.approx(expected)
    assert data["meta"]["unigram"].tolist() == [3, 3, 2, 1, 1, 1, 1]


def test_errors_name_the_files_and_the_tokens(tmp_path):
    with pytest.raises(ValueError, match="--data-root PATH"):
        ptb(None, "char")
    write_words(tmp_path)
    with pytest.raises(ValueError, match=r"ptb\.char\.train\.txt, ptb\.char\.valid\.txt, ptb\.char\.test\.txt.*"
                                         r"simple-examples/data.*simple-examples\.tgz"):
        ptb(tmp_path, "char")
    (tmp_path / "ptb.test.txt").write_text(" a dog\n the zebra sat\n")
    with pytest.raises(ValueError, match=r"ptb\.test\.txt, line 2: the token 'zebra' is not in the training"):
        ptb(tmp_path, "word")
    write_words(tmp_path)
    with pytest.raises(ValueError, match=r"ptb\.valid\.txt: 4 tokens .* fewer than one window of --length 5"):
        ptb(tmp_path, "word", length=5)
    (tmp_path / "ptb.train.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        ptb(tmp_path, "word")
    with pytest.raises(ValueError, match="level"):
        ptb(tmp_path, "byte")


def test_the_paper_presets_are_lambs_configs():
    char, word = settings(TASKS["ptb-char"], "paper", "lem"), settings(TASKS["ptb-word"], "paper", "lem")
    assert (char["hidden_size"], char["embedding_size"], char["batch_size"]) == (1024, 200, 128)
    assert (word["hidden_size"], word["embedding_size"], word["batch_size"]) == (256, 256, 64)
    assert char["lr"] == pytest.approx(6.6e-4, rel=0.01) and word["lr"] == pytest.approx(6.8e-4, rel=0.01)
    assert char["clip"] * 150 == pytest.approx(1.0) and word["clip"] * 70 == pytest.approx(4.0)
    assert TASKS["ptb-char"].model_options("lem", {}) == {"dt": 1.0} == TASKS["ptb-word"].model_options("lem", {})
    assert TASKS["ptb-word"].model_options("gru", {}) == {}
    assert word["tie_embedding"] and word["stateful"] and char["stateful"] and char["select"] == word["select"] == "loss"
    assert "tie_embedding" not in char and "tie_embedding" not in settings(TASKS["ptb-word"], "quick", "lem")


def test_the_word_preset_ties_the_readout_to_the_embedding(tmp_path):
    """Through run_fit: one weight for the embedding and the readout; the run trains (stateful) and reports."""
    words = [f"w{i}" for i in range(30)]
    lines = {"train": [" ".join(words[i % 7:i % 7 + 20]) for i in range(40)], "valid": [" ".join(words[:20])] * 3,
             "test": [" ".join(words[5:25])] * 3}
    write_words(tmp_path / "data", lines)
    TASKS["ptb-word"].presets["tied-tiny"] = dict(hidden_size=8, embedding_size=8, epochs=1, lr=1e-2, batch_size=4,
                                                  stateful=True, select="loss", tie_embedding=True)
    try:
        model, result = run_fit(FitSpec("ptb-word", "lem", "tied-tiny", data_options={"path": str(tmp_path / "data"),
                                                                                        "length": 5}, progress=False))
    finally:
        del TASKS["ptb-word"].presets["tied-tiny"]
    assert model.readout.embedding is model.embedding and result["settings"]["head"]["tie_embedding"]
    assert result["parameters"] == sum(p.numel() for p in model.parameters())


def test_a_large_vocabulary_run_never_holds_every_test_logit(tmp_path, monkeypatch):
    """2 000 word types: the report takes the test cross-entropy from the result, the figure streams."""
    words = [f"w{i}" for i in range(1999)]
    lines = {"train": [" ".join(words[i:i + 40]) for i in range(0, 1999, 40)],
             "valid": [" ".join(words[:300])], "test": [" ".join(words[500:1100])]}
    write_words(tmp_path / "data", lines)

    def refuse(*args, **kwargs):
        raise AssertionError("the report must not predict every test window")
    monkeypatch.setattr(run, "predict", refuse)
    model, result = run_fit(FitSpec("ptb-word", "gru", hidden=4, embedding_size=3, out=tmp_path / "run",
                                    progress=False, data_options={"path": str(tmp_path), "length": 20}))
    assert model.readout.out_features == 2000 and model.embedding.num_embeddings == 2001
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["test_perplexity"] == pytest.approx(math.exp(saved["test_loss"]))
    assert saved["baseline_perplexity"]["unigram"] == pytest.approx(math.exp(saved["baselines"]["unigram"]))
    assert "unigram" not in saved["data"] and saved["data"]["class_count"] == 2000
    assert (tmp_path / "run" / "predictions.png").stat().st_size > 0


def test_odelab_fit_ptb_char(tmp_path):
    write_chars(tmp_path / "ptb")
    out = tmp_path / "out"
    assert main(["fit", "ptb-char", "--data-root", str(tmp_path / "ptb"), "--hidden", "3", "--epochs", "1",
                 "--length", "5", "--no-progress", "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["test_bits_per_character"] == pytest.approx(saved["test_loss"] / math.log(2.0))
    assert saved["baseline_metrics"] == {"unigram": "cross-entropy"} and saved["settings"]["length"] == 5
    assert main(["fit", "ptb-word", "--data-root", str(tmp_path / "nothing-here"), "--no-progress"]) == 2


def test_the_reproduction_tables_read_the_papers_units():
    """Bits per character = CE / ln 2, perplexity = exp(CE), from the run's test cross-entropy and the unigram's."""
    from odelab.training.reproduce import TABLES

    char, word = TABLES["ptb-char"], TABLES["ptb-word"]
    assert char.value({"test_loss": 1.5 * math.log(2)}) == pytest.approx(1.5)
    assert word.value({"test_loss": math.log(72.8)}) == pytest.approx(72.8)
    assert word.baseline(math.log(600.0)) == pytest.approx(600.0) and not word.higher_is_better
    assert char.paper_for("path=/data/ptb")["lem"] == 1.25 and word.winner == "lem"
