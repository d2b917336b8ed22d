"""Issue 31 (reliability round 3): the fused ops on an integer input.

blas_layer_norm returned [[316, 632, ...]] for an int64 row (rstd cast to int64) and bias_gelu
crashed inside NumPy's casting; both now refuse it as module 13's layer_norm does.
"""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import LayerNorm
from tinytorch.perf.acceleration import BlasLayerNorm, bias_gelu, blas_layer_norm


@pytest.mark.parametrize("dtype", [np.int64, np.int16, np.bool_])
def test_blas_layer_norm_refuses_an_integer_input(dtype):
    x = Tensor(np.array([[1, 2, 3, 4]]).astype(dtype))
    with pytest.raises(TypeError, match=rf"blas_layer_norm needs a floating-point input, got dtype {np.dtype(dtype)}"):
        blas_layer_norm(x, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="convert it first"):
        BlasLayerNorm(LayerNorm(4))(x)


def test_bias_gelu_refuses_an_integer_input_with_a_clear_error():
    with pytest.raises(TypeError, match="bias_gelu needs a floating-point input, got dtype int64"):
        bias_gelu(Tensor(np.array([[1, 2]])), Tensor(np.ones(2, np.float32)))
    with pytest.raises(TypeError, match="bias_gelu needs a floating-point input"):
        bias_gelu(Tensor(np.array([[1, 2]])))


@pytest.mark.parametrize("tile", [float("inf"), float("nan"), 2.5, 0, True, "4"])
def test_blocked_matmul_tile_must_be_a_positive_whole_number(tile):
    """tile=inf crashed with a raw OverflowError inside int()."""
    from tinytorch.perf.acceleration import blocked_matmul
    with pytest.raises(ValueError, match="blocked_matmul: tile must be a positive int"):
        blocked_matmul(np.ones((4, 4)), np.ones((4, 4)), tile)
