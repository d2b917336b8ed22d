"""Reference entry "fused": module 18's fuse(model), every MLP's bias + GELU as one op and every LayerNorm's
row means as BLAS products, the same weights;
for the speedrun the same recipe as fp32 with module 18's FusedAdamW (one flat buffer) for AdamW, each
batch cut into parts on the threads the judge allows (module 18's ThreadedDataParallel: 2 parts on the
speedrun's 2 threads), in a process whose allocator keeps freed memory (module 18's keep_freed_memory),
as the shakespeare milestone trains."""
from tinytorch.models.transformer import GPT
from tinytorch.perf.acceleration import FusedAdamW, ThreadedDataParallel, fuse, keep_freed_memory
from tinytorch.perf.olympics import speedrun_data, train_recipe

CHECKPOINT = "model.npz"


def build_model():
    return fuse(GPT(65, 128, 4, 4, 64, dropout=0.0, tie_weights=True, bias=False, seed=1337))


def train(time_budget_s):
    keep_freed_memory()
    train_ids, _ = speedrun_data()
    return train_recipe(build_model(), train_ids, time_budget_s, optimizer_class=FusedAdamW,
                        parallel_class=ThreadedDataParallel)
