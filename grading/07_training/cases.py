"""Module 07, graded cases: gradient clipping, schedules, accuracy, the Trainer's loops, checkpoints.

Models are small float64 networks with seeded weights and a seeded Dropout, so every loss,
weight and learning rate is reproducible. A checkpoint case writes into a temporary folder
it makes and removes. Format: grading/reference_values.py.
"""
import math
import tempfile
import warnings
from pathlib import Path

import numpy as np
from reference_values import raised

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Sequential
from tinytorch.core.losses import cross_entropy
from tinytorch.core.optimizers import SGD, Adam
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import (CosineWarmupLR, StepLR, Trainer, accuracy, clip_grad_norm, load_checkpoint,
                                     save_checkpoint)


def with_grads(rng, *shapes, dtype=np.float64, scale=1.0):
    params = []
    for shape in shapes:
        p = Tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)
        p.grad = Tensor((rng.standard_normal(shape) * scale).astype(dtype))
        params.append(p)
    return params


def model(rng, p=0.3, hidden=5):
    # the dropout draws from its own generator: a shared one would move on with the case's other draws
    return Sequential(Linear(3, hidden, rng=rng, dtype=np.float64), ReLU(), Dropout(p, seed=int(rng.integers(1000))),
                      Linear(hidden, 4, rng=rng, dtype=np.float64))


def batches(rng, sizes):
    """Seeded (x, y) batches of the given sizes: x (n, 3) float64, y (n,) classes in [0, 4)."""
    return [(rng.standard_normal((n, 3)), rng.integers(0, 4, n)) for n in sizes]


def weights(net):
    return np.concatenate([p.numpy().ravel() for p in net.parameters()])


def _clip_global(rng):
    params = with_grads(rng, (3, 4), (5,), scale=2.0)
    params.append(Tensor(np.ones(2), requires_grad=True))  # no gradient: skipped
    total = clip_grad_norm(params, max_norm=1.5)
    small = with_grads(rng, (4,), scale=0.01)
    small_total = clip_grad_norm(small, max_norm=10.0)
    return {"total": total, "g0": params[0].grad, "g1": params[1].grad, "small_total": small_total,
            "small_grad": small[0].grad, "none": clip_grad_norm([Tensor(np.ones(2), requires_grad=True)], 1.0)}


def _clip_inf_and_float16(rng):
    params = with_grads(rng, (6,), (2, 2))
    params[0].grad.data[2] = -9.0  # the largest |entry| is negative
    total = clip_grad_norm(params, max_norm=3.0, norm_type=math.inf)
    half = Tensor(np.zeros(4, dtype=np.float16), requires_grad=True)
    half.grad = Tensor((rng.standard_normal(4) * 300 + 400).astype(np.float16))
    half_total = clip_grad_norm(half, max_norm=1.0)
    return {"inf_total": total, "inf_g0": params[0].grad, "inf_g1": params[1].grad, "half_total": half_total,
            "half_grad": half.grad, "bad_norm": raised(clip_grad_norm, params, 1.0, norm_type=1.0)}


def _step_lr(rng):
    optimizer = SGD([Tensor(np.ones(2), requires_grad=True)], lr=0.4)
    scheduler = StepLR(optimizer, step_size=3, gamma=0.5)
    rates = [optimizer.lr] + [scheduler.step() for _ in range(9)]
    return {"rates": rates, "lr_at_7": scheduler.lr_at(7), "bad": raised(StepLR, optimizer, 0)}


def _cosine(rng):
    optimizer = SGD([Tensor(np.ones(2), requires_grad=True)], lr=0.2)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=3, total_steps=10, min_lr=0.01)
    rates = [optimizer.lr] + [scheduler.step() for _ in range(13)]
    no_warmup = CosineWarmupLR(SGD([Tensor(np.ones(1), requires_grad=True)], lr=1.0), 0, 4)
    return {"rates": rates, "no_warmup": [no_warmup.lr_at(s) for s in range(6)],
            "bad": raised(CosineWarmupLR, optimizer, 5, 5)}


def _accuracy(rng):
    logits = rng.standard_normal((7, 3))
    targets = rng.integers(0, 3, 7)
    scores = np.array([0.2, -0.1, 0.4, 0.6, -2.0, 0.05])
    labels = np.array([1, 0, 1, 1, 0, 0])
    return {"logits": accuracy(Tensor(logits), targets), "logits_list": accuracy(logits, targets.tolist()),
            "scores": accuracy(Tensor(scores), labels), "column": accuracy(scores[:, None], labels)}


def _train_steps(rng):
    net = model(rng)
    optimizer = SGD(net, lr=0.1)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=2, total_steps=6)
    trainer = Trainer(net, optimizer, cross_entropy, scheduler=scheduler, clip=0.05, verbose=False)
    losses = [trainer.train_step(x, y) for x, y in batches(rng, [4, 4, 4])]
    return {"losses": losses, "weights": weights(net), "step": trainer.step, "lr": optimizer.lr,
            "last_grad_norm": trainer.last_grad_norm}


