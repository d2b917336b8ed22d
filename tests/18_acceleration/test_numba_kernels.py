"""Module 18, section 6: the compiled kernels, each against its composed NumPy version (values and
gradients in float32 and float64, central differences in float64, one row, odd and 3-D shapes, an
empty batch), the compiled GPT against module 13's, and fuse() without Numba.

The kernels run as plain Python where Numba is missing (the same results, slowly), so the value
tests run either way; the tests that need the compiled path itself skip, saying so."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinytorch.core.activations import gelu
from tinytorch.core.attention import composed_attention
from tinytorch.core.autograd import gradcheck
from tinytorch.core.losses import cross_entropy
from tinytorch.core.optimizers import AdamW, weight_decay_groups
from tinytorch.core.tensor import Tensor
from tinytorch.models.transformer import GPT, layer_norm
from tinytorch.perf import acceleration
from tinytorch.perf.acceleration import (COMPILED_REPLACEMENTS, FUSED_REPLACEMENTS, CompiledGPT, FusedAdamW,
                                         causal_attention, compiled_bias_gelu, compiled_cross_entropy,
                                         compiled_layer_norm, fuse, kernel)

needs_numba = pytest.mark.skipif(not acceleration.NUMBA_AVAILABLE,
                                 reason="Numba is not installed: the compiled path is not taken (pip install numba)")
TOLERANCE = {np.float32: dict(rtol=1e-4, atol=1e-5), np.float64: dict(rtol=1e-11, atol=1e-13)}


def check_against_composed(op, composed, inputs, dtype, seed=0):
    """op(*inputs) against composed(*inputs): the value, then every input's gradient for one random
    cotangent, within the dtype's tolerance; in float64 also central differences (gradcheck).
    `inputs` are arrays: each becomes a Tensor with requires_grad in `dtype` (index arrays stay
    as they are when they are integers)."""
    def tensors():
        return [Tensor(a.astype(dtype), requires_grad=True) if a.dtype.kind == "f" else a for a in inputs]

    ours_in, theirs_in = tensors(), tensors()
    ours, theirs = op(*ours_in), composed(*theirs_in)
    tol = TOLERANCE[dtype]
    assert ours.dtype == dtype, f"{op.__name__}: {np.dtype(dtype).name} in must give {np.dtype(dtype).name} out"
    assert ours.shape == theirs.shape and np.allclose(ours.numpy(), theirs.numpy(), **tol), (
        f"{op.__name__} ({np.dtype(dtype).name}, shapes {[a.shape for a in inputs]}): value differs from the composed "
        f"version by up to {np.abs(ours.numpy() - theirs.numpy()).max() if ours.size else 0:.2e}")
    cotangent = np.random.default_rng(seed).standard_normal(ours.shape).astype(dtype)
    (ours * Tensor(cotangent)).sum().backward()
    (theirs * Tensor(cotangent)).sum().backward()
    for k, (a, b) in enumerate(zip(ours_in, theirs_in)):
        if isinstance(a, Tensor):
            assert a.grad is not None and b.grad is not None, f"{op.__name__}: input {k} got no gradient"
            assert np.allclose(a.grad.numpy(), b.grad.numpy(), **tol), (
                f"{op.__name__} ({np.dtype(dtype).name}): the gradient of input {k} differs from the composed "
                f"version's by up to {np.abs(a.grad.numpy() - b.grad.numpy()).max() if a.grad.size else 0:.2e}")
    if dtype == np.float64 and ours.size:
        assert gradcheck(op, tensors()), f"{op.__name__}: gradients differ from central differences"


ROW_SHAPES = [(1, 5), (7, 13), (2, 3, 6), (0, 4)]
DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=["one-row", "7x13", "3-D", "empty"])
def test_layer_norm_against_module_13(shape, dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) * 2 + 1
    w, b = 1 + 0.3 * rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
    check_against_composed(compiled_layer_norm, layer_norm, [x, w, b], dtype)
    check_against_composed(compiled_layer_norm, layer_norm, [x, w], dtype)  # no bias


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=["one-row", "7x13", "3-D", "empty"])
def test_bias_gelu_against_add_then_gelu(shape, dtype):
    rng = np.random.default_rng(2)
    x, b = rng.standard_normal(shape) * 2, rng.standard_normal(shape[-1])
    check_against_composed(compiled_bias_gelu, lambda x, b: gelu(x + b), [x, b], dtype)
    check_against_composed(compiled_bias_gelu, gelu, [x], dtype)


def composed_cross_entropy(logits, targets):
    """Module 04's loss written as composed ops: −mean of log_softmax picked by a one-hot mask."""
    from tinytorch.core.activations import log_softmax

    onehot = np.eye(logits.shape[-1])[targets].astype(logits.dtype)
    count = max(targets.size, 1)
    return -(log_softmax(logits, dim=-1) * Tensor(onehot)).sum() / count


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=["one-row", "7x13", "3-D", "empty"])
def test_cross_entropy_against_log_softmax(shape, dtype):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(shape) * 3
    targets = rng.integers(0, shape[-1], shape[:-1])
    check_against_composed(compiled_cross_entropy, composed_cross_entropy, [logits, targets], dtype)
    if targets.size:
        assert np.isclose(compiled_cross_entropy(logits, targets).item(), cross_entropy(logits, targets).item(),
                          rtol=1e-12), "compiled_cross_entropy differs from module 04's cross_entropy"


