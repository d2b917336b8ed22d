"""Module 15, section 8: quantize_model (a new model; integers in its state_dict) and checkpoints on disk."""
import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.tensor import Tensor
from tinytorch.core.training import load_checkpoint
from tinytorch.models.transformer import GPT
from tinytorch.perf.quantization import QuantizedEmbedding, QuantizedLinear, checkpoint_bytes, quantize_model
from tinytorch.text.embeddings import Embedding


def small_mlp():
    return Sequential(Linear(4, 8, seed=0), ReLU(), Sequential(Linear(8, 8, seed=1), ReLU()), Linear(8, 3, seed=2))


def test_original_model_is_untouched():
    model = small_mlp()
    before = {name: value.copy() for name, value in model.state_dict().items()}
    quantize_model(model, bits=4)
    assert all(isinstance(m, Linear) for m in (model[0], model[2][0], model[3])), (
        "quantize_model must not change the original model: deep-copy it and replace the copy's submodules")
    after = model.state_dict()
    assert after.keys() == before.keys() and all(np.array_equal(before[k], after[k]) for k in before), (
        "quantize_model must not change the original model's weights")


def test_every_linear_is_replaced_and_the_state_dict_holds_integers():
    quantized = quantize_model(small_mlp())
    kinds = [type(m).__name__ for m in quantized.modules() if isinstance(m, (Linear, QuantizedLinear))]
    assert kinds == ["QuantizedLinear"] * 3, f"every Linear, nested ones too, becomes a QuantizedLinear: got {kinds}"
    state = quantized.state_dict()
    assert {k: str(v.dtype) for k, v in state.items() if k.endswith("qweight")} == {
        "0.qweight": "int8", "2.0.qweight": "int8", "3.qweight": "int8"}
    assert all(v.dtype in (np.int8, np.float32) for v in state.values())
    assert quantized.parameters() == [], "nothing of an MLP's is left to train"
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    assert np.allclose(quantized(Tensor(x)).numpy(), small_mlp()(Tensor(x)).numpy(), atol=0.05)
    four = quantize_model(small_mlp(), bits=4).state_dict()
    assert four["0.qweight"].dtype == np.uint8 and four["0.qweight"].shape == (4, 4), "int4 packed in the state_dict"
    assert isinstance(quantize_model(Linear(3, 2, seed=0)), QuantizedLinear), "a Linear becomes a QuantizedLinear"
    table = quantize_model(Embedding(10, 4, seed=0))
    assert isinstance(table, QuantizedEmbedding), (
        f"a model that is itself an Embedding becomes a QuantizedEmbedding, got {type(table).__name__} "
        "(the root is named '' in named_modules(): return its replacement)")
    kept = quantize_model(Embedding(10, 4, seed=0), embeddings=False)
    assert type(kept) is Embedding and [name for name, _ in kept.named_modules()] == [""], (
        "embeddings=False leaves an Embedding as it is, with no submodule added")


def test_the_gpt_is_quantized_without_touching_module_13():
    model = GPT(11, 16, 2, 2, 8, seed=0, bias=False)
    quantized = quantize_model(model)
    linears = [name for name, m in model.named_modules() if isinstance(m, Linear)]
    assert len(linears) == 12 and all(isinstance(dict(quantized.named_modules())[n], QuantizedLinear) for n in linears)
    assert isinstance(quantized.token_embedding, QuantizedEmbedding), (
        f"embeddings=True (the default): every Embedding becomes a QuantizedEmbedding, got "
        f"{type(quantized.token_embedding).__name__} for the GPT's token_embedding")
    assert isinstance(model.token_embedding, Embedding), "the original GPT keeps its float32 Embedding"
    assert type(quantized) is GPT and type(quantized.blocks[0]) is type(model.blocks[0]), "module 13's own classes"
    idx = np.random.default_rng(1).integers(0, 11, (2, 8))
    with no_grad():
        ours, ref = quantized(idx)[0].numpy(), model(idx)[0].numpy()
    assert np.abs(ours - ref).max() < 0.02, "the int8 GPT's logits stay close to the float ones"
    head = quantized.token_embedding.weight.numpy()
    table = model.token_embedding.weight.numpy()
    half_step = np.abs(table).max(axis=1, keepdims=True) / 255  # symmetric per row: max / 127.5, halved
    assert np.all(np.abs(head - table) <= half_step * (1 + 1e-4)), "the tied table: per row, half a step at most"
    tables = quantize_model(model, embeddings=False)
    assert isinstance(tables.token_embedding, Embedding), "embeddings=False leaves the tables in float32"
    four = quantize_model(model, bits=4)
    assert four.blocks[0].mlp.fc.bits == 4, f"quantize_model(bits=4): the Linears get 4 bits, got {four.blocks[0].mlp.fc.bits}"
    assert four.token_embedding.bits == 8, (
        f"quantize_model(bits=4): the embedding tables got {four.token_embedding.bits} bits, expected 8: they take "
        "embedding_bits (8 by default), not the Linears' bits")
    assert quantize_model(model, bits=4, embedding_bits=4).token_embedding.qweight.dtype == np.uint8
    assert np.array_equal(quantized.generate([1, 2], 5, seed=0).numpy(), quantized.generate([1, 2], 5, seed=0).numpy())
    dynamic = quantize_model(model, mode="dynamic")
    with no_grad():
        assert np.abs(dynamic(idx)[0].numpy() - ref).max() < 0.05


