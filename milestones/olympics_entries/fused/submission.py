"""Reference entry "fused": module 18's fuse(model), every MLP's bias + GELU as one op; the same weights."""
from tinytorch.models.transformer import GPT
from tinytorch.perf.acceleration import fuse

CHECKPOINT = "model.npz"


def build_model():
    return fuse(GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False))
