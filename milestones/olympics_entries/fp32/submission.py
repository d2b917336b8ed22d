"""Reference entry "fp32": the shakespeare milestone's GPT as trained (the baseline of the quality bar).

The judge loads CHECKPOINT into build_model()'s model with module 07's load_checkpoint.
"""
from tinytorch.models.transformer import GPT

CHECKPOINT = "model.npz"


def build_model():
    return GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False)