def test_cross_entropy_refuses_bad_targets():
    for bad in (np.array([0, 3]), np.array([0, -1]), np.array([0.5, 1.0]), np.array([[0, 1]])):
        with pytest.raises(ValueError, match="compiled_cross_entropy"):
            compiled_cross_entropy(np.zeros((2, 3)), bad)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (2, 3, 7, 5), (3, 7, 5), (0, 2, 4, 3)],
                         ids=["one-token", "2x3x7x5", "3-D", "empty"])
def test_causal_attention_against_composed_attention(shape, dtype):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    check_against_composed(causal_attention, lambda q, k, v: composed_attention(q, k, v, is_causal=True)[0],
                           [q, k, v], dtype)


def test_huge_and_minus_inf_logits_stay_finite():
    huge = np.array([[1000.0, 0.0, -1000.0], [0.0, 990.0, 1000.0]], np.float32)
    assert np.isclose(compiled_cross_entropy(huge, np.array([0, 1])).item(),
                      cross_entropy(huge, np.array([0, 1])).item(), rtol=1e-5)
    ruled_out = Tensor(np.array([[-np.inf, 0.0, 1.0]]), requires_grad=True)
    loss = compiled_cross_entropy(ruled_out, np.array([2]))
    loss.backward()
    assert np.isfinite(loss.item()) and ruled_out.grad.numpy()[0, 0] == 0, "a -inf logit: probability and gradient 0"


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_compiled_adamw_is_adamw_bit_for_bit(dtype):
    """adamw_kernel rounds as NumPy does: equal bits after several steps, two groups, one without decay."""
    def run(compiled):
        model = GPT(13, 8, 2, 2, 6, seed=7, dtype=dtype, bias=True)
        settings = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
        groups = weight_decay_groups(model, 0.1)
        optimizer = AdamW(groups, **settings) if compiled is None else FusedAdamW(groups, compiled=compiled,
                                                                                 **settings)
        rng = np.random.default_rng(0)
        for _ in range(4):
            x, y = rng.integers(0, 13, (2, 3, 6))
            _, loss = model(x, targets=y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return [p.data.copy() for p in model.parameters()]

    reference = run(None)
    for compiled in (False, True):
        for a, b in zip(reference, run(compiled)):
            assert np.array_equal(a, b), f"FusedAdamW(compiled={compiled}) differs from AdamW by {np.abs(a - b).max():.2e}"


@needs_numba
def test_fuse_picks_the_compiled_kernels_and_adamw_the_kernel():
    model = fuse(GPT(11, 8, 2, 2, 6, seed=0))
    kinds = {type(m).__name__ for _, m in model.named_modules()}
    assert type(model) is CompiledGPT and {"CompiledMLP", "CompiledLayerNorm", "CompiledCausalSelfAttention"} <= kinds
    assert FusedAdamW(model.parameters()).compiled, "with Numba, FusedAdamW uses adamw_kernel by default"


@pytest.mark.parametrize("dropout", [0.0, 0.2], ids=["no-dropout", "dropout"])
def test_compiled_gpt_equals_gpt(dropout):
    """Loss and every gradient, float64, tight: the compiled path changes only the order of roundings."""
    model = GPT(17, 16, 2, 2, 8, dropout=dropout, seed=5, dtype=np.float64)
    for block in model.blocks:
        block.mlp.fc.bias.data = np.linspace(-1.0, 1.0, block.mlp.fc.bias.size)
        block.ln2.bias.data = np.linspace(-0.5, 0.5, 16)
    compiled = fuse(model, COMPILED_REPLACEMENTS)
    ids, targets = np.random.default_rng(6).integers(0, 17, (2, 3, 8))
    logits, loss = model(ids, targets=targets)
    clogits, closs = compiled(ids, targets=targets)
    assert np.allclose(clogits.numpy(), logits.numpy(), rtol=1e-12, atol=1e-13)
    assert np.isclose(closs.item(), loss.item(), rtol=1e-13), f"loss {closs.item()} is not GPT's {loss.item()}"
    loss.backward()
    plain = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    closs.backward()
    for (name, p), want in zip(compiled.named_parameters(), plain):
        assert np.allclose(p.grad.numpy(), want, rtol=1e-10, atol=1e-13), f"the gradient of {name} differs"


def test_compiled_gpt_generates_and_draws_maps_as_gpt():
    model = GPT(17, 16, 2, 2, 8, seed=5, dtype=np.float64)
    compiled = fuse(model, COMPILED_REPLACEMENTS)
    prompt = np.array([[1, 2, 3]])
    assert np.array_equal(model.generate(prompt, 4, seed=0).numpy(), compiled.generate(prompt, 4, seed=0).numpy()), \
        "the compiled GPT (KV cache: module 13's attention) must generate the same tokens"
    assert np.allclose(model.attention_maps(prompt), compiled.attention_maps(prompt), rtol=1e-12)


def test_kernel_without_a_file_compiles_without_cache():
    """A function with no source file (a notebook cell) cannot be cached: kernel() still compiles it."""
    namespace = {"kernel": kernel}
    exec(compile("@kernel()\ndef twice(a, out):\n    for i in range(a.shape[0]):\n        out[i] = 2 * a[i]\n",
                 "<cell>", "exec"), namespace)
    out = np.empty(3)
    namespace["twice"](np.arange(3.0), out)
    assert out.tolist() == [0.0, 2.0, 4.0]


SHIM = "import sys\nsys.modules['numba'] = None  # `import numba` raises ImportError: as if it were not installed\n"
FALLBACK = textwrap.dedent("""
    import json, warnings
    import numpy as np
    warnings.simplefilter("always")
    from tinytorch.models.transformer import GPT
    from tinytorch.perf import acceleration
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = GPT(17, 16, 2, 2, 8, seed=5, dtype=np.float64)
        fused = acceleration.fuse(model)
        again = acceleration.fuse(model)
    ids, targets = np.random.default_rng(6).integers(0, 17, (2, 3, 8))
    _, loss = fused(ids, targets=targets)
    loss.backward()
    print(json.dumps({"numba": acceleration.NUMBA_AVAILABLE, "loss": loss.item(),
                      "grad": float(sum(np.abs(p.grad.numpy()).sum() for p in model.parameters())),
                      "kinds": sorted({type(m).__name__ for _, m in fused.named_modules()}),
                      "compiled_adamw": acceleration.FusedAdamW(model.parameters()).compiled,
                      "warnings": [str(w.message) for w in caught]}))
""")


@pytest.mark.slow
def test_fuse_without_numba_falls_back_and_says_so(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(SHIM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path(__file__).parents[2])]))
    done = subprocess.run([sys.executable, "-c", FALLBACK], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["numba"] is False, "the shim must hide Numba"
    assert report["kinds"] == sorted({"GPT", "Embedding", "Dropout", "ModuleList", "TransformerBlock", "BlasLayerNorm",
                                      "CausalSelfAttention", "FusedMLP", "Linear"}), report["kinds"]
    assert report["compiled_adamw"] is False, "without Numba FusedAdamW takes the NumPy update"
    told = [w for w in report["warnings"] if "Numba is not installed" in w]
    assert len(told) == 1 and "pip install numba" in told[0], f"say it once, naming what to install: {report}"
    model = GPT(17, 16, 2, 2, 8, seed=5, dtype=np.float64)
    ids, targets = np.random.default_rng(6).integers(0, 17, (2, 3, 8))
    _, loss = fuse(model, COMPILED_REPLACEMENTS)(ids, targets=targets)
    loss.backward()
    assert np.isclose(report["loss"], loss.item(), rtol=1e-12), "the NumPy fusions give the compiled path's loss"
    grad = float(sum(np.abs(p.grad.numpy()).sum() for p in model.parameters()))
    assert np.isclose(report["grad"], grad, rtol=1e-10)
    assert FUSED_REPLACEMENTS is not COMPILED_REPLACEMENTS


@needs_numba
def test_kernels_let_go_of_the_gil_and_keep_numpy_division():
    """Section 11's threads run kernels at once only if each lets go of Python's lock (nogil), as NumPy does;
    error_model="numpy": x/0 is inf or NaN, as in NumPy, not a ZeroDivisionError."""
    names = ["layer_norm_rows", "layer_norm_rows_backward", "bias_gelu_rows", "bias_gelu_rows_backward",
             "softmax_cross_entropy_rows", "softmax_cross_entropy_rows_backward", "causal_softmax_rows",
             "causal_softmax_rows_backward", "adamw_kernel"]
    for name in names:
        options = getattr(acceleration, name).targetoptions
        assert options.get("nogil") and options.get("error_model") == "numpy", f"{name}: {options}"


@needs_numba
def test_no_softmax_kernel_and_not_adamw_assumes_away_inf_or_nan():
    """fastmath=True (or its nnan/ninf flags) lets the compiler assume no inf and no NaN: a softmax must
    turn a -inf logit into exactly 0, and AdamW must round as NumPy does. No value on one machine proves
    what such a build drops, so the flags each kernel was compiled with are read instead."""
    import numba

    for name in ["softmax_cross_entropy_rows", "softmax_cross_entropy_rows_backward", "causal_softmax_rows",
                 "causal_softmax_rows_backward", "adamw_kernel"]:
        assert acceleration.unsafe_fastmath(getattr(acceleration, name)) == set(), name

    def identity(x):
        return x

    assert acceleration.unsafe_fastmath(numba.njit(fastmath=True)(identity)) == {"fast"}
    assert acceleration.unsafe_fastmath(numba.njit(fastmath={"nnan", "reassoc"})(identity)) == {"nnan"}
    assert acceleration.unsafe_fastmath(numba.njit(fastmath=set(acceleration.SAFE_FASTMATH))(identity)) == set()
    assert acceleration.unsafe_fastmath(identity) == set()  # plain Python: nothing compiled
    with pytest.raises(AssertionError, match="fastmath on a softmax tells the compiler that inf never occurs"):
        acceleration.check_no_unsafe_fastmath(numba.njit(fastmath=True)(identity))
