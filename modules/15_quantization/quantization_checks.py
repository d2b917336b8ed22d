# %% [markdown]
# # Module 15's given code: what the inline tests say when a number is wrong
#
# Given code for the lesson `quantization_dev.py`, exported with it (`tito export 15`) to
# `tinytorch.perf.quantization_checks`. It receives your functions as arguments and does not
# import `tinytorch.perf.quantization` (the module you are writing). It holds no exercise:
# the student edition carries this file unchanged.

# %%
#| default_exp perf.quantization_checks

# %%
#| export
import numpy as np


# %%
#| export
def dynamic_slip(out, rows, qweight, scale, bias, observer_class, quantize):
    """None when `out` (N, out) is the dynamic forward of `rows` (N, in) with the int8 weight integers `qweight`
    (in, out), their scales (out,) and `bias`; else what differs, named by the classic slip it matches.

    `observer_class` and `quantize` are the lesson's MinMaxObserver and quantize_per_tensor."""
    def forward(x_symmetric=False, fold_zero_point=True, x_scale=True, add_bias=True):
        observer = observer_class(symmetric=x_symmetric)
        observer.observe(rows)
        sx, zx = observer.qparams()
        qx = quantize(rows, sx, zx).numpy().astype(np.float64)
        acc = (qx - (zx if fold_zero_point else 0)) @ qweight.astype(np.float64)   # exact integers in float64
        y = acc.astype(np.float32) * ((np.float32(sx) if x_scale else np.float32(1)) * scale)
        return y + bias if add_bias else y

    def close(y):
        return np.allclose(out, y, rtol=1e-6, atol=1e-6)

    if close(forward()):
        return None
    slips = [
        ({"add_bias": False}, "it equals the right output without the bias: add self.bias"),
        ({"fold_zero_point": False}, "x's zero point was never folded out (integer_matmul got 0): x is quantized "
                                     "affine, q = x/s_x + z_x, so pass its zero point x_zero_point to integer_matmul"),
        ({"x_scale": False}, "the int32 sums were rescaled by the weight's scale only: multiply by x_scale·scale"),
        ({"x_symmetric": True}, "x was quantized symmetric: quantize it affine int8, its own min and max "
                                "(MinMaxObserver('int8'), the default), so it uses all 256 integers"),
    ]
    for change, what in slips:
        if close(forward(**change)):
            return what
    return (f"largest difference {np.abs(out - forward()).max():.3g} from quantize x (affine int8, its own min and "
            "max), integer_matmul with x's zero point, times x_scale·scale, plus the bias; matched no classic slip")
