"""Module 09, graded cases: output sizes, im2col/col2im, conv2d and pooling with their gradients, layers.

Shapes, strides and paddings differ from the visible tests' (rectangular kernels, unequal
strides and paddings); gradients are checked in float64. Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.spatial import (AvgPool2d, Conv2d, Flatten, MaxPool2d, avg_pool2d, col2im, conv2d,
                                    conv_output_size, im2col, max_pool2d)
from tinytorch.core.tensor import Tensor


def leaf(rng, *shape):
    return Tensor(rng.standard_normal(shape), requires_grad=True)


def backward_with(out, rng):
    """Backpropagate a seeded upstream gradient (not all ones) through `out`."""
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()


def _output_size(rng):
    combos = [(7, 3, 2, 1), (10, 4, 3, 0), (5, 5, 1, 0), (9, 2, 2, 2), (33, 3, 2, 1)]
    return {"sizes": [conv_output_size(*c) for c in combos],
            "types": [type(conv_output_size(*c)).__name__ for c in combos]}


def _im2col(rng):
    x = rng.standard_normal((2, 2, 5, 6))
    cols = im2col(x, (2, 3), (2, 1))
    one = rng.standard_normal((1, 3, 4, 4))
    pointwise = im2col(one, (1, 1), (1, 1))
    return {"cols": cols, "pointwise": pointwise, "pointwise_is_copy": not np.shares_memory(pointwise, one)}


def _col2im(rng):
    cols = rng.standard_normal((2, 2 * 2 * 3, 4 * 2))  # 2 images, 2 channels, 2×3 kernel, 4×2 positions
    overlapping = col2im(cols, (2, 2, 5, 4), (2, 3), (1, 1))
    strided = col2im(rng.standard_normal((1, 1 * 2 * 2, 2 * 3)), (1, 1, 5, 8), (2, 2), (2, 3))
    return {"overlapping": overlapping, "strided": strided}


def _conv2d(rng):
    x, weight, bias = leaf(rng, 2, 3, 6, 7), leaf(rng, 4, 3, 3, 2), leaf(rng, 4)
    out = conv2d(x, weight, bias, stride=(2, 1), padding=(1, 2))
    backward_with(out, rng)
    return {"out": out, "dx": x.grad, "dweight": weight.grad, "dbias": bias.grad}


def _conv2d_square(rng):
    # O = OH·OW = 4: a bias lined up with the positions instead of the channels still broadcasts
    x, weight, bias = leaf(rng, 3, 2, 3, 3), leaf(rng, 4, 2, 2, 2), leaf(rng, 4)
    out = conv2d(x, weight, bias)
    backward_with(out, rng)
    return {"out": out, "dx": x.grad, "dweight": weight.grad, "dbias": bias.grad}


def _conv2d_stride(rng):
    x, weight = leaf(rng, 1, 2, 7, 8), leaf(rng, 3, 2, 3, 3)
    out = conv2d(x, weight, stride=(2, 3), padding=1)
    backward_with(out, rng)
    return {"out": out, "dx": x.grad, "dweight": weight.grad}


def _conv2d_float32(rng):
    x = Tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    weight = Tensor(rng.standard_normal((2, 2, 3, 3)).astype(np.float32))
    return {"out": conv2d(x, weight, padding=1),
            "channels": raised(conv2d, x, Tensor(np.zeros((2, 3, 3, 3), dtype=np.float32))),
            "too_big": raised(conv2d, x, Tensor(np.zeros((2, 2, 6, 6), dtype=np.float32)))}


def _max_pool(rng):
    x = Tensor(rng.integers(0, 4, (2, 2, 5, 6)).astype(np.float64), requires_grad=True)  # many ties
    out = max_pool2d(x, (2, 3), stride=(1, 2))
    backward_with(out, rng)
    layer = MaxPool2d(2)(Tensor(rng.standard_normal((1, 1, 4, 6))))
    return {"out": out, "argmax": out._node.saved["argmax"], "dx": x.grad, "layer": layer}


def _avg_pool(rng):
    x = leaf(rng, 2, 1, 6, 5)
    out = avg_pool2d(x, (3, 2), stride=(1, 1))
    backward_with(out, rng)
    return {"out": out, "dx": x.grad, "layer": AvgPool2d(2, stride=1)(Tensor(rng.standard_normal((1, 2, 3, 3)))),
            "three_d": raised(avg_pool2d, Tensor(np.zeros((2, 4, 4))), 2)}


def _conv_layer(rng):
    layer = Conv2d(3, 5, (2, 3), stride=2, padding=1, seed=int(rng.integers(1000)))
    x = Tensor(rng.standard_normal((2, 3, 5, 6)).astype(np.float32))
    return {"weight": layer.weight, "bias": layer.bias, "out": layer(x)}


def _flatten(rng):
    x = Tensor(rng.standard_normal((2, 3, 4, 5)))
    return {"default": Flatten()(x), "middle": Flatten(1, 2)(x), "tail": Flatten(start_dim=2)(x),
            "all": Flatten(0)(x), "bad": raised(Flatten(3, 1), x)}


CASES = {
    "output-size": (_output_size, "conv_output_size for five size/kernel/stride/padding combinations (ints)"),
    "im2col": (_im2col, "im2col with a 2×3 kernel and stride (2, 1); a 1×1 kernel gives a copy, not a view"),
    "col2im": (_col2im, "col2im adds overlapping windows; strides (2, 3) place them apart"),
    "conv2d": (_conv2d, "conv2d with bias, stride (2, 1), padding (1, 2): output and gradients"),
    "conv2d-square": (_conv2d_square, "conv2d whose channel count equals its number of positions: bias per channel"),
    "conv2d-stride": (_conv2d_stride, "conv2d without bias, stride (2, 3), padding 1: output and gradients"),
    "conv2d-float32": (_conv2d_float32, "conv2d keeps float32; channel mismatch and a too-large kernel raise",
                       {"rtol": 1e-5, "atol": 1e-5}),
    "max-pool": (_max_pool, "max_pool2d with ties (the first maximum wins), stride (1, 2): output and gradient"),
    "avg-pool": (_avg_pool, "avg_pool2d 3×2 overlapping windows: output and gradient"),
    "conv-layer": (_conv_layer, "Conv2d(3, 5, (2, 3)) weight (O, C, kh, kw) drawn ±1/√(C·kh·kw) from the seed",
                   {"rtol": 1e-5, "atol": 1e-5}),
    "flatten": (_flatten, "Flatten with default, middle, tail and full ranges"),
}
