"""Module 18, graded cases: the fused bias + GELU op and its rule, FusedMLP and fuse, FusedAdamW
(bit for bit AdamW's updates, so compared as the floats' bits), blocked_matmul. (BlasLayerNorm
is given code: fuse's case checks that it replaces LayerNorm.)

Format: grading/reference_values.py.
"""
import copy

import numpy as np
from reference_values import raised

from tinytorch.core.activations import gelu
from tinytorch.core.autograd import BACKWARD_RULES
from tinytorch.core.autograd import topological_order
from tinytorch.core.layers import Linear, Module
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import MLP, LayerNorm
from tinytorch.perf.acceleration import FusedAdamW, FusedMLP, bias_gelu, blocked_matmul, fuse


def graph_ops(out):
    """The ops recorded behind `out`, sorted (which ops ran, not how many times)."""
    return sorted({t._node.op for t in topological_order(out) if t._node is not None})


def bits(array):
    """A float64 array's bits as int64: compared exactly (the fused step must equal AdamW's bit for bit)."""
    return np.ascontiguousarray(np.asarray(array, dtype=np.float64)).view(np.int64)


def _bias_gelu(rng):
    x = Tensor(rng.standard_normal((3, 5)) * 2, requires_grad=True)
    bias = Tensor(rng.standard_normal(5), requires_grad=True)
    out = bias_gelu(x, bias)
    upstream = Tensor(rng.standard_normal((3, 5)))
    loss = (out * upstream).sum()
    loss.backward()
    first_dx, first_dbias = x.grad.numpy().copy(), bias.grad.numpy().copy()
    loss.backward()  # a second backward on the same graph adds the same gradients again
    saved = out._node.saved
    seed_grad = rng.standard_normal((3, 5))
    kept = seed_grad.copy()
    BACKWARD_RULES["bias_gelu"](seed_grad, out._node)  # the rule must leave the gradient it is given alone
    return {"out": out, "reference": gelu(Tensor(x.numpy() + bias.numpy())), "u": saved["u"], "tanh": saved["tanh"],
            "grad_kept": bool(np.array_equal(seed_grad, kept)),
            "inputs": len(out._node.inputs), "dx": first_dx, "dbias": first_dbias,
            "dx_twice": x.grad, "dbias_twice": bias.grad, "bad_bias": raised(bias_gelu, x, Tensor(np.ones(4)))}


def _bias_gelu_no_bias(rng):
    x = Tensor(rng.standard_normal((2, 2, 4)), requires_grad=True)
    out = bias_gelu(x)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    half = bias_gelu(Tensor(rng.standard_normal((2, 3)).astype(np.float16)))
    return {"out": out, "dx": x.grad, "half": half, "half_dtype": str(half.dtype)}


def _fused_mlp(rng):
    mlp = MLP(4, 8, rng=rng, dtype=np.float64)
    fused = FusedMLP(mlp)
    x = Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    out = fused(x)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    no_bias = FusedMLP(MLP(4, 6, bias=False, rng=rng, dtype=np.float64))
    dropping = MLP(4, 8, dropout=0.5, rng=rng, dtype=np.float64)  # training mode: a copy draws the same masks
    twin = copy.deepcopy(dropping)
    return {"dropout_out": FusedMLP(twin)(Tensor(x.numpy())), "dropout_plain": dropping(Tensor(x.numpy())),
            "out": out, "plain": mlp(Tensor(x.numpy())), "ops": graph_ops(out), "dx": x.grad,
            "dfc": mlp.fc.weight.grad, "dfc_bias": mlp.fc.bias.grad, "no_bias": no_bias(Tensor(x.numpy())),
            "names": [n for n, _ in fused.named_parameters()]}


class Small(Module):
    def __init__(self, rng):
        super().__init__()
        self.norm = LayerNorm(4, dtype=np.float64)
        self.mlp = MLP(4, 8, rng=rng, dtype=np.float64)
        self.head = Linear(4, 2, rng=rng, dtype=np.float64)

    def forward(self, x):
        return self.head(self.mlp(self.norm(x)))


