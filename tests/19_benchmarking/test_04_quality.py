"""Module 19, section 5: lm_validation_loss and accuracy, against hand-computed facts and a real GPT."""
import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT
from tinytorch.perf.benchmarking import accuracy, lm_validation_loss, lm_window_losses, paired_difference

VOCAB = 7
CYCLE = np.arange(101) % VOCAB  # 0 1 2 ... 6 0 1 ...: the next token is (token + 1) % 7


def oracle(x):
    """Puts a large logit on the true next token of CYCLE."""
    logits = np.zeros(np.shape(x) + (VOCAB,), np.float32)
    np.put_along_axis(logits, ((np.asarray(x) + 1) % VOCAB)[..., None], 30.0, axis=-1)
    return logits, None


def reference_loss(model, tokens, context):
    """The definition, window by window (a loop is fine in a test)."""
    total, count = 0.0, 0
    for start in range(0, (len(tokens) - 1) // context * context, context):
        x, y = tokens[start:start + context], tokens[start + 1:start + context + 1]
        logits = np.asarray(model(x[None])[0].data, dtype=np.float64)[0]
        logits -= logits.max(axis=-1, keepdims=True)
        total += float(np.sum(np.log(np.exp(logits).sum(axis=-1)) - logits[np.arange(context), y]))
        count += context
    return total / count


def test_targets_are_the_next_tokens():
    loss = lm_validation_loss(oracle, CYCLE, context=8, batch_size=4)
    assert loss < 1e-6, (f"a model that knows the next token scores ~0, got {loss:.4f}: the targets are the "
                         "inputs shifted by one (tokens[i*T + 1 : i*T + T + 1])")


def test_one_loss_per_window():
    losses = lm_window_losses(oracle, CYCLE, context=8, batch_size=5)  # 12 windows: batches of 5, 5 and 2
    assert isinstance(losses, np.ndarray) and losses.shape == (12,), (
        f"(101 - 1) // 8 = 12 non-overlapping windows: expected one loss per WINDOW, shape (12,), got {np.shape(losses)}")
    uniform = lambda x: np.zeros(np.shape(x) + (VOCAB,), np.float32)  # noqa: E731
    assert np.allclose(lm_window_losses(uniform, CYCLE, 8, batch_size=5), np.log(VOCAB)), \
        "each window's loss is the MEAN over its positions: equal logits give ln(V) in every window"


def test_equal_logits_score_ln_vocab():
    uniform = lambda x: np.zeros(np.shape(x) + (VOCAB,), np.float32)  # noqa: E731
    got = lm_validation_loss(uniform, CYCLE, context=5)
    assert got == pytest.approx(np.log(VOCAB), abs=1e-9), \
        f"equal logits over {VOCAB} tokens score ln({VOCAB}) = {np.log(VOCAB):.6f} nats, got {got}"


def test_windows_do_not_overlap():
    seen = []

    def spy(x):
        seen.append(np.array(x))
        return oracle(x)
    lm_validation_loss(spy, np.arange(50) % VOCAB, context=6, batch_size=3)
    windows = np.concatenate(seen)
    assert windows.shape == (8, 6), (f"50 tokens, context 6: (50 - 1) // 6 = 8 whole, non-overlapping windows, "
                                     f"got {windows.shape[0]} windows of {windows.shape[1]}")
    assert np.array_equal(windows.ravel(), np.arange(48) % VOCAB), "window i starts at i·context: no overlap, no gap"


def test_equals_the_definition_on_a_gpt_and_every_token_weighs_the_same():
    gpt = GPT(VOCAB, 16, 1, 2, 8, seed=0)
    tokens = np.random.default_rng(0).integers(0, VOCAB, 200)
    expected = reference_loss(gpt, tokens, 8)
    for batch_size in (1, 4, 7, 100):  # 24 windows: 7 leaves a last batch of 3
        got = lm_validation_loss(gpt, tokens, context=8, batch_size=batch_size)
        assert got == pytest.approx(expected, rel=1e-6), (
            f"batch_size={batch_size}: expected {expected:.6f}, got {got:.6f}; weigh every TOKEN the same "
            "(sum the cross-entropies, divide once by the number of targets), also when the last batch is smaller")


def test_window_losses_follow_the_windows():
    gpt = GPT(VOCAB, 16, 1, 2, 8, seed=0)
    tokens = np.random.default_rng(5).integers(0, VOCAB, 8 * 6 + 1)
    losses = lm_window_losses(gpt, tokens, 8, batch_size=4)
    for i in range(6):
        alone = reference_loss(gpt, tokens[8 * i:8 * i + 9], 8)
        assert losses[i] == pytest.approx(alone, rel=1e-6), f"window {i}: expected {alone:.6f}, got {losses[i]:.6f}"


def test_paired_difference():
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    mean, low, high = paired_difference(a + 0.5, a)
    assert mean == pytest.approx(0.5) and low == pytest.approx(0.5) and high == pytest.approx(0.5), (
        f"a constant paired difference 0.5 has a zero-width interval, whatever the spread of the windows: expected "
        f"(0.5, 0.5, 0.5), got {(mean, low, high)}")
    noise = np.random.default_rng(0).normal(size=200)
    mean, low, high = paired_difference(a.repeat(40)[:200] + noise, a.repeat(40)[:200])
    assert low < mean < high and low < 0.3 and high > -0.3


def test_max_batches():
    gpt = GPT(VOCAB, 16, 1, 2, 8, seed=0)
    tokens = np.random.default_rng(0).integers(0, VOCAB, 200)
    got, want = lm_validation_loss(gpt, tokens, 8, batch_size=4, max_batches=2), reference_loss(gpt, tokens[:8 * 8 + 1], 8)
    assert got == pytest.approx(want, rel=1e-6), (
        f"max_batches=2 with batch_size 4: the loss of the first 2 · 4 = 8 windows is {want:.6f}, got {got:.6f}"
        + (": max_batches counts BATCHES, not windows" if abs(got - reference_loss(gpt, tokens[:2 * 8 + 1], 8)) < 1e-9
           else ""))


def test_eval_mode_no_graph_and_mode_restored():
    gpt = GPT(VOCAB, 16, 1, 2, 8, dropout=0.5, seed=0)
    gpt.train()
    tokens = np.random.default_rng(1).integers(0, VOCAB, 100)
    first, second = lm_validation_loss(gpt, tokens, 8), lm_validation_loss(gpt, tokens, 8)
    assert first == second, f"{first} then {second}: evaluate in eval mode (dropout off), deterministically"
    assert gpt.training, "the model was in training mode before: put it back (model.train(was_training))"
    seen = []
    lm_validation_loss(lambda x: (seen.append(gpt(x)[0]), seen[-1])[1], tokens, 8)
    assert all(not t.requires_grad for t in seen), "no graph is recorded while evaluating (no_grad())"


def test_loss_refuses_too_few_tokens():
    with pytest.raises(ValueError, match="context"):
        lm_validation_loss(oracle, np.arange(5), context=8)


def test_accuracy_counts_every_example():
    labels = np.arange(103) % 10
    onehot = np.eye(10, dtype=np.float32)[labels]
    assert accuracy(lambda x: x, onehot, labels, batch_size=10) == 1.0
    wrong = labels.copy()
    wrong[:7] = (wrong[:7] + 1) % 10
    got = accuracy(lambda x: x, onehot, wrong, batch_size=10)
    assert got == pytest.approx(96 / 103), (f"7 of 103 wrong: expected {96 / 103:.4f}, got {got:.4f}; count the "
                                           "correct answers of every batch (the last one has 3) and divide once by N")


def test_accuracy_in_eval_mode_and_restored():
    model = Sequential(Linear(4, 16, seed=0), ReLU(), Dropout(0.9, seed=1), Linear(16, 3, seed=2))
    model.train()
    x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    y = np.asarray(model.eval()(Tensor(x)).data).argmax(axis=1)
    model.train()
    assert accuracy(model, x, y) == 1.0, "dropout must be off while evaluating (model.eval())"
    assert model.training, "put the model back into the mode it was in"


def test_accuracy_refuses_mismatched_labels():
    with pytest.raises(ValueError, match="label"):
        accuracy(lambda x: x, np.zeros((4, 3)), np.zeros(5, dtype=int))
