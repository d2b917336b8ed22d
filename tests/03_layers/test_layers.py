"""Module 03: parameter registration, names and order, modes, state_dict, buffers, Linear, Dropout, containers.

The order matters for students: `Module` is tested first with hand-made modules (no
Linear, Dropout or containers), then Linear, Dropout, the containers and whole models, so
the first failing test points at the piece that is wrong, and its message names the cause.
"""
import copy
import math
import re

import numpy as np
import pytest

from tinytorch.core.activations import GELU, ReLU, Tanh
from tinytorch.core.layers import Dropout, Linear, Module, ModuleList, Sequential, count_parameters
from tinytorch.core.tensor import Tensor


def leaf(values):
    return Tensor(np.array(values, dtype=np.float32), requires_grad=True)


class Affine(Module):
    """y = x * scale + shift, parameters made by hand."""

    def __init__(self, size=2, start=1.0):
        super().__init__()
        self.scale = leaf(np.full(size, start))
        self.shift = leaf(np.zeros(size))

    def forward(self, x):
        return x * self.scale + self.shift


class Tree(Module):
    """A child assigned before own parameters; a plain list of modules and an activation;
    a tensor without requires_grad; a string."""

    def __init__(self):
        super().__init__()
        self.body = Affine(2, 1.0)
        self.gain = leaf([1.0, 2.0])
        self.constant = Tensor([5.0])  # requires_grad=False: not a parameter
        self.name = "tree"
        self.blocks = [Affine(2, 2.0), Tanh(), Affine(2, 3.0)]
        self.bias = leaf([0.0])

    def forward(self, x):
        h = self.body(x) * self.gain
        for block in self.blocks:
            h = block(h)
        return h + self.bias


TREE_NAMES = ["gain", "bias", "body.scale", "body.shift", "blocks.0.scale", "blocks.0.shift",
              "blocks.2.scale", "blocks.2.shift"]


def check_names(module, expected):
    """Compare named_parameters() with `expected`; the failure says which rule was broken."""
    named = module.named_parameters()
    got = [name for name, _ in named]
    repeated = [f"{name} (the same tensor as {next(n for n, u in named[:i] if u is t)})"
                for i, (name, t) in enumerate(named) if any(u is t for _, u in named[:i])]
    assert not repeated, (f"named_parameters listed a tensor more than once: {repeated}: list each tensor once, "
                          "under its first name (shared weights are one parameter)")
    missing = [n for n in expected if n not in got]
    if missing:
        if all(re.search(r"\.\d+(\.|$)", n) for n in missing):
            cause = ("parameters inside a list of modules are missing: a list assigned to an attribute is a child, "
                     "its items named name.0, name.1, ...")
        elif all("." in n for n in missing):
            cause = "children's parameters are missing: named_parameters must recurse into child modules"
        else:
            cause = "own parameters are missing: assigning a leaf Tensor with requires_grad=True registers it"
        pytest.fail(f"named_parameters() gave {got}; missing {missing}: {cause}")
    extra = [n for n in got if n not in expected]
    assert not extra, f"named_parameters() gave {got}; {extra} are not parameters (expected {expected})"
    assert got == expected, (f"named_parameters() gave {got}, expected {expected}: same names, wrong order; "
                             "own parameters first, then each child's, in assignment order")


# ---- Module: registration, names, order -----------------------------------------------------------


def test_own_parameters_are_registered_by_assignment():
    check_names(Affine(), ["scale", "shift"])


def test_child_parameters_are_found_recursively():
    outer = Module()
    outer.first = Affine()
    outer.second = Affine()
    check_names(outer, ["first.scale", "first.shift", "second.scale", "second.shift"])


def test_order_is_own_parameters_first_then_children_in_assignment_order():
    check_names(Tree(), TREE_NAMES)


def test_lists_of_modules_and_parameters_are_children():
    m = Module()
    m.items = [leaf([1.0]), Affine(1)]
    check_names(m, ["items.0", "items.1.scale", "items.1.shift"])
    later = Module()
    later.stack = []
    later.stack.append(Affine(1))  # appended after the assignment: still seen
    check_names(later, ["stack.0.scale", "stack.0.shift"])


