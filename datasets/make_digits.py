"""Convert scikit-learn's copy of the 8x8 handwritten digits into datasets/digits.npz.

Run ONCE, by a maintainer, in a throwaway environment that has scikit-learn:

    python3 -m venv /tmp/skl && /tmp/skl/bin/pip install scikit-learn numpy
    /tmp/skl/bin/python datasets/make_digits.py

TinyTorch itself never imports scikit-learn and never runs this script: the
milestones and tests read the committed digits.npz. The output is deterministic
(same arrays, same order as `sklearn.datasets.load_digits()`).
"""
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits


def main() -> None:
    digits = load_digits()
    images = digits.images  # (1797, 8, 8) float64 holding integers 0..16
    labels = digits.target  # (1797,) int
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,)
    assert np.array_equal(images, np.round(images)) and images.min() == 0 and images.max() == 16
    assert set(np.unique(labels).tolist()) == set(range(10))
    out = Path(__file__).resolve().parent / "digits.npz"
    np.savez_compressed(out, images=images.astype(np.uint8), labels=labels.astype(np.uint8))
    check = np.load(out)
    assert np.array_equal(check["images"], images) and np.array_equal(check["labels"], labels)
    counts = np.bincount(labels, minlength=10)
    print(f"wrote {out}: images {check['images'].shape} uint8, labels {check['labels'].shape} uint8, "
          f"per class {counts.tolist()}, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
