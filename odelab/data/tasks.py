"""Tasks of the ``odelab fit`` command: data, presets of hyperparameters, per-model options, trivial baselines.

Presets: ``quick`` runs in a few minutes on 2 CPU cores (a smoke run that shows the curves, not the paper's
numbers; adding: 2 epochs = 200 steps of 50 sequences of length 2000, 160 s per epoch with ``--threads 1`` on a
busy 2-core machine, too few for LEM, which needs ~2000 steps to pass MSE 0.01); ``paper`` is the paper's
protocol where one exists:

* fhn: Rusch et al. 2022, Table 8 / official code (d = 16, lr 9.04e-3, batch 32, 400 epochs);
* fhn-irregular (ours, no paper: odelab/data/fhn.py): FHN's sequences observed at irregular times, gaps U[0.04, 0.76]
  (mean 0.4, the regular spacing); the inputs' second feature is the time to the predicted sample (``time_gaps``:
  the continuous-time cells step by it, LSTM/GRU read it); FHN's ``paper`` and ``quick`` presets;
* enso, mackey-glass: Erichson et al. 2025, §3.0 / Table 10 (d = 16, Adam lr 0.01, 400 epochs; τ-GRU τ = 20 / 10 steps);
  the batch size is not given: 32 (ours);
* adding: Erichson et al. 2025, Table 10 for N = 2000 (d = 128, lr 2.6e-3, 200 epochs, τ-GRU τ = 900; N = 5000: τ = 2000,
  else τ = 0.45 N) with LEM's batch 50 and Δt = 1/√N (Rusch et al. 2022, Table 8, App. B.1); ``small``: our CPU
  protocol at N = 2000, the same for every model: d = 32, lr 2.6e-3, batch 50, 20 epochs = 2000 steps (the LEM
  code trains 30 000), gradient-norm clipping at 1.0 (≈ 37 s per LEM / τ-GRU epoch with ``--threads 1``);
* spiral, duffing: Farsang et al. 2024, Table 3 (RMSprop lr 1e-3, batch 16, 1000 / 2000 iterations, rounded up to 16 / 32 epochs of our
  1024 windows; d = 16); option ``reading``: ``ours`` (held-out trajectories, MSE) or ``official`` (the authors'
  one trajectory, read with their L1: results carry ``test_mae`` and the baselines are MAEs), where
  ``valid_window`` sets the validation windows' samples (default 16; 250: rollouts long enough to select on);
* frequency (classification): Erichson et al. 2025, §5, Table 5 gives no hyperparameters; ours: d = 128 (Table 10's
  width for every long-sequence task), Adam lr 1e-3 (inside Table 10's range 5e-4 … 1e-2), batch 32, 50 epochs (the
  paper: τ-GRU at 100 % within 3 epochs without noise and 99 % after 15 with noise, the baselines needing 11–45
  epochs); τ-GRU / Delay GRU τ = 10 steps (ours: the paper's value for its other short-window tasks, HAR-2 and
  Mackey–Glass); ``small``: our CPU protocol for Table 5, the same for every model: d = 32, Adam lr 3e-3, batch 32,
  25 epochs, gradient-norm clipping at 1.0 (≈ 2× the typical norm of the first epochs; without it τ-GRU's gradient
  norm jumps from ~0.5 to 30–300 in epoch 3 on some seeds and training diverges, as in the ``quick`` runs);
  ``paper-clip``: the paper preset with that gradient-norm clipping at 1.0 (unclipped, half of the paper-preset
  runs at noise 0.1 collapse mid-run);
* copy (classification): Erichson et al. 2025, App. F.1, Fig. 7 gives no hyperparameters; ours: d = 128, Adam lr
  1e-3, batch 64, 100 epochs of 2000 sequences (≈ 3100 steps); τ-GRU / Delay GRU τ = T + 9 (the delay hands the
  step where symbol k is due, T + 10 + k, the state just after reading it, h_{k+1}: step n reads h_{n−τ}, the state
  before x_{n−τ}; the official cell, which also lags the input, would use T + 10; our earlier T + 10 missed the
  symbol by one step and τ-GRU stayed at the memoryless loss), LEM Δt = 1/√(T + 20) (the adding task's rule for
  long sequences); ``small``: our CPU protocol for Fig. 7 at T = 1000, the same for every model: d = 32, Adam lr
  3e-3, batch 32, 20 epochs (1260 steps), gradient-norm clipping at 1.0 (≈ 8 s per τ-GRU epoch with
  ``--threads 1``; τ-GRU recalls every symbol after 8–11 epochs, LSTM and LEM none);
* lorenz63 (one step ahead, odelab/data/ode_series.py; no paper gives a protocol): the FHN protocol of Rusch et al. 2022
  (d = 16, lr 9.04e-3, batch 32, 400 epochs) carried over, as the student report did; ``quick``: FHN's quick lr
  0.0155, 100 epochs (≈ 15 s for LEM with ``--threads 1``);
* lorenz96 (likewise): the same with d = 64 (40 observed components on an attractor of Kaplan–Yorke dimension ≈ 27
  do not pass through 16 hidden units);
* smnist, psmnist (classification, the MNIST files read from ``--data-root``, never downloaded; see
  odelab/data/mnist.py): Rusch et al. 2022, §3.2, Table 8 and App. A: d = 128, batch 128, 120 epochs with the lr ÷ 10
  from epoch 100 (0-based; the official ``(epoch + 1) % 100``), Adam lr 1.8e-3 / 3.5e-3, LEM Δt 0.21 / 1.9, and the
  official code's gradient-norm clipping (1.0 / 1.1; the paper gives none); coRNN (Δt, γ, ε) = (0.042, 2.7, 4.7) /
  (0.076, 0.4, 8.0), the official coRNN code's defaults. The psMNIST code's own defaults (lr 0.0073, Δt 0.31, clip
  1.1) are ``--preset paper --lr 0.0073 --model-option dt=0.31`` (a preset sets no model option). ``quick``: the
  paper preset at d = 32 for 2 epochs of all 57 000 training images, no lr drop (≈ 1.5 min per LEM or LSTM epoch
  with ``--threads 1``, estimated from 0.16 s per training batch of 128 and the evaluations; coRNN ≈ 0.7 min, GRU
  ≈ 2 min); ``--train-size N`` trains on N of them; psmnist ``lrc``: Farsang et al. 2024, Tables 8-9 (RMSprop with
  Keras' defaults, lr 1e-3, batch 64, 200 epochs; 64 LRCU cells, 100 units for the others: a preset's
  ``hidden_for``; the LEM code's permutation, the LRC paper gives none);
* eigenworms (classification, the UEA files EigenWorms_TRAIN/_TEST ``.ts`` or ``.arff`` read from ``--data-root``,
  never downloaded; see odelab/data/eigenworms.py): Rusch et al. 2022, §3.3, Table 8: d = 32, Adam lr 2.3e-3, batch 8,
  50 epochs, LEM Δt 1.6e-3 (the official code's defaults: ``--lr 0.00609 --model-option dt=0.00017``); the official
  split of the merged files, 181 / 39 / 39, the same for every seed; UnICORNN with 2 layers, Δt (2.81e-5, 3.43e-2),
  α 0 (Rusch 2023, Table 3.8; its lr 8.59e-3 and 250 epochs not taken: one protocol for every model); coRNN: no
  published setting, its defaults. ``quick``: the paper preset for 10 epochs of the full 17 984-step sequences (LEM:
  14 s per epoch with ``--threads 1``, measured on random data of that size; ≈ 2.5 min); ``--stride K`` keeps every
  K-th step (LEM's and UnICORNN's Δt × K), ``--length N`` the first N steps; baseline: the majority class;
* bidmc-hr, bidmc-rr, bidmc-spo2 (regression, one target per 4000-step window of PPG and ECG: the Monash / UEA / UCR
  regression archive's BIDMC32HR / RR / SpO2 ``.ts`` files read from ``--data-root``, never downloaded; see
  odelab/data/bidmc.py): Rusch et al. 2022, §3.4, Table 8 (healthcare): d = 128, Adam lr 1.56e-3, batch 32, 500 epochs
  with the lr ÷ 10 from epoch 250, LEM Δt 0.19 (the LEM code's defaults: ``--lr 0.00211 --model-option dt=0.2371``);
  UnICORNN 3 layers, dropout 0.1, (Δt, α) = (4.6e-2, 10) for HR, (1.1e-2, 9) for RR and SpO2 (Rusch 2023, Table 3.8;
  its lr 2.88e-3 / 3.98e-3 not taken: one protocol for every model); RR and SpO2 carry the HR protocol over (LEM's
  paper has HR only); coRNN: no published setting, its defaults. The LEM code's split of the merged files (its
  ``random_split`` with seed 123456, reproduced exactly), 5565 / 1192 / 1192, the same for every seed; raw inputs and
  targets as both codes (RMSEs in beats / breaths per minute), ``--standardise`` trains on standardised targets
  (results.json adds the RMSEs in the target's unit). ``quick``: d = 32, 4 epochs (LEM: 160 s per epoch of the full
  4000 steps with ``--threads 1``, 21 s with ``--stride 8``, measured on synthetic files of the real size; reading
  the files 30–75 s); ``--stride K`` keeps every K-th step (LEM's and UnICORNN's Δt × K), ``--length N`` the first N
  steps; with raw targets a short run is spent lifting the readout to the targets' level (≈ 85 bpm): ``--stride 8
  --standardise`` is the smoke run that learns (1.07 bpm on the synthetic files in ≈ 2.5 min); baseline: the mean
  training target;
* person-activity (classification, a class at every step, irregularly sampled: UCI's ``ConfLongDemo_JSI.txt`` read
  from ``--data-root``, never downloaded; see odelab/data/person_activity.py): Farsang et al. 2024, Table 5: RMSprop
  (Keras' defaults ρ 0.9, ε 1e-7, as the authors' TensorFlow code: ``rmsprop-keras``) lr 1e-3, batch 128, 100 epochs (the LRC code's default: 200), windows of 32 samples; d = 100, LRCU-A / LRCU-S 64
  (Table 1's note); no clipping (none stated). The inputs' last feature is the time gap (100 ms -> 1.0): the LRCUs
  step by it, LSTM/GRU read it. The test windows are the ODE-LSTM loader's 20 % (``RandomState(98841)``), the same
  for every seed; a tenth of the training windows, drawn with the run's seed, validate (the paper has no validation
  set and reports the test accuracy after its last epoch; odelab keeps the best validation epoch). ``quick``: the
  paper preset for 5 epochs (≈ 5 s per LSTM epoch, ≈ 37 s per LRCU-A epoch with ``--threads 1``, measured on a
  synthetic file of the real size); baseline: the majority class at every step;
* har2 (classification, UCI HAR's "UCI HAR Dataset" folder read from ``--data-root``, never downloaded; see
  odelab/data/har.py): Erichson et al. 2025, §5, Table 1 / Table 10: Adam lr 1.53e-3, 100 epochs, τ-GRU / Delay GRU
  τ = 10 steps; d = 64, Table 1's width (its 19k τ-GRU parameters are d = 64 with 9 inputs and 2 outputs; Table 10
  and 11 say 128); batch 64 (not given: the coRNN code's HAR-2 default); no clipping (none stated); 9 raw inertial
  channels standardised, activities grouped into 2 classes (Kusupati et al. 2018), 6 452 / 900 / 2 947 windows, the
  900 validating carved from the training file with a fixed seed, the same for every run seed. ``quick``: the paper
  preset for 10 epochs (≈ 10 s per GRU, LEM or τ-GRU epoch with ``--threads 1``, measured on random files of the
  real size; reading them ≈ 4 s); baseline: the majority class;
* google12 (classification, the extracted Speech Commands v2 folder read from ``--data-root``, never downloaded; see
  odelab/data/speech_commands.py): Rusch et al. 2022, §3.6, Table 5 / Table 8 and the official Google12 code: d = 128,
  Adam lr 8.9e-4, batch 100, 60 epochs with the lr ÷ 10 from epoch 50 (0-based; the official ``(epoch + 1) == 50``),
  LEM Δt = 1 (its default), input dropout 0.03 with a fresh mask at every step (the official ``nn.Dropout`` on the
  whole input; ``variational_dropout=False``), no clipping; 12 classes (unknown, silence, the ten words), N = 126
  steps of 80 z-scored log-mel features (computed once, cached); the official split: 84 849 / 9 981 / 11 005 clips
  (validation_list.txt, testing_list.txt, the rest), silence = the six background-noise files, training only.
  ``quick``: d = 32 for 2 epochs, no dropout, no lr drop (≈ 75 s per LEM epoch of all the training clips with
  ``--threads 1``, estimated from 0.06 s per training batch of 100 and the evaluations on random inputs of the real
  size; LSTM / GRU ≈ 1.6 min); ``--train-size N`` trains on N of them; baseline: the majority class ("unknown",
  63 % of the test clips);
* imdb (classification, token inputs: Maas et al.'s ``aclImdb/`` folder, tokenised here, or Keras' ``imdb.npz``,
  read from ``--data-root``, never downloaded; see odelab/data/imdb.py): int64 ids (0 padding, 1 OOV, the
  ``--vocabulary`` − 2 most frequent training words from 2; default 25 000 as coRNN), the last ``--length`` tokens
  of each review pre-padded with 0 (default 256, LRC's; Keras' ``pad_sequences``), the sentiment read at the last
  step; 17 500 / 7 500 / 25 000 reviews, the 7 500 validating carved from the training file with a fixed seed, the
  same for every run seed; ``--glove FILE`` (e.g. glove.6B.100d.txt): pretrained vectors, frozen. ``paper``: coRNN's
  protocol (Rusch & Mishra 2021 / the official IMDB code: d 128, embedding 100 (GloVe-100d when given), Adam 6e-4,
  batch 64, 100 epochs; coRNN (Δt, γ, ε) = (0.054, 4.9, 4.8)); ``lrc``: Farsang et al. 2024, Tables 6–7 (embedding
  64 trained, Adam 1e-3, batch 64, 30 epochs, d 100; their data: vocabulary 20 000 (the preset's
  ``data_options``), length 256; the LRCUs: 64 units, the preset's ``hidden_for``); ``unicornn``: Rusch 2023, Table 3.8 (d 128, embedding 100, Adam 1.67e-4, batch 32, 50
  epochs, embedding dropout 0.65); every preset: UnICORNN 2 layers, Δt (6.6e-3, 0.205), α 0, dropout 0.61,
  τ-GRU / Delay GRU τ = 1, state dropout 0.04. ``quick``: d 32, embedding 32, Adam 1e-3, batch 64, 2 epochs (per epoch with ``--threads
  1`` on a busy 2-core machine, synthetic files of the real size: coRNN 9 s, UnICORNN 19 s, LSTM 23 s, LEM 27 s, GRU
  31 s, LRCU-A 46 s, τ-GRU 48 s; reading the files 6 s (.npz) to 25 s (aclImdb/));
  ``--train-size N`` trains on N of the 17 500; baseline: the majority class;
* ncifar, scifar (classification, CIFAR-10's python batches ``cifar-10-batches-py`` read from ``--data-root``, never
  downloaded; see odelab/data/cifar.py): nCIFAR (Rusch et al. 2022, §3.2, Table 8 and App. A): the 32 image rows of
  96 features (row, channel, column) in [0, 1], then 968 steps of one fixed noise tail to N = 1000, which the loader
  does not pad (19 GB for the training set) but hands to the model (``meta["suffix"]``, appended by
  ``SequenceRegressor``); option ``noise``: ``gaussian`` (N(0, 1), the official code, default) or ``uniform`` (U[0,
  1), the thesis's word; ``odelab sweep --option noise=uniform``; ``fit``'s ``--noise`` takes numbers), drawn from a
  generator seeded 5544, the same for every seed. Paper: d = 128, Adam lr 1.8e-3, batch 120, 120 epochs with the lr
  ÷ 10 from epoch 100, LEM Δt 0.95, no clipping (the official code has none); coRNN (Δt, γ, ε) = (0.034, 1.3, 12.7),
  the official coRNN code's defaults; τ-GRU / Delay GRU τ = 965 (Erichson et al. 2025, Table 10; its lr 0.0022 and
  50 epochs not taken: one protocol for every model). The official LEM code's own defaults (lr 0.00322, batch 100,
  Δt 0.44) are ``--preset paper --lr 0.00322 --batch-size 100 --model-option dt=0.44``. sCIFAR (Erichson et al.
  2025, §5, Table 10): 1024 steps of one pixel's (red, green, blue), row-major, no noise; d = 128, Adam lr 3.5e-3,
  50 epochs, τ-GRU / Delay GRU τ = 30; batch 120 (not given: LEM's nCIFAR batch, ours); LEM, coRNN: no published
  setting, their defaults. Split of both: 48 000 / 2 000 / 10 000 (LEM's), the 2 000 drawn with the run's seed.
  ``quick``: the paper preset at d = 32 for 1 epoch, no lr drop (≈ 1–1.5 s per training batch of 120 for LEM on
  nCIFAR with ``--threads 1``, ≈ 0.9 s on sCIFAR: 6–10 min per epoch of 400 batches, measured on random files of the
  real size); ``--train-size N`` trains on N of the 48 000 images (4 800: about a minute); baseline: the majority
  class;
* ptb-char, ptb-word (language modelling, token inputs, the next token at every step: Mikolov's PTB files
  ``ptb.char.{train,valid,test}.txt`` / ``ptb.{train,valid,test}.txt`` read from ``--data-root``, never downloaded;
  see odelab/data/ptb.py): each split's stream (an ``<eos>`` after every line) cut into windows of ``--length``
  tokens (lamb's BPTT: 150 / 70), trained and evaluated as lamb does: stateful truncated BPTT (``stateful``: the
  batch's streams carry their states from window to window) and the epoch of the lowest validation cross-entropy
  (``select="loss"``); results add ``test_bits_per_character`` (CE / ln 2) / ``test_perplexity`` (exp CE). ``paper``:
  Rusch et al. 2022, §3.7, Table 8 and LEM's lamb configs (src/PTB/LEM_configs): char d 1024, embedding 200, Adam
  6.58e-4, batch 128, input / output dropout 0.047 / 0.191; word d 256, embedding 256, Adam 6.84e-4, batch 64,
  dropout 0.425 / 0.457 (fresh masks at every step, as lamb's); LEM Δt = 1; lamb's gradient-norm clipping (1.0 /
  4.0) and L2 penalty (2.63e-4 / 3.31e-4) rescaled to our per-token loss (÷ 150 / ÷ 70, see ``_PTB_PAPER``); 760 /
  962 epochs ≈ lamb's 200 000 steps; the word model's input and output embeddings tied (``tie_embedding``, the
  repository's config). Not reproduced: lamb's state dropout (0.185 / 0.196; its own recurrent dropout, not
  checked against odelab's ``state_dropout``) and its weight averaging. ``quick``: d 64, embedding 32, no dropout, 1 epoch: char ≈ 1.3 min for LEM / 1.5
  min for LSTM with ``--threads 1`` (≈ 1 min training, the rest evaluating; 36 000 windows of synthetic files of
  the real size); word ≈ 9 min for LEM, 10–11 for LSTM / GRU (1.6–1.8 s per batch of 64: the 10 000-way softmax),
  ``--train-size 2000`` (windows, a prefix of the text) ≈ 2 min; baseline: the training file's unigram
  frequencies (cross-entropy);
* csv: no paper; ``quick`` only.

The classification tasks' ``quick`` presets (d = 32, lr 3e-3, batch 32) fit a 3-seed table of 3–4 models in
~25 minutes on a busy 2-core CPU (``--threads 1``): frequency 12 epochs (~5–13 s each), copy 4 epochs (~20 s each).

Classification tasks (``loss="cross_entropy"``) have int64 class targets and a model with ``classes`` logits; their
runs report accuracy and cross-entropy, and their ``baselines`` return an accuracy (a fraction) or, where
``baseline_metrics`` says ``"cross-entropy"``, a mean cross-entropy in nats per predicted symbol.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from .adding import adding
from .bidmc import bidmc, bidmc_models, bidmc_report
from .cifar import ncifar, scifar
from .copy import copy_task, memoryless_cross_entropy, recalled_accuracy
from .csv_series import csv_persistence_rmse, csv_series, persistence_rmse, rmse_by_column
from .delay_oscillators import enso, mackey_glass
from .eigenworms import eigenworms, eigenworms_models
from .fhn import fitzhugh_nagumo, fitzhugh_nagumo_irregular, irregular_extrapolation_rmse, irregular_persistence_rmse
from .frequency import chance_accuracy, frequency
from .har import har2
from .imdb import VOCABULARY as IMDB_VOCABULARY, imdb, imdb_models
from .mnist import majority_class_accuracy, mnist
from .neural_ode import WINDOW, duffing, initial_state_mae, initial_state_rmse, spiral
from .ode_series import LORENZ63, LORENZ96, lorenz63, lorenz96, rmse_by_component
from .person_activity import majority_class_accuracy as majority_step_accuracy, person_activity
from .ptb import LENGTH as PTB_LENGTH, metrics as ptb_metrics, ptb, unigram_cross_entropy
from .speech_commands import speech_commands


@dataclass
class Task:
    """One ``odelab fit`` task.

    ``load(seed, **options) -> {"train"|"valid"|"test": (inputs, targets), optionally "meta": dict}``;
    ``options`` maps a keyword of ``load`` to the CLI option (argparse destination) that sets it;
    ``model_options(model, options)`` gives extra constructor keywords for a model (e.g. τ-GRU's τ);
    ``baselines`` name -> ``f(data) -> test RMSE`` of a trivial predictor the model must beat (classification:
    its test accuracy, or its mean cross-entropy where ``baseline_metrics[name] == "cross-entropy"``);
    ``report(test_predictions, data)`` optional extra entries for results.json; ``summary(result)`` likewise, from
    the result alone (no predictions: e.g. bits per character from the test cross-entropy);
    ``target``: ``"sequence"`` (a target at every step) or ``"last"`` (one target per sequence, read from the
    last step); ``loss``: ``"mse"`` (regression, float targets) or ``"cross_entropy"`` (classification: int64
    class targets (N,) or (N, T), ``classes`` logits per prediction); ``plot``: ``"series"``, ``"phase"``,
    ``"scatter"``, ``"forecast"``, ``"classes"`` (confusion matrix and accuracy per class), ``"symbols"``
    (decoded sequences) or ``"tokens"`` (a large vocabulary: the test cross-entropy per position); ``time_gaps``:
    irregularly sampled, the inputs' last feature is the time each sample lasts (``odelab.models.SequenceRegressor``:
    the continuous-time cells step by it, the others read it); ``classes``: a loader's ``meta["class_count"]``
    overrides it (e.g. a vocabulary read from the files).
    """

    name: str
    load: Callable[..., dict]
    presets: dict[str, dict]  # preset -> TrainConfig fields + hidden_size
    options: dict[str, str] = field(default_factory=dict)
    hidden: dict[str, int] = field(default_factory=dict)  # per-model hidden size where the paper's table differs
    model_options: Callable[[str, dict], dict] = lambda model, options: {}
    baselines: dict[str, Callable[[dict], float]] = field(default_factory=dict)
    report: Callable[[Tensor, dict], dict] | None = None
    summary: Callable[[dict], dict] | None = None  # extra entries for results.json from the result alone
    target: str = "sequence"
    plot: str = "series"
    sample_dt: float = 1.0  # time between samples, for plots
    loss: str = "mse"
    classes: int | None = None
    baseline_metrics: dict[str, str] = field(default_factory=dict)  # classification: name -> "cross-entropy"
    time_gaps: bool = False  # irregular sampling: the inputs' last feature is each sample's duration
    vocabulary: int | None = None  # token inputs: int64 ids (N, T), 0 padding; the model embeds them

    def __post_init__(self):
        if self.target not in ("sequence", "last"):
            raise ValueError(f"Task {self.name}: target: expected 'sequence' or 'last', got {self.target!r}")
        if self.loss not in ("mse", "cross_entropy"):
            raise ValueError(f"Task {self.name}: loss: expected 'mse' or 'cross_entropy', got {self.loss!r}")
        if self.loss == "cross_entropy" and (not isinstance(self.classes, int) or self.classes < 2):
            raise ValueError(f"Task {self.name}: a cross-entropy task needs classes >= 2, got {self.classes!r}")
        if self.loss == "mse" and self.classes is not None:
            raise ValueError(f"Task {self.name}: classes is for cross-entropy tasks, not {self.loss!r}")

    @property
    def classification(self) -> bool:
        return self.loss == "cross_entropy"


def settings(task: Task, preset: str, model: str) -> dict:
    """TrainConfig fields + hidden_size (+ the head's keys) of ``model`` under ``preset``: the preset, with the
    model's hidden size from the paper's table where it differs: the preset's ``hidden_for`` (model -> size), else
    the task's ``hidden``."""
    values = dict(task.presets[preset])
    sizes = {**task.hidden, **values.pop("hidden_for", {})}
    return {**values, **({"hidden_size": sizes[model]} if model in sizes else {})}


def forecast_horizon(x: Tensor, y: Tensor) -> int:
    """H where the targets are the inputs H samples ahead (y_n = x_{n+H} wherever both exist), read off the data;
    1 when they are not the same series (e.g. other features)."""
    for h in range(1, x.shape[1]):
        if x.shape[-1] == y.shape[-1] and torch.equal(x[:, h:], y[:, :-h]):
            return h
    return 1


def linear_extrapolation_rmse(x: Tensor, y: Tensor) -> float:
    """RMSE of predicting y_n = x_n + H (x_n − x_{n−1}) (H: :func:`forecast_horizon`; 2 x_n − x_{n−1} one step
    ahead) wherever x_{n−1} exists: the bar a model must beat."""
    h = forecast_horizon(x, y)
    return float(((x[:, 1:] + h * (x[:, 1:] - x[:, :-1]) - y[:, 1:]) ** 2).mean().sqrt())


def mean_predictor_rmse(data: dict) -> float:
    """RMSE on test of predicting the mean training target (per output feature)."""
    y_train, y_test = data["train"][1], data["test"][1]
    mean = y_train.reshape(-1, y_train.shape[-1]).mean(0)
    return float(((y_test - mean) ** 2).mean().sqrt())


ONE_STEP_BASELINES = {
    "persistence": lambda data: persistence_rmse(*data["test"]),
    "linear extrapolation": lambda data: linear_extrapolation_rmse(*data["test"]),
}


def _delay_models(tau: float) -> Callable[[str, dict], dict]:
    return lambda model, options: {"tau": tau} if model in ("taugru", "delaygru") else {}


def _adding_models(model: str, options: dict) -> dict:
    length = options.get("length", 2000)
    if model in ("taugru", "delaygru"):
        return {"tau": {2000: 900.0, 5000: 2000.0}.get(length, float(round(0.45 * length)))}
    if model == "lem":
        return {"dt": 1.0 / math.sqrt(length)}
    return {}


def _copy_models(model: str, options: dict) -> dict:
    length = options.get("length", 1000)
    if model in ("taugru", "delaygru"):
        # Symbol k is read at step k and due at step T + 10 + k. Step n (reading x_n, giving h_{n+1}) reads
        # h_{n−τ}, the state *before* x_{n−τ}; so τ = T + 9 hands the output step the state h_{k+1} just after
        # symbol k. τ = T + 10 hands it h_k, one step too early (symbol k not yet read): the delay path is useless
        # and τ-GRU stays at the memoryless loss (measured, d 32, 20 epochs: 0.0204, recall 12 %).
        return {"tau": float(length + 9)}
    if model == "lem":
        return {"dt": 1.0 / math.sqrt(length + 20)}
    return {}


def _mnist_models(lem_dt: float, cornn: dict) -> Callable[[str, dict], dict]:
    """LEM's Δt (Rusch et al. 2022, Table 8) and coRNN's (Δt, γ, ε) (its official code's defaults) on (p)sMNIST."""
    def options(model: str, data_options: dict) -> dict:
        if model in ("lem", "lem-official"):
            return {"dt": lem_dt}
        return dict(cornn) if model in ("cornn", "cornn-official") else {}
    return options


def _mnist_presets(lr: float, clip: float) -> dict[str, dict]:
    """paper: Rusch et al. 2022, Table 8 and §3.2 with the official code's clipping; quick: d 32, 2 epochs."""
    return {"paper": dict(hidden_size=128, epochs=120, lr=lr, batch_size=128, clip=clip, lr_milestones=(100,)),
            "quick": dict(hidden_size=32, epochs=2, lr=lr, batch_size=128, clip=clip)}


# Farsang et al. 2024, Tables 8-9 and Table 1's note: RMSprop (Keras' defaults) 1e-3, batch 64, 200 epochs; 64 LRCU
# cells, 100 units for the others; no clipping (none stated)
_LRC_PSMNIST = dict(hidden_size=100, hidden_for={"lrcu-a": 64, "lrcu-s": 64}, epochs=200, lr=1e-3, batch_size=64,
                    optimizer="rmsprop-keras")


def _mnist_task(name: str, permuted: bool, presets: dict, model_options: Callable[[str, dict], dict]) -> Task:
    return Task(name, load=lambda seed, path=None, train_size=None: mnist(path, permuted, seed, train_size=train_size),
                presets=presets, options={"path": "data_root", "train_size": "train_size"},
                model_options=model_options, baselines={"majority class": majority_class_accuracy}, target="last",
                loss="cross_entropy", classes=10, plot="classes")


def _cifar_models(lem_dt: float | None, cornn: dict, tau: float) -> Callable[[str, dict], dict]:
    """LEM's Δt (Rusch et al. 2022, Table 8), coRNN's (Δt, γ, ε) (its official code's defaults) and τ-GRU's τ
    (Erichson et al. 2025, Table 10) on nCIFAR / sCIFAR; ``None`` / ``{}``: no published setting, the defaults."""
    def options(model: str, data_options: dict) -> dict:
        if model in ("lem", "lem-official") and lem_dt is not None:
            return {"dt": lem_dt}
        if model in ("cornn", "cornn-official"):
            return dict(cornn)
        return {"tau": tau} if model in ("taugru", "delaygru") else {}
    return options


def _cifar_task(name: str, load: Callable[..., dict], presets: dict, model_options: Callable[[str, dict], dict],
                options: dict | None = None) -> Task:
    return Task(name, load=load, presets=presets,
                options={"path": "data_root", "train_size": "train_size", **(options or {})},
                model_options=model_options, baselines={"majority class": majority_class_accuracy}, target="last",
                loss="cross_entropy", classes=10, plot="classes")


def _bidmc_task(target: str) -> Task:
    """BIDMC32 ``target`` (odelab/data/bidmc.py): paper: Rusch et al. 2022, Table 8 (healthcare) and §3.4, the lr ÷ 10
    from epoch 250 (0-based; the code's ``(epoch + 1) == 250``); quick: d = 32, 4 epochs (see the module docstring)."""
    return Task(f"bidmc-{target}",
                load=lambda seed, path=None, length=None, stride=1, standardise=False:
                bidmc(path, target, length=length, stride=stride, standardise=standardise),
                presets={"paper": dict(hidden_size=128, epochs=500, lr=1.56e-3, batch_size=32, lr_milestones=(250,)),
                         "quick": dict(hidden_size=32, epochs=4, lr=1.56e-3, batch_size=32)},
                options={"path": "data_root", "length": "length", "stride": "stride", "standardise": "standardise"},
                model_options=bidmc_models(target), baselines={"mean predictor": mean_predictor_rmse},
                report=bidmc_report, target="last", plot="scatter")


def _neural_ode_models(model: str, options: dict) -> dict:
    return {"dt": 25.0 / 999} if model in ("node", "lrc-ode-a", "lrc-ode-s") else {}  # the data's sample spacing


def _delay_presets() -> dict[str, dict]:
    return {"paper": dict(hidden_size=16, epochs=400, lr=0.01, batch_size=32),
            "quick": dict(hidden_size=16, epochs=30, lr=0.01, batch_size=32)}


def _reads_mae(data: dict) -> bool:
    return data.get("meta", {}).get("metric") == "MAE"


def _initial_state_error(data: dict) -> float:
    """Persistence of the initial state on test: an MAE under the paper's reading, else an RMSE."""
    return (initial_state_mae if _reads_mae(data) else initial_state_rmse)(*data["test"])


def _mean_predictor_error(data: dict) -> float:
    """The mean training target on test: an MAE under the paper's reading, else an RMSE."""
    if not _reads_mae(data):
        return mean_predictor_rmse(data)
    y_train, y_test = data["train"][1], data["test"][1]
    return float((y_test - y_train.reshape(-1, y_train.shape[-1]).mean(0)).abs().mean())


def _neural_ode_task(name: str, load: Callable[..., dict], iterations: int) -> Task:
    return Task(name, load=lambda seed, reading="ours", valid_window=WINDOW: load(seed=seed, reading=reading,
                                                                              valid_window=valid_window),
                presets=_neural_ode_presets(iterations), options={"reading": "reading", "valid_window": "valid_window"},
                model_options=_neural_ode_models, hidden={"node": 32},  # the paper's MLP width
                baselines={"initial state (persistence)": _initial_state_error, "mean predictor": _mean_predictor_error},
                report=lambda prediction, data: {"test_mae": float((prediction - data["test"][1]).abs().mean())},
                plot="phase", sample_dt=25.0 / 999)


def _one_step_ode_task(name: str, load: Callable[..., dict], recipe: dict, hidden: int, quick_epochs: int,
                       plot: str) -> Task:
    """paper: the FHN protocol of Rusch et al. 2022 (Table 8) carried over, as the student report did; quick: FHN's
    quick learning rate and ``quick_epochs``. Baselines and RMSEs in standardised units, ``report`` in the system's."""
    presets = {"paper": dict(hidden_size=hidden, epochs=400, lr=9.04e-3, batch_size=32),
               "quick": dict(hidden_size=hidden, epochs=quick_epochs, lr=0.01545927736419477, batch_size=32)}
    return Task(name, load=lambda seed: load(seed=seed), presets=presets, baselines=ONE_STEP_BASELINES,
                report=rmse_by_component, plot=plot, sample_dt=recipe["spacing"])


def _neural_ode_presets(iterations: int) -> dict[str, dict]:
    """paper: Table 3; official-code: the authors' run_ode.py (Adam 1e-3, L1 loss, 2000 iterations for every task)."""
    epochs = math.ceil(iterations * 16 / 1024)  # batch 16 over 1024 windows: 64 iterations per epoch
    return {"paper": dict(hidden_size=16, epochs=epochs, lr=1e-3, batch_size=16, optimizer="rmsprop"),
            "official-code": dict(hidden_size=16, epochs=math.ceil(2000 * 16 / 1024), lr=1e-3, batch_size=16,
                                  regression_loss="l1"),
            "quick": dict(hidden_size=16, epochs=epochs, lr=3e-3, batch_size=16)}


def _ptb_models(model: str, options: dict) -> dict:
    """LEM's Δt = 1 on PTB (Rusch et al. 2022, Table 8: "/", fixed to 1 and not tuned)."""
    return {"dt": 1.0} if model in ("lem", "lem-official") else {}


# LEM's lamb configs (tk-rusch/LEM, src/PTB/LEM_configs/LEM_config_char, _word; Table 8 rounds the lr): lamb's loss
# is each window's SUMMED cross-entropy (mean over the batch) + l2_penalty · Σ w² / 2, ours the mean per token, L
# times smaller: its max_grad_norm and l2_penalty become clip = max_grad_norm / L and weight_decay = l2_penalty / L
# (Adam's steps do not change with the loss's scale); lamb's dropout masks are fresh at every step
# (shared_mask_dropout False). Epochs: lamb's 1000 turns × 200 steps = 200 000 steps at ≈ 263 (char, ≈ 5.06 M
# tokens) / 208 (word, 929 589 tokens) steps per epoch of our windows. As lamb: stateful truncated BPTT (the batch
# size is the number of parallel streams, whose states carry from window to window; evaluation likewise) and the
# epoch of the lowest validation cross-entropy.
_PTB_PAPER = {
    "char": dict(hidden_size=1024, embedding_size=200, epochs=760, lr=6.5827e-4, batch_size=128, clip=1.0 / 150,
                 weight_decay=2.6325e-4 / 150, input_dropout=0.0474, output_dropout=0.1908,
                 variational_dropout=False, stateful=True, select="loss"),
    "word": dict(hidden_size=256, embedding_size=256, epochs=962, lr=6.8436e-4, batch_size=64, clip=4.0 / 70,
                 weight_decay=3.3147e-4 / 70, input_dropout=0.4248, output_dropout=0.4568,
                 variational_dropout=False, stateful=True, select="loss", tie_embedding=True),
}


def _ptb_task(level: str) -> Task:
    """PTB language modelling (odelab/data/ptb.py): the next token at every step; ``paper``: :data:`_PTB_PAPER`;
    ``quick``: d 64, embedding 32, 1 epoch, no dropout (see the module docstring)."""
    paper = _PTB_PAPER[level]
    quick = {k: v for k, v in paper.items()
             if k not in ("input_dropout", "output_dropout", "variational_dropout", "tie_embedding")}
    quick.update(hidden_size=64, embedding_size=32, epochs=1)
    return Task(f"ptb-{level}",
                load=lambda seed, path=None, length=PTB_LENGTH[level], train_size=None:
                ptb(path, level, length=length, train_size=train_size),
                presets={"paper": paper, "quick": quick},
                options={"path": "data_root", "length": "length", "train_size": "train_size"},
                model_options=_ptb_models, baselines={"unigram": unigram_cross_entropy},
                baseline_metrics={"unigram": "cross-entropy"}, summary=ptb_metrics(level), loss="cross_entropy",
                # the real files' counts (words: 9 999 types and <eos>; characters: about 50); a run takes the
                # data's own count, meta["class_count"], and embeds meta["vocabulary"] = classes + 1 ids
                classes=10_000 if level == "word" else 50, plot="tokens",
                vocabulary=10_001 if level == "word" else 51)


TASKS = {
    "fhn": Task(
        "fhn",
        load=lambda seed, solver="odelab": fitzhugh_nagumo(seed=seed, solver=solver),
        presets={
            # the paper's protocol (Rusch et al. 2022, Table 8 / official FitzHughNagumo_task.py)
            "paper": dict(hidden_size=16, epochs=400, lr=9.04e-3, batch_size=32),
            # the official LEM_cuda/example settings (same data and model, lr 0.01546, 500 epochs)
            "official-cuda": dict(hidden_size=16, epochs=500, lr=0.01545927736419477, batch_size=32),
            # ~3 minutes on a 2-core CPU with --threads 1 (the official-cuda learning rate, 100 epochs)
            "quick": dict(hidden_size=16, epochs=100, lr=0.01545927736419477, batch_size=32),
            # the learning rate of the coRNN search's best setting (model cornn-searched), trained as its extension
            # (800 epochs; docs/cornn_fhn_search.md)
            "cornn-search": dict(hidden_size=24, epochs=800, lr=0.058364053040922785, batch_size=32),
        },
        options={"solver": "data_solver"},
        hidden={"cornn": 24, "cornn-official": 24, "cornn-searched": 24},  # Rusch et al. 2022, Table 4: coRNN, 24 units
        baselines=ONE_STEP_BASELINES,  # persistence: 7.85e-2 in Rusch's thesis (ch. 5), ours 7.87e-2 on test
        sample_dt=0.4,
    ),
    "fhn-irregular": Task(
        "fhn-irregular",
        load=lambda seed: fitzhugh_nagumo_irregular(seed=seed),
        presets={"paper": dict(hidden_size=16, epochs=400, lr=9.04e-3, batch_size=32),
                 "quick": dict(hidden_size=16, epochs=100, lr=0.01545927736419477, batch_size=32)},
        baselines={"persistence": lambda data: irregular_persistence_rmse(*data["test"]),
                   "linear extrapolation": lambda data: irregular_extrapolation_rmse(*data["test"])},
        sample_dt=0.4,
        time_gaps=True,
    ),
    "enso": Task("enso", load=lambda seed, horizon=1, stride=1: enso(seed=seed, horizon=horizon, stride=stride),
                 presets=_delay_presets(), options={"horizon": "horizon", "stride": "stride"},
                 model_options=_delay_models(20.0), baselines=ONE_STEP_BASELINES, sample_dt=0.1),
    "mackey-glass": Task("mackey-glass",
                         load=lambda seed, horizon=1, stride=1: mackey_glass(seed=seed, horizon=horizon, stride=stride),
                         presets=_delay_presets(), options={"horizon": "horizon", "stride": "stride"},
                         model_options=_delay_models(10.0), baselines=ONE_STEP_BASELINES, sample_dt=0.25),
    "adding": Task(
        "adding",
        load=lambda seed, length=2000: adding(length=length, seed=seed),
        presets={"paper": dict(hidden_size=128, epochs=200, lr=2.6e-3, batch_size=50),
                 "quick": dict(hidden_size=32, epochs=2, lr=2.6e-3, batch_size=50),
                 "small": dict(hidden_size=32, epochs=20, lr=2.6e-3, batch_size=50, clip=1.0)},
        options={"length": "length"},
        model_options=_adding_models,
        baselines={"mean predictor": mean_predictor_rmse},
        target="last",
        plot="scatter",
    ),
    "spiral": _neural_ode_task("spiral", spiral, 1000),
    "duffing": _neural_ode_task("duffing", duffing, 2000),
    "lorenz63": _one_step_ode_task("lorenz63", lorenz63, LORENZ63, hidden=16, quick_epochs=100, plot="phase"),
    "lorenz96": _one_step_ode_task("lorenz96", lorenz96, LORENZ96, hidden=64, quick_epochs=100, plot="series"),
    "frequency": Task(
        "frequency",
        load=lambda seed, noise=0.1: frequency(noise=noise, seed=seed),
        presets={"paper": dict(hidden_size=128, epochs=50, lr=1e-3, batch_size=32),
                 "quick": dict(hidden_size=32, epochs=12, lr=3e-3, batch_size=32),
                 "small": dict(hidden_size=32, epochs=25, lr=3e-3, batch_size=32, clip=1.0),
                 "paper-clip": dict(hidden_size=128, epochs=50, lr=1e-3, batch_size=32, clip=1.0)},
        options={"noise": "noise"},
        model_options=_delay_models(10.0),
        baselines={"chance": chance_accuracy},
        target="last",
        loss="cross_entropy",
        classes=100,
        plot="classes",
        sample_dt=1.0 / 999,
    ),
    "copy": Task(
        "copy",
        load=lambda seed, length=1000: copy_task(length=length, seed=seed),
        presets={"paper": dict(hidden_size=128, epochs=100, lr=1e-3, batch_size=64),
                 "quick": dict(hidden_size=32, epochs=4, lr=3e-3, batch_size=32),
                 "small": dict(hidden_size=32, epochs=20, lr=3e-3, batch_size=32, clip=1.0)},
        options={"length": "length"},
        model_options=_copy_models,
        baselines={"memoryless": lambda data: memoryless_cross_entropy(data["test"][1].shape[1] - 20)},
        baseline_metrics={"memoryless": "cross-entropy"},
        report=lambda logits, data: {"test_recalled_accuracy": recalled_accuracy(logits, data)},
        loss="cross_entropy",
        classes=10,
        plot="symbols",
    ),
    "smnist": _mnist_task("smnist", False, _mnist_presets(1.8e-3, 1.0),
                          _mnist_models(0.21, dict(dt=0.042, gamma=2.7, epsilon=4.7))),
    "psmnist": _mnist_task("psmnist", True, {**_mnist_presets(3.5e-3, 1.1), "lrc": _LRC_PSMNIST},
                           _mnist_models(1.9, dict(dt=0.076, gamma=0.4, epsilon=8.0))),
    "eigenworms": Task(
        "eigenworms",
        load=lambda seed, path=None, length=None, stride=1: eigenworms(path, length=length, stride=stride),
        presets={"paper": dict(hidden_size=32, epochs=50, lr=2.3e-3, batch_size=8),
                 "quick": dict(hidden_size=32, epochs=10, lr=2.3e-3, batch_size=8)},
        options={"path": "data_root", "length": "length", "stride": "stride"},
        model_options=eigenworms_models,
        baselines={"majority class": majority_class_accuracy},
        target="last",
        loss="cross_entropy",
        classes=5,
        plot="classes",
    ),
    "bidmc-hr": _bidmc_task("hr"),
    "bidmc-rr": _bidmc_task("rr"),
    "bidmc-spo2": _bidmc_task("spo2"),
    "person-activity": Task(
        "person-activity",
        load=lambda seed, path=None: person_activity(path, seed=seed),
        presets={"paper": dict(hidden_size=100, epochs=100, lr=1e-3, batch_size=128, optimizer="rmsprop-keras"),
                 "quick": dict(hidden_size=100, epochs=5, lr=1e-3, batch_size=128, optimizer="rmsprop-keras")},
        options={"path": "data_root"},
        hidden={"lrcu-a": 64, "lrcu-s": 64},  # Farsang et al. 2024, Table 1: 64 LRCU cells, 100 for the others
        baselines={"majority class": majority_step_accuracy},
        loss="cross_entropy",
        classes=7,
        plot="classes",
        time_gaps=True,
    ),
    "har2": Task(
        "har2",
        load=lambda seed, path=None: har2(path),
        presets={"paper": dict(hidden_size=64, epochs=100, lr=1.53e-3, batch_size=64),
                 "quick": dict(hidden_size=64, epochs=10, lr=1.53e-3, batch_size=64)},
        options={"path": "data_root"},
        model_options=_delay_models(10.0),
        baselines={"majority class": majority_class_accuracy},
        target="last",
        loss="cross_entropy",
        classes=2,
        plot="classes",
    ),
    "google12": Task(
        "google12",
        load=lambda seed, path=None, train_size=None, progress=True: speech_commands(path, seed=seed,
                                                                                     train_size=train_size,
                                                                                     progress=progress),
        # Rusch et al. 2022, Table 8 / official google12_task.py: the lr ÷ 10 after epoch 50, input dropout 0.03
        # (nn.Dropout on the whole (time, batch, 80) input: a fresh mask at every step), the readout left at
        # nn.Linear's initialisation
        presets={"paper": dict(hidden_size=128, epochs=60, lr=8.9e-4, batch_size=100, lr_milestones=(50,),
                               input_dropout=0.03, variational_dropout=False, readout_init="default"),
                 "quick": dict(hidden_size=32, epochs=2, lr=8.9e-4, batch_size=100)},
        options={"path": "data_root", "train_size": "train_size"},
        baselines={"majority class": majority_class_accuracy},
        target="last",
        loss="cross_entropy",
        classes=12,
        plot="classes",
    ),
    "ncifar": _cifar_task(
        "ncifar",
        lambda seed, path=None, noise="gaussian", train_size=None: ncifar(seed, path, noise=noise,
                                                                          train_size=train_size),
        # Rusch et al. 2022, Table 8 and §3.2 (the official code: no clipping)
        {"paper": dict(hidden_size=128, epochs=120, lr=1.8e-3, batch_size=120, lr_milestones=(100,)),
         "quick": dict(hidden_size=32, epochs=1, lr=1.8e-3, batch_size=120)},
        _cifar_models(0.95, dict(dt=0.034, gamma=1.3, epsilon=12.7), 965.0), {"noise": "padding_noise"}),
    "scifar": _cifar_task(
        "scifar",
        lambda seed, path=None, train_size=None: scifar(seed, path, train_size=train_size),
        # Erichson et al. 2025, Table 10 (batch: LEM's nCIFAR batch, ours)
        {"paper": dict(hidden_size=128, epochs=50, lr=3.5e-3, batch_size=120),
         "quick": dict(hidden_size=32, epochs=1, lr=3.5e-3, batch_size=120)},
        _cifar_models(None, {}, 30.0)),
    "imdb": Task(
        "imdb",
        load=lambda seed, path=None, vocabulary=IMDB_VOCABULARY, length=256, glove=None, train_size=None,
        freeze_embedding=True: imdb(path, seed=seed, vocabulary=vocabulary, length=length, glove=glove,
                                    train_size=train_size, freeze_embedding=freeze_embedding),
        presets={"paper": dict(hidden_size=128, embedding_size=100, epochs=100, lr=6e-4, batch_size=64),
                 # LRC, Table 1's note: 64 LRCU cells, 100 units for the others
                 "lrc": dict(hidden_size=100, hidden_for={"lrcu-a": 64, "lrcu-s": 64}, embedding_size=64, epochs=30,
                             lr=1e-3, batch_size=64, data_options={"vocabulary": 20_000}),
                 "unicornn": dict(hidden_size=128, embedding_size=100, epochs=50, lr=1.67e-4, batch_size=32,
                                  input_dropout=0.65),
                 "quick": dict(hidden_size=32, embedding_size=32, epochs=2, lr=1e-3, batch_size=64)},
        options={"path": "data_root", "vocabulary": "vocabulary", "length": "length", "glove": "glove",
                 "train_size": "train_size"},
        model_options=imdb_models,
        baselines={"majority class": majority_class_accuracy},
        target="last",
        loss="cross_entropy",
        classes=2,
        plot="classes",
        vocabulary=IMDB_VOCABULARY,
    ),
    "ptb-char": _ptb_task("char"),
    "ptb-word": _ptb_task("word"),
    "csv": Task(
        "csv",
        load=lambda seed, path=None, columns=None, horizon=1, window=64, strict=None, encoding=None, difference=False,
        missing="error", time=None: csv_series(path, columns, horizon, window, strict=strict, encoding=encoding,
                                               difference=difference, missing=missing, time=time),
        presets={"quick": dict(hidden_size=32, epochs=30, lr=3e-3, batch_size=16)},
        options={"path": "csv", "columns": "columns", "horizon": "horizon", "window": "window", "strict": "strict",
                 "encoding": "encoding", "difference": "difference", "missing": "missing", "time": "time"},
        baselines={"persistence": csv_persistence_rmse},
        report=lambda prediction, data: {"test_rmse_by_column": rmse_by_column(prediction, *data["test"], data["meta"])},
        plot="forecast",
    ),
}
