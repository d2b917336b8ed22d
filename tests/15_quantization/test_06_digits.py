"""The issue's acceptance on the digits: an MLP and a CNN trained here (seconds) lose at most 0.5 accuracy
points at int8, weight-only and dynamic. (The milestone models are measured by benchmarks/quantization.py.)"""
from pathlib import Path

import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import cross_entropy
from tinytorch.core.optimizers import AdamW
from tinytorch.core.spatial import Conv2d, Flatten, MaxPool2d
from tinytorch.core.tensor import Tensor
from tinytorch.perf.quantization import quantize_model

DIGITS = Path(__file__).resolve().parents[2] / "datasets" / "digits.npz"


def digits():
    with np.load(DIGITS, allow_pickle=False) as data:
        x, y = data["images"].astype(np.float32) / 16.0, data["labels"].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))  # the milestones' split
    n_test = int(round(0.2 * len(y)))
    return x[order[n_test:]], y[order[n_test:]], x[order[:n_test]], y[order[:n_test]]


def train(model, x, y, epochs):
    optimizer = AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        for batch in np.array_split(rng.permutation(len(y)), len(y) // 32):
            loss = cross_entropy(model(Tensor(x[batch])), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def accuracy(model, x, y):
    return float((model(Tensor(x)).numpy().argmax(-1) == y).mean())


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_int8_loses_at_most_half_a_point(kind):
    x_train, y_train, x_test, y_test = digits()
    if kind == "mlp":
        model = Sequential(Linear(64, 128, seed=1), ReLU(), Linear(128, 64, seed=2), ReLU(), Linear(64, 10, seed=3))
        x_train, x_test = x_train.reshape(-1, 64), x_test.reshape(-1, 64)
        model = train(model, x_train, y_train, epochs=10)
    else:
        model = Sequential(Conv2d(1, 8, 3, padding=1, seed=1), ReLU(), Conv2d(8, 16, 3, padding=1, seed=2), ReLU(),
                           MaxPool2d(2), Flatten(), Linear(256, 32, seed=3), ReLU(), Linear(32, 10, seed=4))
        x_train, x_test = x_train[:, None], x_test[:, None]
        model = train(model, x_train, y_train, epochs=5)
    base = accuracy(model, x_test, y_test)
    assert base > 0.9, f"the float model should learn the digits first (accuracy {base:.3f})"
    for mode in ("weight_only", "dynamic"):
        quantized = accuracy(quantize_model(model, mode=mode), x_test, y_test)
        assert 100 * (base - quantized) <= 0.5, (
            f"{kind} {mode} int8: accuracy {100 * quantized:.2f}% against float32 {100 * base:.2f}%: more than 0.5 points lost")
