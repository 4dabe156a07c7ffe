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
leaves to its flow1 actors lands on both detached arms alike), over ``--rounds`` (a multiple of
6 keeps that balance); each block's rate is env steps sampled per second of wall time. The
figures are the median of the per-round ratios attached / detached and detached-again /
detached, with a 95 % bootstrap interval, and the ratio of totals; and the geometric means of
the per-round ratios, attached against the detached arm and against both detached arms (their
geometric mean: two controls per round halve the variance the control adds to a round), with
95 % bootstrap intervals. Each block's flow1 runner time and tracer calls are read around it: a
detached block must show none (printed, and the run fails otherwise).

Each block's CPU is read too (the runners, the driver with its local Learner, flow1's actors:
``bench_throughput.process_cpu``, read outside the timed window). The wall-clock ratio swings
with whatever else the machine's two cores do in that block; CPU per env step does not, and
on a machine the run fills it is what throughput pays. Two CPU figures per round, as
throughput ratios (CPU per step detached / attached): with the actors' CPU counted in every
block (what attaching costs, the actors' work spilling into the next block landing on both
detached arms alike), and with the detached blocks' actor CPU taken out (all of flow1 against
a run without its actors: an upper bound, since the actors' idle work is charged to the
attached arm only).

The actors' CPU per arm is printed too, as a share of one core over the arm's wall time. What
an attached block asks of them beyond the detached blocks' (the state snapshots the driver
hook requests, held by ``heatmap_budget`` to a share of one core over wall time) lands in
the attached blocks, a third of the time. With the run's own budget (``--snapshot-budget
raw``) the snapshots' whole share of the run is spent there, about three times what it weighs
in a run attached throughout. By default (``throughout``) the run is built with a third of
the default ``heatmap_budget``: over the attached blocks the snapshots then take the default
share of their wall time, as a run attached throughout spends it.

What stays on in every block, and so is not in the ratio: flow1's actors (hub, recorder,
node probe, clusterer: their work is asynchronous, what an attached block asks of them may
run during the next block), each runner's liveness watchdog thread and the driver's watchdog
(``driver_watch``: a thread, and the start and end of each ``train()`` noted). Their CPU over the
whole timed run is printed apart, in ms per 1,000 env steps, beside the runners' and the
driver's: an upper bound on what they add to the ratio's figure on a machine whose cores the
run fills.

``--json PATH`` keeps every block (steps, seconds, CPU, by process too) with the run's set-up, written again
after each round (a run stopped by a time limit keeps its rounds); ``--pool A.json B.json ...``
prints the same figures over the rounds of several such runs of one preset and block, without
running anything: on this machine an interval narrow enough to tell 0.97 from 0.99 takes more
rounds than one run's time.

    .venv/bin/python scripts/bench_detached.py --preset hopper [--rounds 36] [--block 2]
        [--parts runners,hook,tracing] [--json run.json]
    .venv/bin/python scripts/bench_detached.py --pool run1.json run2.json
"""

from __future__ import annotations

import argparse
import itertools
import json
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


def summarize(runs: list[list[dict]]) -> None:
    """Print the per-round ratios over the rounds of ``runs`` (each a list of blocks): medians
    and geometric means with 95 % bootstrap intervals, wall clock and CPU per step, the ratio of
    totals, and the actors' CPU per arm."""
    rounds = [{b["arm"]: b for b in blocks if b["round"] == r}
              for blocks in runs for r in sorted({b["round"] for b in blocks})]
    rounds = [r for r in rounds if set(r) == set(ARMS)]   # a run cut off mid-round leaves a partial one
    if not rounds:
        print("  no complete round")
        return
    rate = lambda b: b["steps"] / b["s"]                  # noqa: E731
    cpu = lambda b: b["cpu_s"] / max(1, b["steps"])       # noqa: E731

    def line(label: str, ratios: list[float], extra: str = "") -> None:
        lo, hi = bt.ci_of_median(ratios)
        print(f"  {label}: median {statistics.median(ratios):.3f} (95 % CI {lo:.3f}-{hi:.3f}){extra}")

    vs_detached = {arm: [rate(r[arm]) / rate(r["detached"]) for r in rounds] for arm in ARMS[::2]}
    for arm in ARMS[::2]:
        steps = {n: sum(r[n]["steps"] for r in rounds) for n in (arm, "detached")}
        secs = {n: sum(r[n]["s"] for r in rounds) for n in (arm, "detached")}
        total = (steps[arm] / secs[arm]) / (steps["detached"] / secs["detached"])
        line(f"{arm:15s} / detached", vs_detached[arm], f", totals {total:.3f}; {len(rounds)} rounds "
             + ", ".join(f"{x:.3f}" for x in vs_detached[arm]))
    for label, ratios in (("attached / detached", vs_detached["attached"]),
                          ("attached / both detached arms",
                           [rate(r["attached"]) / (rate(r["detached"]) * rate(r["detached-again"])) ** 0.5
                            for r in rounds]),
                          ("A/A, detached-again / detached", vs_detached["detached-again"])):
        g, lo, hi = bt.geomean_ci(ratios)
        print(f"  geometric mean, {label}: {g:.3f} (95 % CI {lo:.3f}-{hi:.3f})")
    for arm in ARMS[::2]:
        line(f"CPU per step, {arm} / detached as throughput (detached / {arm})",
             [cpu(r["detached"]) / cpu(r[arm]) for r in rounds])
    print("  flow1's actors' CPU, % of one core over each arm's wall time: " + ", ".join(
        f"{arm} {100 * sum(r[arm]['actors_s'] for r in rounds) / sum(r[arm]['s'] for r in rounds):.2f}"
        for arm in ARMS))
    if all("cpu" in r[arm] for r in rounds for arm in ARMS):   # runs before 2026-12-04 kept the sum only
        groups = sorted(rounds[0]["attached"]["cpu"])
        per = {arm: {g: 1e6 * sum(r[arm]["cpu"][g] for r in rounds) / max(1, sum(r[arm]["steps"] for r in rounds))
                     for g in groups} for arm in ARMS}
        print("  CPU per 1,000 steps by process, ms (attached / detached / detached-again): " + "; ".join(
            f"{g} {per['attached'][g]:.0f} / {per['detached'][g]:.0f} / {per['detached-again'][g]:.0f}"
            for g in groups))
    line("CPU per step, all of flow1 (the detached blocks without their actors' CPU)",
         [(r["detached"]["cpu_s"] - r["detached"]["actors_s"]) / max(1, r["detached"]["steps"]) / cpu(r["attached"])
          for r in rounds])


