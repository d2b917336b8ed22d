"""Reference entry "checkpointed": module 17's checkpoint_blocks(model), every block recomputed in the
backward pass. A training-memory technique: for the smallest and generation events it should change
nothing, and the leaderboard shows whether it does."""
from tinytorch.models.transformer import GPT
from tinytorch.perf.memory import checkpoint_blocks

CHECKPOINT = "model.npz"


def build_model():
    return checkpoint_blocks(GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False))
