"""Issue 31 (reliability round 3): LayerNorm on an integer input.

Normalising integers gives fractions; with rstd cast to the input's dtype an int64 row came
out as zeros. As torch.nn.functional.layer_norm (and module 02's softmax), an integer or
boolean input is refused with a TypeError that says to convert it.
"""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import LayerNorm, layer_norm


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_layer_norm_refuses_an_integer_input_instead_of_returning_zeros(dtype):
    x = Tensor(np.array([[1, 2, 3, 4]]).astype(dtype))
    with pytest.raises(TypeError, match=rf"layer_norm needs a floating-point input, got dtype {np.dtype(dtype)}"):
        LayerNorm(4)(x)
    with pytest.raises(TypeError, match="convert it first"):
        layer_norm(x, np.ones(4, np.float32))


def test_the_same_values_as_floats_normalise():
    out = LayerNorm(4)(Tensor(np.array([[1, 2, 3, 4]], dtype=np.float32))).numpy()
    expected = (np.arange(1, 5) - 2.5) / np.sqrt(1.25 + 1e-5)
    assert np.allclose(out, [expected], atol=1e-6)
