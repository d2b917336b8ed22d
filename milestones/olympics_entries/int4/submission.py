"""Reference entry "int4": module 15's weight-only int4 (two weights per byte; tables int8) of the trained GPT."""
from tinytorch.models.transformer import GPT
from tinytorch.perf.quantization import quantize_model

CHECKPOINT = "model.npz"


def build_model():
    return quantize_model(GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False), mode="weight_only", bits=4)
