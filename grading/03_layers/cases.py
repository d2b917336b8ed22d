"""Module 03, graded cases: Module's registries and tree walks, Linear, Dropout, state dicts.

Format: grading/reference_values.py. Each function takes the case's seeded generator and
returns {label: value}; the grader compares them with the reference's (expected.npz).
"""
import numpy as np
from reference_values import raised

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Module, ModuleList, Sequential, count_parameters
from tinytorch.core.tensor import Tensor


class Block(Module):
    """A parameter of its own, a child Linear, a plain list of layers, and a dropout."""

    def __init__(self, rng):
        super().__init__()
        self.scale = Tensor(rng.standard_normal(3), requires_grad=True)
        self.inner = Linear(3, 2, rng=rng)
        self.stages = [Linear(2, 2, rng=rng), ReLU(), Linear(2, 4, rng=rng)]
        self.drop = Dropout(0.25, rng=rng)

    def forward(self, x):
        x = self.inner(x * self.scale)
        for stage in self.stages:
            x = stage(x)
        return self.drop(x)


class Tied(Module):
    """Two Linear layers sharing one weight tensor, and a buffer."""

    def __init__(self, rng):
        super().__init__()
        self.first = Linear(4, 4, rng=rng)
        self.second = Linear(4, 4, rng=rng)
        self.second.weight = self.first.weight
        self.register_buffer("table", Tensor(rng.standard_normal((2, 4))))


def _names(rng):
    block = Block(rng)
    tied = Tied(rng)
    return {"block": [name for name, _ in block.named_parameters()],
            "block_values": np.concatenate([p.numpy().ravel() for p in block.parameters()]),
            "tied": [name for name, _ in tied.named_parameters()],
            "prefixed": [name for name, _ in Sequential(Linear(2, 3, rng=rng), ReLU()).named_parameters("net.")],
            "modules": [name for name, _ in block.named_modules()],
            "count_block": count_parameters(block), "count_tied": count_parameters(tied)}


def _zero_grad(rng):
    block = Block(rng)
    for p in block.parameters():
        p.grad = Tensor(rng.standard_normal(p.shape).astype(p.dtype))
    block.zero_grad()
    return {"cleared": [p.grad is None for p in block.parameters()]}


def _modes(rng):
    block = Block(rng)
    returned = block.eval()
    after_eval = [m.training for _, m in block.named_modules()]
    back = block.train()
    return {"eval_returns_self": returned is block, "train_returns_self": back is block,
            "after_eval": after_eval, "after_train": [m.training for _, m in block.named_modules()]}


def _state_dict(rng):
    tied = Tied(rng)
    state = tied.state_dict()
    before = {k: v.copy() for k, v in state.items()}
    tied.first.weight.data[...] = 0.0  # in place: a dict holding views would change too
    tied.table.data[...] = 7.0
    kept = all(np.array_equal(state[k], before[k]) for k in before)
    return {"keys": sorted(state), "kept": kept, "table": state.get("table", np.zeros(0))}


def _load_state_dict(rng):
    source, target = Linear(3, 5, rng=rng), Linear(3, 5, rng=rng)
    state = source.state_dict()
    result = target.load_state_dict(state)
    state["weight"][...] = -1.0  # the model must not change with the dict
    wrong = {"weight": np.zeros((5, 3)), "bias": np.zeros(5)}
    return {"weight": target.weight, "bias": target.bias, "result": [list(result[0]), list(result[1])],
            "dtype": str(target.weight.dtype), "wrong_shape": raised(target.load_state_dict, wrong),
            "missing": raised(target.load_state_dict, {"weight": state["weight"]})}


def _linear_init(rng):
    layer = Linear(6, 3, seed=int(rng.integers(1000)))
    wide = Linear(2, 9, rng=rng, dtype=np.float64)
    return {"weight": layer.weight, "bias": layer.bias, "wide_weight": wide.weight, "wide_bias": wide.bias,
            "no_bias": Linear(2, 2, bias=False, rng=rng).bias is None}


def _linear_forward(rng):
    layer = Linear(4, 4, rng=rng, dtype=np.float64)
    layer.weight.data = rng.standard_normal((4, 4))
    layer.bias.data = rng.standard_normal(4)
    odd = Linear(5, 3, rng=rng, dtype=np.float64)
    x3 = Tensor(rng.standard_normal((2, 3, 5)))
    return {"square": layer(Tensor(rng.standard_normal((3, 4)))), "batched": odd(x3),
            "vector": odd(Tensor(rng.standard_normal(5))),
            "bad_input": raised(odd, Tensor(rng.standard_normal((2, 4)))),
            "bad_size": raised(Linear, 0, 3)}


def _dropout(rng):
    x = Tensor(rng.standard_normal((40, 25)).astype(np.float32) + 3.0)
    drop = Dropout(0.3, seed=int(rng.integers(1000)))
    train = drop(x)
    drop.eval()
    evaluated = drop(x)
    return {"train": train, "eval_is_input": evaluated is x, "all": Dropout(1.0)(x),
            "kept_fraction": float((train.numpy() != 0).mean()), "bad_p": raised(Dropout, 1.5)}


def _sequential(rng):
    net = Sequential(Linear(3, 4, rng=rng, dtype=np.float64), ReLU(), Linear(4, 2, rng=rng, dtype=np.float64))
    items = ModuleList([Linear(2, 2, rng=rng), ReLU()])
    return {"out": net(Tensor(rng.standard_normal((5, 3)))), "sliced_len": len(net[1:]),
            "names": [n for n, _ in net.named_parameters()], "list_names": [n for n, _ in items.named_parameters()],
            "index_error": raised(net.__getitem__, 3), "count": count_parameters(net)}


CASES = {
    "names": (_names, "named_parameters through children, plain lists, shared tensors and prefixes; counts"),
    "zero-grad": (_zero_grad, "zero_grad sets every parameter's grad (children's too) to None"),
    "modes": (_modes, "eval()/train() return the module and reach every descendant"),
    "state-dict": (_state_dict, "state_dict: parameters and buffers, independent copies"),
    "load-state-dict": (_load_state_dict, "load_state_dict copies the values in; wrong shapes and missing keys raise"),
    "linear-init": (_linear_init, "Linear's weight (in, out) and bias drawn uniform(±1/√in) from the seed"),
    "linear-forward": (_linear_forward, "Linear on (3,4), (2,3,5) and (5,) inputs; bad input sizes raise"),
    "dropout": (_dropout, "Dropout(0.3) with a seed: which elements survive and their 1/(1-p) scale; eval is x"),
    "sequential": (_sequential, "Sequential output, slicing and parameter names"),
}
