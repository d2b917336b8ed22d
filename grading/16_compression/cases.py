"""Module 16, graded cases: magnitude masks and pruning (repeated, global, gradual), sparsity,
CSR storage, structured MLP pruning, low-rank factors and choose_rank, the distillation loss.

Weights hold ties, negatives and layers of different scales; counts like 3.78 weights test
the rounding; gradients are float64. Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.optimizers import SGD
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import MLP
from tinytorch.perf.compression import (choose_rank, cubic_sparsity, distillation_loss, from_csr, low_rank,
                                        magnitude_mask, mlp_unit_importance, prune_global, prune_gradually,
                                        prune_magnitude, prune_mlp_units, prune_mlps, pruned_names, remove_pruning,
                                        sparsity, storage_bytes, to_csr)


def _magnitude_mask(rng):
    weights = rng.standard_normal(14) * 2
    weights[[3, 9]] = -5.0  # large and negative: kept
    ties = np.array([[0.5, -0.5, 0.2], [0.5, 0.2, -0.5]])
    earlier = np.ones(14, dtype=bool)
    earlier[[0, 1]] = False
    return {"mask": magnitude_mask(weights, 0.27),  # 3.78 weights: round gives 4
            "ties": magnitude_mask(ties, 0.5), "with_keep": magnitude_mask(weights, 0.1, keep=earlier),
            "bad_amount": raised(magnitude_mask, weights, 1.5)}


def _prune_layer(rng):
    layer = Linear(5, 4, rng=rng, dtype=np.float64)
    optimizer = SGD(layer, lr=0.1)  # made before pruning: must still update the weight the layer uses
    prune_magnitude(layer, 0.5)
    prune_magnitude(layer, 0.3)  # a smaller amount afterwards: nothing comes back
    x = Tensor(rng.standard_normal((3, 5)))
    out = layer(x)
    (out * Tensor(rng.standard_normal(out.shape))).sum().backward()
    grad = layer.weight_orig.grad.numpy().copy()
    optimizer.step()
    state = layer.state_dict()
    return {"weight": layer.weight, "grad_orig": grad, "after_step": layer.weight,
            "state_keys": sorted(state), "mask": state.get("weight_mask", np.zeros(0)),
            "sparsity": sparsity(layer)}


def _remove_pruning(rng):
    layer = Linear(4, 3, rng=rng, dtype=np.float64)
    prune_magnitude(layer, 0.4)
    remove_pruning(layer)
    return {"weight": layer.weight, "params": [n for n, _ in layer.named_parameters()],
            "type": type(layer).__name__, "again": raised(remove_pruning, layer)}


def _two_names(rng):
    layer = Linear(3, 4, rng=rng, dtype=np.float64)
    prune_magnitude(layer, 0.5, name="bias")
    prune_magnitude(layer, 0.5, name="weight")  # the bias stays pruned too
    x = Tensor(rng.standard_normal((2, 3)))
    return {"names": list(pruned_names(layer)), "out": layer(x), "bias": layer.bias}


def _prune_global(rng):
    small = Linear(6, 4, rng=rng, dtype=np.float64)
    large = Linear(4, 12, rng=rng, dtype=np.float64)
    large.weight.data = large.weight.data * 10
    prune_global([small, large], 0.5)
    model = Sequential(small, large)
    return {"small_mask": small.weight_mask, "large_mask": large.weight_mask, "sparsity": sparsity(model),
            "small_sparsity": sparsity(small), "large_sparsity": sparsity(large)}


def _gradual(rng):
    layers = [Linear(5, 5, rng=rng, dtype=np.float64), Linear(5, 3, rng=rng, dtype=np.float64)]
    seen = []
    targets = prune_gradually(layers, 0.8, 4, fine_tune=lambda step: seen.append([step, sparsity(layers)]),
                              initial_sparsity=0.1)
    return {"targets": targets, "seen": seen,
            "schedule": [cubic_sparsity(s, 6, 0.9, 0.2) for s in (-1, 0, 1, 3, 6, 9)]}


def _csr(rng):
    dense = rng.standard_normal((6, 5)) * (rng.random((6, 5)) > 0.6)
    dense[2] = 0.0   # an empty row in the middle
    dense[4:] = 0.0  # and two at the end
    values, cols, row_ptr = to_csr(dense)
    full_values, full_cols, _ = to_csr(rng.standard_normal((3, 4)))  # no zeros: row by row is not column by column
    return {"values": values, "cols": cols, "row_ptr": row_ptr, "back": from_csr(values, cols, row_ptr, dense.shape),
            "full_values": full_values, "full_cols": full_cols,
            "bytes": [storage_bytes(dense)[k] for k in ("dense", "bitmask", "csr")]}


def _structured(rng):
    mlp = MLP(4, 6, rng=rng, dtype=np.float64)
    mlp.proj.weight.data[2] = 0.0  # unit 2 writes nothing: least important however much it reads
    importance = mlp_unit_importance(mlp)
    small = prune_mlp_units(mlp, 0.5)
    x = Tensor(rng.standard_normal((2, 3, 4)))
    model = Sequential(MLP(4, 8, rng=rng, dtype=np.float64))
    smaller = prune_mlps(model, 0.25)
    return {"importance": importance, "fc": small.fc.weight, "proj": small.proj.weight, "fc_bias": small.fc.bias,
            "out": small(x), "model_out": smaller(x), "original_hidden": model[0].fc.out_features,
            "everything": raised(prune_mlp_units, mlp, 1.0)}


def _low_rank(rng):
    linear = Linear(7, 5, rng=rng, dtype=np.float64)
    pair = low_rank(linear, 3)
    x = Tensor(rng.standard_normal((4, 7)))
    return {"first": pair[0].weight, "second": pair[1].weight, "bias": pair[1].bias, "out": pair(x),
            "product": pair[0].weight.numpy() @ pair[1].weight.numpy(), "bad_rank": raised(low_rank, linear, 6)}


def _choose_rank(rng):
    sigma = np.sort(rng.uniform(0.1, 3.0, 12))[::-1]
    squares = sigma ** 2
    boundaries = [float(np.sum(squares[:r]) / np.sum(squares)) for r in (1, 4, 9)]  # exactly at a boundary
    energies = [0.3, 0.9, 0.99] + boundaries + [1.0]
    big = sigma * 3e7
    wide = np.linalg.svd(rng.standard_normal((40, 60)), compute_uv=False)
    # every boundary fraction of the scaled values: energy · Σσ² can round above the sum it came from,
    # by far more than 1e-12 when the sums are near 1e15 (a tolerance on the raw sums misses it)
    big_cumulative = np.cumsum(big ** 2)
    big_boundaries = [float(c / big_cumulative[-1]) for c in big_cumulative]
    return {"ranks": [choose_rank(sigma, e) for e in energies], "scaled": [choose_rank(big, e) for e in energies],
            "scaled_boundaries": [choose_rank(big, e) for e in big_boundaries],
            "wide_full": choose_rank(wide, 1.0), "wide_big_full": choose_rank(wide * 1e6, 1.0),
            "bad": raised(choose_rank, sigma, 0.0)}


def _distillation(rng):
    student = Tensor(rng.standard_normal((2, 3, 5)), requires_grad=True)
    teacher = Tensor(rng.standard_normal((2, 3, 5)) * 2, requires_grad=True)
    targets = rng.integers(0, 5, (2, 3))
    loss = distillation_loss(student, teacher, targets, temperature=3.0, alpha=0.7)
    loss.backward()
    small = Tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    mixed = distillation_loss(small, rng.standard_normal((4, 3)), rng.integers(0, 3, 4), temperature=1.5, alpha=0.4)
    return {"loss": loss, "dstudent": student.grad, "teacher_has_grad": teacher.grad is not None,
            "mixed": mixed, "mixed_dtype": str(mixed.dtype),
            "hard_only": distillation_loss(student, teacher, targets, temperature=4.0, alpha=0.0),
            "bad_temperature": raised(distillation_loss, student, teacher, targets, temperature=0.0)}


CASES = {
    "magnitude-mask": (_magnitude_mask, "magnitude_mask: |value| ranks, round(3.78) weights, stable ties, earlier mask"),
    "prune-layer": (_prune_layer, "prune_magnitude twice: masked forward and gradient, mask buffer, optimizer keeps working"),
    "two-names": (_two_names, "prune_magnitude of a Linear's bias, then of its weight: both stay pruned"),
    "remove-pruning": (_remove_pruning, "remove_pruning makes the pruning permanent and restores the class"),
    "prune-global": (_prune_global, "prune_global: one threshold over a small-weight and a large-weight layer; sparsity"),
    "gradual": (_gradual, "prune_gradually follows the cubic schedule; the schedule clamps its step"),
    "csr": (_csr, "to_csr with empty rows in the middle and at the end; storage bytes"),
    "structured": (_structured, "MLP unit importance (reads × writes), the smaller MLP in original order, prune_mlps"),
    "low-rank": (_low_rank, "low_rank(3) factors U·√S and √S·Vt of our (in, out) weight"),
    "choose-rank": (_choose_rank, "choose_rank on fractions with a 1e-12 tolerance, at boundaries, scaled, energy 1"),
    "distillation": (_distillation, "distillation_loss: T², KL(teacher‖student), batchmean, detached teacher in s's dtype",
                     {"rtol": 1e-5, "atol": 1e-6}),
}
