"""Module 16, section 6: CSR arrays and the bytes of dense, bitmask and CSR storage; the crossovers."""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.perf.compression import from_csr, magnitude_mask, storage_bytes, to_csr


def test_csr_of_a_small_matrix():
    m = np.array([[0.0, 1.5, 0.0, -2.0], [0.0, 0.0, 3.0, 0.0]], dtype=np.float32)
    values, col_indices, row_ptr = to_csr(m)
    assert np.array_equal(row_ptr, [0, 2, 3]), (
        "row_ptr has rows + 1 entries, starts at 0 and ends at nnz (a running count: cumsum of the nonzeros per row): "
        f"expected [0, 2, 3], got {row_ptr}")
    assert np.array_equal(values, [1.5, -2.0, 3.0]) and np.array_equal(col_indices, [1, 3, 2]), (
        f"values row by row [1.5, -2, 3] at columns [1, 3, 2]; got {values}, {col_indices}")
    assert values.dtype == np.float32 and col_indices.dtype == np.int32 and row_ptr.dtype == np.int32, (
        "values keep the matrix's dtype; col_indices and row_ptr are int32")


def test_empty_rows():
    m = np.zeros((4, 3), np.float32)
    m[1, 2] = 7.0
    assert np.array_equal(to_csr(m)[2], [0, 0, 1, 1, 1]), "empty rows (also the last ones) repeat the count"
    values, cols, ptr = to_csr(np.zeros((3, 2)))
    assert values.size == 0 and cols.size == 0 and np.array_equal(ptr, [0, 0, 0, 0]), (
        "an all-zero matrix: no values, row_ptr all 0")


@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0], ids=lambda d: f"density {d}")
def test_round_trip_and_bytes(density):
    rng = np.random.default_rng(int(10 * density))
    m = rng.standard_normal((30, 20)).astype(np.float32) * (rng.random((30, 20)) < density)
    assert np.array_equal(from_csr(*to_csr(m), m.shape), m), "to_csr then from_csr must give the matrix back"
    nnz = int(np.count_nonzero(m))
    expected = {"dense": 4 * 600, "bitmask": 600 // 8 + 4 * nnz, "csr": 8 * nnz + 4 * 31}
    assert storage_bytes(m) == expected, f"expected {expected}, got {storage_bytes(m)}"
    assert storage_bytes(Tensor(m)) == expected, "storage_bytes takes a Tensor too"


def test_bytes_count_float32_values_whatever_the_dtype():
    m = np.eye(8, dtype=np.float64)
    assert storage_bytes(m) == {"dense": 256, "bitmask": 8 + 32, "csr": 32 + 32 + 36}, (
        "float64 entries are counted as float32 values: 4 bytes each")


def test_crossovers_match_the_derivation():
    R, C = 32, 64
    w = np.random.default_rng(5).standard_normal((R, C))
    sparsities = np.arange(R * C + 1) / (R * C)
    sizes = [storage_bytes(w * magnitude_mask(w, s)) for s in sparsities]

    def first(better, worse):
        return next(s for s, b in zip(sparsities, sizes) if b[better] < b[worse])

    # the derivation, exact for a whole number of nonzeros (R·C is a multiple of 8 here)
    for better, worse, formula in (("bitmask", "dense", 1 / 32), ("csr", "dense", 0.5 + (R + 1) / (2 * R * C)),
                                   ("csr", "bitmask", 1 - 1 / 32 + (R + 1) / (R * C))):
        assert formula < first(better, worse) <= formula + 1 / (R * C) + 1e-12, (better, worse, first(better, worse))


def test_errors():
    with pytest.raises(ValueError, match="2-D"):
        to_csr(np.ones(3))
