"""Reference entry "fp32": the shakespeare milestone's GPT as trained (the baseline of the quality bar),
and for the speedrun nanoGPT's small CPU recipe from scratch (the speedrun's baseline).

The judge loads CHECKPOINT into build_model()'s model with module 07's load_checkpoint; for the
speedrun it calls train(time_budget_s) and judges the model it returns.
"""
from tinytorch.models.transformer import GPT
from tinytorch.perf.olympics import speedrun_data, train_recipe

CHECKPOINT = "model.npz"


def build_model():
    return GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False, seed=1337)


def train(time_budget_s):
    train_ids, _ = speedrun_data()
    return train_recipe(build_model(), train_ids, time_budget_s)
