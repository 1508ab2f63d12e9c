"""One look per attention in every figure: a (colour, marker) pair fixed by the attention's name.

The 22 attentions of the first registry (`FIXED`) take the i-th of 22 high-contrast colours (Kelly's list without
white, then teal) and the marker `MARKERS[i % 8]`: no two share a colour, so no two share a pair (and names sharing
a marker have colours far apart). Every other name (an attention added since, or your own) gets a pair that no
fixed name has, chosen by the SHA-1 of the name (two such names can, rarely, share one). So a name keeps its pair in
every plot whatever else the plot shows, and adding an attention (its module and its yaml) changes no other
attention's look and needs no edit here.
"""

from __future__ import annotations

import hashlib

from matplotlib.lines import Line2D

# the registry as it stood when the pairs were fixed (never extended: a new name gets a hashed pair); each is
# still registered (tests/results/test_plot_style.py)
FIXED = ("based", "bigbird", "cosformer", "flatten", "hedgehog", "linear", "linformer", "llops", "local",
              "longformer", "mhla", "nystrom", "performer", "polaformer", "polysketch", "reformer", "sinkhorn",
              "skyformer", "slay", "softmax", "synthesizer", "yat")
# Kelly's 22 colours of maximum contrast without white, then teal; ordered so that the names sharing a marker
# (i, i + 8, i + 16) have colours of different families
COLOURS = ("#222222", "#f3c300", "#875692", "#f38400", "#a1caf1", "#be0032", "#c2b280", "#848482",
           "#008856", "#0067a5", "#f6a600", "#604e97", "#e68fac", "#dcd300", "#e25822", "#f99379",
           "#b3446c", "#882d17", "#8db600", "#17becf", "#2b3d26", "#654522")
MARKERS = "osD^vP*X"
EDGE = "#333333"  # a thin dark edge keeps the pale colours (yellow, buff) visible on white


def attention_style(name: object) -> tuple[str, str]:
    """(colour, marker) of an attention: fixed for the registered ones, from the name's hash for others."""
    name = str(name)
    if name in FIXED:
        index = FIXED.index(name)
        return COLOURS[index], MARKERS[index % len(MARKERS)]
    taken = {attention_style(known) for known in FIXED}
    free = [(colour, marker) for marker in MARKERS for colour in COLOURS if (colour, marker) not in taken]
    digest = int(hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest(), 16)
    return free[digest % len(free)]


def plain(text: object) -> str:
    """A name from a record as matplotlib text: `$` would start mathtext (and can fail to draw), so it is escaped."""
    return str(text).replace("$", r"\$")


def attention_handles(names) -> list[Line2D]:
    """Legend entries: each attention's marker in its colour, labelled with its name (in the given order)."""
    handles = []
    for name in names:
        colour, marker = attention_style(name)
        handles.append(Line2D([], [], color=colour, marker=marker, markeredgecolor=EDGE, markeredgewidth=0.4,
                              linestyle="", label=plain(name)))
    return handles


def attention_legend(ax, names, title: str | None = None) -> None:
    """One legend right of the axes with an entry per attention (two columns past 16)."""
    handles = attention_handles(names)
    if handles:
        ax.legend(handles=handles, fontsize=7, ncol=1 + (len(handles) - 1) // 16, bbox_to_anchor=(1.01, 1),
                  loc="upper left", title=title, title_fontsize=7)


def scatter_attention(ax, name: object, x, y, **options):
    """Points of one attention in its colour and marker (with the thin dark edge)."""
    colour, marker = attention_style(name)
    return ax.scatter(x, y, c=colour, marker=marker, edgecolors=EDGE, linewidths=0.4, **options)
