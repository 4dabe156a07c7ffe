"""What flow1 costs ``algo.train()`` end to end, measured in one process: the same algorithm
with flow1 attached and detached, blocks of iterations alternated.

``bench_throughput.py`` builds one algorithm per arm, each in a fresh process. On this
2-core machine two fresh processes of the same code differ by more than flow1 costs: an A/A
pair of plain arms read 0.79-1.62 round by round and 1.19 over four rounds
(``bench_remote_sample.py --timed train --arms plain,plain-again,flow1``, BENCHMARKS.md). Here
one algorithm is built with Flow1Callbacks, warmed up past flow1's one-off costs, and then
flow1 is taken out of the training path and put back between blocks of ``--block``
iterations:

- each EnvRunner's ``sample`` wrapper, its vector env's step wrapper and each sub-env's
  reset wrapper (and the checked step of an episode being checked) are swapped for the
  callables they wrap, and back (the closures' own cells: nothing of flow1 changes);
- the driver's ``on_train_result`` hook (the metrics row, the hub round trip, the rules,
  the snapshot requests) is replaced on the callbacks instance by a no-op, and back;
- the local Learner's tracing is uninstalled and installed (``LearnerTracer``).

``--parts`` attaches only some of the three in the attached blocks (the others stay out in
every block): which part a cost comes from.

Three arms per round, ``attached``, ``detached`` and ``detached-again`` (the A/A control: the
method's spread when nothing differs), each round in the next of the six orders of the three
(each arm as often first, second and third, and after each other arm: what an attached block
leaves to its flow1 actors lands on both detached arms alike), over ``--rounds`` (a multiple
of 6 keeps that balance); each block's rate is env steps sampled per second of wall time. The figures are the median of the
per-round ratios attached / detached and detached-again / detached, with a 95 % bootstrap
interval, and the ratio of totals. Each block's flow1 runner time and tracer calls are read
around it: a detached block must show none (printed, and the run fails otherwise).

Each block's CPU is read too (the runners, the driver with its local Learner, flow1's actors:
``bench_throughput.process_cpu``, read outside the timed window). The wall-clock ratio swings
with whatever else the machine's two cores do in that block; CPU per env step does not, and
on a machine the run fills it is what throughput pays. Two CPU figures per round, as
throughput ratios (CPU per step detached / attached): with the actors' CPU counted in every
block (what attaching costs, the actors' work spilling into the next block landing on both
detached arms alike), and with the detached blocks' actor CPU taken out (all of flow1 against
a run without its actors: an upper bound, since the actors' idle work is charged to the
attached arm only).

What stays on in every block, and so is not in the ratio: flow1's actors (hub, recorder,
node probe, clusterer: their work is asynchronous, what an attached block asks of them may
run during the next block), each runner's liveness watchdog thread and the driver's watchdog
(``driver_watch``: a thread, and the start and end of each ``train()`` noted). Their CPU over the
whole timed run is printed apart, in ms per 1,000 env steps, beside the runners' and the
driver's: an upper bound on what they add to the ratio's figure on a machine whose cores the
run fills.

    .venv/bin/python scripts/bench_detached.py --preset hopper [--rounds 36] [--block 2]
        [--parts runners,hook,tracing]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_throughput as bt  # noqa: E402
from bench_remote_sample import _flow1_s  # noqa: E402  (flow1's own accounting in a runner)

ARMS = ("attached", "detached", "detached-again")
PARTS = ("runners", "hook", "tracing")   # what the attached arm attaches (--parts)
ORDERS = list(itertools.permutations(ARMS))


def _cell(fn, name: str):
    """The value a closure ``fn`` holds under the free variable ``name``."""
    return fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents


def _runner_toggle(w, on: bool) -> int:
    """In an EnvRunner: flow1's wrappers in (``on``) or out. The first call (all wrappers in
    place) keeps each wrapper and what it wraps on the runner. Returns the sub-envs toggled."""
    saved = getattr(w, "_bench_flow1", None)
    if saved is None:
        env = w.env.unwrapped   # what RLlib passes to on_environment_created: the vector env flow1 wraps
        vstep = vars(env).get("step")
        if getattr(w.sample, "__name__", "") != "wrapped_sample" or getattr(vstep, "__name__", "") != "wrapped":
            raise RuntimeError("flow1's wrappers are not where this bench expects them")
        subs = []
        for sub in getattr(env, "envs", None) or ():
            reset = vars(sub)["reset"]
            subs.append((sub, reset, _cell(reset, "reset"), _cell(reset, "step"), _cell(reset, "own")))
        saved = w._bench_flow1 = {"sample": (w.sample, _cell(w.sample, "sample")),
                                  "vstep": (env, vstep, _cell(vstep, "step")), "subs": subs}
    wrapped, plain = saved["sample"]
    w.sample = wrapped if on else plain
    env, wrapped, plain = saved["vstep"]
    env.step = wrapped if on else plain
    for sub, wrapped_reset, reset, step, own in saved["subs"]:
        sub.reset = wrapped_reset if on else reset
        if not on and getattr(vars(sub).get("step"), "__name__", "") == "checked_step":
            if own:   # as flow1's reset does for an episode it does not check
                sub.step = step
            else:
                vars(sub).pop("step", None)
    return len(saved["subs"])


def _noop(*args, **kwargs) -> None:
    return None


class Toggle:
    """flow1 in or out of one algorithm's training path: its runners, its driver hook, its
    Learner tracing."""

    def __init__(self, algo, parts: set[str]) -> None:
        from flow1_ray import Flow1Callbacks
        from flow1_ray.learner import tracer

        self.algo = algo
        cbs = algo.callbacks if isinstance(algo.callbacks, list) else [algo.callbacks]
        self.callbacks = [c for c in cbs if isinstance(c, Flow1Callbacks)]
        learner = getattr(algo.learner_group, "_learner", None)
        self.tracer = getattr(learner, tracer.ATTR, None) if learner is not None else None
        if not self.callbacks:
            raise SystemExit("the algorithm has no Flow1Callbacks")
        self.parts = parts
        self.on = True
        self.traced = True   # the tracing is installed when the algorithm is built

    def set(self, on: bool) -> None:
        """All of ``parts`` in (``on``) or out; the other parts stay out in both."""
        if on == self.on:
            return
        runners, hook, tracing = (on and p in self.parts for p in PARTS)
        self.algo.env_runner_group.foreach_env_runner(lambda w, o=runners: _runner_toggle(w, o),
                                                      local_env_runner=False)
        self._apply(hook, tracing)
        self.on = on

    def _apply(self, hook: bool, tracing: bool) -> None:
        for c in self.callbacks:
            if hook:
                vars(c).pop("on_train_result", None)
            else:
                c.on_train_result = _noop
        if self.tracer is not None and tracing != self.traced:
            self.traced = tracing
            if tracing:
                self.tracer.install(trace_first=False)
            else:
                self.tracer.uninstall()

    def flow1_s(self) -> float:
        return sum(self.algo.env_runner_group.foreach_env_runner(_flow1_s, local_env_runner=False))

    def tracer_calls(self) -> int:
        return int(self.tracer.calls) if self.tracer is not None else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="hopper", choices=sorted(bt.PRESETS))
    ap.add_argument("--rounds", type=int, default=36)
    ap.add_argument("--block", type=int, default=2, help="train() iterations per arm and round")
    ap.add_argument("--warmup-iterations", type=int, default=11)
    ap.add_argument("--warmup-s", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="what the attached arm attaches: runners (the EnvRunners' wrappers), hook (the driver's "
                         "on_train_result), tracing (the Learner's); the rest stays detached in every arm")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    if not parts <= set(PARTS):
        ap.error(f"--parts: expected names among {', '.join(PARTS)}, got {a.parts}")
    if a.rounds < 1 or a.block < 1:
        ap.error(f"--rounds and --block: expected >= 1, got {a.rounds} and {a.block}")

    import ray
    from flow1_ray import Flow1Callbacks

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    algo = bt.build(Flow1Callbacks.with_options(output_dir=tempfile.mkdtemp(), print_events=False), a.preset, a.seed)
    rates: dict[str, list[float]] = {n: [] for n in ARMS}
    cpus: dict[str, list[tuple[float, float]]] = {n: [] for n in ARMS}   # (all, flow1 actors) s per step
    totals = {n: [0, 0.0] for n in ARMS}   # steps, seconds
    leaks: list[str] = []
    try:
        bt.warm_up(algo, a)
        toggle = Toggle(algo, parts)
        toggle.set(False)   # from here on, only --parts come back in the attached blocks
        bt.settle()
        cpu0, steps_all = bt.process_cpu(), 0
        for r in range(a.rounds):
            for arm in ORDERS[r % len(ORDERS)]:
                toggle.set(arm == "attached")
                own0, traced0 = toggle.flow1_s(), toggle.tracer_calls()
                c0 = bt.process_cpu()
                steps, t0 = 0, time.perf_counter()
                for _ in range(a.block):
                    steps += int(algo.train()["env_runners"]["num_env_steps_sampled"])
                dt = time.perf_counter() - t0
                c1 = bt.process_cpu()
                used = {k: c1[k] - c0[k] for k in c1}
                cpus[arm].append((sum(used.values()) / max(1, steps), used["flow1 actors"] / max(1, steps)))
                own, traced = toggle.flow1_s() - own0, toggle.tracer_calls() - traced0
                if (arm != "attached" or "runners" not in parts) and own > 0 or (
                        (arm != "attached" or "tracing" not in parts) and traced > 0):
                    leaks.append(f"round {r + 1} {arm}: flow1 ran {own * 1e3:.1f} ms in the runners, "
                                 f"the tracer ran {traced} times")
                rates[arm].append(steps / dt)
                totals[arm][0] += steps
                totals[arm][1] += dt
                steps_all += steps
                print(f"round {r + 1:2d} {arm:15s} {steps / dt:8.0f} steps/s  ({steps} steps, {dt:.2f} s; "
                      f"CPU {cpus[arm][-1][0] * 1e6:.0f} ms per 1,000 steps, actors {cpus[arm][-1][1] * 1e6:.1f}; "
                      f"flow1 in runners {own * 1e3:.1f} ms, tracer calls {traced})", flush=True)
        cpu1 = bt.process_cpu()
    finally:
        algo.stop()
        ray.shutdown()
    print(f"\npreset {a.preset} ({bt.describe(a.preset)}): {a.rounds} rounds of {a.block} train() iterations "
          f"per arm, one algorithm, flow1 attached ({', '.join(p for p in PARTS if p in parts)}) and detached "
          f"between blocks")
    for arm in ARMS[::2]:
        ratios = [x / d for x, d in zip(rates[arm], rates["detached"])]
        lo, hi = bt.ci_of_median(ratios)
        total = (totals[arm][0] / totals[arm][1]) / (totals["detached"][0] / totals["detached"][1])
        print(f"  {arm:15s} / detached: median {statistics.median(ratios):.3f} (95 % CI {lo:.3f}-{hi:.3f}), "
              f"totals {total:.3f}; rounds {', '.join(f'{x:.3f}' for x in ratios)}")
    for arm in ARMS[::2]:
        ratios = [d[0] / x[0] for x, d in zip(cpus[arm], cpus["detached"])]
        lo, hi = bt.ci_of_median(ratios)
        print(f"  CPU per step, {arm} / detached as throughput (detached / {arm}): median "
              f"{statistics.median(ratios):.3f} (95 % CI {lo:.3f}-{hi:.3f})")
    ratios = [(d[0] - d[1]) / x[0] for x, d in zip(cpus["attached"], cpus["detached"])]
    lo, hi = bt.ci_of_median(ratios)
    print(f"  CPU per step, all of flow1 (the detached blocks without their actors' CPU): median "
          f"{statistics.median(ratios):.3f} (95 % CI {lo:.3f}-{hi:.3f})")
    print("  CPU over the whole timed run, ms per 1,000 env steps: " + ", ".join(
        f"{k} {(cpu1[k] - cpu0[k]) * 1e6 / max(1, steps_all):.1f}" for k in cpu1))
    if leaks:
        print("flow1 ran while detached (the toggle missed a path):\n  " + "\n  ".join(leaks), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
