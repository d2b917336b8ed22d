"""Module 11, graded cases: scatter-add, embedding lookups and their gradients, learned and sinusoidal positions.

Ids repeat on purpose (a repeated id must add its gradients up). Gradients in float64.
Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.tensor import Tensor
from tinytorch.text.embeddings import (Embedding, PositionalEmbedding, SinusoidalPositionalEncoding, embedding,
                                       position_shift_matrix, scatter_add_rows, sinusoidal_table)


def _scatter_add(rng):
    table = rng.standard_normal((6, 3))
    ids = np.array([4, 1, 4, 0, 4, 1])
    rows = rng.standard_normal((6, 3))
    returned = scatter_add_rows(table, ids, rows)
    return {"table": table, "returns_table": returned is table}


def _lookup_gradient(rng):
    weight = Tensor(rng.standard_normal((7, 4)), requires_grad=True)
    ids = rng.integers(0, 7, (3, 5))
    ids[0, :3] = 2  # repeated ids
    out = embedding(weight, ids)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    return {"out": out, "dweight": weight.grad, "float_ids": embedding(weight, Tensor([1.0, 6.0])),
            "out_of_range": raised(embedding, weight, [0, 7]), "fractional": raised(embedding, weight, [0.5])}


def _padding(rng):
    layer = Embedding(6, 3, padding_idx=-2, dtype=np.float64, seed=int(rng.integers(1000)))
    ids = np.array([[4, 1, 4], [0, 4, 2]])
    out = layer(ids)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    return {"weight_at_start": layer.weight.numpy().copy(), "dweight": layer.weight.grad,
            "padding_idx": layer.padding_idx}


def _embedding_init(rng):
    layer = Embedding(50, 8, seed=int(rng.integers(1000)))
    return {"weight": layer.weight, "dtype": str(layer.weight.dtype), "std": float(layer.weight.numpy().std())}


def _learned_positions(rng):
    layer = PositionalEmbedding(6, 4, dtype=np.float64, seed=int(rng.integers(1000)))
    x = Tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    shifted = layer(x, start=2)
    (shifted * Tensor(rng.standard_normal(shifted.shape))).sum().backward()
    full = Tensor(rng.standard_normal((3, 6, 4)))
    return {"shifted": shifted, "dweight": layer.weight.grad, "dx": x.grad,
            "full": layer(full), "exactly_max_len": raised(layer, full), "one_too_many": raised(layer, x, start=4),
            "ints": layer(Tensor(np.ones((1, 2, 4), dtype=np.int64)))}


def _sinusoidal(rng):
    table = sinusoidal_table(9, 6)
    odd = sinusoidal_table(4, 5)
    layer = SinusoidalPositionalEncoding(6, max_len=9)
    x = Tensor(rng.standard_normal((2, 4, 6)).astype(np.float32))
    half = Tensor(rng.standard_normal((1, 3, 6)).astype(np.float16))
    return {"table": table, "odd": odd, "out": layer(x, start=3), "half": layer(half), "half_dtype": str(layer(half).dtype),
            "parameters": len(layer.parameters()), "buffers": [n for n, _ in layer.named_buffers()],
            "too_long": raised(layer, x, start=6)}


def _shift_matrix(rng):
    table = sinusoidal_table(12, 8)
    matrix = position_shift_matrix(3, 8)
    return {"matrix": matrix, "shifted": table[:9] @ matrix.T, "odd_dim": raised(position_shift_matrix, 1, 5)}


CASES = {
    "scatter-add": (_scatter_add, "scatter_add_rows adds repeated ids up, in place, onto what the table holds"),
    "lookup-gradient": (_lookup_gradient, "embedding lookup of (3, 5) ids and its scatter-added gradient"),
    "padding": (_padding, "Embedding with padding_idx -2: that row starts at 0 and gets no gradient"),
    "embedding-init": (_embedding_init, "Embedding's table is N(0, 1) from the seed", {"rtol": 1e-5, "atol": 1e-5}),
    "learned-positions": (_learned_positions, "PositionalEmbedding with start: values, gradients, max_len limits"),
    "sinusoidal": (_sinusoidal, "sinusoidal table (even and odd widths), the buffer, float16 kept",
                   {"rtol": 1e-3, "atol": 1e-3}),
    "shift-matrix": (_shift_matrix, "position_shift_matrix(3) moves the table 3 positions forward"),
}
