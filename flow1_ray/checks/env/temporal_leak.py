"""OBS_LEAKAGE (advisory): an observation field that knows the env's future.

An observation field that holds a future quantity (the next price change, the next reward)
passes every shape, dtype and bounds check; the agent learns to "predict" and fails where
that field is not known in advance. Seed 000 section 4.2.

What separates a leak from a velocity, which legitimately predicts the next position: a
velocity is the env's state, and its value follows from the past (the previous
observation and action) by the env's dynamics; a leaked future quantity is fresh news at
every step, and the news is about what comes next. So for every field ``c`` of the
observation ``o_t`` the test asks two questions, on linear fits:

* is ``c`` new? The past ``P = (o_{t-1}, a_{t-1}, r_{t-1})`` explains less than
  ``LEAK_MAX_PAST_R2`` of its variance (out of fold: each half of the steps predicted by
  the fit on the other; a state variable's dynamics explain most of it);
* does the news predict the future? Given everything the agent legitimately has at ``t``
  besides ``c`` (``P``, the rest of ``o_t``, the action ``a_t``), ``c`` explains at least
  ``LEAK_MIN_PARTIAL_R2`` of what remains of a future quantity: a field of the next
  observation or the step's reward ``r_t``, paid after the action (the squared partial
  correlation, from the precision matrix of the correlations, in each half of the steps
  on its own, the smaller one counted; at least ``LEAK_ROWS_PER_COLUMN`` steps per
  column keep a fit's chance share small). A near-copy of ``c`` in the observation is left
  out of its own test, or it would explain ``c`` away.

A linear test finds a field equal (or proportional) to the next change of another field or
to a random part of the reward; it is silent on deterministic physics (the past explains
a velocity) and on observations that are pure noise (news about nothing). It is a
statistical judgement about the meaning of a field, so an advisory: the user knows whether
the field is available when the agent must act.

Image fields and observations of more than ``LEAK_MAX_DIMS`` numbers are not tested (said
in the summary): a per-pixel linear test means nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from ...common import codes as C
from ..findings import Finding, advisory
from ..rule import Rule
from ..spaces import get, leaves

LEAK_MAX_DIMS = 128         # observation numbers tested (beyond: not run, said)
LEAK_MIN_ROWS = 200         # within-episode (t-1, t) pairs needed for the fits
LEAK_ROWS_PER_COLUMN = 8    # ... and this many per column of the widest fit (each fold fits half of them)
LEAK_MAX_ROWS = 4096        # rows kept (the first ones: a check's budget is bounded anyway)
LEAK_MAX_PAST_R2 = 0.5      # the past explains less than this of a leaking field
LEAK_MIN_PARTIAL_R2 = 0.8   # ... and the field explains at least this of a future quantity's remainder
LEAK_MIN_REMAINDER = 1e-6   # a future quantity the present explains to within this share has nothing to leak
MAX_ACTION_ONE_HOT = 32     # a Discrete action one-hot up to this many actions, else its index

RULES = (
    Rule("OBS_LEAKAGE", C.OBS_FLOW, C.PASS,
         f"advisory: an observation field that the past explains < {LEAK_MAX_PAST_R2:g} of (R^2) explains >= "
         f"{LEAK_MIN_PARTIAL_R2:g} of what the rest of the observation, the past and the action leave unexplained "
         f"of a field of the next observation or of the step's reward (linear fits, in each half of the steps)",
         evidence=("field", "predicts", "partial_r2", "past_r2", "rows")),
)


@dataclass(frozen=True)
class _Fields:
    """The numeric fields of an observation or action space, flattened, with their names."""

    names: tuple[str, ...]
    leaves: tuple[Any, ...]      # (keys, size, one_hot_n or 0)

    def row(self, sample: Any) -> np.ndarray | None:
        out = []
        try:
            for keys, size, one_hot in self.leaves:
                v = np.asarray(get(sample, keys), dtype=np.float64).ravel()
                if one_hot:
                    hot = np.zeros(one_hot)
                    hot[int(v[0]) % one_hot] = 1.0
                    v = hot
                if v.size != size:
                    return None
                out.append(v)
        except (TypeError, ValueError, KeyError, IndexError):
            return None
        return np.concatenate(out) if out else np.zeros(0)


def _fields(space: spaces.Space, root: str, one_hot: bool) -> tuple[_Fields | None, str]:
    """The space's numeric fields, or None and why not (an image, too many numbers)."""
    names: list[str] = []
    parts: list[Any] = []
    for leaf in leaves(space, root):
        if leaf.opaque:
            continue
        if leaf.is_image:
            return None, f"{leaf.path} is an image"
        if isinstance(leaf.space, spaces.Discrete) and one_hot and 1 < int(leaf.space.n) <= MAX_ACTION_ONE_HOT:
            n = int(leaf.space.n)
            parts.append((leaf.keys, n, n))
            names += [f"{leaf.path}=={int(leaf.space.start) + i}" for i in range(n)]
            continue
        size = int(np.prod(leaf.shape)) if leaf.shape else 1
        parts.append((leaf.keys, size, 0))
        if size == 1:
            names.append(leaf.path)
        else:
            names += [f"{leaf.path}[{', '.join(map(str, np.unravel_index(i, leaf.shape)))}]" for i in range(size)]
        if len(names) > LEAK_MAX_DIMS:
            return None, f"more than {LEAK_MAX_DIMS} numbers"
    return _Fields(tuple(names), tuple(parts)), ""