def test_shared_parameters_listed_once():
    m = Module()
    shared = Affine()
    m.a = shared
    m.b = shared
    check_names(m, ["a.scale", "a.shift"])
    m.c = [shared.scale, leaf([1.0])]
    check_names(m, ["a.scale", "a.shift", "c.1"])


def test_parameters_are_the_same_tensor_objects():
    t = Tree()
    params = t.parameters()
    assert isinstance(params, list) and len(params) == 8
    assert params[0] is t.gain and params[2] is t.body.scale and params[4] is t.blocks[0].scale, (
        "parameters() must return the tensors themselves (an optimizer updates them in place of the model's)")
    assert [p for _, p in t.named_parameters()] == params
    t.body.scale.data = np.full(2, 0.1, dtype=np.float32)  # what an optimizer does: the model sees it
    expected = np.tanh(np.array([0.1, 0.1]) * [1.0, 2.0] * 2.0) * 3.0
    np.testing.assert_allclose(t(Tensor([1.0, 1.0])).numpy(), expected, rtol=1e-6)


def test_non_parameters_are_not_registered():
    t = Tree()
    assert all(p is not t.constant for p in t.parameters()), "a tensor without requires_grad is not a parameter"
    assert len(t.parameters()) == 8


def test_computed_tensors_are_not_parameters():
    m = Affine()
    m.last_output = m(Tensor([1.0, 2.0]))  # requires a gradient, but was computed
    assert m.last_output.requires_grad
    check_names(m, ["scale", "shift"])


def test_reassignment_keeps_position_and_changing_kind_unregisters():
    t = Tree()
    t.gain = leaf([3.0, 4.0])
    check_names(t, TREE_NAMES)
    t.body = None
    check_names(t, [n for n in TREE_NAMES if not n.startswith("body.")])
    a = Affine()
    a.scale = "no longer a parameter"
    check_names(a, ["shift"])
    del a.shift
    check_names(a, [])


def test_frozen_parameter_stays_registered():
    a = Affine()
    a.scale.requires_grad = False
    check_names(a, ["scale", "shift"])


def test_named_modules_and_children():
    t = Tree()
    assert [n for n, _ in t.named_children()] == ["body", "blocks.0", "blocks.1", "blocks.2"]
    assert [n for n, _ in t.named_modules()] == ["", "body", "blocks.0", "blocks.1", "blocks.2"]


def test_forward_must_be_defined():
    m = Module()
    m.inner = Affine()
    with pytest.raises(NotImplementedError):
        m(Tensor([1.0, 2.0]))


# ---- zero_grad, train / eval --------------------------------------------------------------------


def test_zero_grad_clears_every_gradient():
    t = Tree()
    for p in t.parameters():
        p.grad = Tensor(np.ones(p.shape, dtype=np.float32))
    t.zero_grad()
    for name, p in t.named_parameters():
        if p.grad is not None and not np.any(p.grad.numpy()):
            pytest.fail(f"zero_grad set {name}.grad to zeros: zero_grad must set .grad to None, not zeros")
        assert p.grad is None, (f"zero_grad left a gradient on {name}: zero_grad must reach every parameter, "
                                "children's included (use self.parameters())")


def test_train_eval_recursive():
    t = Tree()
    assert t.training and t.body.training and t.blocks[1].training
    result = t.eval()
    assert result is t, "train() and eval() must return the module itself (model = Model().eval() must work)"
    for name, module in t.named_modules():
        assert not module.training, (f"after eval() the child {name!r} is still in training mode: train(mode) "
                                     "must set .training on every child, recursively")
    assert t.train() is t
    for name, module in t.named_modules():
        assert module.training, f"after train() the child {name!r} is still in eval mode"
    t.train(False)
    assert not t.blocks[2].training


# ---- state_dict ---------------------------------------------------------------------------------------


def test_state_dict_names_values_and_copies():
    t = Tree()
    state = t.state_dict()
    assert list(state) == TREE_NAMES
    for name, p in t.named_parameters():
        assert isinstance(state[name], np.ndarray), f"state_dict()[{name!r}] must be a NumPy array"
        assert np.array_equal(state[name], p.numpy())
        assert not np.shares_memory(state[name], p.data), (
            f"state_dict()[{name!r}] shares memory with the parameter: state_dict must return copies, "
            "or the next in-place change of the model changes the saved values too")


