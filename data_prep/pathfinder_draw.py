"""Paddle geometry and rasterisation tables for the Pathfinder generator (drewlinsley/pathfinder snakes2.py).

The published generator places every paddle relative to integer pixel positions: a seed paddle starts at
an integer tail and points at one of 360 integer-degree orientations; every later paddle has its head at
``pivot + D[c]``, where ``D`` are the distinct integer points (``floor``) sampled at one-pixel arc spacing
on the circle of radius ``paddle_length + margin`` around the pivot, and the next pivot is
``pivot + ceil((paddle_length + 2 * margin) * direction)``. So each paddle's pixels, footprint and step
depend only on its "state": a seed orientation (0..359) or a candidate index (360 + c). This module
precomputes, per state, everything the batched grower and renderer need:

- ``patch``: anti-aliased coverage of the paddle (a capsule of width ``paddle_thickness`` from the anchor
  to the end point the original reaches with ``ceil`` at ``antialias`` scale), computed on a
  SUPERSAMPLE x SUPERSAMPLE grid per pixel and box-filtered to pixels;
- ``body``: the pixels the paddle lights (coverage > 0), with or without the marker disc at its anchor;
- ``halo``: the body dilated by ``clearance`` pixels (Chebyshev); no other paddle may light a pixel of
  another paddle's halo, except the paddle that directly follows it on the same snake;
- ``options``: the candidates that may follow a state, with their continuity weights
  ``cos(min(turn * continuity, pi / 2)) ** 2``; a candidate is kept only if its lit pixels lie within
  ``clearance`` (Chebyshev) of the previous paddle's, so the dashes of one snake stay linked at that
  radius while different snakes are always farther apart (at 32x32 this drops 14% of the weight, a few
  sharp-corner transitions whose rounded gap is 3 pixels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SUPERSAMPLE = 8
SEED_STATES = 360  # integer seed orientations -180..179 degrees, state = degree + 180


def _ceil(x: np.ndarray) -> np.ndarray:
    """``ceil`` as the original's translate_coord, without float noise (sin(pi) is not exactly 0)."""
    return np.ceil(np.round(x, 9)).astype(np.int64)


def _floor(x: np.ndarray) -> np.ndarray:
    return np.floor(np.round(x, 9)).astype(np.int64)


def _flip(angle: np.ndarray) -> np.ndarray:
    """Orientation turned by pi, kept in [-pi, pi) as the original's flip_by_pi."""
    return np.where(angle < 0, angle + np.pi, angle - np.pi)


def _unit(angle: np.ndarray) -> np.ndarray:
    """(..., 2) unit vectors as (y, x)."""
    return np.stack([np.sin(angle), np.cos(angle)], axis=-1)


def _subsamples(radius: int) -> np.ndarray:
    """(n*S, n*S, 2) subsample positions of the pixel window [-radius, radius]^2 (pixel centres integer)."""
    n = 2 * radius + 1
    axis = (np.arange(n * SUPERSAMPLE) + 0.5) / SUPERSAMPLE - 0.5 - radius
    return np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1)


