"""What a traced update's train batch says beyond its gradients: PPO's clip fraction, IMPALA's
importance ratios and the batch's reward range. Called by :mod:`.tracer` on traced updates only, inside its guard.

RLlib 2.60 logs neither: the clip fraction (the share of probability ratios new / sampling
policy outside ``1 +- clip_param``; ``checks/learner/clip_fraction.py`` judges it) is computed from
the update's own forward output, so it costs one log-probability of the batch's actions and
no extra forward pass; the reward range bounds the Q-values an off-policy critic can take
(``checks/learner/offpolicy.py``: a replayed batch holds rewards from the whole buffer).
"""

from __future__ import annotations

from typing import Any


def clip_counts(learner: Any, modules: dict[str, Any], fwd_out: Any, batch: Any, into: dict[str, list],
                importance: dict[str, list] | None = None) -> None:
    """Add to ``into[module_id] = [ratios outside 1 +- clip_param, ratios]`` for every module
    whose batch has the sampling log-probabilities and whose config has a ``clip_param`` (PPO,
    APPO); and, for a V-trace learner without one (IMPALA, which logs no importance ratio), to
    ``importance[module_id] = [sum of the ratios behaviour / learner policy clamped to [0, 2],
    ratios]``: APPO's ``mean_IS``, measured the same way, the runners' lag behind the learner."""
    import torch

    if not isinstance(fwd_out, dict) or not isinstance(batch, dict):
        return
    for mid, out in fwd_out.items():
        cols = batch.get(mid)
        if not isinstance(out, dict) or not isinstance(cols, dict) or "action_logp" not in cols \
                or "action_dist_inputs" not in out or mid not in modules:
            continue
        config = learner.config.get_config_for_module(mid)
        clip = getattr(config, "clip_param", None)
        vtrace = getattr(config, "vtrace_clip_rho_threshold", None)
        if not (isinstance(clip, (int, float)) and clip > 0) and not (importance is not None and vtrace is not None):
            continue
        module = modules[mid]
        module = module.unwrapped() if hasattr(module, "unwrapped") else module
        with torch.no_grad():
            dist = module.get_train_action_dist_cls().from_logits(out["action_dist_inputs"].detach())
            log_ratio = dist.logp(cols["actions"]) - cols["action_logp"]
            mask = cols.get("loss_mask")
            keep = mask.bool() if mask is not None else torch.ones_like(log_ratio, dtype=torch.bool)
            n = keep.sum()
            if isinstance(clip, (int, float)) and clip > 0:
                outside = ((torch.exp(log_ratio) - 1.0).abs() > clip)[keep]
                got = into.setdefault(str(mid), [0, 0])
                got[0], got[1] = got[0] + outside.sum(), got[1] + n
            else:
                behind = torch.exp(-log_ratio).clamp(0.0, 2.0)[keep]
                got = importance.setdefault(str(mid), [0, 0])
                got[0], got[1] = got[0] + behind.sum(), got[1] + n


def reward_range(batch: Any, module_ids: Any) -> dict[str, tuple[float, float]]:
    """``{module_id: (min reward, max reward)}`` of the batch's ``rewards`` column."""
    out: dict[str, tuple[float, float]] = {}
    if not isinstance(batch, dict):
        return out
    for mid in module_ids:
        cols = batch.get(mid)
        rewards = cols.get("rewards") if isinstance(cols, dict) else None
        if rewards is None or not hasattr(rewards, "detach") or rewards.numel() == 0:
            continue
        lo, hi = (float(x) for x in rewards.detach().float().aminmax())
        out[mid] = (lo, hi)
    return out


def batch_columns(batch: Any, columns: tuple, max_rows: int) -> dict:
    """module -> {column: numpy array of at most ``max_rows`` rows} of a train batch's numeric
    ``columns`` (a snapshot's)."""
    import numpy as np

    out: dict = {}
    if not isinstance(batch, dict):
        return out
    for mid, cols in batch.items():
        if not isinstance(cols, dict):
            continue
        got = {}
        for key in columns:
            v = cols.get(key)
            if v is None or not hasattr(v, "detach") and not isinstance(v, np.ndarray):
                continue
            arr = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
            if arr.dtype == object:
                continue
            got[key] = np.ascontiguousarray(arr[:max_rows])
        if got:
            out[str(mid)] = got
    return out
