"""``analyze_state_actions``: cluster visited states, count actions per cluster, judge.

Offline on arrays (and the engine the StateClusterer actor runs beside a live run):
observations become standardised features (:mod:`flow1_ray.clustering.features`); actions
become one index each (Discrete as is, MultiDiscrete raveled, Box binned per dimension).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
from gymnasium import spaces

from ..common import codes as C
from ..checks.states.state_action import StateActionThresholds, cluster_means, verdicts
from ..common.events import Event
from ..common.schema import DEFAULT_MODULE_ID
from .backends import make_backend, resolve_backend
from .describe import Description, Feature, default_features, describe, features, map_2d
from .features import flatten_observations, standardize
from .frames import frame_leaf, leaf_of, nearest, png, thumbnails

BOX_BINS = 5            # bins per continuous action dimension
MAX_ACTION_CELLS = 256  # a Box action with more combined bins is judged per its first dims
DESCRIBED = 10          # clusters of one code a snapshot event describes in its evidence, the largest first


def _leading_dims(sizes: list[int]) -> int:
    """How many leading dimensions fit in MAX_ACTION_CELLS combined cells (at least one)."""
    dims, cells = 1, sizes[0]
    while dims < len(sizes) and cells * sizes[dims] <= MAX_ACTION_CELLS:
        cells *= sizes[dims]
        dims += 1
    return dims


def action_index(actions: Any, space: spaces.Space, labels: bool = True) -> tuple[np.ndarray, list[str]]:
    """One integer per action and the column labels of the heatmap (``labels=False``: an
    empty list, for a caller that has them: a runner indexing every sample's actions).
    Multi-dimensional actions whose combinations exceed MAX_ACTION_CELLS are judged on their
    leading dimensions (a 20-dimensional MultiDiscrete has billions of combinations)."""
    a = np.asarray(actions)
    if isinstance(space, spaces.Discrete):
        n = int(space.n)
        return (a.astype(np.int64) - int(space.start)).reshape(-1), \
            [str(int(space.start) + i) for i in range(n)] if labels else []
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        dims = _leading_dims([int(v) for v in nvec])
        nvec = nvec[:dims]
        rel = a.reshape(a.shape[0], -1)[:, :dims] - np.asarray(space.start).reshape(-1)[:dims]
        idx = np.ravel_multi_index(tuple(rel.T), nvec)
        return idx.astype(np.int64), [str(t) for t in np.ndindex(*nvec)] if labels else []
    if isinstance(space, spaces.MultiBinary):
        bits = a.reshape(a.shape[0], -1).astype(np.int64)
        n = _leading_dims([2] * bits.shape[1])
        bits = bits[:, :n]
        return (bits * (1 << np.arange(n))).sum(1), [format(i, f"0{n}b")[::-1] for i in range(1 << n)] if labels else []
    if isinstance(space, spaces.Box):
        low, high = np.asarray(space.low, np.float64).reshape(-1), np.asarray(space.high, np.float64).reshape(-1)
        x = a.reshape(a.shape[0], -1).astype(np.float64)
        dims = _leading_dims([BOX_BINS] * x.shape[1])
        b = np.clip(((x[:, :dims] - low[:dims]) / np.maximum(high[:dims] - low[:dims], 1e-12) * BOX_BINS)
                    .astype(np.int64), 0, BOX_BINS - 1)
        idx = np.ravel_multi_index(tuple(b.T), (BOX_BINS,) * dims)
        return idx.astype(np.int64), \
            ["/".join(f"b{j}" for j in t) for t in np.ndindex(*(BOX_BINS,) * dims)] if labels else []
    raise ValueError(f"unsupported action space {space}")


def policy_stats(logits: np.ndarray) -> np.ndarray:
    """(N, 2) float32 from Categorical logits (N, n): the normalised entropy of the policy
    at each state (1 = uniform) and its top probability."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(1) / np.log(p.shape[1])
    return np.stack([h, p.max(1)], axis=1).astype(np.float32)


# --- the map ----------------------------------------------------------------------------


@dataclass
class StateActionMap:
    centroids: np.ndarray            # (k, d) in standardised feature units
    counts: np.ndarray               # (k, n_actions) visits per cluster and action
    action_labels: list[str]
    verdicts: list[str]
    failures: np.ndarray | None = None   # visits per cluster whose step terminated the episode
    backend: str = ""
    inertia: float = 0.0
    thresholds: StateActionThresholds = field(default_factory=StateActionThresholds)
    policy: np.ndarray | None = None     # (k, 2) mean policy entropy (normalised) and top prob, NaN unknown
    descriptions: list[Description] | None = None   # each cluster in the env's terms (describe.py)
    thumbnails: list[bytes | None] | None = None   # image envs: a PNG of a real state near each centroid
    map_xy: np.ndarray | None = None     # (k, 2) the centroids on their first two principal components

    def describe(self, mean: np.ndarray | float, scale: np.ndarray | float,
                 feats: list[Feature] | None = None) -> "StateActionMap":
        """Name what sets each cluster apart and place the clusters on the 2-D map
        (fills ``descriptions`` and ``map_xy``); returns self.

        Args:
            mean: the standardisation the centroids are in ((raw - mean) / scale): per feature, or one value.
            scale: its scale, per feature or one value.
            feats: a :class:`Feature` per centroid column; None (or a list of another length):
                ``obs[0]``, ``obs[1]``, ...
        """
        self.descriptions = describe(self.centroids, mean, scale, self.visits, feats)
        self.map_xy = map_2d(self.centroids, self.visits)
        return self

    def about(self, i: int) -> str:
        """``cluster 12 (obs[1] +1.8 (+2.1sd), ...)``: a cluster as a message names it.

        Args:
            i: the cluster's index; its description is added once :meth:`describe` has run.
        """
        return f"cluster {i}" + (f" ({self.descriptions[i].label})" if self.descriptions else "")

    @property
    def visits(self) -> np.ndarray:
        return self.counts.sum(1)

    @property
    def probs(self) -> np.ndarray:
        """P(action | cluster), rows summing to 1 (0 for an empty cluster)."""
        return self.counts / np.maximum(self.visits, 1)[:, None]

    def to_arrow(self, snapshot: int = 0, iteration: int | None = None, module: str | None = None) -> pa.Table:
        """One row per cluster (the schema of RUN_DIR/clusters/); policy columns are null
        where the policy's probabilities were not known.

        Args:
            snapshot: the snapshot's index, written in every row.
            iteration: the training iteration of the snapshot; None: null (offline).
            module: the RLModule whose states these are; None: null (offline).
        """
        k = self.counts.shape[0]
        pol = self.policy if self.policy is not None else np.full((k, 2), np.nan)
        desc = self.descriptions or [None] * k
        thumbs = self.thumbnails or [None] * k
        xy = self.map_xy if self.map_xy is not None else np.full((k, 2), np.nan)
        top = self.probs.argmax(1)
        return pa.table({
            "module": pa.array([module] * k, pa.string()),
            "snapshot": pa.array([snapshot] * k, pa.int64()),
            "iteration": pa.array([iteration] * k, pa.int64()),
            "cluster": pa.array(range(k), pa.int32()),
            "size": pa.array(self.visits.astype(np.int64)),
            "action_counts": pa.array([row.astype(np.int64).tolist() for row in self.counts], pa.list_(pa.int64())),
            "p_action": pa.array([row.tolist() for row in self.probs], pa.list_(pa.float64())),
            "failures": pa.array((self.failures if self.failures is not None else np.zeros(k)).astype(np.int64)),
            "policy_entropy": pa.array(pol[:, 0], pa.float64(), from_pandas=True),
            "policy_top_p": pa.array(pol[:, 1], pa.float64(), from_pandas=True),
            "verdict": pa.array(self.verdicts, pa.string()),
            "top_action": pa.array([self.action_labels[int(t)] for t in top], pa.string()),
            "p_top": pa.array(self.probs[np.arange(k), top], pa.float64()),
            "description": pa.array([d.text if d else None for d in desc], pa.string()),
            "label": pa.array([d.label if d else None for d in desc], pa.string()),
            "top_features": pa.array([d.top_json() if d else None for d in desc], pa.string()),
            "thumbnail": pa.array(thumbs, pa.binary()),
            "map_x": pa.array(xy[:, 0], pa.float64(), from_pandas=True),
            "map_y": pa.array(xy[:, 1], pa.float64(), from_pandas=True),
        })

    def to_events(self, **where: Any) -> list[Event]:
        """STATE_ACTION events for CHAOS, BLIND_SPOT, ERROR_FIXATION and RARE_STATE clusters
        (FIXATED and OK raise none), one per cluster.

        Args:
            **where: :class:`Event` fields set on every event, e.g. ``run_id``, ``iteration``.
        """
        out = []
        total = float(self.visits.sum()) or 1.0
        p = self.probs
        for i, v in enumerate(self.verdicts):
            if v not in (C.CHAOS, C.BLIND_SPOT, C.ERROR_FIXATION, C.RARE_STATE):
                continue
            top = int(p[i].argmax())
            ev = {"cluster": i, "visits": int(self.visits[i]), "share": self.visits[i] / total,
                  "p_action": [round(float(q), 4) for q in p[i]], "top_action": self.action_labels[top],
                  "p_top": float(p[i, top])}
            if self.descriptions:
                d = self.descriptions[i]
                ev.update({"description": d.text, "top_features": [s.to_dict() for s in d.standouts]})
            at = self.about(i)
            th = self.thresholds
            known = self.policy is not None and not np.isnan(self.policy[i, 0])
            if known:
                ev.update({"policy_entropy": float(self.policy[i, 0]), "policy_top_p": float(self.policy[i, 1])})
            if v == C.CHAOS:
                msg = (f"{at}: P(action) near uniform (normalised entropy >= {th.chaos_entropy:g}; top "
                       f"{self.action_labels[top]} at {p[i, top]:.2f}"
                       + (f"; the policy's own entropy there {self.policy[i, 0]:.2f}" if known else "")
                       + f") over {int(self.visits[i])} visits: nothing learnt there -- more exploration or a "
                         f"denser reward")
            elif v == C.BLIND_SPOT:
                msg = (f"{at}: no action above {th.blind_spot_max:g} (top {self.action_labels[top]} at "
                       f"{p[i, top]:.3f}) over {int(self.visits[i])} visits: check what the state encoding loses")
            elif v == C.ERROR_FIXATION:
                rate = float(self.failures[i]) / max(self.visits[i], 1)
                base = float(self.failures.sum()) / total
                msg = (f"{at}: action {self.action_labels[top]} at {p[i, top]:.2f} (> {th.fixation_min:g}) "
                       f"where episodes fail {rate:.1%} of visits vs {base:.1%} on average: a confident wrong "
                       f"action, check the reward shaping there")
                ev.update({"failure_rate": rate, "base_failure_rate": base})
            else:
                msg = (f"{at}: {int(self.visits[i])} visits = {self.visits[i] / total:.4%} of states "
                       f"(< {th.rare_share:.2%}): the agent almost never goes there")
            out.append(Event(v, msg, ev, **where))
        return out

    def snapshot_events(self, *, snapshot: int, iteration: int | None = None, heatmap: str | None = None,
                        states: int | None = None, warn: set[str] | frozenset = frozenset(),
                        module: str | None = None, **where: Any) -> list[Event]:
        """What a live snapshot reports: one STATE_SNAPSHOT summary, then one event per
        verdict code present (its clusters listed, the largest first) instead of one per
        cluster, so that a snapshot adds a handful of log lines, not k.

        Args:
            snapshot: the snapshot's index, named in the messages and evidence.
            iteration: the training iteration, set on every event; None: not named.
            heatmap: the heatmap's path, named in the summary and evidence; None: no heatmap.
            states: how many states arrived since the last snapshot (evidence ``states_seen``).
            warn: the codes that are WARNs (``checks.state_action.warn_codes``); the others are
                informational (PASS), their message saying what a WARN needs.
            module: the RLModule whose states these are, named unless it is the default one.
            **where: other :class:`Event` fields set on every event, e.g. ``run_id``.
        """
        k = self.counts.shape[0]
        total = float(self.visits.sum()) or 1.0
        tally = {v: self.verdicts.count(v) for v in dict.fromkeys(self.verdicts)}
        at = f"snapshot {snapshot}" + (f" (iteration {iteration})" if iteration is not None else "")
        if module is not None and module != DEFAULT_MODULE_ID:
            at = f"module {module} {at}"
        out = [Event(C.STATE_SNAPSHOT, (
            f"{at}: {k} state clusters over {int(total)} sampled states ({self.backend}): "
            + ", ".join(f"{n} {v}" for v, n in tally.items()) + (f"; heatmap {heatmap}" if heatmap else "")),
            {"snapshot": snapshot, "clusters": k, "states": int(total), "verdicts": tally, "backend": self.backend,
             "heatmap": heatmap, "states_seen": states, "module": module}, iteration=iteration, **where)]
        by_code: dict[str, list[Event]] = {}
        for e in self.to_events():
            by_code.setdefault(e.code, []).append(e)
        for code, evs in by_code.items():
            evs.sort(key=lambda e: -e.evidence["visits"])
            share = sum(e.evidence["visits"] for e in evs) / total
            ids = [e.evidence["cluster"] for e in evs]
            msg = f"{at}: {len(evs)} of {k} clusters {code} ({share:.1%} of states); largest: {evs[0].message}"
            if code not in warn:
                msg += f"; informational: {self._why_not_warn(code)}"
            ev = {"snapshot": snapshot, "clusters": ids, "share": round(share, 6), "largest": evs[0].evidence,
                  "heatmap": heatmap, "module": module, "warn": code in warn}
            if self.descriptions:   # what each listed cluster holds (the largest ones: bounded)
                ev["described"] = {str(i): self.descriptions[i].label for i in ids[:DESCRIBED]}
            out.append(Event(code, msg, ev,
                             status="" if code in warn else C.PASS, iteration=iteration, **where))
        return out

    def _why_not_warn(self, code: str) -> str:
        th = self.thresholds
        if code == C.RARE_STATE:
            return "a rare state is where the agent seldom goes, nothing to act on by itself"
        need = (f"its clusters holding >= {th.state_warn_share:.0%} of the states at {th.state_warn_snapshots} "
                f"snapshots in a row")
        if code in (C.CHAOS, C.BLIND_SPOT):
            need += (f" while the policy is decided (top p >= {th.decided_top_p:g}) on >= "
                     f"{th.decided_min_share:.0%} of the states elsewhere (early in training a policy is undecided "
                     f"everywhere, an epsilon-greedy one random by design)")
        return f"a WARN needs {need}"

    def heatmap(self, path: str, title: str = "") -> str:
        """PNG of P(action | cluster) (see :func:`~flow1_ray.clustering.heatmap.draw_heatmap`).

        Args:
            path: the PNG file to write (matplotlib needed).
            title: the picture's title; "": the backend and number of states.

        Returns:
            ``path``.
        """
        from .heatmap import draw_heatmap

        head = title or f"state cluster x action ({self.backend}, {int(self.visits.sum())} states)"
        return draw_heatmap(path, self.counts, self.action_labels, self.verdicts, head,
                            [d.label for d in self.descriptions] if self.descriptions else None, self.thumbnails)


def analyze_state_actions(obs: Any, actions: Any, action_space: spaces.Space, *, n_clusters: int = 30,
                          backend: str = "auto", seed: int = 0, observation_space: spaces.Space | None = None,
                          failures: np.ndarray | None = None, max_iter: int = 20,
                          thresholds: StateActionThresholds | None = None,
                          policy_logits: np.ndarray | None = None,
                          feature_names: Sequence[str] | None = None) -> StateActionMap:
    """Cluster the visited states and judge P(action | cluster).

    Args:
        obs: N observations: an (N, ...) array, or a dict/tuple of them with ``observation_space``.
        actions: N actions of ``action_space`` (Discrete, MultiDiscrete, MultiBinary or Box).
        action_space: the actions' space; a Box is judged in BOX_BINS bins per dimension.
        n_clusters: how many clusters (at most N).
        backend: the KMeans: "auto" (cuML, else torch on CUDA, else sklearn), "cuml", "torch", "sklearn".
        seed: the KMeans seed.
        observation_space: flattens ``obs`` (dict/tuple, one-hot Discrete, pooled frames), names the
            features, finds an image's frames for ``thumbnails``; None: a numeric ``obs``, ``obs[0]``...
        failures: N booleans, True where the step ended its episode by termination; None: no ERROR_FIXATION.
        max_iter: the KMeans iterations at most.
        thresholds: the verdicts' thresholds; None: :class:`StateActionThresholds`' defaults.
        policy_logits: (N, n) Categorical logits of a Discrete policy: CHAOS and BLIND_SPOT then need it undecided.
        feature_names: one name per flattened column (e.g. CartPole's "cart velocity"), for the descriptions.

    Returns:
        The map, each cluster described in the observation's terms (``descriptions``); an image
        observation's also with a PNG of the real frame nearest each centroid (``thumbnails``).

    Raises:
        ValueError: fewer or more actions than observations, ``feature_names`` not one per column,
            an unsupported space or an unknown backend.
    """
    th = thresholds or StateActionThresholds()
    x = flatten_observations(obs, observation_space) if observation_space is not None \
        else np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    idx, labels = action_index(actions, action_space)
    if x.shape[0] != idx.shape[0]:
        raise ValueError(f"expected as many actions as observations, actual {idx.shape[0]} vs {x.shape[0]}")
    feats = features(observation_space) if observation_space is not None else default_features(x.shape[1])
    if feature_names is not None:
        if len(feature_names) != x.shape[1]:
            raise ValueError(f"expected {x.shape[1]} feature names (one per flattened column), "
                             f"actual {len(feature_names)}")
        feats = [Feature(str(n), f.kind) for n, f in zip(feature_names, feats)]
    k = int(min(n_clusters, x.shape[0]))
    z, mean, scale = standardize(x)
    be = make_backend(backend)
    res = be.fit(z, k, seed=seed, max_iter=max_iter)
    counts = np.zeros((k, len(labels)), dtype=np.int64)
    np.add.at(counts, (res.labels, idx), 1)
    fails = None
    if failures is not None:
        fails = np.bincount(res.labels, weights=np.asarray(failures, dtype=np.float64), minlength=k).astype(np.int64)
    policy = None if policy_logits is None else cluster_means(res.labels, policy_stats(policy_logits), k)
    m = StateActionMap(res.centroids, counts, labels, verdicts(counts, fails, th, policy=policy), fails,
                       resolve_backend(backend), res.inertia, th, policy).describe(mean, scale, feats)
    leaf = frame_leaf(observation_space) if observation_space is not None else None
    if leaf is not None:
        d2 = ((z - res.centroids[res.labels]) ** 2).sum(1)
        m.thumbnails = cluster_thumbnails(nearest(res.labels, d2, k), leaf_of(obs, leaf[0]), leaf[1])
    return m


def cluster_thumbnails(rows: np.ndarray, frames: Any, space: spaces.Box) -> list[bytes | None]:
    """A PNG thumbnail per cluster of ``frames[rows[c]]`` (None where ``rows[c]`` is -1:
    no frame in that cluster)."""
    have = rows >= 0
    out: list[bytes | None] = [None] * len(rows)
    if have.any():
        pics = thumbnails(np.asarray(frames)[rows[have]], space)
        for c, pic in zip(np.flatnonzero(have), pics):
            out[c] = png(pic)
    return out
