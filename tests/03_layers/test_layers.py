"""Module 03: parameter registration, names and order, modes, state_dict, Linear, Dropout, containers."""
import math

import numpy as np
import pytest

from tinytorch.core.activations import GELU, ReLU, Tanh
from tinytorch.core.layers import Dropout, Linear, Module, ModuleList, Sequential, count_parameters
from tinytorch.core.tensor import Tensor


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


class Mixed(Module):
    """Own parameters assigned after a child; a list of modules; a non-parameter tensor."""

    def __init__(self):
        super().__init__()
        self.body = Linear(2, 2, seed=0)
        self.scale = Tensor([1.0, 2.0], requires_grad=True)
        self.buffer = Tensor([5.0])  # requires_grad=False: not a parameter
        self.name = "mixed"
        self.blocks = [Linear(2, 2, seed=1), Tanh(), Linear(2, 1, bias=False, seed=2)]
        self.shift = Tensor([0.0], requires_grad=True)


def names(module):
    return [n for n, _ in module.named_parameters()]


# ---- registration, names, order ------------------------------------------------------------


def test_named_parameters_like_pytorch():
    assert names(MLP()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def test_order_is_own_parameters_first_then_children_in_assignment_order():
    m = Mixed()
    assert names(m) == ["scale", "shift", "body.weight", "body.bias", "blocks.0.weight", "blocks.0.bias",
                        "blocks.2.weight"]


def test_parameters_are_the_same_tensor_objects():
    m = MLP()
    params = m.parameters()
    assert isinstance(params, list) and len(params) == 4
    assert params[0] is m.fc1.weight and params[1] is m.fc1.bias and params[3] is m.fc2.bias
    assert [p for _, p in m.named_parameters()] == params
    assert all(p.requires_grad for p in params)


def test_non_parameters_are_not_registered():
    m = Mixed()
    assert all(p is not m.buffer for p in m.parameters())
    assert len(m.parameters()) == 7


def test_computed_tensors_are_not_parameters():
    lin = Linear(2, 2, seed=0)
    lin.last_output = lin(Tensor([[1.0, 2.0]]))  # requires a gradient, but was computed
    assert lin.last_output.requires_grad
    assert names(lin) == ["weight", "bias"]


def test_reassignment_keeps_position_and_changing_kind_unregisters():
    m = MLP()
    m.fc1 = Linear(4, 8, seed=3)
    assert names(m) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    m.fc1 = None
    assert names(m) == ["fc2.weight", "fc2.bias"]
    lin = Linear(3, 3, seed=0)
    lin.bias = None
    assert names(lin) == ["weight"]
    del lin.weight
    assert names(lin) == []


def test_frozen_parameter_stays_registered():
    lin = Linear(2, 2, seed=0)
    lin.weight.requires_grad = False
    assert names(lin) == ["weight", "bias"]


def test_shared_parameters_listed_once():
    m = Module()
    shared = Linear(3, 3, seed=0)
    m.a = shared
    m.b = shared
    assert names(m) == ["a.weight", "a.bias"]
    assert count_parameters(m) == 12


def test_module_list_attribute_and_nesting():
    class Stack(Module):
        def __init__(self):
            super().__init__()
            self.layers = ModuleList([Linear(3, 3, seed=i) for i in range(3)])
            self.head = Sequential(Linear(3, 2, seed=9), GELU())

    s = Stack()
    assert names(s) == [f"layers.{i}.{k}" for i in range(3) for k in ("weight", "bias")] + [
        "head.0.weight", "head.0.bias"]
    assert count_parameters(s) == 3 * 12 + 8


def test_registered_list_appended_later_is_seen():
    m = Module()
    m.items = []
    m.items.append(Linear(2, 1, seed=0))
    assert names(m) == ["items.0.weight", "items.0.bias"]


def test_named_modules_and_children():
    m = MLP()
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "drop", "fc2"]
    assert [n for n, _ in m.named_modules()] == ["", "fc1", "act", "drop", "fc2"]


def test_forward_must_be_defined():
    m = Module()
    m.fc = Linear(2, 2, seed=0)
    assert names(m) == ["fc.weight", "fc.bias"]
    with pytest.raises(NotImplementedError):
        m(Tensor([1.0, 2.0]))


# ---- zero_grad, train / eval --------------------------------------------------------------------


def test_zero_grad_clears_every_gradient():
    m = MLP()
    for p in m.parameters():
        p.grad = Tensor(np.ones(p.shape, dtype=np.float32))
    m.zero_grad()
    assert [p.grad for p in m.parameters()] == [None] * 4


