"""The copy task (Erichson et al. 2025, App. F.1; layout of Arjovsky et al. 2016): the sequences against the layout
written out here, the memoryless cross-entropy against an explicit predictor, and the task's wiring."""
import math

import pytest
import torch
from torch.nn import functional as F

import odelab.data.tasks
from odelab.data import copy_task
from odelab.data.copy import memoryless_cross_entropy, recalled_accuracy

SMALL = (("train", 40), ("valid", 3), ("test", 5))


def arjovsky_sequence(symbols: list[int], T: int) -> tuple[list[int], list[int]]:
    """Input: the 10 symbols, T − 1 blanks (0), the delimiter (9), 10 blanks; target: T + 10 blanks, the symbols."""
    return symbols + [0] * (T - 1) + [9] + [0] * 10, [0] * (T + 10) + symbols


@pytest.mark.parametrize("T", [3, 1000])
def test_sequences_follow_the_standard_layout(T):
    data = copy_task(length=T, seed=4, sizes=SMALL)
    for split, count in SMALL:
        x, y = data[split]
        assert x.shape == (count, T + 20, 10) and x.dtype == torch.float32
        assert y.shape == (count, T + 20) and y.dtype == torch.int64
        assert torch.equal(x.sum(-1), torch.ones(count, T + 20))  # one-hot
        for k in range(count):
            symbols = x[k, :10].argmax(-1).tolist()
            assert all(1 <= s <= 8 for s in symbols)
            inputs, targets = arjovsky_sequence(symbols, T)
            assert x[k].argmax(-1).tolist() == inputs
            assert y[k].tolist() == targets
    drawn = torch.cat([data[s][0][:, :10].argmax(-1).flatten() for s, _ in SMALL])
    assert set(drawn.tolist()) == set(range(1, 9))  # every symbol occurs, no blank or delimiter among them


def test_seeds_and_bad_length():
    a, b = copy_task(length=5, seed=1, sizes=SMALL), copy_task(length=5, seed=2, sizes=SMALL)
    assert torch.equal(a["train"][1], copy_task(length=5, seed=1, sizes=SMALL)["train"][1])
    assert not torch.equal(a["train"][1], b["train"][1])
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="length: expected an integer >= 1"):
            copy_task(length=bad, sizes=SMALL)


@pytest.mark.parametrize("T", [5, 1000])
def test_memoryless_cross_entropy_is_that_of_blanks_then_a_uniform_guess(T):
    _, y = copy_task(length=T, seed=0, sizes=SMALL)["test"]
    logits = torch.full((y.shape[0], T + 20, 10), -math.inf)
    logits[:, :T + 10, 0] = 0.0  # certain blank until the delimiter has passed
    logits[:, T + 10:, 1:9] = 0.0  # then the 8 symbols equally likely
    explicit = F.cross_entropy(logits.reshape(-1, 10), y.reshape(-1))
    assert memoryless_cross_entropy(T) == pytest.approx(float(explicit), rel=1e-6)
    assert memoryless_cross_entropy(1000) == pytest.approx(10 * math.log(8) / 1020)


def test_recalled_accuracy_counts_the_last_ten_steps_only():
    data = copy_task(length=4, seed=0, sizes=SMALL)
    y = data["test"][1]
    logits = F.one_hot(y, 10).float()
    logits[:, :5] = 0.0  # wrong or undecided on blanks: does not count
    assert recalled_accuracy(logits, data) == 1.0
    logits[0, -1] = F.one_hot((y[0, -1] % 8) + 1, 10).float()  # one symbol wrong among 5 × 10
    assert recalled_accuracy(logits, data) == pytest.approx(49 / 50)


def test_the_task_is_a_10_class_sequence_classification_with_a_delay_reaching_the_output():
    task = odelab.data.tasks.TASKS["copy"]
    assert (task.loss, task.classes, task.target, task.options) == ("cross_entropy", 10, "sequence",
                                                                     {"length": "length"})
    assert task.model_options("taugru", {}) == {"tau": 1009.0}  # T + 9: see the delay-path test below
    assert task.model_options("taugru", {"length": 50}) == {"tau": 59.0}
    assert task.model_options("lem", {"length": 80}) == {"dt": pytest.approx(0.1)}
    data = copy_task(length=30, sizes=SMALL)
    assert task.baselines["memoryless"](data) == pytest.approx(10 * math.log(8) / 50)
    assert task.baseline_metrics == {"memoryless": "cross-entropy"}
    assert torch.equal(task.load(3, length=6)["test"][1], copy_task(length=6, seed=3)["test"][1])


@pytest.mark.parametrize("T", [3, 12])
def test_the_task_delay_hands_each_output_step_the_state_just_after_its_symbol(T):
    """τ-GRU's step n reads h_{n−τ}, the state before x_{n−τ}: with the task's τ = T + 9 the delay path alone joins
    symbol k (step k) to its output (step T + 10 + k); τ = T + 10, one step more, misses it (the symbol not yet read).
    Instantaneous recurrence cut (W1 = W4 = 0, no gate): an output depends on x_k through delay hops only."""
    from odelab.models.cells import TauGRU

    tau = odelab.data.tasks.TASKS["copy"].model_options("taugru", {"length": T})["tau"]
    assert tau == T + 9
    for delay, reaches in ((tau, True), (tau + 1, False)):
        torch.manual_seed(0)
        model = TauGRU(10, 4, tau=delay, gating=False)
        with torch.no_grad():
            model.system.weight_h.zero_()
        x, _ = copy_task(length=T, seed=1, sizes=(("test", 1),))["test"]
        x = x.clone().requires_grad_(True)
        out, _ = model(x)
        for k in range(10):
            (grad,) = torch.autograd.grad(out[0, T + 10 + k].sum(), x, retain_graph=True)
            assert bool(grad[0, k].abs().sum() > 0) is reaches, (delay, k)


def test_small_preset_is_one_clipped_protocol_for_every_model_of_the_table():
    """The ``small`` preset (our CPU protocol for Fig. 7): d 32, Adam lr 3e-3, batch 32, 20 epochs, gradient-norm
    clip 1.0, the same for τ-GRU, LEM and LSTM; the committed ``quick`` runs stay unclipped."""
    from odelab.training.reproduce import TABLES
    from odelab.training.run import FitSpec

    task = odelab.data.tasks.TASKS["copy"]
    configs = {model: FitSpec("copy", model, "small").config(task) for model in TABLES["copy"].models}
    assert set(configs) == {"taugru", "lem", "lstm"}
    hidden, config = configs["taugru"]
    assert all(c == (hidden, config) for c in configs.values())
    assert (hidden, config.clip, config.epochs, config.lr, config.batch_size) == (32, 1.0, 20, 3e-3, 32)
    assert task.presets["quick"].get("clip") is None
