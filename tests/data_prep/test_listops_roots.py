"""Predictors of a ListOps label from the tree's root operator alone (data_prep.listops_roots)."""

from __future__ import annotations

import numpy as np
import pytest

from data_prep.compact import CompactSplit
from data_prep.listops_roots import first_tokens, label_per_root, predict_by_root, root_operator_rule


def test_root_operator_rule_predicts_the_most_frequent_label_per_first_token():
    train_first = np.array([11, 11, 11, 12, 12, 13])
    train_labels = np.array([3, 3, 4, 9, 9, 5])
    test_first = np.array([11, 12, 12, 14])  # 14 never starts a training tree: the overall majority (3)
    test_labels = np.array([3, 9, 1, 3])
    accuracy, best = root_operator_rule(train_first, train_labels, test_first, test_labels)
    assert best == {11: 3, 12: 9, 13: 5}
    assert accuracy == pytest.approx(0.75)


def test_a_tie_goes_to_the_smallest_label_and_an_unseen_root_to_the_fallback():
    table = label_per_root(np.array([5, 5, 5, 5, 6]), np.array([7, 2, 7, 2, 4]))
    assert table == {5: 2, 6: 4}
    assert predict_by_root(table, np.array([6, 5, 8]), fallback=1).tolist() == [4, 2, 1]


def test_first_tokens_are_each_sequences_first():
    split = CompactSplit(tokens=np.array([4, 1, 2, 7, 3, 9, 9], dtype=np.int16),
                         offsets=np.array([0, 3, 5, 7]), labels=np.array([0, 1, 2]))
    assert first_tokens(split).tolist() == [4, 7, 9]
