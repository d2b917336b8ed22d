"""Module 08 on CuPy arrays: batches gathered on the GPU, the order kept on the host (skipped without a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.tensor import Tensor
from tinytorch.data.loader import DataLoader, TensorDataset, collate

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_batches_of_gpu_tensors_stay_on_the_gpu_and_match_the_cpu():
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np.arange(20)
    cpu = DataLoader(TensorDataset(x, y), batch_size=6, shuffle=True, seed=3)
    gpu = DataLoader(TensorDataset(Tensor(x, device="cuda"), Tensor(y, device="cuda")), batch_size=6,
                     shuffle=True, seed=3)
    assert isinstance(gpu.order(), np.ndarray)
    for (xc, yc), (xg, yg) in zip(cpu, gpu):
        assert xg.device == "cuda" and yg.device == "cuda"
        np.testing.assert_array_equal(xg.numpy(), xc.numpy())
        np.testing.assert_array_equal(yg.numpy(), yc.numpy())


def test_collate_stacks_gpu_examples_on_the_gpu():
    batch = collate([Tensor(np.full(3, i, dtype=np.float32), device="cuda") for i in range(4)])
    assert batch.device == "cuda" and batch.shape == (4, 3)
    assert batch.numpy()[:, 0].tolist() == [0, 1, 2, 3]