def test_state_dict_round_trip_is_exact():
    a, b = Tree(), Tree()
    for p in b.parameters():
        p.data = p.data + 1.0
    x = Tensor([0.3, -0.2])
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    missing, unexpected = b.load_state_dict(a.state_dict())
    assert missing == [] and unexpected == []
    for name, p in b.named_parameters():
        assert np.array_equal(p.numpy(), a.state_dict()[name]) and p.dtype == np.float32
    assert np.array_equal(a(x).numpy(), b(x).numpy())
    state = a.state_dict()
    b.load_state_dict(state)
    state["body.shift"][:] = 123.0
    assert not np.any(b.body.shift.numpy() == 123.0), (
        "changing the dict after load_state_dict changed the model: load_state_dict must copy the values it is "
        "given")


def test_load_state_dict_accepts_tensors_and_lists_and_casts():
    a = Affine(2)
    a.load_state_dict({"scale": Tensor([1.0, 2.0], dtype=np.float64), "shift": [0.5, 0.25]})
    assert a.scale.dtype == np.float32 and a.shift.dtype == np.float32, "loaded values take the parameter's dtype"
    assert a.scale.numpy().tolist() == [1.0, 2.0] and a.shift.numpy().tolist() == [0.5, 0.25]


def test_load_state_dict_missing_and_unexpected_keys():
    t = Tree()
    state = t.state_dict()
    del state["blocks.2.shift"]
    state["head.weight"] = np.zeros((2, 2))
    before = t.state_dict()
    with pytest.raises(KeyError) as err:
        t.load_state_dict(state)
    assert "blocks.2.shift" in str(err.value) and "head.weight" in str(err.value)
    for name, p in t.named_parameters():  # nothing was changed
        assert np.array_equal(p.numpy(), before[name])


def test_load_state_dict_non_strict_reports():
    t = Tree()
    state = t.state_dict()
    state["gain"] = np.full(2, 0.25, dtype=np.float32)
    del state["bias"]
    state["extra"] = np.zeros(1)
    missing, unexpected = t.load_state_dict(state, strict=False)
    assert missing == ["bias"] and unexpected == ["extra"]
    assert np.all(t.gain.numpy() == 0.25)


def test_load_state_dict_shape_mismatch_names_both_shapes():
    t = Tree()
    state = t.state_dict()
    state["gain"] = np.zeros((3,), dtype=np.float32)
    before = t.state_dict()
    with pytest.raises(ValueError) as err:
        t.load_state_dict(state)
    text = str(err.value)
    assert "gain" in text and "(3,)" in text and "(2,)" in text
    assert np.array_equal(t.gain.numpy(), before["gain"])


# ---- buffers and to(device) -----------------------------------------------------------------------------


