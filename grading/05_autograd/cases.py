"""Module 05, graded cases: gradients of seeded graphs the visible tests never build.

Each case runs forward and backward on the student's engine (the earlier modules are the
reference's when modules are graded on their own); the grader compares its values and
gradients with the reference's, recorded by `python grading/record_expected.py`.
"""
import numpy as np

from tinytorch.core.activations import gelu, log_softmax, relu, sigmoid, softmax, tanh
from tinytorch.core.autograd import gradcheck, no_grad
from tinytorch.core.losses import binary_cross_entropy_with_logits, cross_entropy, mse_loss
from tinytorch.core.tensor import Tensor


def leaf(rng, *shape, dtype=np.float64):
    return Tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)


def _broadcast_chain(rng):
    a, b, c = leaf(rng, 3, 1, 4), leaf(rng, 2, 4), leaf(rng, 4, 5)
    y = ((a * b + a / (b * b + 1.0) - b ** 2) @ c).sum()
    y.backward()
    return {"y": y, "da": a.grad, "db": b.grad, "dc": c.grad}


def _reused_node(rng):
    x = leaf(rng, 4)
    h = x * x
    y = (h + h * x + x.exp() - 2.0 / (h + 1.0)).mean()
    y.backward()
    return {"y": y, "dx": x.grad}


def _accumulation(rng):
    x = leaf(rng, 2, 3)
    (x * 3.0).sum().backward()
    (x * x).sum().backward()
    first = x.grad.numpy().copy()
    x.zero_grad()
    (x ** 3).mean().backward()
    return {"accumulated": first, "after_zero_grad": x.grad}


def _reductions(rng):
    x = leaf(rng, 3, 4, 5)
    y = x.sum(axis=(0, 2), keepdims=True) * x.mean(axis=-1, keepdims=True)  # (3, 4, 1)
    z = (y * x.max(axis=1, keepdims=True)).sum()  # (3, 4, 5)
    z.backward()
    return {"z": z, "dx": x.grad}


def _max_ties(rng):
    x = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.5, -1.0, 0.25]]) * rng.uniform(1, 2), requires_grad=True)
    (x.max(axis=1) * Tensor(np.array([1.0, 2.0, 3.0]))).sum().backward()
    return {"dx": x.grad}


def _shape_ops(rng):
    x = leaf(rng, 2, 3, 4)
    mask = rng.random((3, 6)) > 0.6
    y = x.permute(2, 0, 1).reshape(4, 6)[np.array([3, 1, 1])].masked_fill(mask, 0.0).transpose()
    (y * Tensor(rng.standard_normal((6, 3)))).sum().backward()
    return {"y": y, "dx": x.grad}


def _activations(rng):
    x = leaf(rng, 3, 5)
    weights = Tensor(rng.standard_normal((3, 5)))
    y = (relu(x) + sigmoid(x) * tanh(x) + gelu(x) + softmax(x, dim=0) + log_softmax(x, dim=-1)) * weights
    y.sum().backward()
    return {"y": y, "dx": x.grad}


def _losses(rng):
    logits, pred = leaf(rng, 2, 3, 5), leaf(rng, 4, 2)
    targets = rng.integers(0, 5, (2, 3))
    targets[0, 1] = -100
    loss = (cross_entropy(logits, targets, ignore_index=-100) + mse_loss(pred, rng.standard_normal((4, 2)))
            + binary_cross_entropy_with_logits(pred, (rng.random((4, 2)) > 0.5).astype(np.float64)))
    loss.backward()
    return {"loss": loss, "dlogits": logits.grad, "dpred": pred.grad}


def _matmul_vectors(rng):
    v, m, batch = leaf(rng, 4), leaf(rng, 4, 3), leaf(rng, 2, 5, 3, 4)
    y = ((v @ m).sum() + (batch @ v).sum() + (m.transpose() @ v).sum() + (batch @ m).mean())
    y.backward()
    return {"dv": v.grad, "dm": m.grad, "dbatch": batch.grad}


def _deep_chain(rng):
    x = leaf(rng, 3)
    y = x
    for step in range(3000):  # deeper than Python's recursion limit
        y = y * 1.0001 + 0.001 * (step % 3)
    y.sum().backward()
    return {"y": y, "dx": x.grad}


def _float32(rng):
    a, b = leaf(rng, 3, 4, dtype=np.float32), leaf(rng, 4, dtype=np.float32)
    ((a * b).exp().sum(axis=0) * b).sum().backward()
    return {"da": a.grad, "db": b.grad}


def _no_grad_and_detach(rng):
    x = leaf(rng, 3)
    with no_grad():
        frozen = x * 2.0
    y = (x * frozen + x.detach() * x).sum()
    y.backward()
    return {"frozen_requires_grad": [frozen.requires_grad], "dx": x.grad}


def _gradcheck_agrees(rng):
    a, b = leaf(rng, 2, 3), leaf(rng, 3, 2)
    return {"agrees": [bool(gradcheck(lambda p, q: (p @ q).exp().mean(), [a, b]))]}


CASES = {
    "broadcast-chain": (_broadcast_chain, "gradients of ((a*b + a/(b*b+1) - b**2) @ c).sum() with broadcasting"),
    "reused-node": (_reused_node, "a tensor used several times gets every contribution"),
    "accumulation": (_accumulation, "gradients accumulate across backward() calls; zero_grad clears them"),
    "reductions": (_reductions, "gradients through sum/mean/max with axis tuples and keepdims"),
    "max-ties": (_max_ties, "max over an axis with ties shares the gradient equally"),
    "shape-ops": (_shape_ops, "gradients through permute, reshape, indexing, masked_fill and transpose"),
    "activations": (_activations, "gradients through relu, sigmoid, tanh, gelu, softmax, log_softmax"),
    "losses": (_losses, "gradients of cross_entropy (with ignore_index), mse and bce_with_logits"),
    "matmul-vectors": (_matmul_vectors, "matmul gradients with 1-D operands and broadcast batches"),
    "deep-chain": (_deep_chain, "backward through a 3,000-op chain (no recursion)"),
    "float32-gradients": (_float32, "float32 leaves get float32 gradients"),
    "no-grad-detach": (_no_grad_and_detach, "no_grad records nothing; detach stops the gradient"),
    "gradcheck": (_gradcheck_agrees, "gradcheck returns True for a correct op"),
}

