"""Module 16 against PyTorch: torch.nn.utils.prune's masks (per layer, global, pruning twice, a Conv2d),
the distillation loss against F.kl_div + F.cross_entropy (values and gradients, float64), CSR arrays
against to_sparse_csr. Our Linear weight is (in, out), PyTorch's (out, in): masks compare transposed."""
import numpy as np
import pytest

from tinytorch.core.layers import Linear
from tinytorch.core.spatial import Conv2d
from tinytorch.core.tensor import Tensor
from tinytorch.perf.compression import distillation_loss, prune_global, prune_magnitude, to_csr

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
F = torch.nn.functional
prune = pytest.importorskip("torch.nn.utils.prune")


def torch_linear_like(layer):
    twin = torch.nn.Linear(layer.in_features, layer.out_features).double()
    twin.weight.data = torch.tensor(layer.weight.numpy().T.copy())
    return twin


@pytest.mark.parametrize("amount", [0.1, 0.37, 0.5, 0.9], ids=lambda a: f"amount {a}")
def test_l1_unstructured(amount):
    ours = Linear(10, 7, seed=1, dtype=np.float64)
    theirs = torch_linear_like(ours)
    prune_magnitude(ours, amount)
    prune.l1_unstructured(theirs, "weight", amount)
    assert np.array_equal(ours.weight_mask.numpy(), theirs.weight_mask.numpy().T), \
        "masks must equal torch.nn.utils.prune.l1_unstructured's (prune the smallest |w|, round(amount * n) of them)"
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict()), "the same state_dict keys as a pruned torch layer"


def test_pruning_twice_with_torchs_relative_amount():
    ours = Linear(10, 10, seed=2, dtype=np.float64)
    theirs = torch_linear_like(ours)
    prune_magnitude(ours, 0.3)
    prune.l1_unstructured(theirs, "weight", 0.3)
    prune_magnitude(ours, 0.65)  # ours: 65% of all entries ...
    prune.l1_unstructured(theirs, "weight", 0.5)  # ... torch: half of the 70% left
    assert np.array_equal(ours.weight_mask.numpy(), theirs.weight_mask.numpy().T), (
        "pruned twice: 65% of all entries here is torch's 50% of the 70% left")


def test_global_unstructured():
    ours = [Linear(8, 5, seed=s, dtype=np.float64) for s in range(3)]
    for scale, layer in zip((1.0, 2.0, 0.3), ours):
        layer.weight.data = layer.weight.data * scale
    theirs = [torch_linear_like(layer) for layer in ours]
    for amount in (0.4, 0.7):
        prune_global(ours, amount)
        relative = amount if amount == 0.4 else (0.7 - 0.4) / 0.6
        prune.global_unstructured([(t, "weight") for t in theirs], prune.L1Unstructured, amount=relative)
        for a, b in zip(ours, theirs):
            assert np.array_equal(a.weight_mask.numpy(), b.weight_mask.numpy().T), \
                f"global masks must equal torch's global_unstructured at {amount}"


def test_conv2d_masks_need_no_transpose():
    ours = Conv2d(3, 4, 3, seed=3, dtype=np.float64)
    theirs = torch.nn.Conv2d(3, 4, 3).double()
    theirs.weight.data = torch.tensor(ours.weight.numpy().copy())
    prune_magnitude(ours, 0.6)
    prune.l1_unstructured(theirs, "weight", 0.6)
    assert np.array_equal(ours.weight_mask.numpy(), theirs.weight_mask.numpy()), (
        "Conv2d weights have the same layout in both: no transpose")


@pytest.mark.parametrize("shape", [(6, 10), (2, 5, 7)], ids=lambda s: "x".join(map(str, s)))
def test_distillation_against_kl_div(shape):
    rng = np.random.default_rng(4)
    s, t = rng.standard_normal(shape) * 2, rng.standard_normal(shape) * 2
    y = rng.integers(0, shape[-1], shape[:-1])
    for T, alpha in ((2.0, 0.5), (4.0, 0.9), (1.0, 0.0)):
        student = Tensor(s, requires_grad=True)
        ours = distillation_loss(student, t, y, temperature=T, alpha=alpha)
        ours.backward()
        ts = torch.tensor(s.reshape(-1, shape[-1]), requires_grad=True)
        tt = torch.tensor(t.reshape(-1, shape[-1]))
        kl = F.kl_div(F.log_softmax(ts / T, -1), F.log_softmax(tt / T, -1), reduction="batchmean", log_target=True)
        theirs = alpha * T * T * kl + (1 - alpha) * F.cross_entropy(ts, torch.tensor(y.reshape(-1)))
        theirs.backward()
        assert abs(ours.item() - theirs.item()) < 1e-12, (T, alpha, ours.item(), theirs.item())
        assert np.allclose(student.grad.numpy().reshape(-1, shape[-1]), ts.grad.numpy(), atol=1e-12, rtol=0), (
            "the gradient equals PyTorch's")


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_csr_against_to_sparse_csr():
    rng = np.random.default_rng(5)
    m = rng.standard_normal((9, 13)) * (rng.random((9, 13)) < 0.3)
    m[4] = 0.0  # an empty row
    values, col_indices, row_ptr = to_csr(m)
    theirs = torch.tensor(m).to_sparse_csr()
    assert np.array_equal(values, theirs.values().numpy()), "values equal torch's to_sparse_csr().values()"
    assert np.array_equal(col_indices, theirs.col_indices().numpy()), "col_indices equal torch's"
    assert np.array_equal(row_ptr, theirs.crow_indices().numpy()), "row_ptr equals torch's crow_indices()"