class LeakageWatch:
    """Keeps each step's (observation, action, reward, next observation) of the first
    ``LEAK_MAX_ROWS`` steps and tests them at the end (:meth:`findings`).

    Fed by ``flow1 check``'s driver: :meth:`on_reset` with each reset observation,
    :meth:`on_step` after each step. A value that does not fit the space is skipped (the
    contract checks say why); the pair it breaks is not used.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 max_rows: int = LEAK_MAX_ROWS) -> None:
        self.obs_f, why_o = _fields(observation_space, "obs", one_hot=False)
        self.act_f, _ = _fields(action_space, "action", one_hot=True)
        self.not_run = why_o and f"not run: {why_o}"
        if self.obs_f is not None and not self.obs_f.names:
            self.not_run = "not run: no numeric observation field"
        self.max_rows = max_rows
        self._rows: list[tuple[int, np.ndarray, np.ndarray, float, np.ndarray]] = []
        self._episode = 0
        self._last: np.ndarray | None = None

    @property
    def active(self) -> bool:
        return not self.not_run and len(self._rows) < self.max_rows

    @property
    def rows(self) -> list[tuple[int, np.ndarray, np.ndarray, float, np.ndarray]]:
        """The kept steps: (episode, observation, action, reward, next observation)."""
        return self._rows

    def on_reset(self, obs: Any) -> None:
        if self.not_run:
            return
        self._episode += 1
        self._last = self.obs_f.row(obs)

    def on_step(self, action: Any, obs: Any, reward: Any) -> None:
        if not self.active:
            return
        nxt = self.obs_f.row(obs)
        act = self.act_f.row(action) if self.act_f is not None else np.zeros(0)
        try:
            r = float(reward)
        except (TypeError, ValueError):
            r = float("nan")
        if self._last is not None and nxt is not None and act is not None and np.isfinite(r) \
                and np.isfinite(self._last).all() and np.isfinite(nxt).all():
            self._rows.append((self._episode, self._last, act, r, nxt))
        self._last = nxt

    def findings(self) -> tuple[list[Finding], dict]:
        """(OBS_LEAKAGE advisories, what was tested)."""
        if self.not_run:
            return [], {"leakage": self.not_run}
        pairs = _pairs(self._rows)
        if pairs is None:
            return [], {"leakage": f"not run: fewer than {LEAK_MIN_ROWS} consecutive within-episode steps"}
        past, present, action = pairs[0], pairs[1], pairs[2]
        need = LEAK_ROWS_PER_COLUMN * sum(int((b.std(0) > 0).sum()) for b in (past, present, action))
        if len(present) < need:
            return [], {"leakage": f"not run: {len(present)} consecutive within-episode steps, the fits need {need}"}
        found, tested = test_leakage(*pairs, self.obs_f.names)
        return found, {"leakage": f"{tested} observation fields tested on {len(pairs[0])} steps"}


def _pairs(rows: list) -> tuple[np.ndarray, ...] | None:
    """(past, present, action, reward, next) for each step whose previous step is in the
    same episode and continues it (its next observation is this step's observation)."""
    idx = [i for i in range(1, len(rows)) if rows[i][0] == rows[i - 1][0]
           and np.array_equal(rows[i - 1][4], rows[i][1])]
    if len(idx) < LEAK_MIN_ROWS:
        return None
    prev = [rows[i - 1] for i in idx]
    cur = [rows[i] for i in idx]
    past = np.array([np.concatenate([p[1], p[2], [p[3]]]) for p in prev])
    present = np.array([c[1] for c in cur])
    action = np.array([c[2] for c in cur]).reshape(len(cur), -1)
    reward = np.array([c[3] for c in cur])
    nxt = np.array([c[4] for c in cur])
    return past, present, action, reward, nxt


def _design(*blocks: np.ndarray) -> np.ndarray:
    """The blocks side by side, constant columns dropped, standardised, with an intercept."""
    x = np.concatenate([b.reshape(len(b), -1) for b in blocks], axis=1) if blocks else np.zeros((0, 0))
    sd = x.std(0)
    keep = sd > 1e-9 * (1.0 + np.abs(x).max(0))
    x = (x[:, keep] - x[:, keep].mean(0)) / sd[keep]
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)


