# %% [markdown]
# # Module 16's given code: what the inline tests say when a number is wrong
#
# Given code for the lesson `compression_dev.py`, exported with it (`tito export 16`) to
# `tinytorch.perf.compression_checks`. When one of your functions returns a wrong mask,
# sparsity, schedule, CSR array, importance or distillation loss, the lesson's tests call
# these helpers to say which classic mistake gives exactly that result (each one made on the
# same inputs), or that none does. Read them when a message is not enough. They hold no
# exercise: the student edition carries this file unchanged.

# %%
#| default_exp perf.compression_checks

# %%
#| export
from __future__ import annotations

import numpy as np


# %%
#| export
def mask_mistake(got: np.ndarray, weights: np.ndarray, amount: float, keep: np.ndarray | None = None) -> str:
    """Why `got` is not magnitude_mask(weights, amount, keep): the classic mistake that gives exactly this
    mask, if one does (each one made on the same inputs), else where it differs."""
    size = weights.size
    keep_flat = None if keep is None else np.asarray(keep, dtype=bool).ravel()

    def made(scores=None, count=None, largest=False, stable=True, and_keep=True, score_earlier=True):
        """The mask with one step done differently (the reference when every argument is left as it is)."""
        scores = (np.abs(weights).astype(np.float64).ravel() if scores is None else scores).copy()
        if keep_flat is not None and score_earlier:
            scores[~keep_flat] = -1.0
        count = round(amount * size) if count is None else count
        ranked = np.argsort(scores, kind="stable") if stable else np.argsort(scores)
        mask = np.ones(size, dtype=bool)
        mask[ranked[count:] if largest else ranked[:count]] = False
        if keep_flat is not None and and_keep:
            mask &= keep_flat
        return mask.reshape(weights.shape)

    candidates = [
        ("you ranked the signed values: prune the entries of smallest ABSOLUTE value (np.abs; sorting the signed "
         "values prunes the most negative weights, the large ones)",
         made(scores=weights.astype(np.float64).ravel())),
        ("you pruned the LARGEST entries and kept the smallest: the pruned ones are the FIRST round(amount · size) "
         "of the ascending argsort ([:count], not [count:])", made(largest=True)),
        ("the count is truncated: prune round(amount * size) entries (Python's round, as torch counts), not int()",
         made(count=int(amount * size))),
        ("ties at the threshold went in another order: the entry first in C order is pruned first; sort with "
         "np.argsort(..., kind=\"stable\") (the default quicksort puts equal values in no particular order)",
         made(stable=False)),
    ]
    if keep_flat is not None:  # what this call is about comes first
        candidates[:0] = [
            ("a pruned weight came back: a pruned weight stays pruned, so AND the new mask with the earlier one "
             "(mask &= keep.ravel())", made(and_keep=False)),
            ("the entries pruned before were not counted first: score them -1 (below every magnitude) so that they "
             "count towards round(amount · size), and only the rest of the count prunes live weights",
             made(score_earlier=False)),
            ("amount is the fraction of ALL entries pruned afterwards, not of the entries still kept (that is "
             "PyTorch's way): count = round(amount * size)", made(count=round(amount * int(keep_flat.sum())))),
        ]
    got = np.asarray(got)
    for cause, wrong in candidates:
        if wrong.shape == got.shape and np.array_equal(wrong, got):
            return f"it matches a known mistake: {cause}"
    return ("it matches no classic mistake: " + (f"{int((~got).sum())} entries pruned, expected "
            f"{round(amount * size)}" if got.shape == weights.shape else f"shape {got.shape}"))


def sparsity_mistake(got: float, weights: list) -> str:
    """Why `got` is not the sparsity of `weights` (NumPy arrays): the classic mistake that gives it, if one does."""
    zeros, total = sum(int(np.sum(w == 0)) for w in weights), sum(w.size for w in weights)
    for cause, wrong in (
            ("you counted the nonzero weights (the density): count the zeros, w == 0", 1 - zeros / total),
            ("the mean of the layers' sparsities weighs a small layer like a large one: the zeros of all the layers "
             "together over all their entries, not the mean of the layers' sparsities",
             float(np.mean([np.mean(w == 0) for w in weights]))),
            ("you divided by the number of layers: divide by the number of weights, sum(w.size)", zeros / len(weights)),
            ("you returned the count of zeros: divide it by the number of weights, sum(w.size)", zeros)):
        if abs(got - wrong) < 1e-12:
            return f"it matches a known mistake: {cause}"
    return "it matches no classic mistake: the zeros of all the layers together over all their entries"


