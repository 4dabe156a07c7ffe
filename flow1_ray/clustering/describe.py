"""State clusters in the env's own terms: which features set a cluster apart, and where.

A heatmap row that says "cluster 12" cannot be acted on: a user needs to know which states
the cluster holds. The engine clusters standardised features (``flatten_observations``),
so each centroid is a point in "standard deviations from the mean" per feature; here each
column gets a name from the observation space (a Dict's keys, ``pos[1]`` within a key, a
Tuple's indices, else ``obs[3]``; a Discrete's one-hot columns ``dir=2``; an image's pooled
blocks ``img[y8:16,x0:8]``) and each cluster the few features whose centroid lies furthest
from the overall mean, back in the observation's ORIGINAL units ("obs[1] ≈ +1.8 (mean 0.01,
+2.1 sd)"). The same descriptions go into ``clusters/``, the heatmap's row labels, the
findings, the report and the panel: one place makes them.

``map_2d`` places the centroids on a plane (their first two principal components, in the
standardised space) for the cluster map: neighbours there are states that look alike.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces

from .features import IMAGE_POOL, has_numbers, is_frame_space

VALUE, ONE_HOT, PIXEL = "value", "one_hot", "pixel"   # how a feature column reads
#: how to read a description, where one is shown (the report, the panel)
HOW_TO_READ = ("feature ≈ the cluster's centroid in the observation's units (mean: over all sampled states; sd: "
               "how many standard deviations the centroid lies from that mean); dir=2 in 90%: a share of the "
               "cluster's states")
TOP_FEATURES = 3      # features named per cluster (its description)
LABEL_FEATURES = 2    # ... of which a short label (a heatmap row, a message) names the first
MIN_SD = 0.5          # a feature closer than this to the overall mean does not set a cluster apart
LABEL_CHARS = 60      # a heatmap row label is cut here (k = 30 rows must stay readable)
ROOT = "obs"          # the name of an observation that is not a Dict


@dataclass(frozen=True)
class Feature:
    """One column of the flattened observation: its name and how its values read."""

    name: str
    kind: str = VALUE


def _index(shape: tuple[int, ...]) -> list[str]:
    """``[0]`` ... for a vector, ``[1,2]`` for a matrix; nothing for a scalar or one value."""
    if int(np.prod(shape)) == 1:
        return [""]
    return ["[" + ",".join(str(i) for i in ix) + "]" if len(ix) > 1 else f"[{ix[0]}]" for ix in np.ndindex(*shape)]


def _pixels(name: str, space: spaces.Box) -> list[Feature]:
    """The pooled blocks of a frame space, in ``_pool_images``'s column order, named by the
    pixel rows and columns each block averages (``img[y8:16,x0:8,c1]``)."""

    shape = space.shape
    if len(shape) == 2:
        h, w, c = shape[0], shape[1], 1
    elif shape[-1] > 4 and shape[0] <= 4:   # (C, H, W)
        c, h, w = shape
    else:
        h, w, c = shape
    fh, fw = max(1, h // IMAGE_POOL), max(1, w // IMAGE_POOL)
    out = []
    for r in range(h // fh):
        for col in range(w // fw):
            for ch in range(c):
                where = f"y{r * fh}:{(r + 1) * fh},x{col * fw}:{(col + 1) * fw}" + (f",c{ch}" if c > 1 else "")
                out.append(Feature(f"{name}[{where}]", PIXEL))
    return out


def features(space: spaces.Space, name: str = ROOT) -> list[Feature]:
    """The names of ``flatten_observations(obs, space)``'s columns, in its order (the same
    leaves left out: those without numbers)."""

    if isinstance(space, spaces.Dict):
        top = name == ROOT
        return [f for k, s in space.spaces.items() if has_numbers(s)
                for f in features(s, str(k) if top else f"{name}.{k}")]
    if isinstance(space, spaces.Tuple):
        return [f for i, s in enumerate(space.spaces) if has_numbers(s) for f in features(s, f"{name}[{i}]")]
    if isinstance(space, spaces.Discrete):
        return [Feature(f"{name}={int(space.start) + i}", ONE_HOT) for i in range(int(space.n))]
    if is_frame_space(space):
        return _pixels(name, space)
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return [Feature(name + ix) for ix in _index(tuple(space.shape))]
    raise ValueError(f"unsupported observation space {space}")


def default_features(d: int) -> list[Feature]:
    """Names for ``d`` columns whose space is unknown (raw arrays): ``obs[0]`` ..."""
    return [Feature(f"{ROOT}[{i}]") for i in range(d)]


def _fmt(v: float, signed: bool = False, digits: int = 3) -> str:
    """``digits`` significant digits, without an exponent between 1e-3 and 1e5 (a pixel
    reads "220", not "2.2e+02"); a sign for a feature's value (a mean or a zero has none)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    sign = "+" if signed else ""
    if not 1e-3 <= abs(v) < 1e5:
        return f"{v:{sign}.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    out = f"{v:{sign}.{decimals}f}"
    return out.rstrip("0").rstrip(".") if "." in out else out


