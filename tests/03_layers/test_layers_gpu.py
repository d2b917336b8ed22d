"""Module 03 on the GPU: Module.to("cuda") moves parameters and buffers in place, and the
moved model computes what it computed on the CPU (skipped without CuPy and a GPU)."""
import numpy as np
import pytest

from devices import requires_gpu
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Module, Sequential
from tinytorch.core.tensor import Tensor

pytestmark = [pytest.mark.gpu, requires_gpu]
cupy = pytest.importorskip("cupy")


class Net(Module):
    def __init__(self):
        super().__init__()
        self.body = Sequential(Linear(4, 8, dtype=np.float64, seed=0), ReLU(), Dropout(0.5, seed=1),
                               Linear(8, 3, dtype=np.float64, seed=2))
        self.register_buffer("offset", Tensor(np.array([1.0, -1.0, 0.5])))

    def forward(self, x):
        return self.body(x) + self.offset


def test_to_cuda_moves_every_parameter_and_buffer_in_place():
    net = Net()
    tensors = net.parameters() + net.buffers()
    net.body[0].weight.grad = Tensor(np.ones((4, 8)))
    assert net.to("cuda") is net
    assert [id(t) for t in net.parameters() + net.buffers()] == [id(t) for t in tensors], "same objects"
    for name, t in net.named_parameters() + net.named_buffers():
        assert t.device == "cuda" and type(t.data).__module__.startswith("cupy"), name
    assert net.body[0].weight.grad.device == "cuda", "a gradient moves with its parameter"
    assert net.to("cpu") is net and all(t.device == "cpu" for t in tensors)


def test_forward_on_the_gpu_equals_the_cpu():
    cpu, gpu = Net().eval(), Net().eval().to("cuda")
    x = np.random.default_rng(0).standard_normal((5, 4))
    out = gpu(Tensor(x, device="cuda"))
    assert out.device == "cuda"
    np.testing.assert_allclose(out.numpy(), cpu(Tensor(x)).numpy(), rtol=1e-12)
    train = Net().to("cuda")
    assert train(Tensor(x, device="cuda")).device == "cuda", "dropout's mask follows the input to the GPU"


def test_state_dict_from_the_gpu_is_numpy_and_loads_onto_either_device():
    gpu = Net().to("cuda")
    state = gpu.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    cpu = Net()
    for p in cpu.parameters():
        p.data = p.data * 0
    cpu.load_state_dict(state)
    assert all(t.device == "cpu" for t in cpu.parameters())
    np.testing.assert_array_equal(cpu.body[0].weight.numpy(), gpu.body[0].weight.numpy())
    other = Net().to("cuda")
    other.load_state_dict(cpu.state_dict())
    assert all(t.device == "cuda" for t in other.parameters() + other.buffers())


def test_linear_built_on_the_gpu():
    lin = Linear(3, 2, device="cuda", seed=0)
    assert lin.weight.device == "cuda" and lin.bias.device == "cuda"
    np.testing.assert_array_equal(lin.weight.numpy(), Linear(3, 2, seed=0).weight.numpy())
