"""A character-level language model on any local text file: LEM over embedded characters, trained with truncated
back-propagation through time -- the state carried from window to window (``TrainConfig(stateful=True)``, as the
PTB presets and DeepMind's lamb train) against every window starting from zero -- then sampled.

    python examples/char_language_model.py [--text FILE] [--tiny] [--epochs N] [--out DIR]

The default text is this repository's README (about 160 000 characters), cut into blocks of 2000 characters: every
twentieth block validates, the one after it tests, the rest trains (the README's parts differ, tables, prose and
code, so each split takes some of each); each split's blocks joined into one stream, cut into windows of
``--window`` characters in order (``odelab.data.ptb.windows``). The same runs on
the Penn Treebank: ``odelab fit ptb-char --data-root DIR --model lem``. Writes the curves of bits per character
(``bpc.png``) and prints a sample drawn from the stateful model.
"""
import argparse
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from odelab import SequenceRegressor, TrainConfig, cells, fit  # noqa: E402
from odelab.data.ptb import windows  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--text", default=str(Path(__file__).resolve().parents[1] / "README.md"),
                    help="a UTF-8 text file (default: the repository's README)")
parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run on a slice of the text")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--window", type=int, default=50, help="characters per window: the steps of back-propagation")
parser.add_argument("--out", default="runs/example-char-lm")
args = parser.parse_args()
torch.set_num_threads(1)  # small recurrent models: one thread is fastest on a CPU

text = Path(args.text).read_text(encoding="utf-8")
if args.tiny:
    text = text[:6000]
characters = sorted(set(text))
index = {c: i for i, c in enumerate(characters)}
stream = np.array([index[c] for c in text], dtype=np.int64)
blocks = np.split(stream, range(2000, len(stream), 2000))
parts = {"train": [b for k, b in enumerate(blocks) if k % 20 < 18], "valid": blocks[18::20], "test": blocks[19::20]}
if args.tiny:  # too few blocks: the last tenth of the text validates and tests
    parts = dict(zip(("train", "valid", "test"), ([stream[:5400]], [stream[5400:5700]], [stream[5700:]])))
data = {name: windows(np.concatenate(chunks), args.window) for name, chunks in parts.items()}
hidden, epochs = (32, 1) if args.tiny else (128, args.epochs)
print(f"{len(text)} characters, {len(characters)} distinct; windows of {args.window}: "
      + ", ".join(f"{k} {v[0].shape[0]}" for k, v in data.items()))

out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig, ax = plt.subplots(figsize=(7, 4))
models = {}
for stateful in (True, False):
    torch.manual_seed(1234)
    model = SequenceRegressor(cells.LEM(32, hidden, dt=1.0), hidden, len(characters), vocabulary=len(characters) + 1,
                              embedding_size=32)  # ids are indices + 1: 0 is the embedding's padding row
    config = TrainConfig(epochs=epochs, lr=3e-3, batch_size=32, clip=1.0, stateful=stateful, select="loss")
    result = fit(model, data, config, progress=False, loss="cross_entropy")
    bpc = result["test_loss"] / math.log(2)
    label = "state carried (truncated BPTT)" if stateful else "every window from zero"
    print(f"{label:32s} test {bpc:.3f} bits per character (best epoch {result['best_epoch']}, "
          f"{result['train_seconds']:.0f} s)")
    ax.plot(result["history"]["epoch"], np.array(result["history"]["valid_loss"]) / math.log(2), marker="o",
            label=f"{label}: test {bpc:.3f}")
    models[stateful] = model
ax.set(xlabel="epoch", ylabel="validation bits per character", title=f"LEM, {hidden} units, on {Path(args.text).name}")
ax.legend()
fig.tight_layout()
fig.savefig(out / "bpc.png", dpi=110)

model, state, token = models[True].eval(), None, torch.tensor([[index.get("\n", 0) + 1]])
generator, sample = torch.Generator().manual_seed(0), []
with torch.no_grad():
    for _ in range(60 if args.tiny else 400):  # one character at a time, the state carried
        logits, state = model.stream(token, state)
        choice = int(torch.multinomial(torch.softmax(logits[0, -1] / 0.8, -1), 1, generator=generator))
        sample.append(characters[choice])
        token = torch.tensor([[choice + 1]])
print("sample (temperature 0.8):\n" + "".join(sample))
print(f"figure in {out}/bpc.png")
