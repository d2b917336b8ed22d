"""Reference entry "pruned": module 16's structured pruning, a quarter of every MLP's hidden units removed
(prune_mlp_units), then fine-tuned (milestones/olympics.py). The MLPs are smaller: build_model makes the
same shapes (which units go does not matter here: the checkpoint holds the kept ones)."""
from tinytorch.models.transformer import GPT
from tinytorch.perf.compression import prune_mlp_units

CHECKPOINT = "model.npz"
AMOUNT = 0.25


def build_model():
    model = GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False)
    for block in model.blocks:
        block.mlp = prune_mlp_units(block.mlp, AMOUNT)
    return model
