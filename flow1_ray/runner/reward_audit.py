"""The reward-logic audit live: one sub-env of one training EnvRunner, opt-in.

``Flow1Callbacks.with_options(audit_reward=True)``: the first training runner (the local
one when there are no remote runners) audits its first sub-env with the same
:class:`~flow1_ray.checks.env.reward_logic.RewardLogicAudit` as ``flow1 check --audit-reward``,
on the actions of the policy being trained (a policy can find an env's trap that random
actions never reach). The base env's own ``step`` and ``reset`` are shadowed on the
instance (as ``flow1 check``'s action probe does), so the audit sees the env's state right
before and after each of its steps, inside whatever wrappers and vector env RLlib puts
around it. One sub-env of one runner: a snapshot of the env's attributes a step there,
and a copy of the env only while a suspect attribute waits for its counterfactual tries.

Anything the audit raises switches it off and is said once (FLOW1_INTERNAL); the env's own
exceptions pass through untouched.
"""

from __future__ import annotations

from typing import Any, Callable

from ..checks.findings import Finding
from ..checks.env.reward_logic import RewardLogicAudit

LIVE_AUDIT_STEPS = 5000        # steps the live audit keeps (the newest)
LIVE_JUDGE_EVERY = 512         # steps between its looks for suspect attributes


def audits_here(env_runner: Any, index: int, kind: str) -> bool:
    """Whether this runner is the one that audits: the first remote training runner, or the
    local one when it is the only one that samples."""
    remote = int(getattr(getattr(env_runner, "config", None), "num_env_runners", 0) or 0)
    return kind == "train" and index == (1 if remote > 0 else 0)


def _reward(r: Any) -> float:
    """A step's reward; a multi-agent env's per-agent rewards summed."""
    try:
        return float(sum(float(v) for v in r.values())) if isinstance(r, dict) else float(r)
    except (TypeError, ValueError):
        return float("nan")


def _ended(terminated: Any, truncated: Any) -> bool:
    if isinstance(terminated, dict) or isinstance(truncated, dict):
        return any(bool(d.get("__all__", False)) for d in (terminated, truncated) if isinstance(d, dict))
    try:
        return bool(terminated) or bool(truncated)
    except (TypeError, ValueError):
        return False


class LiveRewardAudit:
    """Installs the audit on one sub-env's base env; :meth:`new_findings` at each judgement."""

    def __init__(self, sub_env: Any, on_error: Callable[[str, BaseException], None]) -> None:
        self.base = getattr(sub_env, "unwrapped", sub_env)
        self.audit = RewardLogicAudit(getattr(self.base, "action_space", None), max_steps=LIVE_AUDIT_STEPS,
                                      judge_every=LIVE_JUDGE_EVERY)
        self.on_error = on_error
        self.off = False
        self._told: set[tuple[str, str]] = set()
        self._install()

    def _install(self) -> None:
        base, audit = self.base, self.audit
        step, reset = base.step, base.reset

        def audited_step(action: Any) -> Any:
            if not self.off:
                try:
                    audit.before_step(base)
                except Exception as e:
                    self._fail(e)
            out = step(action)
            if not self.off:
                try:
                    audit.after_step(base, action, _reward(out[1]), _ended(out[2], out[3]))
                except Exception as e:
                    self._fail(e)
            return out

        def audited_reset(*args: Any, **kwargs: Any) -> Any:
            out = reset(*args, **kwargs)
            if not self.off:
                try:
                    audit.on_reset(base)
                except Exception as e:
                    self._fail(e)
            return out

        base.step = audited_step
        base.reset = audited_reset

    def _fail(self, exc: BaseException) -> None:
        self.off = True
        self.on_error("the reward-logic audit", exc)

    def new_findings(self) -> list[Finding]:
        """REWARD_UNEARNED findings not sent before (one per attribute and status)."""
        if self.off:
            return []
        try:
            found, _ = self.audit.findings(final=False)
        except Exception as e:
            self._fail(e)
            return []
        out = []
        for f in found:
            key = (str(f.evidence.get("attribute")), f.status)
            if key not in self._told:
                self._told.add(key)
                f.evidence["audited"] = "sub-env 0 of this runner, the policy's own actions"
                out.append(f)
        return out