class Standardize(Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", Tensor([1.0, 2.0]))
        self.register_buffer("std", Tensor([2.0, 4.0]))
        self.gain = leaf([1.0, 1.0])

    def forward(self, x):
        return (x - self.mean) / self.std * self.gain


def test_buffers_are_named_and_not_parameters():
    outer = Module()
    outer.prep = Standardize()
    outer.items = [Standardize()]
    assert [n for n, _ in outer.named_buffers()] == ["prep.mean", "prep.std", "items.0.mean", "items.0.std"]
    assert outer.buffers()[0] is outer.prep.mean
    check_names(outer, ["prep.gain", "items.0.gain"])
    with pytest.raises(TypeError):
        outer.prep.register_buffer("bad", leaf([1.0]))


def test_state_dict_saves_buffers_after_parameters_and_loads_them():
    outer = Module()
    outer.prep = Standardize()
    state = outer.state_dict()
    assert list(state) == ["prep.gain", "prep.mean", "prep.std"], (
        f"state_dict keys {list(state)}: state_dict must contain every buffer after the parameters")
    assert np.array_equal(state["prep.mean"], [1.0, 2.0])
    assert not np.shares_memory(state["prep.mean"], outer.prep.mean.data), "buffers are saved as copies too"
    other = Module()
    other.prep = Standardize()
    other.prep.mean.data = np.zeros(2, dtype=np.float32)
    other.load_state_dict(state)
    assert np.array_equal(other.prep.mean.numpy(), [1.0, 2.0]), "load_state_dict must restore buffers"


def test_to_moves_in_place_and_returns_the_module():
    s = Standardize()
    gain, mean = s.gain, s.mean
    gain.grad = Tensor(np.ones(2, dtype=np.float32))
    assert s.to("cpu") is s
    assert s.gain is gain and s.mean is mean, "to() keeps the same tensor objects (an optimizer still holds them)"
    assert gain.device == "cpu" and mean.device == "cpu" and gain.grad is not None


# ---- Linear ---------------------------------------------------------------------------------------------


def forward(layer, x):
    """layer(x), with a failure that says what the forward must compute when it raises."""
    try:
        return layer(Tensor(x))
    except ValueError as err:
        pytest.fail(f"Linear({layer.in_features} -> {layer.out_features}) with weight {layer.weight.shape} failed "
                    f"on an input of shape {np.shape(x)}: {err}\nThe forward is x @ weight with weight of shape "
                    "(in_features, out_features): no transpose")


def test_linear_shapes_and_registration():
    lin = Linear(5, 3, seed=0)
    assert lin.weight.shape == (5, 3), (
        f"Linear(5, 3).weight has shape {lin.weight.shape}, expected (in_features, out_features) = (5, 3): "
        "TinyTorch stores W as (in, out), so the forward is x @ W")
    assert lin.bias.shape == (3,), f"Linear(5, 3).bias has shape {lin.bias.shape}, expected (out_features,) = (3,)"
    assert lin.weight.dtype == np.float32 and lin.weight.requires_grad and lin.bias.requires_grad
    check_names(lin, ["weight", "bias"])
    assert Linear(5, 3, bias=False, seed=0).bias is None
    check_names(Linear(5, 3, bias=False), ["weight"])


def test_linear_hand_computed_values():
    lin = Linear(2, 3, seed=0)
    lin.weight.data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    lin.bias.data = np.array([0.5, 0.0, -1.0], dtype=np.float32)
    y = forward(lin, [[1.0, 1.0], [2.0, -1.0]])
    assert y.numpy().tolist() == [[5.5, 7.0, 8.0], [-1.5, -1.0, -1.0]], f"x @ W + b gave {y.numpy().tolist()}"
    no_bias = Linear(2, 3, bias=False, seed=0)
    no_bias.weight.data = lin.weight.data
    assert forward(no_bias, [[1.0, 1.0]]).numpy().tolist() == [[5.0, 7.0, 9.0]]


@pytest.mark.parametrize("shape", [(4,), (6, 4), (2, 5, 4), (2, 5, 6, 4)], ids=lambda s: str(s))
def test_linear_keeps_any_leading_dims(shape, rng):
    lin = Linear(4, 3, dtype=np.float64, rng=rng)
    x = rng.standard_normal(shape)
    y = forward(lin, x)
    expected = shape[:-1] + (3,)
    assert y.shape == expected, (
        f"Linear(4 -> 3) turned an input of shape {shape} into {y.shape}, expected {expected}: keep the input's "
        "leading dims (x @ weight batches over them and the (out,) bias broadcasts: reshape nothing)")
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), x @ lin.weight.numpy() + lin.bias.numpy(), rtol=1e-12)


def test_linear_records_matmul_then_add():
    lin = Linear(3, 2, seed=0)
    x = Tensor(np.ones((1, 3)))
    y = lin(x)
    assert y._node.op == "add" and y._node.inputs[1] is lin.bias, "the last op is add(x @ weight, bias)"
    product = y._node.inputs[0]
    assert product._node.op == "matmul" and product._node.inputs[0] is x and product._node.inputs[1] is lin.weight


def describe_bound(largest, fan_in, fan_out):
    """Which scale the weights' largest magnitude matches, as a hint for the failure message."""
    if largest > 0.5:
        return "the weights are not scaled: draw from uniform(-1/√in_features, 1/√in_features)"
    if abs(largest - 1 / math.sqrt(fan_out)) < 0.02 / math.sqrt(fan_out):
        return "that is 1/√out_features: the weights were scaled by the fan-out; scale by the fan-in (in_features)"
    return "draw from uniform(-1/√in_features, 1/√in_features)"


