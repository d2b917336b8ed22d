# %% [markdown]
# # Module 12's given code: heat maps of attention weights
#
# Given code for the lesson `attention_dev.py`, exported with it (`tito export 12`) to
# `tinytorch.core.attention_plots`; `tinytorch.core.attention` imports `plot_attention` and
# `plot_attention_heads` from here, so both are importable from either module. matplotlib is
# imported inside the functions (module 02's `pyplot()`), so the package does not need it
# to import. It holds no exercise: the student edition carries this file unchanged.

# %%
#| default_exp core.attention_plots

# %%
#| export
from pathlib import Path
from typing import Any

import numpy as np

from tinytorch.core.tensor import to_host
from tinytorch.files import atomic_write
from tinytorch.plotting import pyplot  # module 02's: the one place the backend is chosen


def save_figure(fig, path: Any, dpi: int) -> None:
    """Save `fig` to `path` (its suffix picks the format; png without one) with module 07's
    `atomic_write`, so an older image at `path` stays whole until the new one is."""
    if path is not None:
        path = Path(path)
        with atomic_write(path) as handle:  # no "Software" entry: the same figure always gives the same bytes
            fig.savefig(handle, format=path.suffix[1:].lower() or "png", dpi=dpi, metadata={"Software": None})


def _draw(ax, w: np.ndarray, query_tokens, key_tokens, title: str):
    image = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-12), aspect="auto")
    ax.set_title(title)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if key_tokens is not None:
        ax.set_xticks(range(len(key_tokens)), [str(t) for t in key_tokens], rotation=90)
    if query_tokens is not None:
        ax.set_yticks(range(len(query_tokens)), [str(t) for t in query_tokens])
    return image


def plot_attention(weights: Any, query_tokens: Any = None, key_tokens: Any = None,
                   title: str = "Attention weights", path: Any = None, ax: Any = None):
    """Heat map of one (Tq, Tk) weight matrix (leading size-1 dims are dropped); returns the Figure.

    Rows are queries, columns keys. Saves a PNG to `path` when given; pass `ax` to draw into
    an existing Axes.
    """
    w = to_host(weights)
    while w.ndim > 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 2:
        raise ValueError(f"plot_attention: needs a (Tq, Tk) matrix, got shape {w.shape}; use plot_attention_heads for heads.")
    for tokens, size, name in ((query_tokens, w.shape[0], "query_tokens"), (key_tokens, w.shape[1], "key_tokens")):
        if tokens is not None and len(tokens) != size:
            raise ValueError(f"plot_attention: {len(tokens)} {name} for {size} rows/columns of weights {w.shape}.")
    plt = pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.0 + 0.45 * w.shape[1], 1.0 + 0.4 * w.shape[0]))
    else:
        fig = ax.figure
    image = _draw(ax, w, query_tokens, key_tokens, title)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    save_figure(fig, path, 120)
    return fig


def plot_attention_heads(weights: Any, query_tokens: Any = None, key_tokens: Any = None,
                         title: str = "Attention weights per head", path: Any = None, cols: int = 4,
                         titles: Any = None):
    """Grid of heat maps, one per head, from (H, Tq, Tk) weights (or (1, H, Tq, Tk)); returns the Figure.

    `titles` names the panels (default "head 0", "head 1", ...).
    """
    w = to_host(weights)
    if w.ndim == 4 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 3:
        raise ValueError(f"plot_attention_heads: needs (H, Tq, Tk) weights, got shape {w.shape}.")
    heads = w.shape[0]
    titles = [f"head {h}" for h in range(heads)] if titles is None else list(titles)
    cols = max(1, min(int(cols), heads))
    rows = -(-heads // cols)
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(cols * (1.0 + 0.3 * w.shape[2]), rows * (1.0 + 0.3 * w.shape[1])),
                             squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h < heads:
            _draw(ax, w[h], query_tokens if h % cols == 0 else None, key_tokens, titles[h])
            if h % cols:
                ax.set_yticks([])
                ax.set_ylabel("")
        else:
            ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path, 120)
    return fig
