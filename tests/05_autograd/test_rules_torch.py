"""PyTorch parity: the same values and gradients as torch (float64) for every op in the table.

(Named so that it runs after the hand-computed rule and engine tests, whose messages
name the cause of a failure; parity failures name the case and its ops.)
"""
import zlib

import numpy as np
import pytest

from autograd_op_table import CASE_IDS, CASES, ops_in
from tinytorch.core.tensor import Tensor

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def _compare(fn, torch_fn, arrays, seed, name=""):
    xs = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    out = fn(*xs)
    what = f"{name} (ops: {ops_in(out)})"
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    ref = torch_fn(torch, *ts)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=f"{what}: value")
    v = np.asarray(np.random.default_rng(seed).standard_normal(out.shape))
    out.backward(v)
    ref.backward(torch.tensor(v))
    for i, (x, t) in enumerate(zip(xs, ts)):
        assert x.grad is not None and x.grad.shape == tuple(t.grad.shape), f"{what}: input {i}"
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{what}: input {i}: gradient differs from torch")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_values_and_gradients_match_torch(case):
    seed = zlib.crc32(case.name.encode())
    _compare(case.fn, case.torch_fn, case.arrays(np.random.default_rng(seed)), seed + 1, case.name)


def test_max_ties_match_torch_amax():
    # torch.amax (and max without dim) share ties equally, like TinyTorch
    a = np.array([[1.0, 5.0, 5.0], [2.0, 2.0, 2.0]])
    _compare(lambda x: x.max(axis=1), lambda t, x: t.amax(x, dim=1), [a], 0)
    _compare(lambda x: x.max(), lambda t, x: x.max(), [a], 1)


def test_pow_with_zero_base_and_zero_exponent_matches_torch():
    base = np.array([0.0, 0.0, 0.5, 3.0])
    exponent = np.array([2.0, 0.0, -1.5, 0.0])
    _compare(lambda a, b: a**b, lambda t, a, b: a**b, [base, exponent], 2)


def test_pow_negative_base_base_gradient_matches_torch():
    # torch's exponent gradient is nan for a negative base (log of a negative number);
    # TinyTorch returns 0 there by design (see test_engine), so compare the base only.
    base, exponent = np.array([-2.0, -0.5]), np.array([3.0, 2.0])
    x = Tensor(base.copy(), requires_grad=True)
    (x ** Tensor(exponent)).sum().backward()
    t = torch.tensor(base, requires_grad=True)
    (t ** torch.tensor(exponent)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_small_mlp_matches_torch():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 4))
    w1, b1 = rng.standard_normal((4, 8)), rng.standard_normal(8)
    w2, b2 = rng.standard_normal((8, 3)), rng.standard_normal(3)

    def ours(w1, b1, w2, b2):
        from tinytorch.core.activations import log_softmax, relu

        h = relu(Tensor(x) @ w1 + b1)
        return -(log_softmax(h @ w2 + b2)[np.arange(5), np.array([0, 2, 1, 1, 0])]).mean()

    def theirs(t, w1, b1, w2, b2):
        h = t.relu(t.tensor(x) @ w1 + b1)
        return t.nn.functional.cross_entropy(h @ w2 + b2, t.tensor([0, 2, 1, 1, 0]))

    _compare(ours, theirs, [w1, b1, w2, b2], 3)
