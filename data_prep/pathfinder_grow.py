"""Batched snake growth for the Pathfinder generator (procedure of drewlinsley/pathfinder snakes2.py).

All images of a batch grow in lock step with numpy; each image keeps an occupancy grid ``occ`` that counts,
per pixel, the halos (lit pixels dilated by the clearance) of the paddles placed so far plus the border.
A paddle may light only pixels whose count is zero once the halo of its own predecessor is discounted.

Per image (as ``two_snakes``, ``make_many_snakes`` and ``from_wrapper``): two target snakes start from
seed paddles whose tails are ``seed_distance`` apart near the centre and grow alternately, a paddle at a
time, to ``contour_length`` paddles; a failure restarts both. Each extension draws its paddle from the
continuity-weighted distribution of the candidates that fit (the original draws among free candidate
heads and retries a colliding paddle up to max_paddle_retrial + 1 = 3 times). Then ``num_distractors``
snakes of ``distractor_length`` paddles are each tried up to ``max_distractor_retrial + 1`` times and
skipped if they never fit. Target seeds and final paddles reserve room for the marker disc, so a marker
never touches another snake.
"""

from __future__ import annotations

import numpy as np

from data_prep.pathfinder_draw import SEED_STATES, Tables

SEED_TRIALS = 3  # max_paddle_retrial + 1 tries of a seed's orientation and position
TAIL_DRAWS = 64  # random tails tried per seed orientation (rejection form of "uniform over available")
MIN_FREE = 0.01  # the original's stop_with_availability


