"""The engine's optional `backward_finished(tensor)` event (given lines after the loop): a listener
that has it hears it once per backward, after every .grad is written; one without it (module 14's
profiler) is simply not told."""
import numpy as np

from tinytorch.core.tensor import OP_LISTENERS, Tensor


class Recorder:
    def __init__(self, watched):
        self.watched, self.heard = watched, []

    def op_recorded(self, op, out, inputs, saved):
        pass

    def rule_started(self, node, grad):
        pass

    def rule_finished(self, node, grad, grads):
        pass

    def backward_finished(self, tensor):
        self.heard.append((tensor, [None if w.grad is None else w.grad.data.copy() for w in self.watched]))


class WithoutTheEvent:
    def op_recorded(self, op, out, inputs, saved):
        pass

    def rule_started(self, node, grad):
        pass

    def rule_finished(self, node, grad, grads):
        pass


def test_backward_finished_comes_once_after_every_grad_is_written():
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
    recorder, silent = Recorder([a, b]), WithoutTheEvent()
    OP_LISTENERS.extend([recorder, silent])
    try:
        loss = (a * b).sum()
        loss.backward()
    finally:
        OP_LISTENERS.remove(recorder)
        OP_LISTENERS.remove(silent)
    assert len(recorder.heard) == 1, f"backward_finished must come once per backward, came {len(recorder.heard)} times"
    tensor, grads = recorder.heard[0]
    assert tensor is loss, "backward_finished(tensor) names the tensor backward() was called on"
    assert grads[0] is not None and grads[0].tolist() == [3.0, 4.0] and grads[1].tolist() == [1.0, 2.0], (
        f"when backward_finished comes, every .grad must be written already, got {grads}")
