"""Field: the plain path (no jump edge, no delays, float time: every recurrent step) gives what the general path
(time and arguments worked out per call) gives, exactly, and still checks the derivative's shape once."""
import pytest
import torch

from odelab.solvers.field import Field
from odelab.systems import LEM, CoRNN, FunctionSystem


@pytest.mark.parametrize("make", [lambda: LEM(2, 4), lambda: CoRNN(2, 4, 1.0, 3.0)])
def test_plain_path_equals_general_path(make):
    torch.manual_seed(0)
    system = make().double()
    u = system.encode(torch.randn(3, 2, dtype=torch.float64))
    state = tuple(torch.randn(3, 4, dtype=torch.float64) for _ in system.blocks)
    plain, general = Field(system), Field(system)
    plain.inp = general.inp = lambda t: u
    general.edges = (0.5, 1.5, False, False)  # an edge that is no jump: the general path, the same t
    assert plain._plain() and not general._plain()
    for a, b in zip(plain(0.5, state), general(0.5, state)):
        assert torch.equal(a, b)
    for i in range(len(system.blocks)):
        assert torch.equal(plain.block(i, 0.5, state), general.block(i, 0.5, state))
        if system.has_split(i):
            for a, b in zip(plain.split(i, 0.5, state), general.split(i, 0.5, state)):
                assert torch.equal(a, b)
    assert plain.split_plan() == tuple(system.has_split(i) for i in range(len(system.blocks)))
    assert plain.split_plan(True) == (False,) * len(system.blocks)


def test_plain_callables_still_get_a_tensor_time_and_a_shape_check():
    seen = []

    def f(t, y):
        seen.append(t)
        return y[:, :1]  # wrong shape: (batch, 1) for a (batch, 3) state

    field = Field(FunctionSystem(f, 3, takes_input=False))
    assert not field._plain()
    y = torch.zeros(2, 3, dtype=torch.float32)
    with pytest.raises(ValueError, match="has shape"):
        field(0.25, (y,))
    assert isinstance(seen[0], torch.Tensor) and seen[0].dim() == 0 and seen[0].dtype == torch.float32
    assert float(seen[0]) == 0.25