def pool(paths: list[str]) -> int:
    """``--pool``: the figures over several ``--json`` runs of one preset, block and parts."""
    runs, setups = [], set()
    for path in paths:
        try:
            with open(path) as f:
                d = json.load(f)
            setups.add((d["preset"], d["block"], tuple(d["parts"]), d.get("heatmap_budget", 0.01)))
            runs.append(list(d["blocks"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"bench_detached: --pool {path}: expected a --json run, {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    if len(setups) != 1:
        print(f"bench_detached: --pool: expected runs of one preset, block, parts and heatmap_budget, got "
              f"{sorted(setups)}", file=sys.stderr)
        return 2
    preset, block, parts, budget = setups.pop()
    print(f"preset {preset}: {len(runs)} runs of {block} train() iterations per arm and round pooled, "
          f"flow1 attached ({', '.join(parts)}) and detached between blocks, heatmap_budget {budget:.4g}")
    summarize(runs)
    return 0


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
    ap.add_argument("--snapshot-budget", choices=("throughout", "raw"), default="throughout",
                    help="throughout: heatmap_budget scaled to the attached share of the time (the default share "
                         "of the attached blocks' wall time, as attached throughout); raw: the default over all of it")
    ap.add_argument("--json", metavar="PATH", help="write every block (steps, seconds, CPU) and the set-up here")
    ap.add_argument("--pool", nargs="+", metavar="RUN.json",
                    help="print the figures over the rounds of these --json runs (one preset and block) and exit")
    a = ap.parse_args()
    if a.pool:
        return pool(a.pool)
    parts = set(a.parts.split(","))
    if not parts <= set(PARTS):
        ap.error(f"--parts: expected names among {', '.join(PARTS)}, got {a.parts}")
    if a.rounds < 1 or a.block < 1:
        ap.error(f"--rounds and --block: expected >= 1, got {a.rounds} and {a.block}")

    import ray
    from flow1_ray import Flow1Callbacks
    from flow1_ray.options import Flow1Options

    budget = Flow1Options().heatmap_budget
    if a.snapshot_budget == "throughout":
        budget *= ARMS.count("attached") / len(ARMS)
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    algo = bt.build(Flow1Callbacks.with_options(output_dir=tempfile.mkdtemp(), print_events=False,
                                                heatmap_budget=budget), a.preset, a.seed)
    blocks: list[dict] = []   # one per arm and round: round, arm, steps, s, cpu_s, actors_s
    setup = {"preset": a.preset, "block": a.block, "parts": sorted(parts), "seed": a.seed,
             "heatmap_budget": budget}

    def keep() -> None:   # after every round: a run stopped by a time limit keeps its rounds
        if a.json:
            with open(a.json, "w") as f:
                json.dump({**setup, "blocks": blocks}, f)

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
                own, traced = toggle.flow1_s() - own0, toggle.tracer_calls() - traced0
                if (arm != "attached" or "runners" not in parts) and own > 0 or (
                        (arm != "attached" or "tracing" not in parts) and traced > 0):
                    leaks.append(f"round {r + 1} {arm}: flow1 ran {own * 1e3:.1f} ms in the runners, "
                                 f"the tracer ran {traced} times")
                b = {"round": r, "arm": arm, "steps": steps, "s": dt, "cpu_s": sum(used.values()),
                     "actors_s": used["flow1 actors"], "cpu": used}
                blocks.append(b)
                steps_all += steps
                print(f"round {r + 1:2d} {arm:15s} {steps / dt:8.0f} steps/s  ({steps} steps, {dt:.2f} s; "
                      f"CPU {b['cpu_s'] / max(1, steps) * 1e6:.0f} ms per 1,000 steps, "
                      f"actors {b['actors_s'] / max(1, steps) * 1e6:.1f}; "
                      f"flow1 in runners {own * 1e3:.1f} ms, tracer calls {traced})", flush=True)
            keep()
        cpu1 = bt.process_cpu()
    finally:
        algo.stop()
        ray.shutdown()
    print(f"\npreset {a.preset} ({bt.describe(a.preset)}): {a.rounds} rounds of {a.block} train() iterations "
          f"per arm, one algorithm, flow1 attached ({', '.join(p for p in PARTS if p in parts)}) and detached "
          f"between blocks, heatmap_budget {budget:.4g} ({a.snapshot_budget})")
    summarize([blocks])
    print("  CPU over the whole timed run, ms per 1,000 env steps: " + ", ".join(
        f"{k} {(cpu1[k] - cpu0[k]) * 1e6 / max(1, steps_all):.1f}" for k in cpu1))
    if leaks:
        print("flow1 ran while detached (the toggle missed a path):\n  " + "\n  ".join(leaks), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
