"""Module 18, section 8: blocked_matmul honours its tile size and equals a @ b."""
import math

import numpy as np
import pytest

from tinytorch.perf.acceleration import blocked_matmul


class CountingArray(np.ndarray):
    products = 0

    def __matmul__(self, other):
        CountingArray.products += 1
        return np.asarray(self) @ np.asarray(other)


@pytest.mark.parametrize("tile", [1, 2, 5, 8, 64])
def test_equals_matmul(tile):
    rng = np.random.default_rng(tile)
    a, b = rng.standard_normal((9, 13)), rng.standard_normal((13, 6))
    got = blocked_matmul(a, b, tile)
    assert np.allclose(got, a @ b, atol=1e-12), f"tile {tile}: " + _which_slip(got, a @ b, tile)


def _which_slip(got, want, tile):
    """What a wrong blocked product most likely did, told from where it differs from a @ b."""
    m, n = want.shape
    full_m, full_n = m // tile * tile, n // tile * tile
    if np.allclose(got[:full_m, :full_n], want[:full_m, :full_n], atol=1e-12):
        return (f"right in the whole tiles ({full_m} × {full_n}) but wrong in the last, partial tiles of a "
                f"{m} × {n} result: the edge tiles were skipped (range(0, m, tile) reaches them; a slice "
                "past the end stops at the end)")
    if np.allclose(got, 0):
        return "the output is all zeros: add each tile product into it (+=)"
    return "differs from a @ b: add every tile depth p (+=) into an output that starts at zeros"


@pytest.mark.parametrize("m,k,n,tile", [(8, 8, 8, 4), (9, 13, 6, 4), (5, 3, 7, 2)])
def test_number_of_tile_products(m, k, n, tile):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).view(CountingArray)
    CountingArray.products = 0
    blocked_matmul(a, rng.standard_normal((k, n)), tile)
    expected = math.ceil(m / tile) * math.ceil(n / tile) * math.ceil(k / tile)
    assert CountingArray.products == expected, (
        f"({m},{k})@({k},{n}) with tile {tile}: expected {expected} tile products, got {CountingArray.products}: "
        "loop over tiles of `tile` along m, n AND k (a tiled product that ignores its tile is not tiled)")


def test_keeps_float32():
    a = np.ones((4, 4), np.float32)
    assert blocked_matmul(a, a, 2).dtype == np.float32, "keep the inputs' dtype: np.result_type(a, b)"


def test_bad_arguments():
    with pytest.raises(ValueError, match="need a"):
        blocked_matmul(np.ones((2, 3)), np.ones((2, 3)), 2)
    with pytest.raises(ValueError, match="tile must be"):
        blocked_matmul(np.ones((2, 2)), np.ones((2, 2)), 0)
