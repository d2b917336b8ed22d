"""Module 16, section 8: a Linear as two through its truncated SVD; Eckart-Young; the rank from the spectrum."""
import numpy as np
import pytest

from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.perf.compression import choose_rank, low_rank


def test_factor_shapes_follow_our_weight_layout():
    layer = Linear(7, 5, seed=0, dtype=np.float64)
    pair = low_rank(layer, 3)
    assert isinstance(pair, Sequential) and len(pair) == 2, "low_rank returns Sequential(first, second)"
    first, second = pair[0], pair[1]
    assert first.weight.shape == (7, 3) and second.weight.shape == (3, 5), (
        f"first Linear (in, r) from U's first r columns, second (r, out) from Vt's first r rows (our weight is "
        f"(in, out) = U·S·Vt); got {first.weight.shape} and {second.weight.shape}")
    assert first.bias is None and np.array_equal(second.bias.numpy(), layer.bias.numpy()), (
        "the first Linear has no bias; the second takes the layer's bias")
    assert second.bias is not layer.bias, "the bias is copied, not shared"


@pytest.mark.parametrize("shape", [(7, 5), (5, 7), (6, 6)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_eckart_young(shape):
    layer = Linear(*shape, seed=1, dtype=np.float64)
    W = layer.weight.numpy()
    sigma = np.linalg.svd(W, compute_uv=False)
    for r in range(1, min(shape) + 1):
        pair = low_rank(layer, r)
        product = pair[0].weight.numpy() @ pair[1].weight.numpy()
        error = np.sum((W - product) ** 2)
        assert abs(error - np.sum(sigma[r:] ** 2)) < 1e-10, (
            f"Eckart-Young: ||W - W_r||_F^2 must equal the sum of the dropped sigma^2 ({np.sum(sigma[r:] ** 2):.6f}) at "
            f"rank {r}, got {error:.6f}: scale by the singular values, U's columns on the input side, Vt's rows on the "
            "output side")
        x = np.random.default_rng(r).standard_normal((3, shape[0]))
        assert np.allclose(pair(Tensor(x)).numpy(), x @ product + layer.bias.numpy(), atol=1e-12), (
            "the pair computes x @ (first.weight @ second.weight) + bias")
    full = low_rank(layer, min(shape))
    assert np.allclose(full[0].weight.numpy() @ full[1].weight.numpy(), W, atol=1e-12), (
        "at full rank the factors multiply back to W")


def test_the_singular_values_are_split_evenly():
    pair = low_rank(Linear(9, 4, seed=2, dtype=np.float64), 3)
    assert np.allclose(np.linalg.norm(pair[0].weight.numpy(), axis=0), np.linalg.norm(pair[1].weight.numpy(), axis=1)), \
        "sqrt(S) on each side: column i of the first factor and row i of the second have the same norm, sqrt(sigma_i)"


def test_dtype_no_bias_and_errors():
    layer = Linear(6, 4, bias=False, seed=3)
    pair = low_rank(layer, 2)
    assert pair[0].weight.dtype == np.float32 and pair[1].bias is None, (
        "the factors keep float32; no bias stays no bias")
    for bad in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="rank"):
            low_rank(layer, bad)


def test_choose_rank():
    sigma = [3.0, 2.0, 1.0]  # energies 9, 4, 1 of 14
    got = [choose_rank(sigma, e) for e in (9 / 14, 0.65, 13 / 14, 1.0)]
    assert got == [1, 2, 2, 3], (
        f"choose_rank: the smallest r with sum(sigma[:r]^2) >= energy * sum(sigma^2); for sigma = [3, 2, 1] and "
        f"energies 9/14, 0.65, 13/14, 1 expected [1, 2, 2, 3], got {got}")
    assert isinstance(choose_rank(np.array(sigma), 0.5), int), "choose_rank returns a Python int"
    scaled = [choose_rank(np.array(sigma) * 1e4, e) for e in (9 / 14, 0.65, 13 / 14, 1.0)]
    assert scaled == [1, 2, 2, 3], (
        f"choose_rank does not depend on the scale of sigma: for 1e4 * [3, 2, 1] expected [1, 2, 2, 3], got {scaled}; "
        "compare the fractions cumsum(sigma^2) / sum(sigma^2) with energy - 1e-12, not the raw sums "
        "(a tolerance of 1e-12 is below their rounding error)")
    # a spectrum whose last cumulative fraction cumsum(σ²) / sum(σ²) rounds to just below 1 (cumsum and NumPy's
    # pairwise sum add in different orders); an SVD's last fraction lands on either side of 1, by machine
    ten = np.array([9.0, 8.7, 8.2, 8.0, 7.8, 6.3, 4.7, 3.0, 2.3, 0.1])
    assert choose_rank(ten, 1.0) == 10, (
        f"energy 1.0 keeps every singular value: expected rank 10, got {choose_rank(ten, 1.0)} (the last "
        "cumulative fraction rounds to just below 1 here: compare with energy - 1e-12, and never return more than "
        "len(sigma))")
    twenty = np.linalg.svd(np.random.default_rng(0).standard_normal((20, 30)), compute_uv=False)
    assert choose_rank(twenty, 1.0) == 20, (
        f"energy 1.0 keeps every singular value: expected rank 20, got {choose_rank(twenty, 1.0)} (the last "
        "cumulative fraction rounds to just below 1 here: compare with energy - 1e-12, and never return more than "
        "len(sigma))")
    sigma = np.linalg.svd(np.random.default_rng(4).standard_normal((20, 30)), compute_uv=False)
    for energy in (0.3, 0.9, 0.99):
        r = choose_rank(sigma, energy)
        kept = np.cumsum(sigma ** 2) / np.sum(sigma ** 2)
        assert kept[r - 1] >= energy - 1e-12 and (r == 1 or kept[r - 2] < energy), (
            f"rank {r} is not the smallest that keeps {energy} of the energy")
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="energy"):
            choose_rank(sigma, bad)
