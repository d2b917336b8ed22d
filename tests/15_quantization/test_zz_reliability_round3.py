"""Issue 31 (reliability round 3): NaN and empty batches in module 15.

A calibration batch holding one NaN was dropped whole by MinMaxObserver and PercentileObserver
(Python's min and max skip a NaN compared second), so later values outside the old range were
clamped in silence; a dynamic-int8 model said "nothing observed yet; call observe(x) first" for
an empty batch or NaN input, which its user never called. Now: every observer refuses a batch
with NaN or inf naming it by number and keeps its range; quantize_per_tensor/per_channel refuse
NaN; an empty batch gives an empty output (as PyTorch); a NaN input and a NaN weight are refused
naming the layer or the parameter.
"""
import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.perf.quantization import (MinMaxObserver, PercentileObserver, PerChannelMinMaxObserver, QuantizedLinear,
                                         quantize_model, quantize_per_channel, quantize_per_tensor)
from tinytorch.text.embeddings import Embedding

OBSERVERS = {
    "MinMaxObserver": lambda: MinMaxObserver(),
    "PercentileObserver": lambda: PercentileObserver(100.0),
    "PerChannelMinMaxObserver": lambda: PerChannelMinMaxObserver(axis=1),
}


def ranges(observer):
    return np.asarray(observer.min_val).tolist(), np.asarray(observer.max_val).tolist()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name", OBSERVERS)
def test_every_observer_refuses_a_non_finite_batch_by_number_and_keeps_its_range(name, bad):
    observer = OBSERVERS[name]()
    observer.observe(np.array([[0.0, 1.0], [-1.0, 2.0]], np.float32))
    before = ranges(observer)
    batch = np.array([[bad, 50.0], [-40.0, 3.0]], np.float32)  # without the check 50 and -40 were lost
    with pytest.raises(ValueError, match=rf"{name}.observe: batch 2 \(observe call number 2\) holds "
                                         rf"{int(np.isnan(bad))} NaN and {int(np.isinf(bad))} infinite"):
        observer.observe(batch)
    assert ranges(observer) == before, "a refused batch must leave the range as it was"
    observer.observe(np.array([[-3.0, 4.0]], np.float32))
    assert ranges(observer)[0] != before[0] and observer.qparams() is not None, "the observer still works after"


def test_the_batch_number_counts_every_call():
    observer = MinMaxObserver()
    for _ in range(4):
        observer.observe(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="batch 5 "):
        observer.observe(np.array([1.0, np.nan], np.float32))


@pytest.mark.parametrize("call", [lambda x: quantize_per_tensor(x, 0.1, 0),
                                  lambda x: quantize_per_channel(x, np.full(2, 0.1), np.zeros(2, int), axis=1)],
                         ids=["per_tensor", "per_channel"])
def test_quantize_refuses_nan_which_no_integer_stands_for(call):
    with pytest.raises(ValueError, match=r"x holds 1 NaN value\(s\), which no integer can stand for"):
        call(np.array([[np.nan, 1.0]], np.float32))
    q = call(np.array([[np.inf, -np.inf]], np.float32)).numpy()
    assert q.tolist() == [[127, -128]], "±inf saturates at qmax and qmin, as PyTorch's kernels clamp"


def dynamic_model():
    return quantize_model(Sequential(Linear(4, 3, seed=0), ReLU(), Linear(3, 2, seed=1)), mode="dynamic")


@pytest.mark.parametrize("shape, expected", [((0, 4), (0, 2)), ((2, 0, 4), (2, 0, 2))])
def test_a_dynamic_model_on_an_empty_batch_returns_an_empty_output(shape, expected):
    out = dynamic_model()(Tensor(np.zeros(shape, np.float32)))
    assert out.shape == expected and out.dtype == np.float32


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_dynamic_model_names_a_non_finite_input(bad):
    x = np.ones((3, 4), np.float32)
    x[1, 2] = bad
    with pytest.raises(ValueError, match=r"QuantizedLinear\(4 -> 3, dynamic int8\): the input x holds 1 NaN or "
                                         r"infinite value"):
        dynamic_model()(Tensor(x))


def test_a_dynamic_layer_names_an_integer_input():
    with pytest.raises(ValueError, match=r"QuantizedLinear\(4 -> 3, dynamic int8\): x must hold floats"):
        dynamic_model()(Tensor(np.ones((1, 4), np.int64)))


def test_quantize_model_names_the_parameter_holding_nan():
    model = Sequential(Linear(4, 3, seed=0), ReLU(), Linear(3, 2, seed=1))
    weight = dict(model.named_parameters())["2.weight"]
    weight.data[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"quantize_model: the model's '2.weight' holds 1 NaN or infinite value"):
        quantize_model(model)


@pytest.mark.parametrize("mode", ["weight_only", "dynamic"])
def test_from_float_refuses_a_layer_with_inf(mode):
    linear = Linear(4, 3, seed=0)
    linear.weight.data[2, 0] = np.inf
    with pytest.raises(ValueError, match=r"QuantizedLinear.from_float: the weight holds 1 NaN or infinite"):
        QuantizedLinear.from_float(linear, mode=mode)


def test_an_embedding_with_nan_is_refused():
    table = Embedding(5, 4, seed=0)
    table.weight.data[3, 3] = np.nan
    with pytest.raises(ValueError, match=r"quantize_model: the model's 'weight' holds 1 NaN"):
        quantize_model(table)


@pytest.mark.parametrize("kwargs, message", [
    ({"in_features": 4.5, "out_features": 3}, "in_features must be a whole number"),
    ({"in_features": float("nan"), "out_features": 3}, "in_features must be a whole number"),
    ({"in_features": 4, "out_features": -3}, "out_features must be at least 1"),
    ({"in_features": 4, "out_features": 3, "group_size": 2.5}, "group_size must be a whole number"),
    ({"in_features": 4, "out_features": 3, "group_size": float("inf")}, "group_size must be a whole number"),
])
def test_quantized_linear_constructor_numbers(kwargs, message):
    """group_size=2.5 was quietly taken as 2; NaN and negative sizes crashed inside NumPy."""
    with pytest.raises(ValueError, match=rf"QuantizedLinear: {message}"):
        QuantizedLinear(**kwargs)
