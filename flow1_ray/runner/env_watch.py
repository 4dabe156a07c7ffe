"""What flow1 puts around a runner's env: the vector env's step (liveness: the stall clock,
the progress stamp, the step count and time, and what the env raised) and each sub-env's
step and reset (the contract checks of a checked episode, with the sub-env's raw values).

A mixin of :class:`~flow1_ray.runner.agent.RunnerAgent`: the state it reads and fills
(``liveness``, ``checkers``, ``budget``, ``log``...) is the agent's own, made in its
constructor; ``attach_env`` is called from RLlib's ``on_environment_created``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..checks.env.env_spec import crash_finding
from ..checks.env.machine_load import WaitShare, gc_pause_s
from ..checks.findings import Finding
from ..checks.env.rollout import RolloutChecker
from ..common import codes as C
from ..checks.run.death_cause import ENV
from ..liveness.holder import format_exception
from ..liveness.lockfile import STEP_EMA
from .alloc_sites import AllocSampler, Owners, env_code
from .cost import thread_time
from .flight import FlightRecorder, rng_state, unseeded_first
from .flight_agents import MultiAgentFlightRecorder
from .flight_watch import NONFINITE, SPACE, crash_dumps, env_build_spec, hang_dumps, life_dumps, nonfinite_dumps
from .reward_audit import LiveRewardAudit, audits_here

LIVE_WINDOW = 20_000          # steps kept per series for the distribution rules
#: env-to-module connectors that normalise observations (OBS_UNSCALED stays silent behind one)
NORMALIZING_CONNECTORS = ("MeanStdFilter",)


def pipeline_scaling(env_runner: Any) -> tuple[bool, str] | None:
    """(whether the runner's env-to-module pipeline normalises observations, its connectors'
    names, nested pipelines walked), None before RLlib has built it (after the env)."""
    pipe = getattr(env_runner, "_env_to_module", None)
    if pipe is None:
        return None
    names: list[str] = []

    def walk(p: Any, depth: int = 0) -> None:
        for c in list(getattr(p, "connectors", None) or ())[:64]:
            names.append(type(c).__name__)
            if depth < 4:
                walk(c, depth + 1)

    walk(pipe)
    return any(n in NORMALIZING_CONNECTORS for n in names), ", ".join(names)


class EnvWatch:
    """Wrappers on the env a runner steps; see the module's docstring."""

    flight: FlightRecorder | None = None   # the flight recorder of the env's sub-envs (runner/flight.py)
    flight_subs: list = []
    flight_env: dict | None = None         # how to build a sub-env again
    repro_count = 0
    dumped_codes: frozenset = frozenset()   # the non-finite codes already dumped by this runner

    def attach_env(self, env: Any) -> None:
        """Wrap each sub-env of a (new) vector env; called from on_environment_created.
        A MultiAgentEnvRunner's vector env (RLlib's VectorMultiAgentEnv, per-agent
        ``single_observation_spaces``) gets a multi-agent checker per sub-env."""
        with self._lock:  # RLlib closed the previous env (make_env again): judge and drop its checkers
            for rc in self.checkers:
                rc.judge()
            self.checkers = []
            self._fed.clear()
        self.multi_agent = getattr(env, "single_observation_spaces", None) is not None
        self.spaces = (None, None) if self.multi_agent else (
            getattr(env, "single_observation_space", None) or env.observation_space,
            getattr(env, "single_action_space", None) or env.action_space)
        subs = getattr(env, "envs", None)
        n = len(subs) if subs else int(getattr(env, "num_envs", 1) or 1)
        # NEXT_STEP autoreset: a sub-env reset inside the vector step is a step not taken
        # (gymnasium's AutoresetMode.NEXT_STEP; RLlib's multi-agent vector env says "next_step")
        resets_in_step = str(getattr(env, "autoreset_mode", "")).upper().endswith("NEXT_STEP")
        self._start_flight(subs, n, resets_in_step)
        self._wrap_vector_step(env, n)
        for sub in subs or ():  # one checker per sub-env: episodes of sub-envs interleave
            self._wrap_sub_env(sub, len(self.checkers), self._new_checker(sub), resets_in_step)
        if self.alloc is None and self.opts.alloc_sites:
            self.alloc = AllocSampler(lambda: Owners(*env_code(env)), lambda: self.liveness.steps,
                                      min_age_s=self.thresholds.leak_min_seconds)
        if self.states is None and self.opts.state_actions and self.kind == "train":
            self._start_state_sampling()
        if self.opts.audit_reward and subs and audits_here(self.env_runner, self.index, self.kind):
            try:
                self.audit = LiveRewardAudit(subs[0], self.report_internal)
            except Exception as e:
                self.report_internal("the reward-logic audit", e)

    def _start_flight(self, subs: Any, n: int, next_step: bool) -> None:
        """A flight recorder for the sub-envs (a multi-agent env's: per agent)."""
        self.flight = None
        if not self.opts.flight_recorder or not subs:
            return
        try:
            cls = MultiAgentFlightRecorder if self.multi_agent else FlightRecorder
            self.flight = cls(n, int(self.opts.flight_mb * 1024**2), next_step=next_step)
            self.flight_subs = list(subs)
            self.flight_env = env_build_spec(self.env_runner, self.index)
            self.liveness.on_stall = self._stall_dump
        except Exception as e:
            self.flight = None
            self.report_internal("the flight recorder", e)

    def _flight_before_reset(self, sub: Any, args: tuple, kwargs: dict) -> dict | None:
        """The env's generator state before a reset; a reset without a seed of an env whose own
        generator is unset gets one drawn here (as gymnasium would draw it, but a seed the replay
        knows): an env that never sets it (a multi-agent env seeding its parts) gets one at every
        episode, so that an episode replays alone once the rows no longer hold the env's life."""
        if self.flight is None:
            return None
        state = rng_state(sub)
        if state is None and kwargs.get("seed") is None and not args and unseeded_first(sub):
            kwargs["seed"] = int.from_bytes(os.urandom(4), "little")
        return state

    def _flight_reset(self, index: int, kwargs: dict, state: dict | None, obs: Any) -> None:
        flight = self.flight
        if flight is None:
            return
        try:
            flight.on_reset(index, kwargs.get("seed"), kwargs.get("options"), state, obs,
                            bool(self.liveness.in_step_since))
        except Exception as e:
            self.flight = None
            self.report_internal("the flight recorder", e)

    def _flight_row(self) -> Any:
        """The vector step's recording: one row of the flight recorder, measured on one vector
        step in FLIGHT_EVERY; a failure of its own stops it and is said once."""
        flight, acct, agent = self.flight, self.account, self
        if flight is None:
            return None
        sampled = acct.flight
        due, on_step = sampled.due, flight.on_step

        def record(actions, out):
            c0 = thread_time() if due() else None
            try:
                on_step(actions, out[0], out[1])
            except Exception as e:
                flight.off = f"{type(e).__name__}: {e}"
                agent.flight = None
                agent.report_internal("the flight recorder", e)
            if c0 is not None:
                sampled.add(thread_time() - c0 - acct.read_s)
        return record

    def _wrap_vector_step(self, env: Any, n: int) -> None:
        """Liveness on the vector env's step, once per ``n`` sub-env steps: the stall clock,
        the progress stamp, the step count and time, and what the env raised. The sub-envs'
        own steps go unwrapped unless their episode is checked (:meth:`_wrap_sub_env`): on a
        fast vectorised env a wrapper on every sub-env step was most of flow1's cost there."""
        lv, agent, step = self.liveness, self, env.step
        clock = time.time
        ema = STEP_EMA
        acct = self.account
        sampled = acct.liveness
        due = sampled.due
        record = self._flight_row()
        flight = self.flight

        def stamp(t0):
            """After the env's step: the progress stamp, the step count and time."""
            t1 = lv.last_progress = clock()
            lv.in_step_since = 0.0
            lv.steps += n
            d = (t1 - t0) / n
            lv.step_time_ema += ema * (d - lv.step_time_ema) if lv.step_time_ema else d

        def measured(actions):
            """One vector step in LIVENESS_EVERY: the wrapper's own CPU, around the env's step."""
            g0, c0 = gc_pause_s(), thread_time()
            t0 = lv.in_step_since = clock()
            c1, ga = thread_time(), gc_pause_s()
            if flight is not None:
                flight.pending = actions   # what a step that hangs was called with
            try:
                out = step(actions)
            except Exception as e:
                agent._crashed(e, actions=actions)
                raise
            g1, c2 = gc_pause_s(), thread_time()
            stamp(t0)
            c3 = thread_time()
            if ga == g0 and gc_pause_s() == g1:   # no garbage collection inside the two intervals
                sampled.add((c1 - c0) + (c3 - c2) - 2 * acct.read_s)
            if record is not None:
                record(actions, out)
            return out

        def wrapped(actions):
            if due():
                return measured(actions)
            t0 = lv.in_step_since = clock()
            if flight is not None:
                flight.pending = actions   # what a step that hangs was called with
            try:
                out = step(actions)
            except Exception as e:
                agent._crashed(e, actions=actions)
                raise
            stamp(t0)
            if record is not None:
                record(actions, out)
            return out

        env.step = wrapped

    def _new_checker(self, sub: Any) -> Any:
        """The sub-env's checker: each agent of a multi-agent env against its own spaces."""
        if self.multi_agent:
            from ..checks.env.multi_agent import MultiAgentRolloutChecker

            rc = MultiAgentRolloutChecker.for_env(getattr(sub, "unwrapped", sub), self.thresholds,
                                                  window=LIVE_WINDOW, log=self.log, live=True)
        else:
            rc = RolloutChecker(*self.spaces, self.thresholds, window=LIVE_WINDOW, log=self.log, live=True)
        rc.load_probe = WaitShare()   # judged in on_sample_end, on the stepping thread
        rc.pipeline_of = self._pipeline   # built after the env: read when an observation's scale asks
        # the reset-drift test on sub-env 0 alone: each checker's false alarms (1 in 2,000) would add up
        # over a runner's sub-envs; the resets of one sub-env are the env's
        rc.drift_judged = not self.checkers
        self.checkers.append(rc)
        return rc

    def _pipeline(self) -> tuple[bool, str] | None:
        return pipeline_scaling(self.env_runner)

    def _wrap_sub_env(self, sub: Any, index: int, rc: Any, resets_in_step: bool) -> None:
        """Each reset draws whether the new episode is checked (a sub-env's first always is).
        A checked episode's steps go through ``checked_step`` (the sub-env's raw values, before
        the vector env copies and casts them, and its own step time); an unchecked one's steps
        call the env directly, at no cost."""
        lv, agent, budget, fed, acct = self.liveness, self, self.budget, self._fed, self.account
        checks_due = acct.checks.due
        step, reset = sub.step, sub.reset
        own = "step" in vars(sub)   # an instance attribute before ours (another wrapper): restore it
        clock = time.perf_counter
        first = True   # a sub-env's first episode is always checked: a fault of every episode shows at once

        def checked_step(action):
            g0, t0 = gc_pause_s(), clock()
            try:
                out = step(action)
            except Exception as e:
                agent._crashed(e, action=action, sub=index)
                raise
            t1 = clock()
            c0, g1 = thread_time() if checks_due() else None, gc_pause_s()   # one in CHECKS_EVERY: its CPU
            try:
                with agent._lock:   # a garbage collection's pause is the process's heap, not the step
                    rc.on_step(action, *out, duration_s=t1 - t0 - (g1 - g0))
                    fed.add(index)
            except Exception as e:
                agent._internal(e)
            if c0 is not None and gc_pause_s() == g1:
                acct.checks.add(thread_time() - c0 - acct.read_s)
            budget.spent_s += clock() - t1
            return out

        def wrapped_reset(*args, **kwargs):
            nonlocal first
            if resets_in_step and lv.in_step_since:
                lv.steps -= 1
            state = agent._flight_before_reset(sub, args, kwargs)
            try:
                out = reset(*args, **kwargs)
            except Exception as e:
                agent._flight_reset(index, kwargs, state, None)   # the failing reset is the episode to replay
                agent._crashed(e, "reset", sub=index)
                raise
            agent._flight_reset(index, kwargs, state, out[0])
            if first or agent.rng.random() < budget.rate:
                first = False
                sub.step = checked_step
                agent._checked_reset(rc, index, out)
            elif own:
                sub.step = step
            else:
                vars(sub).pop("step", None)
            return out

        sub.reset = wrapped_reset

    def _checked_reset(self, rc: Any, index: int, out: Any) -> None:
        """A checked episode's reset through its checker, its CPU booked to the checks."""
        t1, c0 = time.perf_counter(), thread_time()
        try:
            with self._lock:
                rc.on_reset(*out)
                self._fed.add(index)
        except Exception as e:
            self._internal(e)
        self.account.add("checks", thread_time() - c0)
        self.budget.spent_s += time.perf_counter() - t1

    def _stall_dump(self, stalled_s: float, frame: Any) -> list[str]:
        """The watchdog thread's call on a stalled step: the hanging sub-env to ``repro/``, once;
        the entries' names, which the stack file hands to the probe's WORKER_STALLED."""
        if "ENV_HUNG" in self.dumped_codes:
            return []
        self.dumped_codes = self.dumped_codes | {"ENV_HUNG"}
        try:
            return hang_dumps(self, stalled_s, frame)
        except Exception as e:
            self.report_internal("the flight recorder's dump", e)
            return []

    def _dump_nonfinite(self, findings: list) -> list:
        """A runner's first OBS_NAN_INF and REWARD_NAN each send the sub-envs that produced
        one to ``repro/``, its first space violation (SPACE) and each REWARD_UNEARNED the
        sub-envs' lives (named in the finding's evidence); the findings, for sending."""
        for f in findings:
            once = f.code in NONFINITE or f.code in SPACE
            if (once and f.code not in self.dumped_codes or f.code == "REWARD_UNEARNED") and self.flight is not None:
                self.dumped_codes = self.dumped_codes | {f.code}
                try:
                    names = nonfinite_dumps(self, f) if f.code in NONFINITE else life_dumps(self, f)
                    if names:
                        f.evidence["repro"] = names
                except Exception as e:
                    self.report_internal("the flight recorder's dump", e)
        return findings

    # -- findings ------------------------------------------------------------------------
    def _crashed(self, exc: BaseException, call: str = "step", action: Any = None, sub: int | None = None,
                 actions: Any = None) -> None:
        """The env raised: record it next to the lock (the process may exit next) and send
        ENV_CRASHED now, before RLlib's restart delay and exit. An env that raises again and
        again (RLlib recreating it each time) is one incident: its first crash is the
        finding, repeats are counted and said as PASS rows when the count doubles (and at
        the end), so a crashing env gives a number of rows logarithmic in its crashes. A
        sub-env's exception seen again by the vector env's wrapper is not counted twice."""
        if exc is self._last_crash:
            return
        self._last_crash = exc
        try:
            self.liveness.record_cause({**format_exception(exc), "component": ENV, "call": call,
                                        "env_steps": self.liveness.steps})
            f = crash_finding(call, exc, self.liveness.steps + 1, None,
                              who=f"{self.kind} worker {self.index} (pid {os.getpid()}): ")
            key = (call, f.evidence.get("exception", ""), f.evidence.get("frame", ""))
            now = time.time()
            seen = self._crashes.get(key)
            if seen is None:
                self._crashes[key] = [1, 1, now, now]
                try:   # the crashing sub-env's episode, for flow1 replay
                    names = crash_dumps(self, exc, call, f, action, sub, actions)
                    if names:
                        f.evidence["repro"] = names
                except Exception as e:
                    self.report_internal("the flight recorder's dump", e)
                self._send([f])
                return
            seen[0] += 1
            seen[3] = now
            if seen[0] >= 2 * seen[1]:
                self._send([self._repeat_finding(key)])
        except Exception:
            pass

    def _repeat_finding(self, key: tuple[str, str, str]) -> Finding:
        count, _, first, last = self._crashes[key]
        self._crashes[key][1] = count
        call, exc, frame = key
        return Finding(C.ENV_CRASHED, f"{self.kind} worker {self.index} (pid {os.getpid()}): {call}() raised {exc} in "
                                      f"{frame} again: {count} times so far; the same incident as the first, counted",
                       {"repeat_of": list(key), "count": count, "first_seen": first, "last_seen": last},
                       status=C.PASS)
