"""Reference entry "distilled": a 2-layer GPT trained from scratch on the 4-layer model's logits with
module 16's distillation_loss (milestones/olympics.py trains it)."""
from tinytorch.models.transformer import GPT

CHECKPOINT = "model.npz"


def build_model():
    return GPT(65, 128, 2, 4, 64, dropout=0.0, tie_weights=True, bias=False)
