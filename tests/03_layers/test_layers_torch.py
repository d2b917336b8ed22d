"""Module 03 against PyTorch: Linear values with copied weights, parameter names and counts."""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from tinytorch.core.activations import ReLU, Tanh  # noqa: E402
from tinytorch.core.layers import Dropout, Linear, Module, Sequential  # noqa: E402
from tinytorch.core.tensor import Tensor  # noqa: E402


def copy_into_torch(ours, theirs):
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(ours.weight.numpy().T.copy()))
        if ours.bias is not None:
            theirs.bias.copy_(torch.from_numpy(ours.bias.numpy()))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape", [(7,), (5, 7), (2, 3, 7)], ids=lambda s: str(s))
def test_linear_matches_torch(bias, shape, rng):
    ours = Linear(7, 4, bias=bias, dtype=np.float64, rng=rng)
    theirs = torch.nn.Linear(7, 4, bias=bias, dtype=torch.float64)
    copy_into_torch(ours, theirs)
    x = rng.standard_normal(shape)
    expected = theirs(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), expected, rtol=1e-12, atol=1e-14)


def test_mlp_names_counts_and_values_match_torch(rng):
    class Ours(Module):
        def __init__(self):
            super().__init__()
            self.fc1 = Linear(6, 16, dtype=np.float64, rng=rng)
            self.act = Tanh()
            self.drop = Dropout(0.5)
            self.fc2 = Linear(16, 3, dtype=np.float64, rng=rng)

        def forward(self, x):
            return self.fc2(self.drop(self.act(self.fc1(x))))

    class Theirs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(6, 16, dtype=torch.float64)
            self.act = torch.nn.Tanh()
            self.drop = torch.nn.Dropout(0.5)
            self.fc2 = torch.nn.Linear(16, 3, dtype=torch.float64)

        def forward(self, x):
            return self.fc2(self.drop(self.act(self.fc1(x))))

    ours, theirs = Ours().eval(), Theirs().eval()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert sum(p.size for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    copy_into_torch(ours.fc1, theirs.fc1)
    copy_into_torch(ours.fc2, theirs.fc2)
    x = rng.standard_normal((4, 6))
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)


def test_sequential_names_match_torch():
    ours = Sequential(Linear(3, 4), ReLU(), Linear(4, 2))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert p.shape == tuple(reversed(q.shape)) if name.endswith("weight") else p.shape == tuple(q.shape)


def test_default_init_distribution_matches_torch():
    torch.manual_seed(0)
    theirs = torch.nn.Linear(256, 512).weight.detach().numpy()
    ours = Linear(256, 512, seed=0).weight.numpy()
    assert np.abs(ours).max() <= 1 / 16 and np.abs(theirs).max() <= 1 / 16
    assert ours.std() == pytest.approx(theirs.std(), rel=0.02)


def _nested(kind):
    """The same tree in both libraries: Sequential(Linear, ReLU, Sequential(Linear, Tanh)) with an `extra` attribute."""
    if kind == "ours":
        model = Sequential(Linear(3, 4, dtype=np.float64, seed=0), ReLU(),
                           Sequential(Linear(4, 2, dtype=np.float64, seed=1), Tanh()))
        return model, lambda i, o: Linear(i, o, dtype=np.float64, seed=2), Tanh
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Tanh()))
    return model, torch.nn.Linear, torch.nn.Tanh


@pytest.mark.parametrize("target", ["1", "2.0", "2.1", "2"], ids=lambda t: f"target={t}")
def test_set_submodule_gives_torchs_names(target):
    results = {}
    for kind in ("ours", "theirs"):
        model, linear, _ = _nested(kind)
        model.set_submodule(target, linear(3, 4) if target == "1" else linear(4, 5))
        results[kind] = ([n for n, _ in model.named_parameters()], [n for n, _ in model.named_modules()],
                         type(model.get_submodule(target)).__name__)
    assert results["ours"] == results["theirs"], \
        f"set_submodule({target!r}): ours gives {results['ours']}, PyTorch {results['theirs']}"


CALLS = {
    "missing-parent": lambda m, lin, act: m.set_submodule("5.0", act()),
    "missing-last-strict": lambda m, lin, act: m.set_submodule("2.7", act(), strict=True),
    "parameter-target": lambda m, lin, act: m.set_submodule("0.weight", act()),
    "through-a-parameter": lambda m, lin, act: m.set_submodule("0.weight.x", act()),
    "empty-target": lambda m, lin, act: m.set_submodule("", act()),
    "not-a-module": lambda m, lin, act: m.set_submodule("1", 3.0),
    "get-missing": lambda m, lin, act: m.get_submodule("2.9"),
    "get-parameter": lambda m, lin, act: m.get_submodule("0.bias"),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_set_submodule_raises_torchs_error_types(case):
    raised = {}
    for kind in ("ours", "theirs"):
        model, linear, act = _nested(kind)
        with pytest.raises(Exception) as info:
            CALLS[case](model, linear, act)
        raised[kind] = type(info.value).__name__
    assert raised["ours"] == raised["theirs"], f"{case}: ours raises {raised['ours']}, PyTorch {raised['theirs']}"


def test_set_submodule_without_strict_adds_a_new_child_as_torch_does():
    names = {}
    for kind in ("ours", "theirs"):
        model, _, act = _nested(kind)
        model.set_submodule("2.extra", act())
        names[kind] = [n for n, _ in model.named_modules()]
    assert names["ours"] == names["theirs"], f"ours {names['ours']}, PyTorch {names['theirs']}"
