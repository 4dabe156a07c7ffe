"""Flow1Callbacks: thin glue from RLlib's hooks to flow1's worker agents and run actors.

``config.callbacks(Flow1Callbacks)`` is the whole integration. Every hook is guarded: an
error of flow1 becomes a FLOW1_INTERNAL event and a log warning, never an exception into
RLlib (on a remote EnvRunner that would kill the runner after a 60 s stall).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import time
from typing import Any, Callable

from ray.rllib.callbacks.callbacks import RLlibCallback

from .common import iteration as I
from .common.events import Event
from .options import Flow1Options
from .common.schema import DRIVER_MS, RESULT_KEY
from .driver.hub_turn import (Turn, as_float, ask_all, check_rate, learner_metrics, ms_since, row_head,
                               runner_cost)

logger = logging.getLogger("flow1_ray")



def _guarded(hook: Callable) -> Callable:
    @functools.wraps(hook)
    def run(self: "Flow1Callbacks", *args: Any, **kwargs: Any) -> None:
        try:
            hook(self, *args, **kwargs)
        except Exception as e:  # never into RLlib
            self._internal_error(hook.__name__, e)
    return run


class Flow1Callbacks(RLlibCallback):
    """Watches every EnvRunner and the run; see ``Flow1Callbacks.with_options``."""

    OPTIONS = Flow1Options()

    def __init__(self) -> None:
        super().__init__()
        self._agents: dict[int, Any] = {}
        self._run = None
        self._learner = None
        self._watch = None
        self._run_id = ""
        self.internal_errors = 0
        self.metrics_dropped = 0
        self._states_seen: dict = {}   # a clusterer of its own: its last counts (they go in the next row)
        self._watch_error: BaseException | None = None   # said as WATCHER_OFF once the run exists
        self._no_samples = None
        try:  # built inside Algorithm.setup (before its actors): the driver watchdog starts here
            algorithm = _algorithm_in_setup()
            if algorithm is not None and self.OPTIONS.driver_watch:
                self._start_watch(algorithm)
        except Exception as e:
            self._watch_error = e
            logger.warning("flow1: the driver watchdog did not start: %s: %s", type(e).__name__, e)

    @classmethod
    def with_options(cls, **opts: Any) -> type["Flow1Callbacks"]:
        """A subclass of Flow1Callbacks with some options set, for ``config.callbacks(...)``.

        ``config.callbacks(Flow1Callbacks.with_options(output_dir="runs", stall_timeout_s=60))``

        Args:
            **opts: any field of :class:`~flow1_ray.options.Flow1Options`, by name, e.g.
                ``output_dir``, ``stall_timeout_s``, ``stall_action``, ``sample_rate``,
                ``thresholds``, ``on_fail``. Each option's default and meaning is declared once,
                as the field's docstring in ``flow1_ray/options.py``; the docs' reference page
                "Flow1Callbacks options" (``docs/reference/options.md``) is generated from
                those. Options not given keep this class's values.

        Returns:
            A new class (not an instance): RLlib makes its instances, one in each process that runs
            hooks.

        Raises:
            TypeError: an option name that is not a field of ``Flow1Options``.
            ValueError: a value the option does not accept (e.g. ``stall_action="stop"``).
        """
        options = cls.OPTIONS.with_overrides(**opts)
        return type(cls.__name__, (cls,), {"OPTIONS": options, "__module__": cls.__module__,
                                           "__qualname__": f"{cls.__qualname__}.configured"})

    def _start_watch(self, algorithm: Any) -> None:
        from .driver.run import new_run_id
        from .rundir.store import Location, write_events
        from .driver.watchdog import DriverWatch

        self._run_id = self.OPTIONS.run_id or new_run_id()
        run_dir = Location(self.OPTIONS.resolved_output_dir()) / self._run_id

        def emit_direct(ev: Event) -> None:  # no Recorder yet: the run directory, the log, stderr
            ev.run_id = self._run_id
            print(f"flow1: {ev.log_line()}", file=sys.stderr, flush=True)
            run_dir.mkdir()
            write_events([ev], run_dir)

        self._watch = DriverWatch(algorithm, self.OPTIONS, emit_direct)

    def _emit_to_run(self, ev: Event) -> None:
        run = self._run
        if run is None:
            return
        ev.run_id = run.run_id
        print(f"flow1: {ev.log_line()}", file=sys.stderr, flush=True)   # train() may never return to print it
        run.hub.add_events.remote([ev.to_dict()])

    # -- EnvRunner side ------------------------------------------------------------------
    @_guarded
    def on_environment_created(self, *, env_runner: Any, env: Any, env_context: Any = None, **kwargs: Any) -> None:
        from .runner.agent import RunnerAgent

        agent = self._agents.get(id(env_runner))
        if agent is None:
            agent = self._agents[id(env_runner)] = RunnerAgent(env_runner, self.OPTIONS)
        agent.attach_env(env)

    # -- Algorithm side ------------------------------------------------------------------
    @_guarded
    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        from .driver.run import Flow1Run, runner_keys
        from .liveness.learner import learner_keys
        from .runner.agent import LOCAL_RUN

        opts = self.OPTIONS.with_overrides(run_id=self._run_id) if self._run_id else self.OPTIONS
        run = self._run = Flow1Run(opts, type(algorithm).__name__, _settings(algorithm))
        LOCAL_RUN[str(os.getpid())] = run.run_id
        try:  # the learner side: tracing and liveness on every Learner, the curve rules on the driver
            from .driver.learner_watch import LearnerWatch

            self._learner = LearnerWatch(algorithm, self.OPTIONS, run.run_id)
        except Exception as e:
            self._internal_error("on_algorithm_init(learner)", e)
        run.register(runner_keys(algorithm) + learner_keys(algorithm))
        # Trainable.stop() calls self.cleanup(): wrapping cleanup on the instance covers
        # algo.stop() and Tune's stop alike (Tune calls stop through the actor's class).
        original_cleanup = algorithm.cleanup

        def cleanup(*args: Any, **kw: Any) -> Any:
            if self._watch is not None:   # RLlib's stop has no timeout: watched (STOP_STALLED)
                self._watch.on_stop_begin()
            if self._run is not None:
                self._run.stopping()
            if self._learner is not None:
                try:
                    self._learner.stop()
                except Exception as e:
                    self._internal_error("cleanup(learner)", e)
            try:
                return original_cleanup(*args, **kw)
            finally:
                self._close()

        algorithm.cleanup = cleanup
        atexit.register(self._close)
        if self._watch is not None:
            self._watch.on_init(self._emit_to_run)
        elif self._watch_error is not None:
            from .checks.own.watchers import DRIVER_WATCH, watcher_off

            run.hub.add_events.remote([watcher_off(DRIVER_WATCH, "the driver", self._watch_error,
                                                   "a build, train() or stop() that never returns").to_dict()])
        from .checks.run.incidents import WAIT_HOLD_FACTOR
        from .checks.run.sampling import DiscardedSamples, NoSamples

        self._no_samples = NoSamples(getattr(algorithm, "config", None),
                                     first_call_s=WAIT_HOLD_FACTOR * self.OPTIONS.stall_timeout_s)
        self._discarded = DiscardedSamples(getattr(algorithm, "config", None))
        logger.info("flow1: run %s writing to %s", run.run_id, run.run_dir)

    @_guarded
    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        run = self._run
        if run is None:
            return
        if self._watch is not None:
            self._watch.on_result()
        t0, t = time.perf_counter(), self.OPTIONS.get_timeout_s
        iteration = int(result.get("training_iteration", 0))
        return_mean = as_float(result.get("env_runners", {}).get("episode_return_mean"))
        # what the learner rules read of this iteration before the hub answers: the replay
        # buffer, measured here where it lives (REPLAY_MEMORY)
        early: dict[str, Any] = {}
        result[RESULT_KEY] = early
        try:
            from .driver.replay_footprint import replay_footprint

            replay = replay_footprint(algorithm)
            if replay is not None:
                early["replay"] = replay
        except Exception as e:
            self._internal_error("on_train_result(replay)", e)
        send = Turn(run)
        learner = None
        if self._learner is not None:
            try:
                learner = self._learner.after_iteration(result, iteration, send)
            except Exception as e:
                self._internal_error("on_train_result(learner)", e)
        turn = send.seal()   # what goes with the one call to the hub; from here on, sent apart
        turn["row"] = {I.ROW_HEAD: row_head(result, iteration, return_mean), I.ROW_DROPPED: self.metrics_dropped,
                       I.ROW_TAIL: {DRIVER_MS: ms_since(t0), **learner_metrics(learner or {})}}
        status, rec, states, lines = self._ask_hub(run, algorithm, t, turn)
        if self.OPTIONS.print_events:
            for line in lines:
                print(line, flush=True)
        out = result[RESULT_KEY] = {**self._section(run, status, rec, states), **early}
        run.after_iteration(iteration, return_mean)
        if self._no_samples is not None:
            found = self._no_samples.add(result, iteration, rec.get("sampling"))
            found += self._discarded.add(result, rec.get("sampling") or {}, iteration)
            if found:
                run.hub.add_events.remote([e.to_dict() for e in found])
        if learner is not None:
            out["learner"] = learner
            try:
                self._learner.after_lines(result, learner, iteration, lines, send)
            except Exception as e:
                self._internal_error("on_train_result(learner)", e)
        out["driver_ms"] = ms_since(t0)

    def _ask_hub(self, run: Any, algorithm: Any, t: float, turn: dict) -> tuple[dict, dict, dict, list[str]]:
        """Register new runners and learners, then ask the hub (and a GPU clusterer) for the
        monitor's and the Recorder's status, the new log lines and the clusterer's counts, all
        at once and each within ``t`` seconds, the hub's question carrying ``turn`` (the
        iteration's row, the learner's events and rows); a part that did not answer is said
        in a line, a row the hub could not take is counted (``samples_dropped``)."""
        import ray

        from .driver.run import runner_keys
        from .liveness.learner import learner_keys

        keys = runner_keys(algorithm) + learner_keys(algorithm)
        if set(keys) - set(run.keys):
            run.register(keys)
        # the hub's parts in one call (HubCore.driver_view); a clusterer of its own (a GPU share) apart
        own_states = run.states is not None and run.states is not run.hub
        if own_states:
            turn["states"] = self._states_seen

        def view() -> Any:
            try:
                return run.hub.driver_view.remote(run.cursor, turn)
            except ray.exceptions.PendingCallsLimitExceeded:   # the hub is behind: this row is lost, counted
                self.metrics_dropped += 1
                raise

        got = ask_all({"view": view,
                        "states": (lambda: run.states.states_status.remote()) if own_states else None}, t)
        got = {**got.pop("view", {}), **got}
        status, rec, states = got.get("status", {}), got.get("rec", {}), got.get("states", {})
        if "states" in got:
            self._states_seen = states
        if run.hub_restarted(rec.get("started_at")):
            run.reregister()
        lines: list[str] = []
        if "lines" in got:
            lines, run.cursor = got["lines"]
        missing = [name for name, key in (("monitor", "status"), ("recorder", "rec")) if key not in got]
        if run.states is not None and "states" not in got:
            missing.append("clusterer")
        if missing:
            lines.append(f"flow1: {', '.join(missing)} did not answer within {t:g} s")
        return status, rec, states, lines

    def _section(self, run: Any, status: dict, rec: dict, states: dict) -> dict:
        """``result["flow1"]``: the workers, the findings so far, what flow1 lost or does not watch."""
        return {
            **I.counts(status, rec, states),
            "samples_dropped": I.samples_dropped(rec, self.metrics_dropped),
            "internal_errors": self.internal_errors,
            # what flow1 does not watch in this run (WATCHER_OFF): a run with any is never a plain PASS
            "watchers_off": list(rec.get("watchers_off", [])),
            "run_dir": str(run.run_dir),
            # the share of episodes the runners contract-check now (flow1_ray/checks/own/budgets.py)
            "check_rate": check_rate(rec.get("sampling") or {}),
            # flow1's own time in the runners, as a share of their sample() time (RunnerAgent.cost)
            "runner_cost": runner_cost(rec.get("sampling") or {}, rec.get("hub_cpu")),
        }

    # -- internals -----------------------------------------------------------------------
    def _close(self) -> None:
        if self._watch is not None:
            self._watch.stop()
        run, self._run = self._run, None
        if run is not None:
            try:
                run.close()
            except Exception as e:
                logger.warning("flow1: closing the run failed: %s", e)

    def _internal_error(self, where: str, exc: BaseException) -> None:
        self.internal_errors += 1
        logger.warning("flow1: %s failed (%s: %s); training goes on", where, type(exc).__name__, exc)
        try:
            for agent in self._agents.values():  # an EnvRunner: its agent sends it
                agent.report_internal(where, exc)
                return
            if self._run is not None:
                from .checks.own.watchers import internal_event

                self._run.hub.add_events.remote([internal_event(f"hook {where}", exc, pid=os.getpid()).to_dict()])
        except Exception:
            pass


def _algorithm_in_setup() -> Any:
    """The RLlib Algorithm whose ``setup`` is building this callbacks object, or None (an
    EnvRunner's instance, a user's own construction). Only the nearest callers count
    (setup -> a list comprehension -> a subclass's ``__init__``): an EnvRunner built inside
    setup builds its own instance further down, and must not start a second watch."""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            return None
        if f.f_code.co_name == "setup":
            obj = f.f_locals.get("self")
            if obj is not None and any(c.__name__ == "Algorithm" and c.__module__.startswith("ray.rllib")
                                       for c in type(obj).__mro__):
                return obj
        f = f.f_back
    return None


def _settings(algorithm: Any) -> dict:
    """The Algorithm's config settings for ``run.json`` ({} when they cannot be read: the
    run goes on, its diagnosis says the config is unknown)."""
    try:
        from .checks.advice import config_settings

        return config_settings(getattr(algorithm, "config", None))
    except Exception:   # noqa: BLE001 -- a foreign config object: no settings, never a failed hook
        return {}
