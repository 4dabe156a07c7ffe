"""The driver's side of one training iteration's conversation with the hub: the learner's
events and rows gathered for the hook's one call (:class:`Turn`), the questions asked at once
with a time limit each (:func:`ask_all`), the iteration's row, and the numbers of
``result["flow1"]`` read from the answers. Called from ``Flow1Callbacks.on_train_result``
once per iteration; a question that is not answered in time is said, never waited for.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ..common import schema as S
from ..common.schema import metric

class Turn:
    """The learner's ``send`` for one iteration: its events and rows go with the hook's one
    call to the hub until :meth:`seal` takes them; after that (the on_fail guard read from the
    hub's answer, a live what-if's thread minutes later) they are sent on their own."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.kept: dict[str, list] = {"events": [], "learner_rows": []}
        self.open = True
        self.lock = threading.Lock()

    def __call__(self, kind: str, payload: Any) -> Any:
        if kind in self.kept:
            with self.lock:
                if self.open:
                    self.kept[kind].extend(payload)
                    return None
        return _send(self.run, kind, payload)

    def seal(self) -> dict[str, Any]:
        with self.lock:
            self.open = False
            return dict(self.kept)


def _send(run: Any, kind: str, payload: Any) -> Any:
    """Deliver learner-side output to the run's Recorder: events and rows fire-and-forget
    (dropped when the hub is behind), a snapshot waited for (its path goes in the event)."""
    import ray

    hub = run.hub
    try:
        if kind == "events":
            hub.add_events.remote(payload)
        elif kind == "learner_rows":
            hub.add_learner_rows.remote(payload)
        elif kind == "learner_snapshot":
            return ray.get(hub.add_learner_snapshot.remote(*payload), timeout=run.opts.get_timeout_s * 5)
    except ray.exceptions.PendingCallsLimitExceeded:
        return None
    return None


def row_head(result: dict, iteration: int, return_mean: float | None) -> dict:
    """The metrics row's first columns: the iteration, its env steps and returns, the episodes
    completed so far and the return's smoothing window (what the learning rules need:
    :mod:`flow1_ray.checks.learner.sufficiency`)."""
    evaluated = as_float(((result.get("evaluation") or {}).get("env_runners") or {}).get("episode_return_mean"))
    episodes = as_float((result.get("env_runners") or {}).get("num_episodes_lifetime"))
    config = result.get("config")
    window = config.get("metrics_num_episodes_for_smoothing") if isinstance(config, dict) else None
    return {"iteration": iteration,
            "env_steps": int(result.get("num_env_steps_sampled_lifetime", 0) or 0),
            "episode_return_mean": return_mean,
            S.EPISODES: int(episodes) if episodes is not None and episodes == episodes else None,
            S.SMOOTHING_WINDOW: window if isinstance(window, int) and not isinstance(window, bool) else None,
            **({S.EVAL_RETURN: evaluated} if evaluated is not None and evaluated == evaluated else {})}


def ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 2)


def learner_metrics(values: dict) -> dict:
    """Flat ``flow1/learner/<module>/<name>`` numbers for the metrics table."""
    out = {}
    for mid, v in values.items():
        if isinstance(v, dict) and mid not in ("tracing",):
            for k, x in v.items():
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    out[metric("learner", mid, k)] = float(x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[metric("learner", mid)] = float(v)
    return out


def ask_all(asks: dict[str, Callable[[], Any] | None], timeout: float) -> dict[str, Any]:
    """Send every question at once, wait at most ``timeout`` in all, and keep the answers
    that came: a slow or restarting actor costs its own answer, not the others'."""
    import ray

    refs = {}
    for key, ask in asks.items():
        if ask is not None:
            try:
                refs[key] = ask()
            except Exception:
                pass
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    done = set(ready)
    out = {}
    for key, ref in refs.items():
        if ref in done:
            try:
                out[key] = ray.get(ref, timeout=0)
            except Exception:  # that actor died or raised: its answer is missing
                pass
    return out


def check_rate(sampling: dict) -> dict | None:
    """The lowest share of episodes any runner checks now and ever did, of its most."""
    rates = [v for v in sampling.values() if isinstance(v, dict) and v.get("check_rate") is not None]
    if not rates:
        return None
    return {"now": min(float(v["check_rate"]) for v in rates),
            "lowest": min(float(v.get("check_rate_lowest", v["check_rate"])) for v in rates),
            "max": max(float(v.get("check_rate_max", v["check_rate"])) for v in rates)}


def runner_cost(sampling: dict, hub_cpu: dict | None = None) -> dict | None:
    """flow1's own time in all runners so far and its share of their sample() time (wall), the
    CPU account (``cpu``: per feature, CPU per env step as a share of the runners' own,
    :func:`flow1_ray.runner.cost.account`), and the hub's CPU per 1,000 env steps (``hub_cpu``,
    :class:`flow1_ray.runner.cost.ProcessCpu`)."""
    from ..runner.cost import account

    parts = [v for v in sampling.values() if isinstance(v, dict) and v.get("sample_s")]
    if not parts:
        return None
    own, total = sum(float(v.get("flow1_s", 0.0)) for v in parts), sum(float(v["sample_s"]) for v in parts)
    return {"share": round(own / total, 5) if total > 0 else None, "flow1_s": round(own, 3), "sample_s": round(total, 2),
            "cpu": account([v["cost"] for v in parts if isinstance(v.get("cost"), dict)]), "hub_cpu": hub_cpu}


def as_float(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None
