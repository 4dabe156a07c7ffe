"""The PIPELINE rules live, in a single-agent EnvRunner: what its RLModule sees and emits, judged
on windows of its own sampling, with the tap of ``flow1 check --config`` (:mod:`flow1_ray.pipeline.tap`).

The tap sits in front of the runner's two connector pipelines for the whole run, recording only
inside a window: the first ``WINDOW_ROWS`` module forward passes of the runner's first
``sample()`` calls (the RLModule as the run starts), then one window each ``every_steps`` env
steps. Outside a window a pipeline call costs the tap one attribute read. A full window is
judged after the ``sample()`` call that filled it, in the runner's thread, and what it finds
goes to the hub once per code (the same fault seen again in the next window is not news).
What it costs is booked to the cost account's ``pipeline`` line (:mod:`.cost`).
"""

from __future__ import annotations

from typing import Any

from ..checks.findings import Finding
from ..checks.pipeline.module_output import pipeline_findings
from ..checks.thresholds import Thresholds
from .cost import thread_time

#: module forward passes (of all sub-envs) a window records: the rules' least rows and some
WINDOW_ROWS = 256


class PipeWatch:
    """One runner's live PIPELINE windows (see the module docstring)."""

    def __init__(self, env_runner: Any, every_steps: int, th: Thresholds, prefix: str) -> None:
        from ..pipeline.tap import Tap

        self.runner, self.every, self.prefix = env_runner, every_steps, prefix
        self.th = th
        self.tap = Tap(env_runner, max_bytes=16 * 1024**2, max_rows=WINDOW_ROWS)
        self.windows = 0
        # the first window judges the RLModule as initialised only on a fresh runner: a restored run
        # (its runners' sampled steps restored) or a runner restarted mid-run (weights synced, a
        # sequence number above 0) samples with trained weights, which may well have chosen
        self.initial = getattr(env_runner, "_weights_seq_no", 1) == 0 and \
            getattr(env_runner, "num_env_steps_sampled_lifetime", 1) == 0
        self.next_at = 0       # the runner's env steps at which the next window opens
        self.told: set[str] = set()

    @staticmethod
    def fits(env_runner: Any) -> bool:
        """A runner the tap knows: RLlib's single-agent EnvRunner, with its two pipelines."""
        return type(env_runner).__name__ == "SingleAgentEnvRunner" and hasattr(env_runner, "_env_to_module") \
            and hasattr(env_runner, "_module_to_env")

    def after_sample(self, steps: int) -> list[Finding]:
        """After each ``sample()`` call (``steps``: the runner's env steps so far): the window
        judged when full, the next one opened when due; the findings not told before."""
        tap = self.tap
        if not tap.recording:
            if steps >= self.next_at:
                tap.clear()
                tap.recording = True
            return []
        if min(len(tap.actions), len(tap.seen)) < WINDOW_ROWS and not tap.truncated:
            return []
        tap.recording = False
        self.next_at = steps + self.every
        self.windows += 1
        return self._judge()

    def _judge(self) -> list[Finding]:
        from ..pipeline.describe import describe_runner

        runner = self.runner
        sample = self.tap.sample(**describe_runner(runner, runner.config, trained=not (self.initial and self.windows == 1)))
        self.tap.clear()
        out, _ = pipeline_findings(sample, self.th)
        new = [f for f in out if f.code not in self.told]
        self.told.update(f.code for f in new)
        for f in new:
            f.message = f"{self.prefix}{f.message}"
            f.evidence["window"] = self.windows
        return new

    def remove(self) -> None:
        self.tap.remove()


def start_pipe(agent: Any, env_runner: Any) -> PipeWatch | bool:
    """The runner agent's PipeWatch, at its first ``sample()`` (the RLModule exists by then);
    False where there is none: the option off, an evaluation runner, a runner the tap does not
    know (multi-agent), or a tap that could not be put in place (said as FLOW1_INTERNAL)."""
    every = int(agent.opts.pipeline_every_steps)
    if every <= 0 or agent.kind != "train" or not PipeWatch.fits(env_runner):
        return False
    try:
        return PipeWatch(env_runner, every, agent.thresholds, f"{agent.kind} worker {agent.index}: ")
    except Exception as e:
        agent.report_internal("pipeline tap", e)
        return False


def pipe_tick(agent: Any, steps: int) -> None:
    """After each ``sample()``: the window's turn (:meth:`PipeWatch.after_sample`), its news sent,
    its CPU (the tap's recording inside ``sample()`` and the judging here) booked to ``pipeline``.
    A failure takes the tap out and is said once; the runner samples on."""
    pipe, c0 = agent.pipe, thread_time()
    try:
        found = pipe.after_sample(steps)
        if found:
            agent._send(found)
    except Exception as e:
        agent.pipe = False
        try:
            pipe.remove()
        finally:
            agent.report_internal("pipeline tap", e)
    agent.account.add("pipeline", thread_time() - c0 + pipe.tap.cpu_s)
    pipe.tap.cpu_s = 0.0
