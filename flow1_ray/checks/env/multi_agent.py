"""MultiAgentRolloutChecker: RLlib's MultiAgentEnv contract, judged one env step at a time.

A MultiAgentEnv answers ``reset``/``step`` with dicts keyed by agent id; judged as a
single-agent env every reward dict is "not a scalar" and every terminateds dict "not a
bool". Here each agent gets its own :class:`~flow1_ray.checks.env.rollout.RolloutChecker`
(its own spaces, its own episode from its first observation to its own
terminated/truncated), so every single-agent check applies per agent with the agent named
in paths and messages (``obs[agent 1]``). On top sits the multi-agent contract as the new
API stack enforces it in ``MultiAgentEpisode.add_env_step`` (RLlib 2.60):

* an agent that acted and gets its next observation needs a reward entry, else RLlib
  raises ``MultiAgentEnvError`` (MA_REWARD_MISSING, FAIL); an agent that acted and gets no
  observation yet (turn-based play) is fine: its action "hangs" and rewards add up;
* an agent done earlier in the episode must receive no observation, reward or info
  ("should NOT have received any data"; RLlib raises) (MA_AGENT_AFTER_DONE, FAIL);
* an agent that acted and is then truncated, by its own flag or by ``__all__``, needs a
  last observation to bootstrap from, else RLlib raises (MA_TRUNCATED_WITHOUT_OBS, FAIL);
  terminated without one is fine (RLlib repeats the last observation);
* a reward for an agent before its first action of the episode lands in RLlib's
  "hanging begin" cache, which no SingleAgentEpisode ever reads: it is credited to no
  action (MA_REWARD_LOST, WARN when non-zero: RLlib's own autoreset hands every possible
  agent a 0.0, which loses nothing);
* ``terminateds`` needs ``__all__``: RLlib's vector env reads ``terminateds["__all__"]``
  (a KeyError fails the EnvRunner), and when every agent of the episode is done but
  ``__all__`` stays False, RLlib's episode ends but the env is never reset, so sampling
  goes on past the end (MA_ALL_DONE_MISSING, FAIL). ``truncateds["__all__"]`` is read with
  ``.get`` ("some environments just return terminated"): it may be left out;
* every dict is keyed by ids from ``possible_agents`` (RLlib builds each episode's
  per-agent spaces from them), plus ``__all__`` in terminateds/truncateds and
  ``__common__`` in infos (MA_DICT_INVALID, FAIL; RLlib's pre-check raises on it too).

Agents that join mid-episode (a first observation at any step) and leave it (their own
terminated/truncated) raise nothing. No Ray import: the live EnvRunner callbacks feed this
object with the raw dicts of a MultiAgentEnvRunner's sub-env, ``flow1 check`` with a
driven env.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Collection, Iterable, Mapping

import numpy as np
from gymnasium import spaces

from ...common import codes as C
from ..findings import Finding, FindingLog
from .multi_agent_contract import ALL, COMMON, NO_ACTION, AgentID, MultiAgentContract, agent_name, done_flag, json_id
from .rollout import RolloutChecker, step_time_findings
from ..series import Series
from .space_contract import validate_space
from ..thresholds import DEFAULT, Thresholds

# --- per-agent spaces -------------------------------------------------------------------


def _space_of(env: Any, aid: AgentID, kind: str) -> Any:
    """One agent's space the way RLlib asks for it: ``get_<kind>_space(aid)`` (new API
    stack), else the ``<kind>_spaces`` dict, else a Dict ``<kind>_space`` keyed by agent id,
    else the shared ``<kind>_space``."""
    getter = getattr(env, f"get_{kind}_space", None)
    if callable(getter):
        try:
            return getter(aid)
        except Exception:  # e.g. KeyError: observation_spaces misses the agent
            return None
    per_agent = getattr(env, f"{kind}_spaces", None)
    if isinstance(per_agent, Mapping):
        return per_agent.get(aid)
    shared = getattr(env, f"{kind}_space", None)
    if isinstance(shared, spaces.Dict) and aid in shared.spaces:
        return shared[aid]
    return shared


def agent_spaces(env: Any) -> tuple[list, dict, dict]:
    """(possible agents, observation space per agent, action space per agent) of a MultiAgentEnv.

    RLlib's MultiAgentEnvRunner builds every episode's spaces from ``possible_agents``
    (falling back here to ``agents``, as MultiAgentEnv.__init__ does), so those are the
    agent ids the env knows.
    """
    agents = list(getattr(env, "possible_agents", None) or getattr(env, "agents", None) or [])
    return (agents, {aid: _space_of(env, aid, "observation") for aid in agents},
            {aid: _space_of(env, aid, "action") for aid in agents})


def tag(finding: Finding, aid: AgentID) -> Finding:
    """Name the agent in a finding made by a single-agent check."""
    name = agent_name(aid)
    if f"[{name}]" not in finding.message:
        finding.message = f"{name}: {finding.message}"
    finding.evidence = {**finding.evidence, "agent": json_id(aid)}
    return finding


def validate_agent_spaces(agents: Collection, obs_spaces: Mapping, act_spaces: Mapping) -> list[Finding]:
    """SPACE_INVALID for each agent's spaces, and for an env that declares no agent at all."""
    if not agents:
        return [Finding(C.SPACE_INVALID, "multi-agent env declares no agents: expected possible_agents (or agents) "
                                         "listing every agent id, actual []",
                        {"role": "agents", "possible_agents": []})]
    out: list[Finding] = []
    for aid in agents:
        for role, space, what in (("obs", obs_spaces.get(aid), "observation"),
                                  ("action", act_spaces.get(aid), "action")):
            if space is None:
                out.append(tag(Finding(C.SPACE_INVALID, f"{role} space: expected a gymnasium Space from "
                                                        f"get_{what}_space({aid!r}), actual None",
                                       {"role": role, "space": None}), aid))
            else:
                out.extend(tag(f, aid) for f in validate_space(space, role))
    return out


