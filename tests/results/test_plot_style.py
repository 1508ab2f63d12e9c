"""Every attention has its own (colour, marker) in every figure, no line joins two protocols (tags), and no legend
entry names a task or tag (issue 32, point 5). The figures are inspected through their matplotlib artists."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex
from matplotlib.markers import MarkerStyle

from results.curves import curves_figure
from results.plot_style import FIXED, attention_style
from results.plots import accuracy_figure, time_figure
from results.plots_extra import length_figure, throughput_figure

LENGTHS = {("quick", "listops"): 256.0, ("default", "listops"): 2048.0, ("quick", "text"): 1000.0}


def marker_path(marker: str) -> np.ndarray:
    """The vertices scatter draws for `marker` (as matplotlib builds its collection paths)."""
    style = MarkerStyle(marker)
    return style.get_path().transformed(style.get_transform()).vertices


def collection_style(collection) -> tuple[str, np.ndarray]:
    return to_hex(collection.get_facecolor()[0]), collection.get_paths()[0].vertices


def assert_style(name: str, collection) -> None:
    colour, vertices = collection_style(collection)
    expected_colour, expected_marker = attention_style(name)
    assert colour == expected_colour, name
    assert np.allclose(vertices, marker_path(expected_marker)), name


def long_table(names) -> pd.DataFrame:
    """One completed ListOps and Text run per attention (tag quick), with accuracy, tokens/s and wall time."""
    rows = [{"tag": "quick", "task": task, "attention": name, "seed": 0, "status": "completed", "metric": "test_acc",
             "value": 0.3 + 0.01 * i, "tokens_per_s": 1e4 + 100 * i, "wall_time_s": 100.0 + i,
             "path": f"runs/{task}/{name}/result.json"} for i, name in enumerate(names) for task in ("listops", "text")]
    return pd.DataFrame(rows)


def summary_table(names) -> pd.DataFrame:
    """Means for ListOps under two tags (quick at length 256, default at 2,048) and a majority-class row."""
    rows = [{"tag": tag, "attention": name, "listops_mean": 30.0 + i % 5 + (5 if tag == "default" else 0),
             "listops_std": 0.5, "listops_n": 1} for tag in ("quick", "default") for i, name in enumerate(names)]
    rows.append({"tag": "quick", "attention": "(majority class)", "listops_mean": 17.0, "listops_std": np.nan,
                 "listops_n": np.nan})
    return pd.DataFrame(rows)


def legend_texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [text.get_text() for text in legend.get_texts()] if legend else []


def test_fixed_attentions_have_distinct_pairs_and_every_registered_name_has_its_own():
    import attention_zoo  # the registry (available() imports every mechanism, and torch)

    assert set(FIXED) <= set(attention_zoo.available())  # a fixed name is never dropped from the registry
    pairs = [attention_style(name) for name in FIXED]
    assert len(set(pairs)) == len(FIXED)
    assert len({colour for colour, _ in pairs}) == len(FIXED)  # even the colours alone differ
    assert attention_style("based") != attention_style("mhla")
    assert pairs == [attention_style(name) for name in FIXED]  # the same on every call
    added = [name for name in attention_zoo.available() if name not in FIXED]  # since the pairs were fixed
    assert not {attention_style(name) for name in added} & set(pairs)


def test_other_names_get_a_stable_pair_no_registered_name_has():
    taken = {attention_style(name) for name in FIXED}
    for name in ("my_attn", "my_attn_v2", "<b>x</b>", "$x$"):
        assert attention_style(name) == attention_style(name) and attention_style(name) not in taken


def test_scatter_figures_use_each_attentions_pair_and_no_task_legend():
    names = list(FIXED) + ["my_attn"]
    for fig in (throughput_figure(long_table(names)), time_figure(long_table(names))):
        axes = fig.axes
        assert [ax.get_title().split(": ")[-1] for ax in axes] == ["listops", "text"]  # a panel per task
        for ax in axes:
            labels = [c.get_label() for c in ax.collections]
            assert sorted(labels) == sorted(names)
            for collection in ax.collections:
                assert_style(collection.get_label(), collection)
            assert legend_texts(ax) == sorted(names)  # attentions only: no "task: listops"
            for handle, name in zip(ax.get_legend().legend_handles, sorted(names)):
                assert (to_hex(handle.get_color()), handle.get_marker()) == attention_style(name)
        plt.close(fig)


def test_accuracy_bars_take_the_attentions_colours_and_markers():
    fig = accuracy_figure(summary_table(FIXED).query("tag == 'quick'"))
    ax = fig.axes[0]
    assert [to_hex(bar.get_facecolor()) for bar in ax.patches] == [attention_style(name)[0] for name in FIXED]
    markers = [c for c in ax.collections if isinstance(c, PathCollection)]  # the marker on top of each bar
    assert [c.get_label() for c in markers] == list(FIXED)
    for collection in markers:
        assert_style(collection.get_label(), collection)
    assert legend_texts(ax) == list(FIXED)
    plt.close(fig)


def test_length_plot_never_joins_two_tags():
    names = list(FIXED)
    fig = length_figure(summary_table(names), LENGTHS)
    ax, = fig.axes  # text has one length only: no panel
    assert not [line for line in ax.get_lines() if len(line.get_xdata()) > 1]  # no line at all between points
    assert len(ax.collections) == 2 * len(names)  # one series per (attention, tag)
    for collection in ax.collections:
        x = collection.get_offsets()[:, 0]
        assert len(x) == 1 and (200 < x[0] < 320 or 1600 < x[0] < 2600)  # beside one tag's length only
        assert_style(collection.get_label(), collection)
    assert legend_texts(ax) == names  # no "tag: quick"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256\nquick", "2048\ndefault"]
    plt.close(fig)


@pytest.mark.parametrize("seeds", [1, 2])
def test_learning_curves_take_the_attentions_colours_and_markers(seeds):
    curve = pd.DataFrame({"step": [250, 500, 750], "val_acc": [0.2, 0.3, 0.35]})
    runs = [(SimpleNamespace(attention=name, seed=seed, task="listops"), curve)
            for name in FIXED for seed in range(seeds)]
    fig = curves_figure(runs)
    lines = fig.axes[0].get_lines()
    assert len(lines) == len(runs)
    for line, (run, _) in zip(lines, runs):
        assert (to_hex(line.get_color()), line.get_marker()) == attention_style(run.attention)
    styles = [line.get_linestyle() for line in lines]
    assert len(set(styles)) == seeds  # seeds of one attention differ by line style
    plt.close(fig)


def test_names_with_dollars_draw_as_text(tmp_path):
    names = ["$\\frac{$", "a$b", "softmax"]  # unescaped, the first is broken mathtext and fails to draw
    fig = throughput_figure(long_table(names))
    fig.savefig(tmp_path / "names.png")
    assert legend_texts(fig.axes[0]) == [name.replace("$", "\\$") for name in sorted(names)]
    plt.close(fig)