def _oof_residuals(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Residuals of y (N, k) on x, each half predicted by the fit on the other half (the
    halves are the first and the second half in time)."""
    n = len(x)
    half = n // 2
    out = np.empty_like(y)
    for fit, score in ((slice(half, n), slice(0, half)), (slice(0, half), slice(half, n))):
        coef, *_ = np.linalg.lstsq(x[fit], y[fit], rcond=None)
        out[score] = y[score] - x[score] @ coef
    return out


def _r2(resid: np.ndarray, y: np.ndarray) -> np.ndarray:
    var = y.var(0)
    return np.where(var > 0, 1.0 - (resid ** 2).mean(0) / np.where(var > 0, var, 1.0), 0.0)


def test_leakage(past: np.ndarray, present: np.ndarray, action: np.ndarray, reward: np.ndarray,
                 nxt: np.ndarray, names: tuple[str, ...]) -> tuple[list[Finding], int]:
    """The OBS_LEAKAGE advisories of one rollout's steps, and how many fields were tested.

    ``past`` (N, p): the previous step's observation, action and reward; ``present`` (N, d)
    the observation the action answers; ``action`` (N, q); ``reward`` (N,) the step's
    reward; ``nxt`` (N, d) the next observation.
    """
    n, d = present.shape
    varying = [j for j in range(d) if present[:, j].std() > 1e-9 * (1.0 + np.abs(present[:, j]).max())]
    if not varying:
        return [], 0
    px = _design(past)
    past_r2 = _r2(_oof_residuals(px, present[:, varying]), present[:, varying])
    candidates = [j for j, r2 in zip(varying, past_r2) if r2 < LEAK_MAX_PAST_R2]
    targets = np.concatenate([nxt, reward[:, None]], axis=1)
    target_names = [f"next {nm}" for nm in names] + ["the step's reward"]
    # the partial R^2 of each candidate for each target, in each half: min over the halves
    score = np.full((d, targets.shape[1]), np.inf)
    for half in (slice(0, n // 2), slice(n // 2, n)):
        score = np.minimum(score, _partial_r2s(past[half], present[half], action[half], targets[half], candidates))
    found: list[Finding] = []
    r2_of = dict(zip(varying, past_r2))
    for j in candidates:
        row = score[j].copy()
        if j < row.size - 1:
            row[j] = 0.0    # a field's own next value is its dynamics, not the future of something else
        row[~np.isfinite(row)] = 0.0
        k = int(np.argmax(row))
        if row[k] < LEAK_MIN_PARTIAL_R2:
            continue
        pr2 = r2_of[j]
        found.append(advisory(C.OBS_LEAKAGE, (
            f"{names[j]} predicts {target_names[k]} beyond what the past, the rest of the observation and the "
            f"action predict (partial R^2 {row[k]:.2f}; the past explains only {max(pr2, 0.0):.2f} of {names[j]}): "
            f"if {names[j]} is not known when the agent acts (a future quantity), the agent learns to read the "
            f"future and fails without it; remove the field or lag it by a step"),
            {"field": names[j], "predicts": target_names[k], "partial_r2": round(float(row[k]), 4),
             "past_r2": round(float(pr2), 4), "rows": int(n)}))
    return found, len(varying)


def _standardized(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z-scores of the varying columns, which columns vary)."""
    sd = x.std(0)
    keep = sd > 1e-9 * (1.0 + np.abs(x).max(0)) if x.size else np.zeros(x.shape[1], bool)
    return (x[:, keep] - x[:, keep].mean(0)) / sd[keep], keep


def _partial_r2s(past: np.ndarray, present: np.ndarray, action: np.ndarray, targets: np.ndarray,
                 candidates: list[int]) -> np.ndarray:
    """(d, t): the squared partial correlation of each candidate field of ``present`` with
    each target, given everything else the agent has (the past, the other fields, the action),
    from the precision matrix of their correlations (one inversion per target; a tiny ridge
    keeps collinear columns, a one-hot action, invertible). A field with near-copies in the
    observation is judged without them (its copy would explain it away). 0 where a target has
    nothing left to explain without the field (within ``LEAK_MIN_REMAINDER`` of its variance)."""
    d, t = present.shape[1], targets.shape[1]
    out = np.zeros((d, t))
    zp, kp = _standardized(present)
    cols = np.flatnonzero(kp)                      # present fields -> their column among zp
    za, _ = _standardized(np.concatenate([past, action], axis=1))
    zy, ky = _standardized(targets)
    x = np.concatenate([zp, za], axis=1)
    m = len(x)
    corr_x = x.T @ x / m
    cross = x.T @ zy / m
    pos = {int(c): i for i, c in enumerate(cols)}
    dup = np.abs(corr_x[:zp.shape[1], :zp.shape[1]]) > 0.95
    groups: dict[tuple[int, ...], list[int]] = {}
    for j in candidates:
        if j in pos:
            i = pos[j]
            groups.setdefault(tuple(int(c) for c in np.flatnonzero(dup[i]) if c != i), []).append(j)
    for drop, members in groups.items():
        keep = np.setdiff1d(np.arange(x.shape[1]), drop)
        cx = corr_x[np.ix_(keep, keep)]
        where = {j: int(np.searchsorted(keep, pos[j])) for j in members}
        for yi, k in enumerate(np.flatnonzero(ky)):
            a = np.empty((len(keep) + 1, len(keep) + 1))
            a[:-1, :-1] = cx
            a[:-1, -1] = a[-1, :-1] = cross[keep, yi]
            a[-1, -1] = 1.0
            a[np.diag_indices_from(a)] += 1e-8
            try:
                om = np.linalg.inv(a)
            except np.linalg.LinAlgError:
                continue
            oyy = om[-1, -1]
            for j, i in where.items():
                ojj, ojy = om[i, i], om[i, -1]
                det = ojj * oyy - ojy ** 2
                # Var(target | everything but this field) = ojj / det (the Schur complement)
                if det > 0 and ojj / det >= LEAK_MIN_REMAINDER:
                    out[j, k] = ojy ** 2 / (ojj * oyy)
    return out