def test_train_eval_recursive():
    m = Mixed()
    outer = Sequential(m, Dropout(0.1))
    assert outer.training and m.body.training
    assert outer.eval() is outer
    flags = [mod.training for mod in outer.modules()]
    assert len(flags) == 7 and not any(flags)  # Sequential, Mixed, body, 2 Linears + Tanh, Dropout
    assert not m.blocks[1].training  # the activation inside a plain list
    assert outer.train() is outer and all(mod.training for mod in outer.modules())
    outer.train(False)
    assert not m.body.training


# ---- state_dict ---------------------------------------------------------------------------------------


def test_state_dict_names_values_and_copies():
    m = MLP()
    state = m.state_dict()
    assert list(state) == names(m)
    for (name, p) in m.named_parameters():
        assert isinstance(state[name], np.ndarray)
        assert np.array_equal(state[name], p.numpy())
        assert not np.shares_memory(state[name], p.data)


def test_state_dict_round_trip_is_exact():
    a, b = MLP(seed=0), MLP(seed=1)
    x = Tensor(np.random.default_rng(5).standard_normal((6, 4)))
    a.eval(), b.eval()
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    missing, unexpected = b.load_state_dict(a.state_dict())
    assert missing == [] and unexpected == []
    for name, p in b.named_parameters():
        assert np.array_equal(p.numpy(), a.state_dict()[name]) and p.dtype == np.float32
    assert np.array_equal(a(x).numpy(), b(x).numpy())
    # loading copies: changing the source afterwards does not change the model
    state = a.state_dict()
    b.load_state_dict(state)
    state["fc1.bias"][:] = 123.0
    assert not np.any(b.fc1.bias.numpy() == 123.0)


def test_load_state_dict_accepts_tensors_and_lists_and_casts():
    lin = Linear(2, 1, seed=0)
    lin.load_state_dict({"weight": Tensor([[1.0], [2.0]], dtype=np.float64), "bias": [0.5]})
    assert lin.weight.dtype == np.float32 and lin.bias.dtype == np.float32
    assert lin.weight.numpy().tolist() == [[1.0], [2.0]] and lin.bias.numpy().tolist() == [0.5]


def test_load_state_dict_missing_and_unexpected_keys():
    m = MLP()
    state = m.state_dict()
    del state["fc2.bias"]
    state["fc3.weight"] = np.zeros((2, 2))
    before = m.state_dict()
    with pytest.raises(KeyError) as err:
        m.load_state_dict(state)
    assert "fc2.bias" in str(err.value) and "fc3.weight" in str(err.value)
    assert "missing" in str(err.value) and "unexpected" in str(err.value)
    for name, p in m.named_parameters():  # nothing was changed
        assert np.array_equal(p.numpy(), before[name])


def test_load_state_dict_non_strict_reports():
    m = MLP()
    state = m.state_dict()
    state["fc1.weight"] = np.full((4, 8), 0.25, dtype=np.float32)
    del state["fc2.bias"]
    state["extra"] = np.zeros(1)
    missing, unexpected = m.load_state_dict(state, strict=False)
    assert missing == ["fc2.bias"] and unexpected == ["extra"]
    assert np.all(m.fc1.weight.numpy() == 0.25)


def test_load_state_dict_shape_mismatch_names_both_shapes():
    m = MLP()
    state = m.state_dict()
    state["fc1.weight"] = np.zeros((8, 4), dtype=np.float32)
    before = m.state_dict()
    with pytest.raises(ValueError) as err:
        m.load_state_dict(state)
    text = str(err.value)
    assert "fc1.weight" in text and "(8, 4)" in text and "(4, 8)" in text
    assert np.array_equal(m.fc1.weight.numpy(), before["fc1.weight"])


# ---- Linear ---------------------------------------------------------------------------------------------


def test_linear_shapes_and_registration():
    lin = Linear(5, 3, seed=0)
    assert lin.weight.shape == (5, 3) and lin.bias.shape == (3,)
    assert lin.weight.dtype == np.float32 and lin.weight.requires_grad and lin.bias.requires_grad
    assert names(lin) == ["weight", "bias"]
    assert Linear(5, 3, bias=False, seed=0).bias is None
    assert names(Linear(5, 3, bias=False)) == ["weight"]


def test_linear_hand_computed_values():
    lin = Linear(2, 3, seed=0)
    lin.weight.data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    lin.bias.data = np.array([0.5, 0.0, -1.0], dtype=np.float32)
    y = lin(Tensor([[1.0, 1.0], [2.0, -1.0]]))
    assert y.numpy().tolist() == [[5.5, 7.0, 8.0], [-1.5, -1.0, -1.0]]
    assert lin(Tensor([1.0, 0.0])).numpy().tolist() == [1.5, 2.0, 2.0]  # a single vector
    no_bias = Linear(2, 3, bias=False, seed=0)
    no_bias.weight.data = lin.weight.data
    assert no_bias(Tensor([[1.0, 1.0]])).numpy().tolist() == [[5.0, 7.0, 9.0]]