def test_checkpoint_round_trip_keeps_the_integers(tmp_path):
    model = GPT(11, 16, 2, 2, 8, seed=0, bias=False)
    for bits in (8, 4):
        quantized = quantize_model(model, bits=bits)
        path = tmp_path / f"int{bits}.npz"
        size = checkpoint_bytes(quantized, path)
        assert size == path.stat().st_size
        skeleton = quantize_model(GPT(11, 16, 2, 2, 8, seed=5, bias=False), bits=bits)
        load_checkpoint(path, skeleton)
        for name, value in quantized.state_dict().items():
            loaded = skeleton.state_dict()[name]
            assert loaded.dtype == value.dtype and np.array_equal(loaded, value), f"int{bits}: {name} changed"
        with np.load(path) as arrays:
            stored = {str(arrays[k].dtype) for k in arrays.files if k.endswith("qweight") and "embedding" not in k}
            tables = {str(arrays[k].dtype) for k in arrays.files if k.endswith("embedding.qweight")}
        assert stored == {"int8" if bits == 8 else "uint8"}, f"the file stores the integers themselves, got {stored}"
        assert tables == {"int8"}, f"the embedding tables keep 8 bits by default (embedding_bits=8), got {tables}"


def test_checkpoint_bytes_of_a_model_a_path_or_a_temporary_file(tmp_path):
    model = Sequential(Linear(64, 32, seed=1), ReLU(), Linear(32, 10, seed=2))
    kept = checkpoint_bytes(model, tmp_path / "m")  # ".npz" added, the file kept
    path = tmp_path / "m.npz"
    assert kept == path.stat().st_size, f"checkpoint_bytes(model, path) = {kept}, the file has {path.stat().st_size}"
    assert checkpoint_bytes(path) == kept == checkpoint_bytes(str(path)), "checkpoint_bytes(path) weighs the file"
    assert checkpoint_bytes(model) == kept, "checkpoint_bytes(model) saves a temporary checkpoint of the same bytes"
    assert checkpoint_bytes(quantize_model(model)) < kept, "the int8 model's checkpoint is smaller"
    with pytest.raises(TypeError, match="measures a file"):
        checkpoint_bytes(path, tmp_path / "other.npz")


def test_int8_checkpoint_is_close_to_four_times_smaller(tmp_path):
    model = Sequential(Linear(512, 512, seed=0), ReLU(), Linear(512, 512, seed=1))
    fp32 = checkpoint_bytes(model, tmp_path / "fp32.npz")
    sizes = {}
    for bits in (8, 4):
        quantized = quantize_model(model, bits=bits)
        sizes[bits] = checkpoint_bytes(quantized, tmp_path / f"int{bits}.npz")
        state = quantized.state_dict()
        assert sum(v.nbytes for k, v in state.items() if k.endswith("qweight")) == 2 * 512 * 512 * bits // 8, (
            f"int{bits}: {bits} bits per weight in the state_dict")
        # the rest: a float32 scale and an int8 zero point per output channel, the float32 biases
        assert sum(v.nbytes for k, v in state.items() if not k.endswith("qweight")) == 2 * 512 * (4 + 1 + 4)
        assert sizes[bits] - sum(v.nbytes for v in state.values()) < 8_000, "the file holds the arrays and little else"
    assert fp32 / sizes[8] >= 3.8 and fp32 / sizes[4] >= 7.4, f"fp32 {fp32:,} bytes, int8 {sizes[8]:,}, int4 {sizes[4]:,}"


def test_refuses_what_it_cannot_quantize():
    with pytest.raises(TypeError, match="Module"):
        quantize_model(lambda x: x)
