"""Module 06 on CuPy arrays: the same updates as on NumPy (skipped without CuPy and a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.optimizers import SGD, Adam, AdamW, weight_decay_groups
from tinytorch.core.tensor import Tensor

pytestmark = [pytest.mark.gpu, requires_gpu]
cupy = pytest.importorskip("cupy")

MAKERS = {
    "SGD(momentum,wd)": lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "Adam": lambda ps: Adam(ps, lr=0.05),
    "AdamW(two groups)": lambda ps: AdamW(weight_decay_groups(ps, 0.1), lr=0.05),
}


@pytest.mark.parametrize("maker", MAKERS)
def test_gpu_updates_equal_cpu_updates(maker):
    make = MAKERS[maker]
    rng = np.random.default_rng(0)
    starts = [rng.standard_normal((4, 3)), rng.standard_normal(3)]
    grads = [[rng.standard_normal((4, 3)), rng.standard_normal(3)] for _ in range(3)]
    cpu = [Tensor(s.copy(), requires_grad=True) for s in starts]
    gpu = [Tensor(s.copy(), requires_grad=True, device="cuda") for s in starts]
    opt_cpu, opt_gpu = make(cpu), make(gpu)
    for g in grads:
        for c, d, gi in zip(cpu, gpu, g):
            c.grad = Tensor(gi)
            d.grad = Tensor(gi, device="cuda")
        opt_cpu.step()
        opt_gpu.step()
    for c, d in zip(cpu, gpu):
        assert d.device == "cuda"
        np.testing.assert_allclose(d.numpy(), c.numpy(), rtol=1e-12, atol=1e-12)
    state = opt_gpu.state_dict()["state"][0]
    assert all(isinstance(v, np.ndarray) for k, v in state.items() if k != "step")
    opt_gpu.load_state_dict(opt_cpu.state_dict())
    assert all(type(v).__module__.startswith("cupy") for k, v in opt_gpu.state[0].items() if k != "step")