@pytest.mark.parametrize("fan_in,fan_out", [(400, 300), (100, 900)], ids=["400->300", "100->900"])
def test_linear_initialisation_scales_by_the_fan_in(fan_in, fan_out):
    lin = Linear(fan_in, fan_out, seed=0)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    bound = 1 / math.sqrt(fan_in)
    largest = float(np.abs(w).max())
    assert bound * 0.99 < largest <= bound, (
        f"Linear({fan_in}, {fan_out}): largest |weight| = {largest:.4f}, expected just under 1/√in_features = "
        f"{bound:.4f}; {describe_bound(largest, fan_in, fan_out)}")
    assert np.abs(b).max() <= bound, f"the bias is drawn from the same uniform(±1/√in_features) = ±{bound:.4f}"
    assert abs(w.mean()) < 0.02 * bound
    assert w.var() == pytest.approx(bound**2 / 3, rel=0.03)  # variance of uniform(-a, a) = a²/3


def test_linear_reproducible_with_seed_or_rng():
    a = Linear(6, 4, seed=11)
    b = Linear(6, 4, rng=11)
    c = Linear(6, 4, rng=np.random.default_rng(11))
    assert np.array_equal(a.weight.numpy(), b.weight.numpy()) and np.array_equal(a.bias.numpy(), c.bias.numpy())
    assert not np.array_equal(Linear(6, 4, seed=12).weight.numpy(), a.weight.numpy())
    rng = np.random.default_rng(0)
    first, second = Linear(6, 4, rng=rng), Linear(6, 4, rng=rng)
    assert not np.array_equal(first.weight.numpy(), second.weight.numpy())
    with pytest.raises(ValueError):
        Linear(6, 4, seed=1, rng=2)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_linear_dtype(dtype):
    lin = Linear(3, 2, dtype=dtype, seed=0)
    assert lin.weight.dtype == dtype and lin.bias.dtype == dtype
    assert lin(Tensor(np.ones((1, 3), dtype=dtype))).dtype == dtype


def test_linear_wrong_input_size_names_both_shapes():
    lin = Linear(4, 3, seed=0)
    with pytest.raises(ValueError) as err:
        lin(Tensor(np.ones((2, 5))))
    assert "(2, 5)" in str(err.value) and "4" in str(err.value)
    with pytest.raises(ValueError):
        Linear(0, 3)


# ---- Dropout ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_statistics(p):
    x = Tensor(np.full((400, 500), 3.0))
    y = Dropout(p, seed=0)(x).numpy()
    zeros = np.mean(y == 0)
    assert abs(zeros - p) < 0.005, (  # 200,000 draws: std of the fraction < 0.0012
        f"Dropout({p}) zeroed a fraction {zeros:.3f} of the elements, expected {p}: p is the probability of "
        "dropping (zeroing) an element; keep it with probability 1 − p")
    survivors = np.unique(y[y != 0])
    assert np.allclose(survivors, 3.0 / (1 - p)), (
        f"Dropout({p}) on 3.0 kept the values {survivors[:3].tolist()}: survivors must be scaled by 1/(1−p) "
        f"(3.0 → {3.0 / (1 - p):.4f}), so the expected value stays 3.0")
    assert abs(y.mean() - 3.0) < 0.03  # the mean is preserved


def test_dropout_eval_is_identity_and_train_is_not():
    x = Tensor(np.random.default_rng(0).standard_normal((50, 50)))
    d = Dropout(0.5, seed=0)
    assert not np.array_equal(d(x).numpy(), x.numpy())
    d.eval()
    y = d(x)
    assert y is x, ("Dropout in eval mode must return its input itself (the identity)"
                    + ("; it changed the values: dropout must be off in eval mode"
                       if not np.array_equal(y.numpy(), x.numpy()) else ""))
    d.train()
    assert np.mean(d(x).numpy() == 0) > 0.4


def test_dropout_edge_probabilities():
    x = Tensor(np.arange(1.0, 13.0).reshape(3, 4))
    assert np.array_equal(Dropout(0.0)(x).numpy(), x.numpy())
    y = Dropout(1.0)(x)
    assert y.shape == (3, 4) and not y.numpy().any() and np.isfinite(y.numpy()).all()
    for bad in (-0.1, 1.1):
        with pytest.raises(ValueError):
            Dropout(bad)