# --- the checker ------------------------------------------------------------------------


class _AgentLog:
    """The shared FindingLog seen through one agent: keys, messages and evidence name it,
    so two agents with the same fault make two findings, not one with a count of 2."""

    __slots__ = ("_log", "_aid", "_prefix")

    def __init__(self, log: FindingLog, aid: AgentID) -> None:
        self._log, self._aid, self._prefix = log, aid, f"{agent_name(aid)}|"

    def hit(self, code: str, key: str, build: Callable[[], tuple[str, dict]], env_step: int | None = None,
            status: str = "") -> None:
        def tagged() -> tuple[str, dict]:
            f = tag(Finding(code, *build()), self._aid)
            return f.message, f.evidence
        self._log.hit(code, self._prefix + key, tagged, env_step, status)

    def add(self, finding: Finding, key: str = "") -> None:
        self._log.add(tag(finding, self._aid), self._prefix + key)

    def extend(self, findings: list[Finding]) -> None:
        for f in findings:
            self.add(f, key=str(f.evidence.get("path", "")))

    def findings(self) -> list[Finding]:
        return self._log.findings()


class _Agent:
    """One agent: its checker, the action waiting for its next observation, the reward
    gathered since that action, and its last observation (repeated, as RLlib does, when
    it terminates without a new one)."""

    __slots__ = ("rc", "action", "reward", "last_obs", "sent_at", "takes_turns")

    def __init__(self, rc: RolloutChecker) -> None:
        self.rc = rc
        self.action: Any = NO_ACTION
        self.reward = 0.0
        self.last_obs: Any = None
        self.sent_at = 0             # the env step its waiting action was sent in
        self.takes_turns = False     # it has acted on consecutive env steps (observed in the step it acted)


