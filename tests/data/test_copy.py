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
    assert task.model_options("taugru", {}) == {"tau": 1010.0}  # T + 10: a symbol's input step to its output step
    assert task.model_options("taugru", {"length": 50}) == {"tau": 60.0}
    assert task.model_options("lem", {"length": 80}) == {"dt": pytest.approx(0.1)}
    data = copy_task(length=30, sizes=SMALL)
    assert task.baselines["memoryless"](data) == pytest.approx(10 * math.log(8) / 50)
    assert task.baseline_metrics == {"memoryless": "cross-entropy"}
    assert torch.equal(task.load(3, length=6)["test"][1], copy_task(length=6, seed=3)["test"][1])
