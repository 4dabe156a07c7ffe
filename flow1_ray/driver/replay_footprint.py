"""What the algorithm's replay buffer holds in the driver and what that costs, measured where
it lives: RLlib 2.60's DQN and SAC keep one ``local_replay_buffer`` in the algorithm's own
process, so a buffer that outgrows the memory kills the driver, and with it the run, late --
when the buffer fills, hours after the last config change.

Read once an iteration (``result["flow1"]["replay"]``): the buffer's capacity and steps
stored, the bytes one stored step takes (the numpy arrays of its newest episodes: observations,
actions, rewards and model outputs, without Python's object overhead -- a lower bound), and
the memory this process may still take (the host's, or the container's cgroup limit when that
is lower: on Kubernetes a pod is killed at its limit, not at the node's). The rules that read
it are in :mod:`flow1_ray.checks.learner.replay`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

#: episodes measured each iteration (the newest): enough for a stable per-step size, cheap
EPISODES_MEASURED = 3
#: items of a list measured at most (a strided sample of a longer one, scaled)
SAMPLED_ITEMS = 256


def replay_footprint(algorithm: Any) -> dict | None:
    """``{"capacity", "stored", "bytes_per_step", "available", "rss"}`` of the algorithm's
    local replay buffer, or None when it has none (PPO, APPO, IMPALA) or it cannot be read."""
    buf = getattr(algorithm, "local_replay_buffer", None)
    if buf is None:
        return None
    capacity = getattr(buf, "capacity", None)
    try:
        stored = int(buf.get_num_timesteps())
    except Exception:
        return None
    out: dict = {"capacity": int(capacity) if isinstance(capacity, (int, float)) else None, "stored": stored,
                 "buffer_type": type(buf).__name__}
    per_step = _bytes_per_step(getattr(buf, "episodes", None))
    if per_step is not None:
        out["bytes_per_step"] = per_step
    out.update(memory_available())
    return out


def _bytes_per_step(episodes: Any) -> float | None:
    if not episodes:
        return None
    total, steps = 0, 0
    try:
        for eps in list(episodes)[-EPISODES_MEASURED:]:
            for single in (eps.agent_episodes.values() if hasattr(eps, "agent_episodes") else (eps,)):
                n = len(single)
                if n <= 0:
                    continue
                total += sum(_nbytes(getattr(single, name, None))
                             for name in ("observations", "actions", "rewards", "extra_model_outputs"))
                steps += n
    except Exception:
        return None
    return total / steps if steps else None


def _nbytes(x: Any) -> int:
    """The bytes of the numpy data under ``x``: an InfiniteLookbackBuffer (``.data``), a dict of
    them, or nested lists / tuples / dicts of arrays and numbers."""
    if x is None:
        return 0
    if hasattr(x, "data") and not isinstance(x, np.ndarray):
        return _nbytes(x.data)
    if isinstance(x, np.ndarray):
        return int(x.nbytes)
    if isinstance(x, dict):
        return sum(_nbytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        if len(x) > SAMPLED_ITEMS:   # a long unfinalized episode: a strided sample, scaled (bounded cost)
            step = len(x) / SAMPLED_ITEMS
            return int(sum(_nbytes(x[int(i * step)]) for i in range(SAMPLED_ITEMS)) * step)
        return sum(_nbytes(v) for v in x)
    if isinstance(x, (int, float, np.generic, bool)):
        return int(np.asarray(x).nbytes)
    return 0


def memory_available() -> dict:
    """``{"available", "rss"}`` in bytes: what this process may still allocate -- the host's
    available memory, or the cgroup's limit minus its usage where that is less -- and its RSS."""
    import psutil

    out = {"available": int(psutil.virtual_memory().available)}
    try:
        out["rss"] = int(psutil.Process().memory_info().rss)
    except Exception:
        pass
    room = _cgroup_room()
    if room is not None:
        out["available"] = min(out["available"], room)
        out["cgroup_limited"] = True
    return out


def _cgroup_room() -> int | None:
    """limit - usage of this process's memory cgroup (v2, else v1), None when unlimited."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None
        return max(0, int(limit) - usage)
    return None