def _train_epoch(rng):
    net = model(rng, p=0.0)
    trainer = Trainer(net, SGD(net, lr=0.05), cross_entropy, verbose=False)
    epoch_loss = trainer.train_epoch(batches(rng, [5, 5, 1]))
    return {"epoch_loss": epoch_loss, "weights": weights(net), "empty": raised(trainer.train_epoch, [])}


def _evaluate(rng):
    net = model(rng, p=0.5)
    graphs = []

    def loss_fn(outputs, targets):
        graphs.append(outputs._node is not None)
        return cross_entropy(outputs, targets)

    trainer = Trainer(net, SGD(net, lr=0.1), loss_fn, metric=accuracy, verbose=False)
    before = weights(net)
    result = trainer.evaluate(batches(rng, [6, 3]))
    return {"loss": result["loss"], "accuracy": result["accuracy"], "graphs": graphs,
            "training_after": [m.training for _, m in net.named_modules()],
            "unchanged": bool(np.array_equal(weights(net), before))}


def _fit(rng):
    net = model(rng, p=0.2)
    trainer = Trainer(net, Adam(net, lr=0.01), cross_entropy, verbose=False)
    train, val = batches(rng, [4, 4]), batches(rng, [5])
    trainer.fit(train, val, epochs=2)
    history = trainer.fit(train, val, epochs=1)
    return {"epochs": history["epoch"], "train_loss": history["train_loss"], "val_loss": history["val_loss"],
            "lr": history["lr"], "step": trainer.step}


def _train_then_save(rng, folder, parts):
    net = model(rng, p=0.4)
    optimizer = Adam(net, lr=0.02)
    scheduler = CosineWarmupLR(optimizer, warmup_steps=3, total_steps=8)
    trainer = Trainer(net, optimizer, cross_entropy, scheduler=scheduler, verbose=False)
    for x, y in batches(rng, [4, 4]):
        trainer.train_step(x, y)
    path = save_checkpoint(Path(folder) / "run", net, *(optimizer, scheduler)[:parts], step=trainer.step,
                           extra={"note": "two steps"})
    return trainer, path


def _checkpoint(rng):
    with tempfile.TemporaryDirectory(prefix="case-checkpoint-") as folder:
        trainer, path = _train_then_save(rng, folder, parts=2)
        fresh = model(np.random.default_rng(99), p=0.4)
        optimizer = Adam(fresh, lr=0.5)
        scheduler = CosineWarmupLR(optimizer, warmup_steps=3, total_steps=8)
        info = load_checkpoint(path, fresh, optimizer, scheduler)
        resumed = Trainer(fresh, optimizer, cross_entropy, scheduler=scheduler, verbose=False)
        x, y = batches(rng, [4])[0]
        original_loss = trainer.train_step(x, y)
        resumed_loss = resumed.train_step(x, y)
        return {"step": info["step"], "note": info["extra"]["note"], "lr_loaded": scheduler.lr,
                "losses": [original_loss, resumed_loss], "original": weights(trainer.model),
                "resumed": weights(fresh), "adam_steps": [s.get("step", 0) for s in optimizer.state]}


def _checkpoint_checks(rng):
    with tempfile.TemporaryDirectory(prefix="case-checkpoint-") as folder:
        _, model_only = _train_then_save(rng, folder, parts=0)
        net = model(np.random.default_rng(5), p=0.4)
        optimizer = Adam(net, lr=0.02)
        without_optimizer = raised(load_checkpoint, model_only, net, optimizer)
        other_args = model(np.random.default_rng(5), p=0.1)  # same shapes, built with another p
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            other_build = raised(load_checkpoint, model_only, other_args)
        return {"without_optimizer": without_optimizer, "other_build": other_build,
                "wider": raised(load_checkpoint, model_only, model(rng, p=0.4, hidden=6))}


CASES = {
    "clip-global": (_clip_global, "clip_grad_norm scales every gradient by one factor; returns the norm before"),
    "clip-inf-float16": (_clip_inf_and_float16, "the inf-norm uses |entries|; float16 squares summed without overflow",
                         {"rtol": 2e-3, "atol": 1e-5}),
    "step-lr": (_step_lr, "StepLR(step_size 3, gamma 0.5) over 9 steps"),
    "cosine": (_cosine, "CosineWarmupLR(3, 10, min_lr 0.01) over 13 steps: warm-up, decay, floor"),
    "accuracy": (_accuracy, "accuracy of (N, C) logits (arg-max over classes) and of one logit per example (> 0)"),
    "train-steps": (_train_steps, "train_step: zero_grad, clip, step, scheduler, counter, over 3 batches"),
    "train-epoch": (_train_epoch, "train_epoch's loss is the mean per example (a short last batch weighs less)"),
    "evaluate": (_evaluate, "evaluate in eval mode, under no_grad, back to training mode, weights unchanged"),
    "fit": (_fit, "fit: validation on val, epochs counted across calls, history"),
    "checkpoint": (_checkpoint, "save then load: the resumed run takes the same next step (Adam, schedule, dropout)"),
    "checkpoint-checks": (_checkpoint_checks, "a checkpoint without optimizer state or from another build is refused"),
}
