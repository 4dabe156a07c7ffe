"""The contract of RLlib's MultiAgentEnv (new API stack: ``MultiAgentEpisode.add_env_step``),
judged on each reset and step's dicts: the MA_* findings, at the severity of what RLlib does
with each fault. :class:`MultiAgentContract` is the part of
:class:`~flow1_ray.checks.env.multi_agent.MultiAgentRolloutChecker` that holds these checks."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from ...common import codes as C
from . import env_spec as es
from ..rule import Rule

# The multi-agent contract of RLlib's MultiAgentEnv (new API stack: MultiAgentEpisode.add_env_step).
RULES = (
    Rule("MA_DICT_INVALID", C.ENV_SPEC, C.FAIL,
         "a multi-agent reset/step value is not a dict, or is keyed by an id that is not one of the env's "
         "possible_agents (besides '__all__' in terminateds/truncateds, '__common__' in infos)"),
    Rule("MA_ALL_DONE_MISSING", C.ENV_SPEC, C.FAIL,
         "terminateds has no '__all__' key, or every agent of the episode is done while '__all__' stays False"),
    Rule("MA_AGENT_AFTER_DONE", C.ENV_SPEC, C.FAIL,
         "an observation, reward or info for an agent after its own terminated/truncated in the same episode"),
    Rule("MA_REWARD_MISSING", C.ENV_SPEC, C.FAIL, "an agent acted and got its next observation but no reward entry"),
    Rule("MA_TRUNCATED_WITHOUT_OBS", C.ENV_SPEC, C.FAIL,
         "an agent acted, then was truncated (its own flag or '__all__') without a last observation"),
    Rule("MA_REWARD_LOST", C.ENV_SPEC, C.WARN,
         "a non-zero reward for an agent before its first action of the episode, or under '__all__': RLlib "
         "credits it to no action"),
)


AgentID = Any
ALL = "__all__"
COMMON = "__common__"
NO_ACTION = object()  # an agent's action slot when it has no action waiting for its next observation


def agent_name(aid: AgentID) -> str:
    """How an agent is named in paths and messages: ``agent 1``, ``agent car_0``."""
    return f"agent {aid}"


def json_id(aid: AgentID) -> Any:
    return aid if isinstance(aid, (int, str)) else repr(aid)


def done_flag(value: Any) -> bool:
    """A done flag as RLlib reads it (truthiness); an unreadable value counts as False."""
    if value is True or value is False:
        return value
    try:
        return bool(value)
    except (TypeError, ValueError):
        return False


def _to_float(reward: Any) -> float:
    if type(reward) is float or type(reward) is int:
        return reward
    try:
        return float(np.asarray(reward, dtype=np.float64).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return 0.0


class MultiAgentContract:
    """The MA_* checks over one step's dicts; the checker supplies the agents and the log."""

    def _check_dict(self, field: str, value: Any, step: int) -> dict:
        """The value as a dict of the keys the env may use; MA_DICT_INVALID for the rest."""
        if not isinstance(value, dict):
            self.log.hit(C.MA_DICT_INVALID, field, lambda: (
                f"{field}: expected a dict keyed by agent id, actual {type(value).__name__} (first at step {step})",
                {"field": field, "expected": "dict", "actual": type(value).__name__, "first_step": step}),
                env_step=step)
            return {}
        allowed = self._allowed[field]
        if value.keys() <= allowed:
            return value
        bad = [k for k in value if k not in allowed and not (field == "rewards" and k == ALL)]
        if bad:
            self.log.hit(C.MA_DICT_INVALID, field, lambda: (
                f"{field} key {bad[0]!r}: expected one of the env's possible_agents {self.possible_agents[:10]}"
                f"{_special(field)}, actual {bad[0]!r} (first at step {step})",
                {"field": field, "unknown_keys": [json_id(k) for k in bad[:10]],
                 "possible_agents": [json_id(a) for a in self.possible_agents[:50]], "first_step": step}),
                env_step=step)
        return {k: v for k, v in value.items() if k in allowed or (field == "rewards" and k == ALL)}

    def _check_flags(self, field: str, flags: dict, step: int) -> None:
        """DONE_NOT_BOOL for any per-agent or ``__all__`` flag that is not a bool."""
        for k, v in flags.items():
            if type(v) is not bool and type(v) is not np.bool_:
                path = f"{field}[{_key_name(k)}]"
                self.log.hit(C.DONE_NOT_BOOL, f"{field}:{k!r}", lambda: (
                    f"{path}: expected bool or np.bool_, actual {type(v).__name__} {v!r} (first at step {step})",
                    {"field": field, "path": path, "actual": type(v).__name__, "first_step": step}), env_step=step)

    def _check_all_key(self, terminateds: dict, step: int) -> None:
        if ALL not in terminateds:
            self.log.hit(C.MA_ALL_DONE_MISSING, "missing", lambda: (
                f"terminateds: expected an '__all__' key, actual keys {_keys(terminateds)} "
                f"(first at step {step}); RLlib's vector env reads terminateds['__all__'] to reset the env, "
                f"and the KeyError fails the EnvRunner",
                {"field": "terminateds", "expected": ALL, "actual_keys": [json_id(k) for k in terminateds][:10],
                 "first_step": step}), env_step=step)

    def _check_infos(self, infos: dict, step: int) -> None:
        for k, v in infos.items():
            if not isinstance(v, dict):
                path = f"infos[{_key_name(k)}]"
                self.log.hit(C.INFO_NOT_DICT, f"infos:{k!r}", lambda: (
                    f"{path}: expected dict, actual {type(v).__name__} (first at step {step})",
                    {"path": path, "expected": "dict", "actual": type(v).__name__, "first_step": step}),
                    env_step=step)

    def _check_after_done(self, values: Iterable[tuple[str, dict]], step: int) -> None:
        """MA_AGENT_AFTER_DONE: data for an agent whose own episode already ended."""
        if not self._done:
            return
        values = list(values)
        for aid, (at, how) in self._done.items():
            fields = [field for field, d in values if aid in d]
            if fields:
                got = ", ".join(f"{f}[{agent_name(aid)}]" for f in fields)
                self.log.hit(C.MA_AGENT_AFTER_DONE, "", lambda: (
                    f"{agent_name(aid)} got {got} at step {step} after its own {how} at step {at} in the same "
                    f"episode: expected no observation, reward or info for a done agent, actual {', '.join(fields)}; "
                    f"RLlib raises MultiAgentEnvError (agent already done but still received data)",
                    {"agent": json_id(aid), "fields": fields, "done_step": at, "done": how, "first_step": step}),
                    env_step=step)

    def _check_reward_missing(self, actions: Mapping, obs: dict, rewards: dict, step: int) -> None:
        """MA_REWARD_MISSING: an agent acted, got its next observation, and no reward."""
        for aid in actions:
            if aid in obs and aid not in rewards and aid not in self._done:
                self.log.hit(C.MA_REWARD_MISSING, "", lambda: (
                    f"{agent_name(aid)} acted at step {step} and got its next observation but no reward: expected "
                    f"a rewards[{agent_name(aid)}] entry, actual keys {_keys(rewards)}; RLlib raises "
                    f"MultiAgentEnvError (acted and received next obs, but did NOT receive any reward)",
                    {"agent": json_id(aid), "reward_keys": [json_id(k) for k in rewards][:10], "first_step": step}),
                    env_step=step)

    def _rewards(self, rewards: dict, joined_before: set, step: int) -> dict:
        """Rewards as floats (REWARD_NOT_SCALAR for the others); MA_REWARD_LOST for
        non-zero rewards no action of the agent can be credited with."""
        out = {}
        for aid, r in rewards.items():
            if type(r) is not float and type(r) is not int:
                err = es.reward_type_error(r)
                if err is not None:
                    path = f"rewards[{_key_name(aid)}]"
                    self.log.hit(C.REWARD_NOT_SCALAR, f"rewards:{aid!r}", lambda: (
                        f"{path}: expected a Python/NumPy real scalar, actual {err} (first at step {step})",
                        {"path": path, "expected": "real scalar", "actual": err, "first_step": step}), env_step=step)
            x = out[aid] = _to_float(r)
            if x != 0.0 and (aid == ALL or aid not in joined_before) and aid not in self._done:
                why = ("'__all__' is no agent" if aid == ALL else
                       f"{agent_name(aid)} has not acted yet in this episode")
                self.log.hit(C.MA_REWARD_LOST, "", lambda: (
                    f"rewards[{_key_name(aid)}] = {x:.4g} at step {step}: expected rewards only for agents that "
                    f"acted, actual a reward where {why}; RLlib keeps it out of every agent's episode (no action "
                    f"is credited with it)", {"agent": json_id(aid), "reward": x, "first_step": step}),
                    env_step=step)
        return out

    def _check_truncated_without_obs(self, aid: AgentID, step: int) -> None:
        self.log.hit(C.MA_TRUNCATED_WITHOUT_OBS, "", lambda: (
            f"{agent_name(aid)} acted and was truncated at step {step} without a last observation: expected "
            f"obs[{agent_name(aid)}] at truncation (own flag or '__all__'), actual none; RLlib raises "
            f"MultiAgentEnvError (it needs that observation to bootstrap the value)",
            {"agent": json_id(aid), "first_step": step}), env_step=step)

    def _check_stranded(self, joined_before: set, done_now: set, step: int) -> bool:
        """MA_ALL_DONE_MISSING when every agent of the episode is done but ``__all__`` is not
        True: RLlib's episode ends (all its agents are done), its vector env does not reset."""
        if not joined_before or not joined_before <= done_now:
            return False
        self.log.hit(C.MA_ALL_DONE_MISSING, "stranded", lambda: (
            f"every agent of the episode is done at step {step} ({_keys(joined_before)}): expected "
            f"terminateds['__all__'] or truncateds['__all__'] True, actual neither; RLlib's episode ends but its "
            f"vector env resets only on '__all__', so the next step runs the env past its end",
            {"agents": [json_id(a) for a in joined_before][:10], "first_step": step}), env_step=step)
        return True

    # -- the stream ----------------------------------------------------------------------


def _keys(keys: Iterable) -> str:
    """A short, ordered listing of dict keys or agent ids for messages."""
    names = sorted(map(repr, keys))
    return "[" + ", ".join(names[:10]) + (", ..." if len(names) > 10 else "") + "]"


def _key_name(k: Any) -> str:
    return repr(k) if k in (ALL, COMMON) else agent_name(k)


def _special(field: str) -> str:
    return {"terminateds": " or '__all__'", "truncateds": " or '__all__'", "infos": " or '__common__'"}.get(field, "")
