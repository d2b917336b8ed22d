"""Module 07 on CuPy arrays: clipping, a training epoch and a checkpoint round trip (skipped without a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.activations import Tanh
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import MSELoss
from tinytorch.core.optimizers import Adam
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import CosineWarmupLR, Trainer, clip_grad_norm, load_checkpoint, save_checkpoint

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_clip_on_the_gpu_equals_the_cpu():
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((3, 4)), rng.standard_normal(4)]
    cpu = [Tensor(np.zeros_like(g), requires_grad=True) for g in grads]
    gpu = [Tensor(np.zeros_like(g), requires_grad=True, device="cuda") for g in grads]
    for c, d, g in zip(cpu, gpu, grads):
        c.grad, d.grad = Tensor(g), Tensor(g, device="cuda")
    assert clip_grad_norm(gpu, 0.5) == pytest.approx(clip_grad_norm(cpu, 0.5), rel=1e-12)
    for c, d in zip(cpu, gpu):
        assert d.grad.device == "cuda"
        np.testing.assert_allclose(d.grad.numpy(), c.grad.numpy(), rtol=1e-12)


def run(device):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((32, 3)), rng.standard_normal((32, 2))
    model = Sequential(Linear(3, 8, seed=0, dtype=np.float64), Tanh(), Linear(8, 2, seed=1, dtype=np.float64)).to(device)
    opt = Adam(model.parameters(), lr=0.05)
    trainer = Trainer(model, opt, MSELoss(), scheduler=CosineWarmupLR(opt, 2, 8), clip=1.0, verbose=False)
    batches = [(Tensor(x[i:i + 8], device=device), Tensor(y[i:i + 8], device=device)) for i in range(0, 32, 8)]
    trainer.fit(batches, epochs=2)
    return trainer


def test_training_on_the_gpu_equals_the_cpu_and_checkpoints_round_trip(tmp_path):
    cpu, gpu = run("cpu"), run("cuda")
    for a, b in zip(cpu.model.parameters(), gpu.model.parameters()):
        assert b.device == "cuda"
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-9, atol=1e-12)
    path = save_checkpoint(tmp_path / "gpu", gpu.model, gpu.optimizer, gpu.scheduler, step=gpu.step)
    fresh = run("cuda")
    fresh.model[0].weight.data = fresh.model[0].weight.data * 0
    load_checkpoint(path, fresh.model, fresh.optimizer, fresh.scheduler)
    for a, b in zip(gpu.model.parameters(), fresh.model.parameters()):
        assert b.device == "cuda" and np.array_equal(a.numpy(), b.numpy())
    assert all(type(v).__module__.startswith("cupy") for k, v in fresh.optimizer.state[0].items() if k != "step")