def test_dropout_reproducible_and_varies_between_calls():
    x = Tensor(np.ones((10, 10)))
    a, b = Dropout(0.5, seed=3), Dropout(0.5, seed=3)
    first = a(x).numpy()
    assert np.array_equal(first, b(x).numpy())
    assert not np.array_equal(first, a(x).numpy())


@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=lambda d: np.dtype(d).name)
def test_dropout_keeps_dtype(dtype):
    y = Dropout(0.5, seed=0)(Tensor(np.ones((4, 4), dtype=dtype)))
    assert y.dtype == dtype and set(np.unique(y.numpy())) <= {0.0, 2.0}


def test_dropout_is_a_mul_by_a_constant_mask():
    x = Tensor(np.ones((3, 4)), requires_grad=True)
    y = Dropout(0.5, seed=0)(x)
    node = y._node
    assert node.op == "mul" and node.inputs[0] is x
    mask = node.inputs[1]
    assert not mask.requires_grad and np.array_equal(mask.numpy(), y.numpy())


# ---- containers and counting ------------------------------------------------------------------------------


def test_sequential_forward_values(rng):
    a, b = Linear(3, 4, dtype=np.float64, rng=rng), Linear(4, 2, dtype=np.float64, rng=rng)
    model = Sequential(a, ReLU(), b)
    x = rng.standard_normal((5, 3))
    h = np.maximum(x @ a.weight.numpy() + a.bias.numpy(), 0)
    assert np.allclose(model(Tensor(x)).numpy(), h @ b.weight.numpy() + b.bias.numpy(), rtol=1e-12)
    assert np.allclose(Sequential([a, ReLU()])(Tensor(x)).numpy(), h)


def test_sequential_indexing_and_names():
    model = Sequential(Linear(3, 4, seed=0), ReLU(), Linear(4, 2, seed=1))
    assert len(model) == 3 and isinstance(model[1], ReLU) and model[-1] is model[2]
    check_names(model, ["0.weight", "0.bias", "2.weight", "2.bias"])
    head = model[:2]
    assert isinstance(head, Sequential) and len(head) == 2 and head[0] is model[0]
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear"]
    with pytest.raises(IndexError):
        model[3]
    with pytest.raises(TypeError):
        Sequential(Linear(2, 2), lambda x: x)


def test_module_list_operations():
    ml = ModuleList()
    assert len(ml) == 0 and list(ml) == []
    first = Linear(2, 2, seed=0)
    assert ml.append(first) is ml
    ml.extend([ReLU(), Linear(2, 1, seed=1)])
    assert len(ml) == 3 and ml[0] is first and ml[-1].out_features == 1
    check_names(ml, ["0.weight", "0.bias", "2.weight", "2.bias"])
    replacement = Linear(2, 2, seed=5)
    ml[0] = replacement
    assert ml[0] is replacement and ml.parameters()[0] is replacement.weight
    assert isinstance(ml[1:], ModuleList) and len(ml[1:]) == 2
    with pytest.raises(IndexError):
        ml[-4]
    with pytest.raises(TypeError):
        ml.append(3)
    with pytest.raises(NotImplementedError):
        ml(Tensor([1.0, 2.0]))


def test_module_list_attribute_and_nesting():
    class Stack(Module):
        def __init__(self):
            super().__init__()
            self.layers = ModuleList([Linear(3, 3, seed=i) for i in range(3)])
            self.head = Sequential(Linear(3, 2, seed=9), GELU())

    check_names(Stack(), [f"layers.{i}.{k}" for i in range(3) for k in ("weight", "bias")]
                + ["head.0.weight", "head.0.bias"])


def test_count_parameters():
    model = Sequential(Linear(784, 128), ReLU(), Dropout(0.1), Linear(128, 64), ReLU(), Linear(64, 10))
    expected = 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10
    got = count_parameters(model)
    assert got == expected == 109_386, (
        f"count_parameters gave {got}, expected {expected}: count the numbers (the sum of each tensor's size), "
        "not the tensors")
    shared = Module()
    shared.a = shared.b = Linear(3, 3)
    assert count_parameters(shared) == 12, "a shared layer counts once"


# ---- whole models ---------------------------------------------------------------------------------------------