def _box_filter(inside: np.ndarray) -> np.ndarray:
    """(..., n*S, n*S) bool subsamples -> (..., n, n) pixel coverage."""
    *lead, h, w = inside.shape
    blocks = inside.reshape(*lead, h // SUPERSAMPLE, SUPERSAMPLE, w // SUPERSAMPLE, SUPERSAMPLE)
    return blocks.mean(axis=(-3, -1)).astype(np.float32)


def capsule_coverage(ends: np.ndarray, half_width: float, radius: int) -> np.ndarray:
    """Coverage of segments from the window centre to ``ends`` (n, 2), width 2*half_width: (n, w, w)."""
    points = _subsamples(radius)[None]  # (1, h, w, 2)
    ends = ends[:, None, None, :]
    length2 = np.maximum((ends**2).sum(-1), 1e-12)
    t = np.clip((points * ends).sum(-1) / length2, 0.0, 1.0)
    distance2 = ((points - t[..., None] * ends) ** 2).sum(-1)
    return _box_filter(distance2 <= half_width**2)


def disc_coverage(disc_radius: float, radius: int) -> np.ndarray:
    """Coverage of a disc centred on the window centre: (w, w)."""
    return _box_filter((_subsamples(radius) ** 2).sum(-1) <= disc_radius**2)


def _offsets(mask: np.ndarray, radius: int) -> list[np.ndarray]:
    """Per window (n, w, w) bool: (k, 2) offsets from the centre of its True pixels."""
    return [np.argwhere(m) - radius for m in mask]


def _dilate(mask: np.ndarray, by: int) -> np.ndarray:
    """Square (Chebyshev) dilation of (n, w, w) bool windows by ``by`` pixels; windows grow by 2*by."""
    n, w, _ = mask.shape
    out = np.zeros((n, w + 2 * by, w + 2 * by), bool)
    for dy in range(2 * by + 1):
        for dx in range(2 * by + 1):
            out[:, dy : dy + w, dx : dx + w] |= mask
    return out


def _pad_offsets(offsets: list[np.ndarray]) -> np.ndarray:
    """Stack ragged (k, 2) offset lists into (n, kmax, 2), padding with each list's first offset."""
    width = max(len(o) for o in offsets)
    out = np.empty((len(offsets), width, 2), np.int64)
    for i, o in enumerate(offsets):
        out[i, : len(o)] = o
        out[i, len(o) :] = o[0]
    return out


def chebyshev_gap(a: np.ndarray, b: np.ndarray) -> int:
    """Smallest Chebyshev distance between two (k, 2) pixel sets."""
    return int(np.abs(a[:, None, :] - b[None, :, :]).max(-1).min())


@dataclass
class Tables:
    """Per-state geometry for one (parameters, margin) pair; see the module docstring.

    States 0..359 are seed orientations (anchor = tail), 360 + c candidate c (anchor = head).
    Variant v = state (plain) or n_states + state (with the marker disc at the anchor).
    """

    window: int
    padding: int
    clearance: int
    cand: np.ndarray  # (K, 2) head offsets from the pivot
    step: np.ndarray  # (n_states, 2) pivot step taken after a paddle of this state
    seed_head: np.ndarray  # (360, 2) seed head offset from the tail
    seed_pivot: np.ndarray  # (360, 2) seed pivot offset from the tail
    seed_rect: np.ndarray  # (360, 4) ylo, yhi, xlo, xhi of the first target tail (empty if lo > hi)
    options: np.ndarray  # (n_states, J) candidates that may follow a state (linked, weight > 0), padded
    option_weight: np.ndarray  # (n_states, J) their continuity weights; 0 for padding
    patch: np.ndarray  # (n_states, w, w) coverage around the anchor
    patch_radius: int
    marker: np.ndarray  # (wm, wm) marker disc coverage
    marker_radius: int
    body: np.ndarray  # (2 * n_states, kb, 2) lit-pixel offsets per variant
    halo: np.ndarray  # (2 * n_states, kh, 2)
    halo_radius: int

    @property
    def n_states(self) -> int:
        return SEED_STATES + len(self.cand)


def build_tables(
    *,
    window: int,
    padding: int,
    seed_distance: int,
    paddle_length: int,
    paddle_thickness: float,
    margin: int,
    continuity: float,
    marker_radius: float,
    antialias: int,
    clearance: int,
) -> Tables:
    """All per-state tables for one margin value of one parameter set."""
    length = paddle_length
    seed_angle = np.arange(-180, 180) * np.pi / 180
    seed_head = _ceil(length * _unit(seed_angle))
    seed_pivot = seed_head + _ceil((length + margin) * _unit(_flip(seed_angle)))

    radius = length + margin  # candidates: integer points at one-pixel arc spacing on this circle
    samples = np.arange(0, 360, 360.0 / (2 * radius * np.pi)) * np.pi / 180
    cand = np.unique(_floor(radius * _unit(samples)), axis=0)
    cand_angle = np.arctan2(cand[:, 0], cand[:, 1])

    state_angle = np.concatenate([seed_angle, cand_angle])
    step = _ceil((length + 2 * margin) * _unit(state_angle))
    delta = np.abs(cand_angle[None, :] - state_angle[:, None])
    delta = np.minimum(delta, 2 * np.pi - delta)
    weight = np.maximum(np.cos(np.minimum(delta * continuity, np.pi / 2)), 0.0) ** 2

    # a seed paddle runs from its tail along its orientation; a candidate from its head back to the pivot
    draw_angle = np.concatenate([seed_angle, _flip(cand_angle)])
    ends = _ceil(length * antialias * _unit(draw_angle)) / antialias
    patch_radius = length + int(math.ceil(paddle_thickness)) + 1
    patch = capsule_coverage(ends, paddle_thickness / 2, patch_radius)
    marker_r = int(math.ceil(marker_radius)) + 1
    marker = disc_coverage(marker_radius, marker_r)

    # bodies in a common window that holds both the paddle and the marker disc
    body_r = max(patch_radius, marker_r)
    lit = np.zeros((patch.shape[0], 2 * body_r + 1, 2 * body_r + 1), bool)
    lit[:, body_r - patch_radius : body_r + patch_radius + 1, body_r - patch_radius : body_r + patch_radius + 1] = (
        patch > 0
    )
    with_marker = lit.copy()
    with_marker[:, body_r - marker_r : body_r + marker_r + 1, body_r - marker_r : body_r + marker_r + 1] |= marker > 0
    bodies = np.concatenate([lit, with_marker])
    halos = _dilate(bodies, clearance)
    halo_radius = body_r + clearance

    # first target tail: the seed paddle must fit in the centre square the original leaves free (borders
    # of 2 * seed_distance); its dilation anchor shifts tails by -1 pixel. (Its OpenCV dilation also
    # rejects the orientations whose kernel misses the anchor; we keep every orientation.)
    lo, hi = 2 * seed_distance, window - 2 * seed_distance - 1
    seed_rect = np.empty((SEED_STATES, 4), np.int64)
    for o, offs in enumerate(_offsets(lit[:SEED_STATES], body_r)):
        seed_rect[o] = [lo - 1 - offs[:, 0].min(), hi - 1 - offs[:, 0].max(),
                        lo - 1 - offs[:, 1].min(), hi - 1 - offs[:, 1].max()]

    lit_offsets = _offsets(lit, body_r)
    link = np.zeros_like(weight, bool)
    for s in range(len(state_angle)):
        if s < SEED_STATES:  # next head relative to this paddle's anchor (tail or head)
            shift = seed_pivot[s] + step[s] + cand
        else:
            shift = step[s] - cand[s - SEED_STATES] + cand
        for c in range(len(cand)):
            nxt = lit_offsets[SEED_STATES + c] + shift[c]
            link[s, c] = chebyshev_gap(lit_offsets[s], nxt) <= clearance

    allowed = link & (weight > 1e-9)  # cos(pi/2)**2 is 4e-33, not 0
    width = int(allowed.sum(1).max())
    options = np.zeros((len(state_angle), width), np.int64)
    option_weight = np.zeros((len(state_angle), width))
    for s, row in enumerate(allowed):
        options[s, : row.sum()], option_weight[s, : row.sum()] = np.flatnonzero(row), weight[s, row]
    return Tables(
        window=window, padding=padding, clearance=clearance, cand=cand, step=step, seed_head=seed_head,
        seed_pivot=seed_pivot, seed_rect=seed_rect, options=options, option_weight=option_weight,
        patch=patch, patch_radius=patch_radius, marker=marker, marker_radius=marker_r,
        body=_pad_offsets(_offsets(bodies, body_r)), halo=_pad_offsets(_offsets(halos, halo_radius)),
        halo_radius=halo_radius,
    )
