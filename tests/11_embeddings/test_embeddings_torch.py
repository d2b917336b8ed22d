"""Module 11 against PyTorch in float64: torch.nn.functional.embedding and nn.Embedding.

Both tables are (num_embeddings, embedding_dim) and are indexed the same way, so the
weights copy over unchanged. With padding_idx, PyTorch gives the padding row a zero
gradient; so do we.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from tinytorch.core.tensor import Tensor  # noqa: E402
from tinytorch.text.embeddings import Embedding, embedding  # noqa: E402

CASES = {
    "(6,)": ((6,), None),
    "(3,5)": ((3, 5), None),
    "(2,3,4)": ((2, 3, 4), None),
    "(3,5)-padding=2": ((3, 5), 2),
    "(4,4)-padding=-1": ((4, 4), -1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_embedding_values_and_gradients_match_torch(case):
    shape, padding_idx = CASES[case]
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((7, 5))
    ids = rng.integers(0, 7, shape)
    ids.reshape(-1)[:3] = [2, 2, 6]  # a repeated id and the last row are always there
    cotangent = rng.standard_normal(shape + (5,))

    ours_w = Tensor(weight, requires_grad=True)
    ours = embedding(ours_w, ids, padding_idx=padding_idx)
    ours.backward(cotangent)

    theirs_w = torch.tensor(weight, requires_grad=True)
    theirs = torch.nn.functional.embedding(torch.tensor(ids), theirs_w, padding_idx=padding_idx)
    theirs.backward(torch.tensor(cotangent))

    assert ours.dtype == np.float64
    assert np.allclose(ours.numpy(), theirs.detach().numpy(), atol=1e-12, rtol=0)
    assert np.allclose(ours_w.grad.numpy(), theirs_w.grad.numpy(), atol=1e-12, rtol=0), (
        "weight.grad differs from PyTorch's: repeated ids must scatter-add, the padding row must get 0")


def test_embedding_layer_matches_nn_embedding():
    torch.manual_seed(0)
    theirs = torch.nn.Embedding(9, 4, padding_idx=0).double()
    ours = Embedding(9, 4, padding_idx=0, dtype=np.float64)
    ours.weight.data = theirs.weight.detach().numpy().copy()
    ids = np.array([[0, 3, 3, 8], [1, 0, 2, 3]])
    cotangent = np.random.default_rng(1).standard_normal((2, 4, 4))
    out = ours(ids)
    out.backward(cotangent)
    ref = theirs(torch.tensor(ids))
    ref.backward(torch.tensor(cotangent))
    assert np.allclose(out.numpy(), ref.detach().numpy(), atol=1e-12)
    assert np.allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), atol=1e-12)
    assert np.all(theirs.weight.detach().numpy()[0] == 0) and np.all(Embedding(9, 4, padding_idx=0).weight.numpy()[0] == 0)