class MLP(Module):
    def __init__(self, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc1 = Linear(4, 8, rng=rng)
        self.act = ReLU()
        self.drop = Dropout(0.5, rng=rng)
        self.fc2 = Linear(8, 3, rng=rng)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


def test_mlp_names_like_pytorch_and_state_round_trip():
    check_names(MLP(), ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
    a, b = MLP(seed=0).eval(), MLP(seed=1).eval()
    x = Tensor(np.random.default_rng(5).standard_normal((6, 4)))
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    b.load_state_dict(a.state_dict())
    assert np.array_equal(a(x).numpy(), b(x).numpy())
    assert all(not m.training for m in a.modules()) and not a.drop.training


def test_repr_shows_the_tree():
    text = repr(MLP())
    assert "(fc1): Linear(in_features=4, out_features=8, bias=True)" in text
    assert "(act): ReLU()" in text and "(drop): Dropout(p=0.5)" in text


# ---- config(): how a model was built (issue 20: checkpoints compare it) -----------------------

def test_config_records_every_modules_constructor_arguments():
    class Heads(Module):
        def __init__(self, width, heads=2, *, seed=None):
            super().__init__()
            self.heads = heads
            self.proj = Linear(width, width, seed=seed, dtype=np.float64)

    model = Sequential(Heads(4, seed=0), ReLU(), Linear(4, 1, bias=False, seed=1, device="cpu"))
    assert model.config() == {
        "": {"type": "Sequential", "args": {"modules": ["Heads", "ReLU", "Linear"]}},
        "0": {"type": "Heads", "args": {"width": 4, "heads": 2}},  # the default is filled in, seed left out
        "0.proj": {"type": "Linear", "args": {"in_features": 4, "out_features": 4, "bias": True}},
        "1": {"type": "ReLU", "args": {}},
        "2": {"type": "Linear", "args": {"in_features": 4, "out_features": 1, "bias": False}},
    }
    assert Heads(4, heads=4).config()[""]["args"] == {"width": 4, "heads": 4}
    copied = copy.deepcopy(model)
    assert copied.config() == model.config(), "a copy keeps the arguments its original was built with"


def test_set_submodule_replaces_by_dotted_name_and_the_forward_uses_it():
    model = Sequential(Linear(2, 3, dtype=np.float64, seed=0), ReLU(), Linear(3, 1, dtype=np.float64, seed=1))
    x = Tensor(np.array([[1.0, -2.0]]))
    model.set_submodule("1", Tanh())
    h = np.tanh(x.numpy() @ model[0].weight.numpy() + model[0].bias.numpy())
    expected = h @ model[2].weight.numpy() + model[2].bias.numpy()
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-12,
                               err_msg="after set_submodule('1', Tanh()) the forward must call the Tanh")
    assert model.get_submodule("1") is model[1] and isinstance(model[1], Tanh)


def test_set_submodule_into_plain_lists_and_tuples():
    class Holder(Module):
        def __init__(self):
            super().__init__()
            self.layers = [Linear(2, 2, seed=0), Linear(2, 2, seed=1)]
            self.frozen = (Linear(2, 2, seed=2),)

    holder = Holder()
    new = Linear(2, 5, seed=3)
    holder.set_submodule("layers.1", new)
    assert holder.layers[1] is new and holder.get_submodule("layers.1") is new
    assert [n for n, _ in holder.named_parameters()][2:4] == ["layers.1.weight", "layers.1.bias"]
    assert holder.layers[1].weight.shape == (2, 5), "the list holds the new layer"
    with pytest.raises(TypeError, match="tuple"):
        holder.set_submodule("frozen.0", Linear(2, 2))
    with pytest.raises(AttributeError, match="no item `2`"):
        holder.set_submodule("layers.2", Linear(2, 2))
    with pytest.raises(AttributeError, match="`layers` is not a Module"):
        holder.get_submodule("layers")  # a list is a step on the way, not a module
    assert holder.get_submodule("") is holder, "get_submodule('') is the module itself"


def test_set_submodule_refuses_to_put_a_layer_where_a_parameter_was():
    layer = Linear(2, 2, seed=0)
    weight = layer.weight
    with pytest.raises(AttributeError, match="`weight` is not a Module"):
        layer.set_submodule("weight", Linear(2, 2))
    assert layer.weight is weight and [n for n, _ in layer.named_parameters()] == ["weight", "bias"], \
        "a refused set_submodule changes nothing"
