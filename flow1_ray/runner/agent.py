"""What flow1 does inside one EnvRunner: liveness, live contract checks, sends.

- Liveness: a :class:`~flow1_ray.liveness.holder.WorkerLiveness` lock for the runner's
  whole life; ``sample()`` is wrapped to mark busy/idle, the vector env's ``step`` to stamp
  progress (a few attribute writes per vector step) and to catch what the env raises.
- Contract checks: a share ``sample_rate`` of the episodes is fed, step by step, to the
  same :class:`~flow1_ray.checks.env.rollout.RolloutChecker` that ``flow1 check`` uses, with the
  sub-env's raw values (before the vector env copies and casts them); the other episodes'
  steps run with nothing of flow1's around them.
- What sample() returned: its episodes are scanned whole (the NaN scan) and thinned into
  states right after the call, from the wrapper (RLlib's ``on_sample_end`` sees the same
  list); a small sample (off-policy algorithms sample one step per call, hundreds of calls a
  second) is held, with each episode's length and end as they were, and read with the
  next ones, at most ``HOLD_STEPS`` steps or ``HOLD_S`` seconds later (holding.py).
- Sends: after a read, and only when there is something new, one fire-and-forget call to the
  run's hub (its Recorder); past the hub's limit of calls in flight (3x ``max_pending_calls``)
  the batch is dropped and counted (SAMPLES_DROPPED).
- States: a training runner thins the episodes into (state, action, failed) rows for the
  StateClusterer (:mod:`~flow1_ray.runner.states`), sent at most every ``state_send_interval_s``.
- The pipeline: windows of what the RLModule saw and emitted, judged (:mod:`~flow1_ray.runner.pipe_watch`).
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import replace
from typing import Any

from ..common import codes as C
from ..checks.env.episode_parts import EpisodePart, episode_parts
from ..checks.findings import Finding, FindingLog
from ..checks.env.rollout import RolloutChecker
from ..checks.env.sample_scan import SampleScan
from ..checks.run.sampling import SampleTimes
from ..checks.thresholds import DEFAULT
from ..common.names import NAMESPACE
from ..options import Flow1Options
from ..common.schema import DEFAULT_MODULE_ID
from ..checks.own.watchers import LIVENESS, STATE_SAMPLING, TRACEBACK, error_line, traceback_text, watcher_off_finding
from ..liveness.holder import NoLiveness, WorkerLiveness
from ..liveness.lockdir import job_lock_dir
from ..checks.own.budgets import CheckBudget
from .cost import CostAccount, thread_time
from .sender import Sender
from .reward_audit import LiveRewardAudit
from .env_watch import EnvWatch
from .holding import SampleHolding
from .states import StateSampler
from .pipe_watch import pipe_tick, start_pipe
from ..liveness.crash_site import crash_site, done_in_failed_call, watch_os_exit, where_sampling, wrap_state_sync

JUDGE_EVERY_S, JUDGE_SHARE = 5.0, 0.002   # distribution rules run at most this often, and at most this share of the time
SAMPLE_TIMES_EVERY_S = 2.0    # a runner's sample() timing goes to the hub this often (a late call at once)
WATCHDOG_TICK_S = 0.25        # the watchdog writes the heartbeat and checks for a stall this often


#: The run id of local EnvRunners (they live in the Algorithm's process).
LOCAL_RUN: dict[str, str] = {}


class RunnerAgent(EnvWatch, SampleHolding):
    def __init__(self, env_runner: Any, opts: Flow1Options) -> None:
        import ray

        self.opts = opts
        self.kind = "eval" if getattr(env_runner.config, "in_evaluation", False) else "train"
        self.index = int(getattr(env_runner, "worker_index", 0) or 0)
        ctx = ray.get_runtime_context()
        self.actor_id = ctx.get_actor_id()
        self.local = self.actor_id is None
        self.key = self.actor_id or f"local-{os.getpid()}-{self.kind}{self.index}"
        meta = {"worker_index": self.index, "eval": self.kind == "eval", "actor_id": self.actor_id,
                "node_id": ctx.get_node_id(), "local": self.local, "kind": self.kind}
        off: Finding | None = None
        try:
            self.liveness: WorkerLiveness | NoLiveness = WorkerLiveness(
                job_lock_dir(ctx.get_job_id(), ctx.get_node_id()), f"{self.key}.{os.getpid()}", meta,
                # the watchdog's tick bounds how late a stall's stack is written: keep it short
                heartbeat_interval_s=min(opts.heartbeat_interval_s, WATCHDOG_TICK_S, opts.stall_timeout_s / 8),
                stall_timeout_s=opts.stall_timeout_s, arm_faulthandler=not self.local)
        except Exception as e:  # no lock file: this runner goes unwatched, and says so
            self.liveness = NoLiveness()
            off = watcher_off_finding(LIVENESS, f"{self.kind} worker {self.index} (pid {os.getpid()})", e,
                                      "its death or hang")
        self.thresholds = DEFAULT.with_overrides(opts.thresholds)
        self.log = FindingLog()
        self.scan = SampleScan(self.log, f"{self.kind} worker {self.index}: ")
        self.checkers: list[RolloutChecker] = []
        self._fed: set[int] = set()   # indices of the checkers fed a step or reset since their last judgement
        self.rng = random.Random(hash((self.key, os.getpid())))
        self._last_judge = time.monotonic()
        self._judge_every = JUDGE_EVERY_S
        self._internal_sent, self.node_id = set(), ctx.get_node_id()
        self.sender = Sender(self.key, self._lookup_recorder, self.index)
        timeout = getattr(env_runner.config, "sample_timeout_s", None) if self.kind == "train" else None
        self.sample_times = SampleTimes(timeout)
        self.budget = CheckBudget(opts.sample_rate, opts.check_budget, opts.min_sample_rate)
        self._times_sent = -SAMPLE_TIMES_EVERY_S   # perf_counter() of the last send
        self.hooks_s = 0.0    # flow1's own time in on_sample_end (less the judgements) and after each sample()
        self.account = CostAccount()   # flow1's own CPU per feature (cost.py)
        self._parts_s = 0.0   # CPU booked to features inside the current after-sample() work
        self.sample_s = 0.0   # the sample() calls' time
        self.states: StateSampler | None = None
        self.audit: LiveRewardAudit | None = None   # options.audit_reward, on one runner
        self._held: list[EpisodePart] = []   # small samples' episode chunks, read together
        self._held_steps, self._held_since = 0, 0.0
        self._lock, self.env_runner, self.multi_agent = threading.Lock(), env_runner, False
        self.alloc: Any = None   # an AllocSampler: where the runner's memory grows (set with its env)
        self._maps_off_said: set[str] = set()
        self._crashes: dict[tuple[str, str, str], list] = {}   # (call, exception, frame) -> [count, told, first, last]
        self._last_crash: BaseException | None = None
        self._sync_wrapped = False
        self.pipe: Any = None   # a PipeWatch (pipe_watch.py) from the first sample(); False: none here
        self._wrap_runner(env_runner)
        if not self.local:   # the runner's own process: an os._exit in it is recorded with its caller
            watch_os_exit(self.liveness.record_cause)
        if off is not None:
            self._send([off])

    # -- wrapping ------------------------------------------------------------------------
    def _wrap_runner(self, env_runner: Any) -> None:
        lv = self.liveness
        sample, stop = env_runner.sample, env_runner.stop
        clock = time.perf_counter

        def wrapped_sample(*args, **kwargs):
            lv.busy()
            if not self._sync_wrapped:   # the module exists by the first sample(): the weight sync's parts
                self._sync_wrapped = wrap_state_sync(env_runner, lv.record_cause) > 0
                self.pipe = self.pipe if self.pipe is not None else start_pipe(self, env_runner)
            s0, t0, c0 = lv.steps, clock(), thread_time()
            samples = None
            try:
                samples = sample(*args, **kwargs)
                if lv.cause_recorded:   # it raised before and went on: that was not its end
                    lv.clear_cause()
                return samples
            except BaseException as e:   # recorded next to the lock, then re-raised untouched
                self._sample_raised(e)
                raise
            finally:
                t1 = clock()
                lv.idle()
                self._sampled(t1 - t0, lv.steps - s0, t1, samples)
                if self.pipe:
                    pipe_tick(self, lv.steps)
                self.account.sampled(thread_time() - c0, lv.steps - s0)   # flow1's after-sample work included

        def wrapped_stop(*args, **kwargs):
            lv.close()
            try:
                self.flush()
            except Exception:
                pass
            try:  # the last count of each repeated crash, what the reward audit found since its last look
                repeats = [self._repeat_finding(k) for k, (n, told, _, _) in self._crashes.items() if n > told]
                if self.audit is not None:
                    repeats += self.audit.new_findings()
                if repeats:
                    self._send(repeats)
            except Exception:
                pass
            return stop(*args, **kwargs)

        env_runner.sample = wrapped_sample
        env_runner.stop = wrapped_stop

    def _sample_raised(self, exc: BaseException) -> None:
        """An exception left ``sample()``: where it came from (the env, a connector, the
        RLModule, the action sampling, a callback, RLlib), recorded next to the lock before
        RLlib ends the process, for the WORKER_DIED the probe will write, after the findings
        of this ``sample()`` so far are judged and sent (one may be the death's likely origin).
        The env's own exception was recorded (and sent as ENV_CRASHED) by the step wrapper
        already."""
        chain, e = [], exc
        while e is not None and len(chain) < 5:
            chain.append(e)
            e = e.__cause__ or e.__context__
        if self._last_crash is not None and any(e is self._last_crash for e in chain):
            return   # RLlib's ``raise RuntimeError from e`` of the env's own: recorded as the env's
        try:   # what this sample() stepped so far is scanned and judged, and goes out first: a
            # finding there (a NaN observation) is the death's likely origin; silent if it fails
            ongoing = [e for e in (getattr(self.env_runner, "_ongoing_episodes", None) or []) if e is not None]
            parts = self._held + episode_parts(done_in_failed_call(exc, self.env_runner) + ongoing)
            self._held, self._held_steps = [], 0
            if parts and not self.scan.broken:
                with self._lock:
                    self.scan.scan_parts(parts)
            self._last_judge = float("-inf")
            self._read([])
        except Exception:
            pass
        try:
            site = crash_site(exc, self.env_runner)
            site["env_steps"] = self.liveness.steps
            site["sub_envs"] = where_sampling(self.env_runner)
            self.liveness.record_cause(site)
        except Exception:
            pass

    def _sampled(self, seconds: float, steps: int, t0: float, samples: Any) -> None:
        """After each sample() call (it ended at ``t0``, perf_counter), with what it returned:
        its episodes (:meth:`_hold_or_read`), and its timing, which goes to the hub when the
        call was late (a synchronous algorithm discarded it: RUNNER_SAMPLES_DISCARDED) and
        every SAMPLE_TIMES_EVERY_S (the runners' steps are the whole the waste is a share of);
        fire-and-forget. Kept to a few operations: an off-policy runner calls it hundreds of
        times a second. Never raises into RLlib."""
        self.sample_s += seconds
        judged = 0.0
        c0 = thread_time()
        try:
            if samples:
                judged = self._hold_or_read(samples, t0)
        except Exception as e:
            self.report_internal("on_sample_end", e)
        try:
            late = self.sample_times.add(seconds, steps)
            budget = self.budget
            budget.sampled(seconds)
            if budget.said is not None and not budget.told:
                self._send([budget.lowered_finding(f"{self.kind} worker {self.index}: ")])
            if late or t0 - self._times_sent >= SAMPLE_TIMES_EVERY_S:
                self._times_sent = t0
                self.sender.call({"events": [], "sampling": {**self.sample_times.as_dict(), **budget.as_dict(),
                                                             **self.cost()}})
        except Exception as e:
            self.report_internal("sample() timing", e)
        if self.alloc is not None:
            self._alloc_tick()
        self.hooks_s += time.perf_counter() - t0 - judged
        self.account.add("hooks", thread_time() - c0 - self._parts_s)
        self._parts_s = 0.0

    def _alloc_tick(self) -> None:
        """The allocation-site windows (alloc_sites.py): a window's summary (and its tracing's
        CPU) to the hub and the account; a few comparisons while the RSS is flat."""
        c0 = thread_time()
        try:
            out = self.alloc.tick(float(getattr(self.liveness, "rss", 0) or 0), self.liveness.steps)
            if out is not None:
                self.account.add("alloc_sites", float(out.get("tracing_cpu_s", 0.0)))   # tracemalloc's hook
                self.sender.call({"events": [], "alloc_sites": out})
        except Exception as e:
            self.alloc = None
            self.report_internal("the allocation-site sampling", e)
        self._parts_s += (spent := thread_time() - c0)
        self.account.add("alloc_sites", spent)

    def cost(self) -> dict:
        """flow1's own time in this runner so far, and the sample() time it is a share of:
        the checks (checked steps and resets, judgements) and the per-sample() hooks (the
        scan, the state sampling, the sends). Not in it: the vector step's liveness wrapper,
        a few attribute writes per vector step (measured apart: scripts/bench_runner_overhead.py)."""
        self.account.watchdog(float(getattr(self.liveness, "watchdog_cpu_s", 0.0) or 0.0))
        return {"flow1_s": round(self.budget.checks_s + self.hooks_s, 4), "sample_s": round(self.sample_s, 3),
                "cost": self.account.as_dict()}

    def _start_state_sampling(self) -> None:
        """After the wrappers are in place: a space the clusterer cannot take (a Tuple
        action, say) costs the state maps of that module, never liveness or checks; it is
        said once, as a note (STATE_MAPS_OFF), not as a fault of the run."""
        sender = Sender(f"{self.key}/states", self._lookup_clusterer, self.index, method="ingest_states")
        common = dict(seed=hash((self.key, os.getpid())) & 0xFFFFFFFF, send_every_s=self.opts.state_send_interval_s)
        try:
            if self.multi_agent:
                self.states = StateSampler(None, None, self.opts.state_sample_rate, sender,
                                           resolve=self._module_spaces, **common)
            else:
                self.states = StateSampler(*self.spaces, self.opts.state_sample_rate, sender,
                                           module_of=lambda: getattr(self.env_runner, "module", None), **common)
        except Exception as e:
            self.opts = replace(self.opts, state_actions=False)  # do not try again
            self._maps_off(DEFAULT_MODULE_ID, f"{type(e).__name__}: {e}")

    def _module_spaces(self, module_id: str) -> tuple[Any, Any, Any]:
        module = self.env_runner.module[module_id]
        return module.observation_space, module.action_space, module

    def _maps_off(self, module_id: str, why: str | BaseException) -> None:
        """A module's state maps stop, said once: a space they cannot take is a note
        (STATE_MAPS_OFF); rows they were built to read and failed on are a watcher off."""
        if module_id in self._maps_off_said:
            return
        self._maps_off_said.add(module_id)
        if isinstance(why, BaseException):
            self._send([watcher_off_finding(STATE_SAMPLING, f"module {module_id}", why, "", consequence=(
                "its state-action maps stop; liveness and contract checks go on"))])
            return
        self._send([Finding(C.STATE_MAPS_OFF, f"state-action maps are off for module {module_id}: {why[:300]}; "
                                              f"liveness and contract checks go on",
                            {"module": module_id, "why": why[:300]})])

    def _internal(self, exc: BaseException) -> None:
        """A live check failed: counted in the log, sent with the next batch."""
        self.log.hit(C.FLOW1_INTERNAL, type(exc).__name__, lambda: (
            f"flow1 failed to judge a live step: {error_line(exc)}",
            {"exception": type(exc).__name__, "error": error_line(exc), TRACEBACK: traceback_text(exc)}))

    def report_internal(self, where: str, exc: BaseException) -> None:
        """A flow1 hook failed: send it now (the failing hook may be the one that sends),
        once per hook and exception type."""
        key = f"{where}:{type(exc).__name__}"
        if key in self._internal_sent:
            return
        self._internal_sent.add(key)
        self._send([Finding(C.FLOW1_INTERNAL, f"flow1 hook {where} failed: {error_line(exc)}; training goes on",
                            {"hook": where, "exception": type(exc).__name__, "error": error_line(exc),
                             TRACEBACK: traceback_text(exc)})])

    def _read(self, parts: list[EpisodePart]) -> float:
        """The scan, the state sampling, the judgements when due and the sends; returns the
        judgements' time (counted with the checks')."""
        spent = 0.0
        acct, c0 = self.account, thread_time()
        if parts and not self.scan.broken:
            try:
                with self._lock:
                    self.scan.scan_parts(parts)
            except Exception as e:   # an episode this scan cannot read: said once, the checked episodes go on
                self.scan.broken = True
                self.report_internal("the scan of every sampled step", e)
        c1 = thread_time()
        acct.add("scan", c1 - c0)
        if self.states is not None and parts:
            try:
                self.states.add_parts(parts)
                self.states.maybe_send()
            except Exception as e:
                self.report_internal("state sampling", e)
            for mid, why in [*self.states.unsupported.items(), *self.states.failed.items()]:
                self._maps_off(mid, why)
        c2 = thread_time()
        acct.add("states", c2 - c1)
        now = time.monotonic()
        judged = False
        with self._lock:
            if now - self._last_judge >= self._judge_every:
                judged = True
                # only the checkers fed since their last judgement: the same window judged
                # again says nothing new (at a low check rate most sub-envs' windows are idle);
                # a judgement over full windows of many sub-envs takes tens of ms: the next one
                # waits until this one is JUDGE_SHARE of the time between them; its time counts
                # against the check budget like the steps' checks
                self._last_judge = now
                t0 = time.perf_counter()
                for i in sorted(self._fed):
                    self.checkers[i].judge()
                self._fed.clear()
                spent = time.perf_counter() - t0
                self._judge_every = max(JUDGE_EVERY_S, spent / JUDGE_SHARE)
                self.budget.spent_s += spent
            new = self.log.pop_new()
            if self.audit is not None and judged:
                new += self.audit.new_findings()
        c3 = thread_time()
        acct.add("checks", c3 - c2)   # the judgements (and the log's new findings)
        if new or self.sender.has_news:
            self._send(self._dump_nonfinite(new))
        c4 = thread_time()
        acct.add("sends", c4 - c3)
        self._parts_s += c4 - c0
        return spent

    # -- sending -------------------------------------------------------------------------
    def _lookup(self, name_of: Any) -> Any:
        """The run's actor named by ``name_of(run_id)``, or None while the run is unknown."""
        import ray

        from ..common.names import runner_run_id

        run_id = LOCAL_RUN.get(str(os.getpid())) if self.local else runner_run_id(self.actor_id)
        return ray.get_actor(name_of(run_id), namespace=NAMESPACE) if run_id else None

    def _lookup_recorder(self) -> Any:
        from ..common.names import hub_name
        return self._lookup(hub_name)

    def _lookup_clusterer(self) -> Any:
        """The run's own StateClusterer actor if it has one (a GPU share), else the hub."""
        from ..common.names import hub_name, states_name
        try:
            return self._lookup(states_name)
        except ValueError:  # no such actor: the clusterer lives in the hub
            return self._lookup(hub_name)

    def _send(self, findings: list[Finding]) -> None:
        where = dict(worker_index=self.index, pid=os.getpid(), node_id=self.node_id)
        events = []
        for f in findings:
            e = f.to_event(**where).to_dict()
            e["evidence"]["worker_kind"] = self.kind
            events.append(e)
        self.sender.send(events)

    @property
    def dropped(self) -> int:
        return self.sender.dropped + (self.states.sender.dropped if self.states is not None else 0)