class Batch:
    """Occupancy grids and placed paddles of ``n`` images grown together.

    Grids are padded by ``pad`` pixels (occupied, like the ``padding`` border) and read through flat
    indices: pixel (y, x) of row r is ``(r * size + y + pad) * size + x + pad``.
    """

    def __init__(self, tables: Tables, n: int, slots: int):
        self.t = tables
        self.pad = tables.halo_radius + int(np.abs(tables.cand).max()) + 2
        self.size = size = tables.window + 2 * self.pad
        inner = slice(self.pad + tables.padding, self.pad + tables.window - tables.padding)
        self.empty = np.ones((size, size), np.uint8)
        self.empty[inner, inner] = 0
        self.occ = np.repeat(self.empty[None], n, axis=0)
        self.flat = self.occ.reshape(-1)
        self.body = tables.body[..., 0] * size + tables.body[..., 1]  # (variants, kb) flat offsets
        self.halo = tables.halo[..., 0] * size + tables.halo[..., 1]
        self.anchor = np.zeros((n, slots, 2), np.int64)
        self.state = np.full((n, slots), -1, np.int64)

    def reset(self, rows: np.ndarray, slots: slice) -> None:
        self.occ[rows] = self.empty
        self.state[rows, slots] = -1

    def index(self, rows: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Flat indices of pixels ``points`` (..., 2) of images ``rows`` (broadcastable to points[..., 0])."""
        return (rows * self.size + points[..., 0] + self.pad) * self.size + points[..., 1] + self.pad

    def blocked(self, rows, anchors, variants) -> np.ndarray:
        """(...) True where the paddle variant at anchor lights an occupied pixel; shapes broadcast."""
        return self.flat[self.index(rows, anchors)[..., None] + self.body[variants]].any(-1)

    def stamp(self, rows: np.ndarray, anchors: np.ndarray, variants: np.ndarray, sign: int = 1) -> None:
        """Add (or remove) the halos of one paddle per image; rows are distinct."""
        where = self.index(rows, anchors)[:, None] + self.halo[variants]
        self.flat[where] += np.uint8(1) if sign > 0 else np.uint8(255)  # uint8 wraps: 255 is -1

    def place(self, rows, slot, anchors, states, variants) -> None:
        self.anchor[rows, slot] = anchors
        self.state[rows, slot] = states
        self.stamp(rows, anchors, variants)

    def free_fraction(self, rows: np.ndarray) -> np.ndarray:
        w, p = self.t.window, self.pad
        return (self.occ[rows, p : p + w, p : p + w] == 0).mean(axis=(1, 2))


def _in_window(points: np.ndarray, window: int) -> np.ndarray:
    return ((points >= 0) & (points < window)).all(-1)


def extend(b: Batch, rng, rows, pivot, state, prev_anchor, prev_var, marker: np.ndarray):
    """One paddle more for the snakes of ``rows``; returns (ok, head, new state, variant).

    The candidate is drawn from the continuity weights of the candidates that fit (the original draws
    from the weights of candidates with a free head and retries up to 3 times if the paddle collides).
    ``marker`` (n,) bool: the paddle must leave room for a marker disc at its head.
    """
    t = b.t
    options = t.options[state]  # (n, J) candidate indices
    heads = pivot[:, None, :] + t.cand[options]  # (n, J, 2)
    states = SEED_STATES + options
    variants = states + np.where(marker, t.n_states, 0)[:, None]
    weight = t.option_weight[state] * _in_window(heads, t.window)
    b.stamp(rows, prev_anchor, prev_var, sign=-1)  # a paddle may come close to its own predecessor
    weight *= ~b.blocked(rows[:, None], heads, variants)
    b.stamp(rows, prev_anchor, prev_var)
    total = weight.sum(1)
    cdf = np.cumsum(weight, axis=1) / np.maximum(total, 1e-12)[:, None]
    last_valid = weight.shape[1] - 1 - np.argmax(weight[:, ::-1] > 0, axis=1)  # rounding can pass the last
    pick = np.arange(len(rows)), np.minimum((cdf <= rng.random(len(rows))[:, None]).sum(1), last_valid)
    return total >= 1e-4, heads[pick], states[pick], variants[pick]


def _seed_bounds_ok(t: Tables, tail: np.ndarray, state: np.ndarray) -> np.ndarray:
    return _in_window(tail + t.seed_head[state], t.window) & _in_window(tail + t.seed_pivot[state], t.window)


def _first_pivot(t: Tables, tail: np.ndarray, state: np.ndarray) -> np.ndarray:
    return tail + t.seed_pivot[state] + t.step[state]


def seed_targets(b: Batch, rng, seed_distance: int):
    """Seed paddles of both target snakes in every row, each keeping room for a marker at its tail.

    Returns (ok, tails (n, 2, 2), states (n, 2)).
    """
    t, n = b.t, b.occ.shape[0]
    rows = np.arange(n)
    tails = np.zeros((n, 2, 2), np.int64)
    states = np.zeros((n, 2), np.int64)
    ok = np.zeros(n, bool)
    dead = np.zeros(n, bool)
    for _ in range(SEED_TRIALS):  # first seed: uniform tail inside the centre square for its orientation
        todo = ~ok & ~dead
        o = rng.integers(0, SEED_STATES, n)
        rect = t.seed_rect[o]
        dead |= todo & ((rect[:, 0] > rect[:, 1]) | (rect[:, 2] > rect[:, 3]))
        u = rng.random((n, 2))
        tail = np.stack([rect[:, 0] + (u[:, 0] * (rect[:, 1] - rect[:, 0] + 1)).astype(np.int64),
                         rect[:, 2] + (u[:, 1] * (rect[:, 3] - rect[:, 2] + 1)).astype(np.int64)], 1)
        good = todo & ~dead & _seed_bounds_ok(t, tail, o)
        tails[good, 0], states[good, 0] = tail[good], o[good]
        ok |= good
    ok &= ~b.blocked(rows, tails[:, 0], states[:, 0] + t.n_states)
    b.stamp(rows[ok], tails[ok, 0], states[ok, 0] + t.n_states)
    second = np.zeros(n, bool)
    for _ in range(SEED_TRIALS):  # second seed: seed_distance from the first tail, any orientation
        todo = ok & ~second
        o = rng.integers(0, SEED_STATES, n)
        angle = rng.integers(0, 360, n) * np.pi / 180
        tail = np.round(tails[:, 0] + seed_distance * np.stack([np.sin(angle), np.cos(angle)], 1)).astype(np.int64)
        good = todo & _seed_bounds_ok(t, tail, o) & ~b.blocked(rows, tail, o + t.n_states)
        tails[good, 1], states[good, 1] = tail[good], o[good]
        second |= good
    b.stamp(rows[second], tails[second, 1], states[second, 1] + t.n_states)
    return second, tails, states


def seed_distractor(b: Batch, rng, rows):
    """A seed paddle per image at a random free place; returns (ok, tail, state)."""
    t, n = b.t, len(rows)
    ok = np.zeros(n, bool)
    dead = b.free_fraction(rows) < MIN_FREE
    tails = np.zeros((n, 2), np.int64)
    states = np.zeros(n, np.int64)
    for _ in range(SEED_TRIALS):
        todo = ~ok & ~dead
        o = rng.integers(0, SEED_STATES, n)
        cand = rng.integers(0, t.window, (n, TAIL_DRAWS, 2))
        fits = ~b.blocked(rows[:, None], cand, o[:, None])
        dead |= todo & ~fits.any(1)  # nothing available for this orientation: the original gives up
        tail = cand[np.arange(n), fits.argmax(1)]
        good = todo & ~dead & _seed_bounds_ok(t, tail, o)
        tails[good], states[good] = tail[good], o[good]
        ok |= good
    return ok, tails, states


def _grow(b: Batch, rng, rows, pivot, state, anchor, variant, first_slot: int, paddles: int, marker_last: bool):
    """Extend one snake per image by ``paddles - 1`` paddles in place; returns ok (len(rows),) and heads."""
    ok = np.ones(len(rows), bool)
    for k in range(1, paddles):
        act = np.flatnonzero(ok)
        grown, head, new_state, new_variant = extend(
            b, rng, rows[act], pivot[act], state[act], anchor[act], variant[act],
            marker=np.full(act.size, marker_last and k == paddles - 1))
        ok[act[~grown]] = False
        act = act[grown]
        b.place(rows[act], first_slot + k, head[grown], new_state[grown], new_variant[grown])
        pivot[act] = pivot[act] + b.t.step[new_state[grown]]
        state[act], anchor[act], variant[act] = new_state[grown], head[grown], new_variant[grown]
    return ok, anchor


def grow_target_pairs(pool: Batch, rng, contour_length: int, seed_distance: int):
    """One attempt at both target snakes in every row of ``pool`` (reset first); the two snakes take
    turns, a paddle at a time, and leave room for markers at all four tips (which tips get the markers
    is decided afterwards, so growth does not depend on the label). Returns (ok, tails, heads)."""
    t, n = pool.t, pool.occ.shape[0]
    pool.reset(np.arange(n), slice(None))
    rows = np.arange(n)
    ok, tail, state = seed_targets(pool, rng, seed_distance)
    for s in range(2):
        pool.anchor[ok, s * contour_length], pool.state[ok, s * contour_length] = tail[ok, s], state[ok, s]
    pivot, anchor, variant = _first_pivot(t, tail, state), tail.copy(), state + t.n_states
    for k in range(1, contour_length):
        for s in range(2):
            act = np.flatnonzero(ok)
            grown, head, new_state, new_variant = extend(
                pool, rng, rows[act], pivot[act, s], state[act, s], anchor[act, s], variant[act, s],
                marker=np.full(act.size, k == contour_length - 1))
            ok[act[~grown]] = False
            act = act[grown]
            pool.place(act, s * contour_length + k, head[grown], new_state[grown], new_variant[grown])
            pivot[act, s] += t.step[new_state[grown]]
            state[act, s], anchor[act, s], variant[act, s] = new_state[grown], head[grown], new_variant[grown]
    return ok, tail, anchor


def grow_targets(b: Batch, rng, contour_length: int, seed_distance: int, pool_size: int):
    """Target snakes for every image of ``b``: attempts run ``pool_size`` at a time and the successful
    ones fill the images in order (a failed attempt restarts both snakes, as the original does).
    Returns (tails (n, 2, 2), heads (n, 2, 2), attempts)."""
    n, slots = b.occ.shape[0], slice(0, 2 * contour_length)
    pool = Batch(b.t, pool_size, 2 * contour_length)
    tails = np.zeros((n, 2, 2), np.int64)
    heads = np.zeros((n, 2, 2), np.int64)
    filled, attempts = 0, 0
    while filled < n:
        ok, tail, head = grow_target_pairs(pool, rng, contour_length, seed_distance)
        attempts += pool_size
        src = np.flatnonzero(ok)[: n - filled]
        dst = np.arange(filled, filled + src.size)
        b.occ[dst], b.anchor[dst, slots], b.state[dst, slots] = pool.occ[src], pool.anchor[src], pool.state[src]
        tails[dst], heads[dst] = tail[src], head[src]
        filled += src.size
    return tails, heads, attempts


def grow_distractors(b: Batch, rng, first_slot: int, count: int, length: int, retrials: int) -> int:
    """``count`` distractor snakes per image, each tried ``retrials + 1`` times; returns snakes placed."""
    n, placed = b.occ.shape[0], 0
    for j in range(count):
        base = first_slot + j * length
        pending = np.arange(n)
        for _ in range(retrials + 1):
            if not pending.size:
                break
            rows = pending
            ok, tail, state = seed_distractor(b, rng, rows)
            b.place(rows[ok], base, tail[ok], state[ok], state[ok])
            sub = np.flatnonzero(ok)
            grown, _ = _grow(b, rng, rows[sub], _first_pivot(b.t, tail[sub], state[sub]), state[sub].copy(),
                             tail[sub].copy(), state[sub].copy(), base, length, marker_last=False)
            ok[sub[~grown]] = False
            placed += int(ok.sum())
            for slot in range(base, base + length):  # take back the paddles of snakes that did not fit
                undo = rows[~ok][b.state[rows[~ok], slot] >= 0]
                b.stamp(undo, b.anchor[undo, slot], b.state[undo, slot], sign=-1)
                b.state[undo, slot] = -1
            pending = rows[~ok]
    return placed


def render(b: Batch, contrasts: np.ndarray, markers: np.ndarray) -> np.ndarray:
    """Grey images (n, W, W) uint8: max of paddle patches (x per-slot contrast) and marker discs at
    ``markers`` (n, 2, 2), saturating at 1 -> 255 (the original rescales by the image maximum, which its
    marker sets to 1)."""
    t, pad, n = b.t, b.pad, b.occ.shape[0]
    canvas = np.zeros((n, t.window + 2 * pad, t.window + 2 * pad), np.float32)

    def draw(rows, anchors, patches):
        r = patches.shape[-1] // 2
        y = anchors[:, 0, None, None] + np.arange(-r, r + 1)[None, :, None] + pad
        x = anchors[:, 1, None, None] + np.arange(-r, r + 1)[None, None, :] + pad
        canvas[rows[:, None, None], y, x] = np.maximum(canvas[rows[:, None, None], y, x], patches)

    for slot in range(b.state.shape[1]):
        rows = np.flatnonzero(b.state[:, slot] >= 0)
        draw(rows, b.anchor[rows, slot], contrasts[slot] * t.patch[b.state[rows, slot]])
    every = np.arange(n)
    for m in range(markers.shape[1]):
        draw(every, markers[:, m], np.broadcast_to(t.marker, (n, *t.marker.shape)))
    image = canvas[:, pad : pad + t.window, pad : pad + t.window]
    return np.round(np.minimum(image, 1.0) * 255).astype(np.uint8)
