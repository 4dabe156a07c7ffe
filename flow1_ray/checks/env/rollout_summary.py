"""What a :class:`~flow1_ray.checks.env.rollout.RolloutChecker` says when nothing is wrong:
the numbers behind each module's PASS row of ``flow1 check`` (steps, step times, observation
batches, actions, the reward's statistics) and the notes on what was judged on a sample or
passed through unjudged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...common import codes as C
from ..series import Series
from .reward import reward_stats


def unjudged_notes(ch: Any) -> list[str]:
    """What was passed through unjudged, said once in the ENV_SPEC summary."""
    out = [f"{lf.path}: {type(lf.space).__name__}, checked by contains()"
           for lf in ch.obs_leaves + ch.act_leaves if lf.opaque and lf.path not in ch._no_contains]
    out += [f"{lf.path}: {type(lf.space).__name__} has no contains(), not checked"
            for lf in ch.obs_leaves + ch.act_leaves if lf.path in ch._no_contains]
    return out


def checker_summary(ch: Any) -> dict[str, dict]:
    """Per module, the numbers its PASS row carries: steps, episodes and step times (ENV_SPEC),
    the observation leaves and batches (OBS_FLOW), the actions (ACTION_PIPE), the reward's
    statistics (REWARD_STATS), with a note wherever a series was judged on a sample."""
    d = ch.durations.values() * 1e3
    r = ch.rewards.values()
    env_notes = unjudged_notes(ch) + _sample_note("step times", ch.durations)
    obs_notes = ([f"observations of {_mib(ch._row_bytes())} judged in batches of {ch.batch_rows} "
                  f"(batch_max_bytes {_mib(ch.th.batch_max_bytes)})"]
                 if ch.batch_rows < ch.flush_every else []) + _sample_note("reset observations",
                                                                                ch.reset_features)
    reward_notes = _sample_note("rewards", ch.rewards) + _sample_note("episode returns", ch.returns.series)
    r_rows, r_steps = ch.rewards.rows()
    stats = reward_stats(r_rows, ch.th.reward_spike_ratio, r_steps, ch._episodes(),
                         ch.th.reward_level_min_recurrences)
    if ch.rewards.sampled:
        stats.update({"steps": ch.rewards.seen, "non_finite": ch.rewards.non_finite,
                      "steps_judged": int(r.size)})
    return {
        C.ENV_SPEC: {
            "steps": ch.steps, "episodes": ch.episodes,
            "episode_len_mean": ch._ep_len_total / ch.episodes if ch.episodes else None,
            "step_ms_median": float(np.median(d)) if d.size else None,
            "step_ms_p95": float(np.percentile(d, 95)) if d.size else None,
            "obs_leaves": [lf.describe() for lf in ch.obs_leaves],
            **({"notes": env_notes} if env_notes else {}),
        },
        C.OBS_FLOW: {"leaves": [lf.path for lf in ch.obs_leaves], "observations": ch.steps + ch.episodes,
                     "judged_in_batches": ch.batch_judged,
                     "batch_rows_max": min(ch.batch_rows, ch.flush_every),
                     **({"notes": obs_notes} if obs_notes else {})},
        C.ACTION_PIPE: {"actions": ch.steps, "cast_checked": ch.cast_checked,
                        "leaves": [lf.describe() for lf in ch.act_leaves]},
        C.REWARD_STATS: {**stats, "episode_return_mean": ch.returns.mean,
                         **({"notes": reward_notes} if reward_notes else {})},
    }


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def _sample_note(what: str, series: Series) -> list[str]:
    """A PASS row's note when a series passed its byte cap: how many rows the rules judged."""
    if not series.sampled:
        return []
    return [f"{what}: the distribution rules judged a uniform sample of {len(series):,} of {series.seen:,} "
            f"(series_max_bytes {_mib(series.max_bytes or 0)}); counts, extremes and the first non-finite are exact"]
