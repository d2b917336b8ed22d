"""Module 18, graded cases: the fused bias + GELU op and its rule, FusedMLP and fuse, the compiled
kernels of section 6 (LayerNorm, bias + GELU, softmax + cross-entropy, the causal softmax, the
prange backward) through their ops, FusedAdamW with and without adamw_kernel (bit for bit AdamW's
updates, so compared as the floats' bits), blocked_matmul. (BlasLayerNorm is given code: fuse's
case checks that it replaces LayerNorm.) The kernels run as plain Python where Numba is missing:
the same values.

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
from tinytorch.perf.acceleration import (COMPILED_REPLACEMENTS, FUSED_REPLACEMENTS, FusedAdamW, FusedMLP, bias_gelu,
                                         blocked_matmul, causal_attention, compiled_bias_gelu, compiled_cross_entropy,
                                         compiled_layer_norm, fuse, layer_norm_backward_parallel,
                                         layer_norm_rows_backward, unsafe_fastmath)
from tinytorch.perf import acceleration
from tinytorch.models.transformer import GPT


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
    fused = fuse(model, FUSED_REPLACEMENTS)
    x = Tensor(rng.standard_normal((3, 4)))
    shared = [a is b for a, b in zip(model.parameters(), fused.parameters())]
    fused.mlp.fc.weight.data = fused.mlp.fc.weight.data * 0.5  # an update through the fused model
    return {"types": [type(m).__name__ for _, m in fused.named_modules()],
            "original_types": [type(m).__name__ for _, m in model.named_modules()], "shared": shared,
            "same_update": bool(np.array_equal(model.mlp.fc.weight.numpy(), fused.mlp.fc.weight.numpy())),
            "out": fused(x), "lone": type(fuse(MLP(2, 4, rng=rng), FUSED_REPLACEMENTS)).__name__, "not_a_module": raised(fuse, [model])}


def _fused_adamw(rng):
    shapes = [(3, 4), (4,), (2, 2)]
    start = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) for s in shapes] for _ in range(4)]
    results = {}
    makers = (("fused", lambda *a, **k: FusedAdamW(*a, **k, compiled=False)),
              ("kernel", lambda *a, **k: FusedAdamW(*a, **k, compiled=True)), ("plain", AdamW))
    for label, make in makers:
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
            "kernel_bits": bits(results["kernel"]), "kernel_moment_bits": bits(results["kernel_moments"]),
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


def _backward_of(op, inputs, rng):
    """op(*inputs) and the gradients of its Tensor inputs for a random cotangent."""
    out = op(*inputs)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    return out, [t.grad for t in inputs if isinstance(t, Tensor) and t.requires_grad]


def _kernel_layer_norm(rng):
    x = Tensor(rng.standard_normal((7, 13)) * 2 + 1, requires_grad=True)
    w, b = (Tensor(rng.standard_normal(13), requires_grad=True) for _ in range(2))
    out, (dx, dw, db) = _backward_of(compiled_layer_norm, [x, w, b], rng)
    x3 = Tensor(rng.standard_normal((2, 3, 5)).astype(np.float32), requires_grad=True)
    out3, (dx3, dw3) = _backward_of(compiled_layer_norm, [x3, Tensor(np.ones(5, np.float32), requires_grad=True)], rng)
    return {"out": out, "rstd": out._node.saved["rstd"], "mean": out._node.saved["mean"], "dx": dx, "dweight": dw,
            "dbias": db, "float32": out3, "dx_float32": dx3, "dweight_float32": dw3, "op": out._node.op}


def _kernel_bias_gelu(rng):
    x = Tensor(rng.standard_normal((7, 13)) * 2, requires_grad=True)
    b = Tensor(rng.standard_normal(13), requires_grad=True)
    out, (dx, db) = _backward_of(compiled_bias_gelu, [x, b], rng)
    return {"out": out, "u": out._node.saved["u"], "tanh": out._node.saved["tanh"], "dx": dx, "dbias": db,
            "op": out._node.op}


def _unsafe_flags(*names):
    """How many fastmath flags that assume no NaN or inf the softmax kernels were compiled with (0 is right:
    a -inf logit must give exactly 0, which no value on this machine can prove a fastmath build keeps)."""
    return sum(len(unsafe_fastmath(getattr(acceleration, name))) for name in names)


def _kernel_cross_entropy(rng):
    logits = Tensor(rng.standard_normal((2, 5, 7)) * 3, requires_grad=True)
    targets = rng.integers(0, 7, (2, 5))
    loss = compiled_cross_entropy(logits, targets)
    loss.backward()
    huge = compiled_cross_entropy(np.array([[1000.0, 0.0, -1000.0], [0.0, 990.0, 1000.0]]), np.array([0, 1]))
    low = compiled_cross_entropy(np.array([[-1000.0, -1001.0], [-1200.0, -1000.5]]), np.array([0, 1]))  # max from row's first
    return {"loss": loss, "probs": loss._node.saved["probs"], "dlogits": logits.grad, "huge": huge, "low": low,
            "bad_targets": raised(compiled_cross_entropy, np.zeros((2, 3)), np.array([0, 3])),
            "unsafe_fastmath_flags": _unsafe_flags("softmax_cross_entropy_rows", "softmax_cross_entropy_rows_backward")}


def _kernel_causal_attention(rng):
    q, k, v = (Tensor(rng.standard_normal((2, 3, 6, 4)), requires_grad=True) for _ in range(3))
    out, (dq, dk, dv) = _backward_of(causal_attention, [q, k, v], rng)
    big = np.array([[[[0.0, 0.0], [1000.0, -1000.0]]]])
    eye = np.eye(2)[None, None]
    return {"out": out, "probs": out._node.saved["probs"], "dq": dq, "dk": dk, "dv": dv,
            "huge": causal_attention(big, eye, eye, scale=1.0),
            "low": causal_attention(np.full((1, 1, 2, 2), -1000.0), eye, eye, scale=1.0),  # max from the row's first
            "unsafe_fastmath_flags": _unsafe_flags("causal_softmax_rows", "causal_softmax_rows_backward")}


def _kernel_prange(rng):
    x, grad = rng.standard_normal((600, 16)), rng.standard_normal((600, 16))
    w = rng.standard_normal(16)
    mean, rstd = x.mean(axis=1), 1 / np.sqrt(x.var(axis=1) + 1e-5)
    dx, dw_parts, db_parts = np.empty_like(x), np.zeros((3, 16)), np.zeros((3, 16))
    layer_norm_backward_parallel(grad, x, w, mean, rstd, dx, dw_parts, db_parts)
    serial_dx, dw, db = np.empty_like(x), np.zeros(16), np.zeros(16)
    layer_norm_rows_backward(grad, x, w, mean, rstd, serial_dx, dw, db, 100, 250)
    return {"dx": dx, "dweight_parts": dw_parts, "dbias_parts": db_parts, "rows_100_to_250": serial_dx[100:250],
            "dweight_100_to_250": dw, "dbias_100_to_250": db}


def _compiled_gpt(rng):
    model = GPT(11, 8, 2, 2, 6, seed=int(rng.integers(1000)), dtype=np.float64)
    compiled = fuse(model, COMPILED_REPLACEMENTS)
    ids, targets = rng.integers(0, 11, (2, 2, 6))
    logits, loss = compiled(ids, targets=targets)
    loss.backward()
    return {"type": type(compiled).__name__, "types": sorted({type(m).__name__ for _, m in compiled.named_modules()}),
            "logits": logits, "loss": loss, "ops": graph_ops(loss),
            "grads": np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])}


CASES = {
    "bias-gelu": (_bias_gelu, "bias_gelu: value, saved u and tanh, gradients for x and bias, twice on a kept graph"),
    "bias-gelu-no-bias": (_bias_gelu_no_bias, "bias_gelu without a bias, 3-D and float16", {"rtol": 1e-3, "atol": 1e-3}),
    "fused-mlp": (_fused_mlp, "FusedMLP equals the MLP through the fused op; gradients reach fc's weight and bias"),
    "fuse": (_fuse, "fuse: a new tree, the same weight tensors, MLP and LayerNorm replaced by the table"),
    "fused-adamw": (_fused_adamw, "FusedAdamW with two groups (one without decay), NumPy update and adamw_kernel: "
                                  "AdamW's updates bit for bit"),
    "kernel-layer-norm": (_kernel_layer_norm, "compiled_layer_norm: values, saved mean and rstd, gradients; 3-D float32",
                          {"rtol": 1e-5, "atol": 1e-6}),
    "kernel-bias-gelu": (_kernel_bias_gelu, "compiled_bias_gelu: values, saved u and tanh, dx and the summed dbias"),
    "kernel-cross-entropy": (_kernel_cross_entropy, "compiled_cross_entropy on 3-D logits: loss, probs, gradient; "
                                                    "logits near 1000; targets out of range"),
    "kernel-causal-attention": (_kernel_causal_attention, "causal_attention: output, causal probabilities, "
                                                          "dQ, dK, dV; scores near 1000"),
    "kernel-prange": (_kernel_prange, "layer_norm_backward_parallel in 3 parts: dx and one accumulator row per part; "
                                      "layer_norm_rows_backward on rows 100..249"),
    "compiled-gpt": (_compiled_gpt, "fuse(GPT, COMPILED_REPLACEMENTS): every compiled module and op, loss, gradients"),
    "blocked-tiles": (_blocked_tiles, "blocked_matmul (5, 9) @ (9, 4) with tile 4: 2·1·3 products on 4×4 blocks at most"),
    "blocked-matmul": (_blocked_matmul, "blocked_matmul with tiles 3, 4, 20; float32 and int inputs keep their dtype",
                       {"rtol": 1e-5, "atol": 1e-5}),
}