def _fuse(rng):
    model = Small(rng)
    fused = fuse(model)
    x = Tensor(rng.standard_normal((3, 4)))
    shared = [a is b for a, b in zip(model.parameters(), fused.parameters())]
    fused.mlp.fc.weight.data = fused.mlp.fc.weight.data * 0.5  # an update through the fused model
    return {"types": [type(m).__name__ for _, m in fused.named_modules()],
            "original_types": [type(m).__name__ for _, m in model.named_modules()], "shared": shared,
            "same_update": bool(np.array_equal(model.mlp.fc.weight.numpy(), fused.mlp.fc.weight.numpy())),
            "out": fused(x), "lone": type(fuse(MLP(2, 4, rng=rng))).__name__, "not_a_module": raised(fuse, [model])}


def _fused_adamw(rng):
    shapes = [(3, 4), (4,), (2, 2)]
    start = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) for s in shapes] for _ in range(4)]
    results = {}
    for label, make in (("fused", FusedAdamW), ("plain", AdamW)):
        params = [Tensor(v.copy(), requires_grad=True) for v in start]
        groups = [{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:], "weight_decay": 0.0, "lr": 0.02}]
        optimizer = make(groups, lr=0.01, betas=(0.85, 0.99), eps=1e-6)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = Tensor(g.copy())
            optimizer.step()
        results[label] = np.concatenate([p.numpy().ravel() for p in params])
        results[f"{label}_moments"] = np.concatenate([optimizer.state[i]["exp_avg_sq"].ravel() for i in range(3)])
    return {"fused_bits": bits(results["fused"]), "plain_bits": bits(results["plain"]),
            "moment_bits": bits(results["fused_moments"]),
            "mixed": raised(FusedAdamW, [Tensor(np.ones(2), requires_grad=True),
                                         Tensor(np.ones(2, dtype=np.float32), requires_grad=True)])}


class Counting(np.ndarray):
    """An array that counts the matrix products made with it (and with its slices) and the
    shapes of their operands: a tiled product makes one per tile, on tile-sized blocks."""

    products: list = []

    def __matmul__(self, other):
        Counting.products.append([*self.shape, *np.shape(other)])
        return np.matmul(np.asarray(self), np.asarray(other))


def _blocked_tiles(rng):
    a = rng.standard_normal((5, 9)).view(Counting)
    b = rng.standard_normal((9, 4)).view(Counting)
    Counting.products = []
    out = blocked_matmul(a, b, 4)
    return {"out": np.asarray(out), "products": len(Counting.products), "largest_operand": max(map(max, Counting.products))}


def _blocked_matmul(rng):
    a, b = rng.standard_normal((7, 10)), rng.standard_normal((10, 5))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    out32 = blocked_matmul(a32, b32, 3)
    return {"tile3": blocked_matmul(a, b, 3), "tile4": blocked_matmul(a, b, 4), "tile20": blocked_matmul(a, b, 20),
            "float32": out32, "float32_dtype": str(out32.dtype), "ints": blocked_matmul(np.arange(6).reshape(2, 3),
                                                                                       np.arange(6).reshape(3, 2), 2),
            "mixed": raised(blocked_matmul, np.arange(6).reshape(2, 3), b[:3, :2], 2),  # int @ float: float
            "bad_tile": raised(blocked_matmul, a, b, 0), "bad_shapes": raised(blocked_matmul, a, a, 2)}


CASES = {
    "bias-gelu": (_bias_gelu, "bias_gelu: value, saved u and tanh, gradients for x and bias, twice on a kept graph"),
    "bias-gelu-no-bias": (_bias_gelu_no_bias, "bias_gelu without a bias, 3-D and float16", {"rtol": 1e-3, "atol": 1e-3}),
    "fused-mlp": (_fused_mlp, "FusedMLP equals the MLP through the fused op; gradients reach fc's weight and bias"),
    "fuse": (_fuse, "fuse: a new tree, the same weight tensors, MLP and LayerNorm replaced by the table"),
    "fused-adamw": (_fused_adamw, "FusedAdamW with two groups (one without decay): AdamW's updates bit for bit"),
    "blocked-tiles": (_blocked_tiles, "blocked_matmul (5, 9) @ (9, 4) with tile 4: 2·1·3 products on 4×4 blocks at most"),
    "blocked-matmul": (_blocked_matmul, "blocked_matmul with tiles 3, 4, 20; float32 and int inputs keep their dtype",
                       {"rtol": 1e-5, "atol": 1e-5}),
}
