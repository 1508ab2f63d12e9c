"""ListOps root operators: the first token of every tree, and predictors that see nothing else.

A ListOps label is its root operator (MIN, MAX, MED, SM) applied to the root's arguments, so the root alone
already skews the label (MAX trees are mostly 9, SM trees spread out). `label_per_root` is the most frequent label
per root; fitted on training trees it is the `root-operator rule` of the tables (`results.rules`), fitted on a
split's own labels it is the best any root-only predictor can do there (its ceiling).
"""

from __future__ import annotations

import numpy as np


def first_tokens(split) -> np.ndarray:
    """The first token of every sequence of a loaded split (`data_prep.compact.CompactSplit`), (N,)."""
    return split.tokens[split.offsets[:-1]].astype(np.int64)


def label_per_root(first: np.ndarray, labels: np.ndarray) -> dict[int, int]:
    """First token -> its most frequent label among `labels` (ties: the smallest label)."""
    first, labels = np.asarray(first, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    return {int(token): int(np.bincount(labels[first == token]).argmax()) for token in np.unique(first)}


def predict_by_root(table: dict[int, int], first: np.ndarray, fallback: int) -> np.ndarray:
    """`table`'s label for each first token; `fallback` for a token the table has not seen."""
    return np.array([table.get(int(token), fallback) for token in first], dtype=np.int64)


def fit_root_rule(first: np.ndarray, labels: np.ndarray) -> tuple[dict[int, int], int]:
    """The root-operator rule fitted on (`first`, `labels`): its label per first token, and the overall most
    frequent label for a first token it has not seen."""
    return label_per_root(first, labels), int(np.bincount(np.asarray(labels, dtype=np.int64)).argmax())


def root_operator_rule(train_first: np.ndarray, train_labels: np.ndarray, test_first: np.ndarray,
                       test_labels: np.ndarray) -> tuple[float, dict[int, int]]:
    """Test accuracy of the most frequent training label per first token, and that label per first token.

    A first token never seen in training gets the overall most frequent training label.
    """
    table, fallback = fit_root_rule(train_first, train_labels)
    predicted = predict_by_root(table, test_first, fallback)
    return float((predicted == np.asarray(test_labels)).mean()), table
