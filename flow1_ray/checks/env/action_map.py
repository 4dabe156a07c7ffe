"""What a wrapper does to the action on its way to ``env.step``: a map, or a loss.

``flow1 check`` sees both ends of the action pipe (what it sent, what reached the base env's
``step``). A wrapper that rescales the action (gymnasium's ``RescaleAction``, RLlib's
``ActionTransform`` of ``TransformedActionPendulum``, an env documented to take [-1, 1]) is
a design: the map is affine per dimension, nothing is lost, and the check says which map it
found (an advisory). A wrapper that clips (``ClipAction``), rounds or squashes loses what
the policy meant: ACTION_CAST_WARNING, with what was lost. The pairs are fitted per leaf and
per dimension, from a bounded number of rows. No Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...common import codes as C
from ..findings import Finding, advisory
from ..rule import Rule

#: the rows (sent, received) kept per action leaf: enough for a fit, bounded in bytes
MAX_ROWS = 2048
MAX_BYTES = 4 << 20
#: a value matches the affine fit within this share of the received values' scale (float32
#: arithmetic in the wrapper leaves ~1e-7)
FIT_RTOL = 1e-5

RULES = (
    Rule("ACTION_TRANSFORMED", C.ACTION_PIPE, C.PASS,
         "advisory: the action reaches env.step through an affine map per dimension (a rescale: nothing lost); "
         "the map found is in the evidence"),
)


@dataclass
class _Pairs:
    sent: list[np.ndarray] = field(default_factory=list)
    received: list[np.ndarray] = field(default_factory=list)
    changed: int = 0
    first_step: int = 0
    cap: int = MAX_ROWS


@dataclass(frozen=True)
class DimMap:
    """One dimension's map: ``kind`` "identity", "affine", "clipped" or "lossy"."""

    kind: str
    scale: float = 1.0
    offset: float = 0.0
    clipped: int = 0                 # rows that reached the env at a bound the fit would pass
    bounds: tuple[float, float] = (0.0, 0.0)
    residual: float = 0.0            # the largest miss of the best affine fit (lossy)


def fit_dim(x: np.ndarray, y: np.ndarray) -> DimMap:
    """How ``y`` (received) follows from ``x`` (sent) in one dimension."""
    scale_y = max(float(np.ptp(y)), float(np.max(np.abs(y))), 1e-12)
    tol = FIT_RTOL * scale_y
    if np.array_equal(x, y):
        return DimMap("identity")
    if np.ptp(x) == 0:
        if np.ptp(y) == 0:
            return DimMap("affine", 1.0, float(y[0] - x[0]))
        return DimMap("lossy", residual=float(np.ptp(y)))
    a, b = _line(x, y)
    miss = np.abs(y - (a * x + b))
    if miss.max() <= tol and abs(a) * np.ptp(x) > tol:
        return DimMap("affine", a, b)
    lo, hi = float(y.min()), float(y.max())
    at_bound = np.isclose(y, lo, rtol=0, atol=tol) | np.isclose(y, hi, rtol=0, atol=tol)
    inside = ~at_bound
    beyond_bounds = bool((x < lo - tol).any() or (x > hi + tol).any())
    if hi - lo > tol and beyond_bounds and np.allclose(y, np.clip(x, lo, hi), rtol=0, atol=tol):
        # only the clipped rows changed (the others reached the env as sent, and are not here)
        return DimMap("clipped", 1.0, 0.0, clipped=int(at_bound.sum()), bounds=(lo, hi))
    if hi - lo > tol and inside.sum() >= 3 and np.ptp(x[inside]) > 0:
        a, b = _line(x[inside], y[inside])
        pred = a * x + b
        fits_inside = np.abs(y[inside] - pred[inside]).max() <= tol
        beyond = (pred[at_bound] <= lo + tol) | (pred[at_bound] >= hi - tol)
        if fits_inside and abs(a) > 0 and beyond.all():
            return DimMap("clipped", a, b, clipped=int(at_bound.sum()), bounds=(lo, hi))
    return DimMap("lossy", residual=float(miss.max()))


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    xm, ym = float(x.mean()), float(y.mean())
    a = float(np.dot(x - xm, y - ym) / np.dot(x - xm, x - xm))
    return a, ym - a * xm