@dataclass(frozen=True)
class Standout:
    """One feature that sets a cluster apart: its centroid value and the overall mean, in
    the observation's units, and how many standard deviations lie between them."""

    name: str
    kind: str
    value: float
    mean: float
    sd: float

    def long(self) -> str:
        if self.kind == ONE_HOT:
            return f"{self.name} in {self.value:.0%} of its states (overall {self.mean:.0%})"
        return f"{self.name} ≈ {_fmt(self.value, self.kind == VALUE)} (mean {_fmt(self.mean)}, {self.sd:+.1f} sd)"

    def short(self) -> str:
        if self.kind == ONE_HOT:
            return f"{self.name} {self.value:.0%}"
        return f"{self.name}≈{_fmt(self.value, self.kind == VALUE, 2)} ({self.sd:+.1f}sd)"

    def to_dict(self) -> dict[str, Any]:
        return {"feature": self.name, "kind": self.kind, "value": round(self.value, 6), "mean": round(self.mean, 6),
                "sd": round(self.sd, 3)}


@dataclass(frozen=True)
class Description:
    """A cluster in words: ``text`` (every standout, long form), ``label`` (short, for a
    heatmap row or a message) and the standouts themselves. A cluster whose centroid is
    within ``MIN_SD`` of the mean in every feature (the typical states: in CartPole, the
    pole upright near the centre) is said to be so, with its nearest-to-standing-out
    features (``near``), since "near the mean" alone does not say what the states are."""

    standouts: tuple[Standout, ...]
    near: tuple[Standout, ...] = ()

    @property
    def text(self) -> str:
        if not self.standouts:
            return (f"near the overall mean in every feature (none >= {MIN_SD:g} sd off)"
                    + (": " + "; ".join(s.long() for s in self.near) if self.near else ""))
        return "; ".join(s.long() for s in self.standouts)

    @property
    def label(self) -> str:
        if not self.standouts:
            out = "near the mean" + (": " + ", ".join(s.short() for s in self.near[:LABEL_FEATURES])
                                     if self.near else "")
        else:
            out = ", ".join(s.short() for s in self.standouts[:LABEL_FEATURES])
        return out if len(out) <= LABEL_CHARS else out[: LABEL_CHARS - 1] + "…"

    def top_json(self) -> str:
        """The features that set the cluster apart (none for a cluster near the mean)."""
        return json.dumps([s.to_dict() for s in self.standouts])


def describe(centroids: np.ndarray, mean: np.ndarray | float, scale: np.ndarray | float, weights: np.ndarray,
             feats: Sequence[Feature] | None = None, top: int = TOP_FEATURES) -> list[Description]:
    """One description per centroid. ``centroids`` are in standardised units ((raw - mean) /
    scale); the overall mean is the visit-weighted mean of the centroids (for a converged
    k-means exactly the mean of the states, and the states of this snapshot for the
    streaming one, whose scale comes from its last refit). A feature sets a cluster apart
    by its distance from that mean in standard deviations (>= ``MIN_SD``)."""
    c = np.asarray(centroids, np.float64)
    k, d = c.shape
    feats = list(feats) if feats is not None and len(feats) == d else default_features(d)
    w = np.asarray(weights, np.float64).reshape(-1)
    w = w if w.sum() > 0 else np.ones(k)
    overall = (c * w[:, None]).sum(0) / w.sum()
    mean = np.broadcast_to(np.asarray(mean, np.float64), (d,))
    scale = np.broadcast_to(np.asarray(scale, np.float64), (d,))
    raw, raw_mean = c * scale + mean, overall * scale + mean
    out = []
    for i in range(k):
        diff = c[i] - overall
        order = np.argsort(-np.abs(diff), kind="stable")[:top]
        ranked = [Standout(feats[j].name, feats[j].kind, float(raw[i, j]), float(raw_mean[j]), float(diff[j]))
                  for j in order if np.isfinite(diff[j])]
        stand = tuple(r for r in ranked if abs(r.sd) >= MIN_SD)
        out.append(Description(stand, () if stand else tuple(ranked)))
    return out


def map_2d(centroids: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(k, 2): the centroids on their first two principal components (visit-weighted, in
    the standardised space); zeros where there is no spread to show."""
    c = np.asarray(centroids, np.float64)
    out = np.zeros((len(c), 2))
    if len(c) < 2 or not np.isfinite(c).all():
        return out
    w = np.asarray(weights, np.float64).reshape(-1)
    w = w if w.sum() > 0 else np.ones(len(c))
    centred = c - (c * w[:, None]).sum(0) / w.sum()
    _, s, vt = np.linalg.svd(centred * np.sqrt(w / w.sum())[:, None], full_matrices=False)
    n = min(2, int((s > 1e-9).sum()))
    out[:, :n] = centred @ vt[:n].T
    return out