def test_linear_any_leading_dims(rng):
    lin = Linear(4, 3, dtype=np.float64, rng=rng)
    x = rng.standard_normal((2, 5, 6, 4))
    y = lin(Tensor(x))
    assert y.shape == (2, 5, 6, 3) and y.dtype == np.float64
    assert np.allclose(y.numpy(), x @ lin.weight.numpy() + lin.bias.numpy(), rtol=1e-12)


def test_linear_initialisation_range_and_statistics():
    n = 400
    lin = Linear(n, 300, seed=0)
    w = lin.weight.numpy()
    bound = 1 / math.sqrt(n)
    assert np.abs(w).max() <= bound and np.abs(lin.bias.numpy()).max() <= bound
    assert abs(w.mean()) < 0.02 * bound
    assert w.var() == pytest.approx(bound**2 / 3, rel=0.02)  # variance of uniform(-a, a) = a²/3
    assert np.abs(w).max() > 0.99 * bound  # it really uses the whole range


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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
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


def test_linear_records_matmul_then_add():
    lin = Linear(3, 2, seed=0)
    y = lin(Tensor(np.ones((1, 3))))
    assert y._node.op == "add" and y._node.inputs[1] is lin.bias
    assert y._node.inputs[0]._node.op == "matmul" and y._node.inputs[0]._node.inputs[1] is lin.weight


# ---- Dropout ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_statistics(p):
    x = Tensor(np.full((400, 500), 3.0))
    y = Dropout(p, seed=0)(x).numpy()
    zeros = np.mean(y == 0)
    assert abs(zeros - p) < 0.005  # 200,000 draws: std of the fraction < 0.0012
    assert np.allclose(y[y != 0], 3.0 / (1 - p))  # survivors scaled by exactly 1/(1-p)
    assert abs(y.mean() - 3.0) < 0.03  # the mean is preserved


def test_dropout_eval_is_identity_and_train_is_not():
    x = Tensor(np.random.default_rng(0).standard_normal((50, 50)))
    d = Dropout(0.5, seed=0)
    assert not np.array_equal(d(x).numpy(), x.numpy())
    d.eval()
    assert d(x) is x
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


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
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


# ---- containers -----------------------------------------------------------------------------------------------


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
    assert names(model) == ["0.weight", "0.bias", "2.weight", "2.bias"]
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
    assert names(ml) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    replacement = Linear(2, 2, seed=5)
    ml[0] = replacement
    assert ml[0] is replacement and names(ml)[0] == "0.weight" and ml.parameters()[0] is replacement.weight
    assert isinstance(ml[1:], ModuleList) and len(ml[1:]) == 2
    with pytest.raises(IndexError):
        ml[-4]
    with pytest.raises(TypeError):
        ml.append(3)
    with pytest.raises(NotImplementedError):
        ml(Tensor([1.0, 2.0]))


def test_count_parameters():
    model = Sequential(Linear(784, 128), ReLU(), Dropout(0.1), Linear(128, 64), ReLU(), Linear(64, 10))
    assert count_parameters(model) == 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10 == 109_386


def test_repr_shows_the_tree():
    text = repr(MLP())
    assert "(fc1): Linear(in_features=4, out_features=8, bias=True)" in text
    assert "(act): ReLU()" in text and "(drop): Dropout(p=0.5)" in text


class _WithBuffer(Module):
    def __init__(self):
        super().__init__()
        self.linear = Linear(2, 3, seed=0)
        self.register_buffer("table", Tensor(np.arange(4.0)))

    def forward(self, x):
        return self.linear(x)


def test_buffers_are_saved_and_moved_but_not_learned():
    model = Sequential(_WithBuffer())
    assert [name for name, _ in model.named_buffers()] == ["0.table"]
    assert all(p is not model[0].table for p in model.parameters()), "a buffer is not a parameter"
    state = model.state_dict()
    assert list(state) == ["0.linear.weight", "0.linear.bias", "0.table"]
    assert np.array_equal(state["0.table"], [0, 1, 2, 3])
    other = Sequential(_WithBuffer())
    other[0].table.data = np.zeros(4)
    other.load_state_dict(state)
    assert np.array_equal(other[0].table.numpy(), [0, 1, 2, 3]), "load_state_dict must restore buffers"
    weight = model[0].linear.weight
    assert model.to("cpu") is model and model[0].linear.weight is weight, "to() moves in place"
    with pytest.raises(TypeError):
        model[0].register_buffer("bad", Tensor([1.0], requires_grad=True))