class ActionMapWatch:
    """The (sent, received) pairs of every action leaf whose values changed on the way."""

    def __init__(self) -> None:
        self._pairs: dict[str, _Pairs] = {}
        self.wrappers: list[str] = []     # the wrappers between the check and the base env

    def add(self, path: str, sent: np.ndarray, received: np.ndarray, step: int) -> None:
        p = self._pairs.get(path)
        if p is None:
            width = max(1, int(np.size(sent)))
            p = self._pairs[path] = _Pairs(first_step=step, cap=max(16, min(MAX_ROWS, MAX_BYTES // (16 * width))))
        p.changed += 1
        if len(p.sent) < p.cap:
            p.sent.append(np.asarray(sent, np.float64).reshape(-1))
            p.received.append(np.asarray(received, np.float64).reshape(-1))

    def findings(self, actions: int) -> list[Finding]:
        """The verdict on every leaf that changed, out of ``actions`` actions checked."""
        return [f for path, p in self._pairs.items() for f in [self._judge(path, p, actions)] if f is not None]

    def _judge(self, path: str, p: _Pairs, actions: int) -> Finding | None:
        x, y = np.stack(p.sent), np.stack(p.received)
        by = " by " + " > ".join(self.wrappers) if self.wrappers else ""
        n = x.shape[0]
        if n < 3:   # too few pairs to tell a map from a loss
            return Finding(C.ACTION_CAST_WARNING,
                           f"{path}: values changed on the way to env.step{by} on {p.changed} action(s), too few "
                           f"to tell a rescale from a loss (first at step {p.first_step})",
                           {"path": path, "expected": "unchanged", "changed": p.changed, "first_step": p.first_step},
                           env_step=p.first_step)
        dims = [fit_dim(x[:, j], y[:, j]) for j in range(x.shape[1])]
        ev = {"path": path, "changed": p.changed, "rows_fitted": n, "first_step": p.first_step,
              "wrappers": self.wrappers,
              "map": [{"dim": j, "kind": d.kind, "scale": d.scale, "offset": d.offset}
                      for j, d in enumerate(dims) if d.kind != "identity"][:16]}
        lossy = [(j, d) for j, d in enumerate(dims) if d.kind == "lossy"]
        clipped = [(j, d) for j, d in enumerate(dims) if d.kind == "clipped"]
        if lossy:
            j, d = max(lossy, key=lambda jd: jd[1].residual)
            return Finding(C.ACTION_CAST_WARNING,
                           f"{path}: values changed on the way to env.step{by}, and not by a rescale: dimension {j} "
                           f"misses the best affine map by up to {d.residual:.4g} ({len(lossy)} of {len(dims)} "
                           f"dimension(s)): a rounding, squash or remap loses what the policy sent; expected unchanged "
                           f"or an affine rescale (first at step {p.first_step})",
                           {**ev, "expected": "unchanged or affine", "max_residual": d.residual, "dim": j},
                           env_step=p.first_step)
        if clipped:
            j, d = max(clipped, key=lambda jd: jd[1].clipped)
            k = int(round(d.clipped * p.changed / n))   # the kept rows are the first of the changed ones
            total = max(actions, p.changed)
            return Finding(C.ACTION_CAST_WARNING,
                           f"{path}: values clipped on the way to env.step{by}: {k} of {total} actions "
                           f"({k / total:.0%}) reached the env at a bound (dimension {j}: [{d.bounds[0]:.4g}, {d.bounds[1]:.4g}]), "
                           f"the rest unchanged or rescaled: the policy learns from actions the env never took; "
                           f"expected its actions within the env's bounds (squash in the policy, or match the "
                           f"spaces) (first at step {p.first_step})",
                           {**ev, "expected": "no clipping", "clipped": k, "clipped_share": k / total, "dim": j,
                            "bounds": list(d.bounds)}, env_step=p.first_step)
        shown = "; ".join(f"dim {m['dim']}: {m['scale']:.4g} x {m['offset']:+.4g}" for m in ev["map"][:4])
        more = f" (and {len(ev['map']) - 4} more)" if len(ev["map"]) > 4 else ""
        return advisory(C.ACTION_TRANSFORMED,
                        f"{path} is rescaled on the way to env.step{by}: an affine map per dimension, nothing lost "
                        f"({shown}{more}, fitted on {n} actions); the policy acts in the outer action space, the env "
                        f"receives the map's image: fine when meant (RLlib's normalize_actions does the same)",
                        ev, env_step=p.first_step)
