"""Module 06 on CuPy arrays: the same updates as on NumPy (skipped without CuPy and a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.core.tensor import Tensor

pytestmark = [pytest.mark.gpu, requires_gpu]
cupy = pytest.importorskip("cupy")


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
                                  lambda ps: Adam(ps, lr=0.05), lambda ps: AdamW(ps, lr=0.05)])
def test_gpu_updates_equal_cpu_updates(make):
    rng = np.random.default_rng(0)
    start = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(3)]
    cpu = Tensor(start.copy(), requires_grad=True)
    gpu = Tensor(start.copy(), requires_grad=True, device="cuda")
    opt_cpu, opt_gpu = make([cpu]), make([gpu])
    for g in grads:
        cpu.grad = Tensor(g)
        gpu.grad = Tensor(g, device="cuda")
        opt_cpu.step()
        opt_gpu.step()
    assert gpu.device == "cuda"
    np.testing.assert_allclose(gpu.numpy(), cpu.numpy(), rtol=1e-12, atol=1e-12)
    state = opt_gpu.state_dict()["state"][0]
    assert all(isinstance(v, np.ndarray) for k, v in state.items() if k != "step")
    opt_gpu.load_state_dict(opt_cpu.state_dict())
    assert all(type(v).__module__.startswith("cupy") for k, v in opt_gpu.state[0].items() if k != "step")