def schedule_mistake(got: list, steps: list, n: int, final: float, initial: float = 0.0) -> str:
    """Why the targets `got` at `steps` are not Zhu & Gupta's: the classic mistake that gives them, if one does."""
    def t(step, clamp=True):
        return min(max(step, 0), n) if clamp else step
    for cause, wrong in (
            ("the schedule runs backwards: s_t = s_f + (s_i - s_f)(1 - t/n)^3, with (1 - t/n), not t/n",
             [final + (initial - final) * (t(k) / n) ** 3 for k in steps]),
            ("the cube is missing: that is a straight line from s_i to s_f; s_t = s_f + (s_i - s_f)(1 - t/n)^3 prunes "
             "fast at first", [final + (initial - final) * (1 - t(k) / n) for k in steps]),
            ("t/n is 0 until the last step: // is integer division, use / (t / n is a fraction)",
             [final + (initial - final) * (1 - t(k) // n) ** 3 for k in steps]),
            ("initial_sparsity is ignored: the schedule starts from s_i, s_t = s_f + (s_i - s_f)(1 - t/n)^3",
             [final * (1 - (1 - t(k) / n) ** 3) for k in steps]),
            ("the step is not clamped: clamp t to [0, n] (s_i before step 0, s_f from step n on), "
             "min(max(step, 0), n)", [final + (initial - final) * (1 - t(k, False) / n) ** 3 for k in steps])):
        if np.allclose(got, wrong, atol=1e-12, rtol=0):
            return f"it matches a known mistake: {cause}"
    return "it matches no classic mistake: s_t = s_f + (s_i - s_f)(1 - t/n)^3 with t clamped to [0, n]"


def csr_mistake(matrix: np.ndarray, values: np.ndarray, col_indices: np.ndarray, row_ptr: np.ndarray) -> str:
    """Why to_csr(matrix) gave these arrays: the classic mistake that gives one of them, if one does."""
    rows, cols = np.nonzero(matrix)
    per_row = np.bincount(rows, minlength=matrix.shape[0])
    right = {"values": matrix[rows, cols], "col_indices": cols, "row_ptr": np.concatenate([[0], np.cumsum(per_row)])}
    got = {"values": values, "col_indices": col_indices, "row_ptr": row_ptr}

    def same(a, b) -> bool:
        return np.shape(a) == np.shape(b) and np.array_equal(a, b)

    for cause, part, wrong in (
            ("col_indices holds each value's ROW: np.nonzero returns (rows, cols), the columns come second",
             "col_indices", rows),
            ("the values come column by column (the transpose's order): np.nonzero(matrix) lists them row by row",
             "values", matrix.T[np.nonzero(matrix.T)]),
            ("row_ptr has `rows` entries: it starts with 0, so it has rows + 1 (np.concatenate([[0], np.cumsum(...)]))",
             "row_ptr", np.cumsum(per_row)),
            ("row_ptr holds the nonzeros per row: it must be a running count: cumsum of the nonzeros per row",
             "row_ptr", np.concatenate([[0], per_row])),
            ("empty rows (also the last ones) repeat the count: np.bincount(rows, minlength=the number of rows)",
             "row_ptr", np.concatenate([[0], np.cumsum(np.bincount(rows))]))):
        if not same(wrong, right[part]) and same(wrong, got[part]):
            return f"it matches a known mistake: {cause}"
    return "it matches no classic mistake"


def bytes_mistake(got: dict, matrix: np.ndarray) -> str:
    """Why storage_bytes(matrix) gave `got`: the classic mistakes that give its numbers, if they do."""
    nnz, size, rows = int(np.count_nonzero(matrix)), matrix.size, matrix.shape[0]
    causes = []
    if got.get("dense") == matrix.nbytes != 4 * size:
        causes.append(f"dense counts the matrix's own {matrix.dtype} bytes: store every entry as float32 (4 bytes), "
                      "matrix.astype(np.float32).nbytes, whatever the matrix's dtype")
    if got.get("bitmask") == size + 4 * nnz:
        causes.append("the bitmask takes one byte per entry (a bool array): pack 8 entries into a byte, "
                      "np.packbits(matrix != 0)")
    if got.get("csr") == 8 * nnz:
        causes.append(f"CSR's bytes leave out row_ptr ({rows + 1} int32 numbers, 4·(rows + 1) bytes)")
    return ("it matches a known mistake: " + "; ".join(causes)) if causes else "it matches no classic mistake"


def importance_mistake(got: np.ndarray, w_in: np.ndarray, w_out: np.ndarray) -> str:
    """Why mlp_unit_importance gave `got` for weights fc (E, H) = w_in and proj (H, E) = w_out: the classic
    mistake that gives it, if one does."""
    reads, writes = np.linalg.norm(w_in, axis=0), np.linalg.norm(w_out, axis=1)
    for cause, wrong in (
            ("the unit is scored by what it reads (fc) only: a unit whose outgoing weights (proj.weight row j) are 0 "
             "contributes nothing, so multiply by the norm of proj.weight's row j", reads),
            ("the two norms are added: multiply them (a unit that reads or writes nothing contributes nothing)",
             reads + writes),
            ("the squared norms (sums of squares) are multiplied: take the norms, np.linalg.norm", reads ** 2 * writes ** 2)):
        if np.shape(wrong) == np.shape(got) and np.allclose(got, wrong):
            return f"it matches a known mistake: {cause}"
    return "it matches no classic mistake: importance = ||fc.weight[:, j]|| * ||proj.weight[j, :]||"


def distillation_parts(s: np.ndarray, t: np.ndarray, y: np.ndarray, T: float) -> dict:
    """The pieces of the formula in NumPy, float64, logits flattened to (N, C); and the values
    that the classic mistakes give instead, to name them."""
    def log_softmax_np(z, axis=-1):
        z = z - z.max(axis, keepdims=True)
        return z - np.log(np.exp(z).sum(axis, keepdims=True))

    batch = s.shape[0]
    ls_axis0 = log_softmax_np(s / T, axis=0).reshape(-1, s.shape[-1])  # the student's softmax over the batch
    s, t, y = s.reshape(-1, s.shape[-1]), t.reshape(-1, t.shape[-1]), y.reshape(-1)
    lt, ls, lt1 = log_softmax_np(t / T), log_softmax_np(s / T), log_softmax_np(t)
    pt, ps = np.exp(lt), np.exp(ls)
    rows = np.arange(len(s))
    return {"kl": np.sum(pt * (lt - ls)) / len(s), "kl_reversed": np.sum(ps * (ls - lt)) / len(s),
            "kl_per_sequence": np.sum(pt * (lt - ls)) / batch,
            "kl_student_axis0": np.sum(pt * (lt - ls_axis0)) / len(s),
            "kl_of_probabilities": np.sum(pt * (pt - ps)) / len(s), "classes": s.shape[1],
            "kl_of_exp_probabilities": np.sum(np.exp(pt) * (pt - ps)) / len(s),
            "kl_teacher_unsoftened": np.sum(np.exp(lt1) * (lt1 - ls)) / len(s),
            "ce": -np.mean(log_softmax_np(s)[rows, y]), "ce_softened": -np.mean(ls[rows, y])}


def expected_distillation(s, t, y, T: float, alpha: float) -> tuple[float, dict]:
    """(the right value, {what went wrong: the value that mistake gives})."""
    p = distillation_parts(s, t, y, T)
    hard = (1 - alpha) * p["ce"]
    wrong = {
        "the T² factor is missing (alpha·T²·KL)": alpha * p["kl"] + hard,
        "the KL is in the wrong direction: KL(teacher ‖ student) = Σ p_teacher (log p_teacher − log p_student)":
            alpha * T * T * p["kl_reversed"] + hard,
        "the KL is averaged over the classes too: sum over classes, divide by the number of positions (batchmean)":
            alpha * T * T * p["kl"] / p["classes"] + hard,
        "probabilities used where log-probabilities belong: both logs come from log_softmax":
            alpha * T * T * p["kl_of_probabilities"] + hard,
        "probabilities used where log-probabilities belong: both logs come from log_softmax (softmax, not log_softmax)":
            alpha * T * T * p["kl_of_exp_probabilities"] + hard,
        "the hard term is softened: the cross-entropy with the labels takes the raw logits s, not s / T":
            alpha * T * T * p["kl"] + (1 - alpha) * p["ce_softened"],
        "the teacher's logits are not softened: divide both logits by T":
            alpha * T * T * p["kl_teacher_unsoftened"] + hard,
        "alpha and 1 − alpha swapped: alpha weighs the soft (KL) term, 1 − alpha the cross-entropy":
            (1 - alpha) * T * T * p["kl"] + alpha * p["ce"],
        "the soft term is multiplied by T, not by T² (alpha·T²·KL)": alpha * T * p["kl"] + hard,
        "the KL is divided by the batch size only: every leading position counts, divide by N = s.size / C "
        "(for (B, T, C) logits, B·T positions), batchmean": alpha * T * T * p["kl_per_sequence"] + hard,
        "the student's log_softmax runs over the wrong axis: the classes are the LAST axis, dim=-1":
            alpha * T * T * p["kl_student_axis0"] + hard,
    }
    return alpha * T * T * p["kl"] + hard, wrong