class MultiAgentRolloutChecker(MultiAgentContract):
    """Judges a stream of multi-agent resets and steps: per-agent checks plus the contract.

    Same use as :class:`RolloutChecker`: :meth:`on_reset` after each reset, :meth:`on_step`
    after each step with the action dict sent, :meth:`finish` once; :attr:`log` holds the
    findings of every agent. ``steps`` counts env steps; an agent's own findings count
    that agent's steps (observations after an action).
    """

    def __init__(self, observation_spaces: Mapping[AgentID, spaces.Space],
                 action_spaces: Mapping[AgentID, spaces.Space], possible_agents: Iterable[AgentID] | None = None,
                 thresholds: Thresholds = DEFAULT, *, flush_every: int = 256, window: int | None = None,
                 log: FindingLog | None = None, live: bool = False) -> None:
        """``possible_agents`` are the ids the env may use (default: the keys of
        ``observation_spaces``); ``window``, ``log`` and ``live`` as for RolloutChecker."""
        self.live = live
        self.th = thresholds
        self.obs_spaces, self.act_spaces = dict(observation_spaces), dict(action_spaces)
        self.possible_agents = list(possible_agents if possible_agents is not None else self.obs_spaces)
        self.log = log if log is not None else FindingLog()
        self.flush_every, self.window = flush_every, window
        self.pipeline_of: Any = None   # live: the runner's env-to-module pipeline (OBS_UNSCALED), for each agent
        self.drift_judged = True       # live: whether this sub-env's agents test their resets' drift
        known = frozenset(self.possible_agents)
        self._allowed = {"obs": known, "rewards": known, "terminateds": known | {ALL},
                         "truncateds": known | {ALL}, "infos": known | {COMMON}}
        self.agents: dict[AgentID, _Agent] = {}     # every agent seen: its checker and its waiting action
        self.durations = Series(thresholds.series_max_bytes, window, seed=2)
        self.waits = Series(thresholds.series_max_bytes, window, seed=2)   # each step's run-queue wait, where measured
        self.load_probe: Any = None     # live: the stepping thread's run-queue share per window
        self.steps = 0
        self.episodes = 0
        self._ep_len_total = 0
        self._ep_len = 0
        self._joined: set = set()                   # agents with an observation in this episode
        self._done: dict[AgentID, tuple[int, str]] = {}  # agent -> (step, "terminated"|"truncated")
        self._to_act: dict[AgentID, None] = {}      # agents owed an action next (ordered: reproducible sampling)

    @classmethod
    def for_env(cls, env: Any, thresholds: Thresholds = DEFAULT, **kwargs: Any) -> "MultiAgentRolloutChecker":
        """A checker for a MultiAgentEnv (or its ``unwrapped`` sub-env in an EnvRunner)."""
        agents, obs_spaces, act_spaces = agent_spaces(env)
        return cls(obs_spaces, act_spaces, agents, thresholds, **kwargs)

    def _agent(self, aid: AgentID) -> _Agent | None:
        """The agent's state, made at its first observation; None for an agent without spaces."""
        ag = self.agents.get(aid)
        if ag is None:
            obs_space, act_space = self.obs_spaces.get(aid), self.act_spaces.get(aid)
            if obs_space is None or act_space is None:
                return None
            name = agent_name(aid)
            ag = self.agents[aid] = _Agent(RolloutChecker(
                obs_space, act_space, self.th, flush_every=self.flush_every, window=self.window,
                live=self.live,
                log=_AgentLog(self.log, aid), obs_path=f"obs[{name}]", action_path=f"action[{name}]"))
            ag.rc.pipeline_of, ag.rc.drift_judged = self.pipeline_of, self.drift_judged
        return ag

    def agents_to_act(self) -> list[AgentID]:
        """Agents that got an observation at the last reset/step and are not done: the
        ones RLlib sends actions for next (``MultiAgentEpisode.get_agents_to_act``)."""
        return [aid for aid in self._to_act if aid in self.act_spaces]

    # -- the contract, one check each ------------------------------------------------------
    def on_reset(self, obs: Any, info: Any) -> None:
        """After each reset: the reset observation and info dicts."""
        self._joined.clear()
        self._done.clear()
        self._to_act.clear()
        for ag in self.agents.values():
            ag.action, ag.reward = NO_ACTION, 0.0
        self._ep_len = 0
        step = self.steps
        obs = self._check_dict("obs", obs, step)
        infos = self._check_dict("infos", info, step)
        self._check_infos(infos, step)
        for aid, o in obs.items():
            ag = self._agent(aid)
            if ag is not None:
                self._join(aid, ag, o, infos.get(aid))

    def _join(self, aid: AgentID, ag: _Agent, obs: Any, info: Any) -> None:
        ag.rc.on_reset(obs, info if isinstance(info, dict) else {})
        ag.last_obs = obs
        self._joined.add(aid)
        self._to_act[aid] = None

    def on_step(self, action_dict: Mapping, obs: Any, rewards: Any, terminateds: Any, truncateds: Any, infos: Any,
                duration_s: float | None = None, wait_s: float | None = None) -> bool:
        """After each step, with the action dict sent; True when it ended the episode:
        ``__all__`` was set, or every agent of the episode is done (RLlib's episode ends
        then too; without ``__all__`` that is MA_ALL_DONE_MISSING). ``wait_s``: the step's
        run-queue wait (the machine's share of its duration), as for RolloutChecker."""
        step = self.steps = self.steps + 1
        self._ep_len += 1
        if duration_s is not None:
            self.durations.append(duration_s, self.steps)
            if wait_s is not None:
                self.waits.append(wait_s, self.steps)
        obs, rewards, terminateds, truncateds, infos = self._check_step(
            action_dict, obs, rewards, terminateds, truncateds, infos, step)
        joined_before = set(self._joined)
        all_term, all_trunc = done_flag(terminateds.get(ALL)), done_flag(truncateds.get(ALL))
        done_now = set(self._done) | {a for d in (terminateds, truncateds) for a, v in d.items() if done_flag(v)}
        self._act(action_dict, self._rewards(rewards, joined_before, step))

        def flags(aid: AgentID) -> tuple[bool, bool]:
            return done_flag(terminateds.get(aid)) or all_term, done_flag(truncateds.get(aid)) or all_trunc

        self._observe(obs, infos, flags, step)
        self._close_without_obs(obs, flags, step)
        if all_term or all_trunc or self._check_stranded(joined_before, done_now, step):
            self._end_episode()
            return True
        return False

    def _check_step(self, action_dict: Mapping, obs: Any, rewards: Any, terminateds: Any, truncateds: Any,
                    infos: Any, step: int) -> tuple[dict, dict, dict, dict, dict]:
        """Every per-step contract check; the five values as dicts of the keys the env may use."""
        if isinstance(terminateds, dict):  # (not a dict: MA_DICT_INVALID says so)
            self._check_all_key(terminateds, step)
        obs = self._check_dict("obs", obs, step)
        rewards = self._check_dict("rewards", rewards, step)
        terminateds = self._check_dict("terminateds", terminateds, step)
        truncateds = self._check_dict("truncateds", truncateds, step)
        infos = self._check_dict("infos", infos, step)
        self._check_flags("terminateds", terminateds, step)
        self._check_flags("truncateds", truncateds, step)
        self._check_infos(infos, step)
        self._check_after_done((("obs", obs), ("rewards", rewards), ("infos", infos)), step)
        self._check_reward_missing(action_dict, obs, rewards, step)
        return obs, rewards, terminateds, truncateds, infos

    def _act(self, action_dict: Mapping, rewards: dict) -> None:
        """The actions sent wait for their agents' next observations; rewards add up meanwhile."""
        for aid, action in action_dict.items():
            ag = self.agents.get(aid)
            if ag is not None and aid in self._to_act:
                ag.action, ag.reward, ag.sent_at = action, 0.0, self.steps
        self._to_act.clear()
        for aid, ag in self.agents.items():
            if ag.action is not NO_ACTION and aid in rewards:
                ag.reward += rewards[aid]

    def _observe(self, obs: dict, infos: dict, flags: Callable[[AgentID], tuple[bool, bool]], step: int) -> None:
        """Each observation completes its agent's step, or is a joining agent's first."""
        for aid, o in obs.items():
            if aid in self._done:
                continue  # MA_AGENT_AFTER_DONE said so; RLlib would have raised
            ag = self._agent(aid)
            if ag is None:
                continue
            term, trunc = flags(aid)
            if ag.action is not NO_ACTION:
                self._complete(aid, ag, o, term, trunc, infos.get(aid), step)
            elif aid not in self._joined and not (term or trunc):  # done at its first obs: never part of it
                self._join(aid, ag, o, infos.get(aid))

    def _close_without_obs(self, obs: dict, flags: Callable[[AgentID], tuple[bool, bool]], step: int) -> None:
        """Agents whose action waits and who are done now without an observation: terminated
        is fine (RLlib repeats the last observation), truncated is MA_TRUNCATED_WITHOUT_OBS."""
        for aid, ag in self.agents.items():
            if ag.action is NO_ACTION or aid in obs:
                continue
            term, trunc = flags(aid)
            if trunc:
                self._check_truncated_without_obs(aid, step)
            if term or trunc:
                self._complete(aid, ag, copy.deepcopy(ag.last_obs), term, trunc, {}, step)

    def _complete(self, aid: AgentID, ag: _Agent, obs: Any, term: bool, trunc: bool, info: Any, step: int) -> None:
        """The agent's step: its waiting action, the rewards since, this observation."""
        ag.rc.on_step(ag.action, obs, ag.reward, term, trunc, info if isinstance(info, dict) else {})
        # observed in the very step it acted: its turns last several steps; observed later
        # (another agent acted meanwhile), the step it waited on closed one of those turns.
        # Agents that alternate step by step (a board game's players) are never observed in
        # the step they acted: no turns
        if step == ag.sent_at:
            ag.takes_turns = True
        elif ag.takes_turns and not (term or trunc):
            ag.rc.end_turn()
        ag.action, ag.reward, ag.last_obs = NO_ACTION, 0.0, obs
        if term or trunc:
            self._done[aid] = (step, "terminated" if term else "truncated")
        else:
            self._to_act[aid] = None

    def _end_episode(self) -> None:
        for aid in self._joined - self._done.keys():
            self.agents[aid].rc.end_episode()  # an agent that never acted again: close its episode too
        self.episodes += 1
        self._ep_len_total += self._ep_len
        self._ep_len = 0
        self._joined.clear()
        self._done.clear()
        self._to_act.clear()

    def record(self, finding: Finding, key: str = "") -> None:
        """A finding made by the driver (a crash, an API mismatch)."""
        self.log.add(finding, key)

    def judge(self) -> None:
        """Run every agent's whole-stream rules, and the step-time rule once for the env."""
        self.log.extend(step_time_findings(self.durations, self.waits, self.load_probe, self.th, self.live))
        for ag in self.agents.values():
            ag.rc.judge()

    def finish(self, expect_episode_end: bool = True) -> list[Finding]:
        """Run the whole-stream rules and return every finding."""
        self.judge()
        if expect_episode_end and self.steps > 0 and self.episodes == 0:
            self.log.add(Finding(C.EPISODE_NEVER_ENDS,
                                 f"no terminateds/truncateds['__all__'] in {self.steps} steps: expected episodes to "
                                 f"end within the check budget",
                                 {"steps": self.steps, "threshold_steps": self.steps}))
        return self.log.findings()

    def summary(self) -> dict[str, dict]:
        """Per-module statistics for the PASS rows: the env's numbers, then each agent's."""
        per_agent = {str(aid): ag.rc.summary() for aid, ag in self.agents.items()}
        d = self.durations.values() * 1e3
        env_spec = {
            "steps": self.steps, "episodes": self.episodes, "agents": [json_id(a) for a in self.agents],
            "episode_len_mean": self._ep_len_total / self.episodes if self.episodes else None,
            "step_ms_median": float(np.median(d)) if d.size else None,
            "step_ms_p95": float(np.percentile(d, 95)) if d.size else None,
            "agent_steps": {a: s[C.ENV_SPEC]["steps"] for a, s in per_agent.items()},
            "agent_episodes": {a: s[C.ENV_SPEC]["episodes"] for a, s in per_agent.items()},
        }
        out = {C.ENV_SPEC: env_spec}
        for module in (C.OBS_FLOW, C.ACTION_PIPE, C.REWARD_STATS):
            out[module] = {"agents": {a: s[module] for a, s in per_agent.items()}}
        return out
