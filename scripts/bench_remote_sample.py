"""A trained remote EnvRunner's rate and CPU with and without flow1 (or with flow1 from
another source tree, a commit to compare against), one arm per fresh process.

Each arm run starts its own Ray, builds the preset's algorithm (``bench_throughput``'s
presets and arms: ``--arms plain,plain-again,flow1`` adds the A/A control), trains
``--train`` iterations (the runner's policy trained, flow1's hub and clusterer up), then
times ``--calls`` synchronous ``sample(num_timesteps=--steps)`` calls on every remote runner
(``--timed sample``) or ``--calls`` ``algo.train()`` iterations (``--timed train``: the
runners as training drives them, with weight syncs and metrics between the samples), and
stops. Arms alternate ABC CBA ... over ``--rounds``; the figure per arm is the geometric
mean of its runs' medians, and each arm's ratio to the first arm.

Each run also reads, over the timed window:

- every thread's CPU time of each runner process (``/proc/PID/task``), grouped by what the
  thread is (the sampling thread, Ray's named C++ threads, other Python threads: flow1's
  watchdog among them), and the sampling thread's CPU inside ``sample()`` apart;
- flow1's own accounting (``runner_cost``: its code on the sampling thread), the runners'
  garbage collections (``gc.callbacks``) and the objects they track;
- the CPU of flow1's actors and of the driver (which hosts the local Learner),

all as ms of CPU per 1,000 env steps: where a remote runner's CPU goes beside what flow1
counts of itself.

``--profile`` records the first flow1 arm's runner with py-spy (raw stacks) and prints the
share of its samples inside ``sample()`` whose deepest flow1 frame does work (not the
wrappers' pass-through). ``--compare-profiles`` records the first runner of every run and
prints, arm beside arm, the functions whose time per 1,000 steps differs most.

    .venv/bin/python scripts/bench_remote_sample.py --preset dqn --rounds 3 \
        [--tree before=/path/to/a/worktree] [--profile]
    .venv/bin/python scripts/bench_remote_sample.py --preset hopper --timed train --train 12 \
        --calls 10 --rounds 4 --arms plain,plain-again,flow1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PASS_THROUGH = ("wrapped_sample", "wrapped", "wrapped_reset", "checked_step")   # flow1 frames that only call on (their time below them is not flow1's)
PROFILE_RATE = 200   # py-spy samples a second


def _thread_cpu(pid: int, named: dict[int, str]) -> dict[str, float]:
    """CPU seconds (user + system) of each thread of ``pid`` so far, keyed by what it is:
    ``sampling`` (the main thread, where RLlib calls sample()), a Python thread's name from
    ``named`` (native id -> name), else the kernel's thread name (Ray's C++ threads name
    themselves; an unnamed Python thread carries the process's)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"{base}/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        t = int(tid)
        key = "sampling" if t == pid else named.get(t) or (comm if not comm.startswith("ray::") else "other python")
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _flow1_s(w) -> float:
    """flow1's own accounting in this runner so far (``RunnerAgent.cost()``), 0 without it."""
    return sum(ag.cost()["flow1_s"] for c in getattr(w, "_callbacks", []) for ag in getattr(c, "_agents", {}).values())


def _gc_install(w) -> int:
    """In a runner: times its garbage collections from now on (``gc.callbacks``), kept on the
    ``gc`` module itself (the runner has no other place this bench can reach)."""
    import gc

    if not hasattr(gc, "_bench_gc"):
        state = gc._bench_gc = {"s": 0.0, "full": 0, "n": 0, "t0": 0.0}

        def timer(phase: str, info: dict) -> None:
            if phase == "start":
                state["t0"] = time.perf_counter()
            else:
                state["s"] += time.perf_counter() - state["t0"]
                state["n"] += 1
                state["full"] += info.get("generation") == 2

        gc.callbacks.append(timer)
    return os.getpid()


def _gc_read(w) -> dict:
    """In a runner: its collections' time and counts so far, the objects it tracks now, and
    the thread CPU spent inside its ``sample()`` calls so far (:func:`_sample_timer`)."""
    import gc

    return dict(gc._bench_gc, tracked=len(gc.get_objects()), in_sample_s=w._bench_in_sample[0])


def _sample_timer(w) -> bool:
    """In a runner: wraps its ``sample`` (flow1's wrapper inside, where flow1 is on) to sum
    the calling thread's CPU inside it: the runner's main-thread CPU outside ``sample()``
    (weight syncs, metrics, Ray's task handling) is then the rest."""
    if not hasattr(w, "_bench_in_sample"):
        acc, inner = [0.0], w.sample

        def timed(*args, **kwargs):
            c0 = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                acc[0] += time.thread_time() - c0

        w._bench_in_sample, w.sample = acc, timed
    return True


def one_arm(a: argparse.Namespace) -> dict:
    """Runs in a child process: one arm, one Ray."""
    import logging

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    sys.path.insert(0, HERE)
    import bench_throughput as bt
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    cb = bt.arms(tempfile.mkdtemp())[a.child]
    algo = bt.build(cb, a.preset, a.seed)
    try:
        for _ in range(a.train):
            algo.train()
        group = algo.env_runner_group
        where = group.foreach_env_runner(
            lambda w: (os.getpid(), __import__("flow1_ray").__file__,
                       {t.native_id: ("flow1 watchdog" if t.name.startswith("flow1-watchdog") else "python: " + t.name)
                        for t in __import__("threading").enumerate() if t.native_id != os.getpid()}),
            local_env_runner=False)
        bt.settle()
        prof = None
        if a.profile_to:
            spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
            prof = subprocess.Popen([spy, "record", "--nonblocking", "-r", str(PROFILE_RATE), "-p", str(where[0][0]), "-f", "raw",
                                     "-o", a.profile_to, "-d", "600"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        rates, steps = [], 0
        group.foreach_env_runner(_gc_install, local_env_runner=False)
        group.foreach_env_runner(_sample_timer, local_env_runner=False)
        gc0 = group.foreach_env_runner(_gc_read, local_env_runner=False)
        proc0 = bt.process_cpu()
        flow1_s0 = sum(group.foreach_env_runner(_flow1_s, local_env_runner=False))
        cpu0 = [_thread_cpu(pid, named) for pid, _, named in where]
        for _ in range(a.calls):
            t0 = time.perf_counter()
            if a.timed == "train":
                n = [int(algo.train()["env_runners"]["num_env_steps_sampled"])]
            else:
                n = group.foreach_env_runner(lambda w, k=a.steps: sum(len(e) for e in w.sample(num_timesteps=k)),
                                             local_env_runner=False, timeout_seconds=300)
            rates.append(sum(n) / (time.perf_counter() - t0))
            steps += sum(n)
        cpu1 = [_thread_cpu(pid, named) for pid, _, named in where]
        gc1 = group.foreach_env_runner(_gc_read, local_env_runner=False)
        proc1 = bt.process_cpu()
        if prof is not None:
            prof.send_signal(2)
            prof.wait(timeout=60)
        flow1_s1 = sum(group.foreach_env_runner(_flow1_s, local_env_runner=False))
    finally:
        algo.stop()
        ray.shutdown()
    per_k = {}
    for c0, c1 in zip(cpu0, cpu1):
        for k, v in c1.items():
            per_k[k] = per_k.get(k, 0.0) + 1e6 * (v - c0.get(k, 0.0)) / max(1, steps)
    per_k["(inside sample(), sampling thread)"] = 1e6 * sum(
        g1["in_sample_s"] - g0["in_sample_s"] for g0, g1 in zip(gc0, gc1)) / max(1, steps)
    for role in ("flow1 actors", "driver"):
        per_k[f"[{role}, whole process]"] = 1e6 * (proc1[role] - proc0[role]) / max(1, steps)
    per_k["(runner GC, inside the threads)"] = 1e6 * sum(g1["s"] - g0["s"] for g0, g1 in zip(gc0, gc1)) / max(1, steps)
    gc_note = {"full": sum(g1["full"] - g0["full"] for g0, g1 in zip(gc0, gc1)),
               "n": sum(g1["n"] - g0["n"] for g0, g1 in zip(gc0, gc1)), "tracked": [g["tracked"] for g in gc1]}
    return {"median": statistics.median(rates), "rates": rates, "flow1_from": where[0][1], "cpu_ms_per_1k": per_k,
            "flow1_ms_per_1k": 1e6 * (flow1_s1 - flow1_s0) / max(1, steps), "gc": gc_note,
            "steps_per_runner": steps / max(1, len(where))}


def frame_ms(raw: str, rate: int, steps: float) -> dict[str, float]:
    """A py-spy raw record of one runner: each function's inclusive time on the sampling
    thread's stacks, ms per 1,000 of that runner's steps (a sample is 1/rate s of a thread
    that was not idle)."""
    out: dict[str, float] = {}
    with open(raw) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if "(idle)" in stack:
                continue
            seen = set()
            for fr in stack.split(";"):
                name = fr.split(" (")[0] + (" [" + fr.rsplit("/", 1)[-1].split(":")[0] + "]" if "/" in fr else "")
                if name not in seen:
                    seen.add(name)
                    out[name] = out.get(name, 0.0) + int(n) * 1e6 / rate / max(1.0, steps)
    return out


def flow1_share(raw: str) -> tuple[int, int]:
    """(samples inside a runner's sample(), those whose deepest flow1 frame is flow1's own work)."""
    inside = own = 0
    with open(raw) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            if not any("wrapped_sample" in fr for fr in frames):
                continue
            inside += int(n)
            deepest = [fr for fr in frames if "flow1_ray" in fr][-1]
            i = frames.index(deepest)
            name = deepest.split(" (")[0].rsplit(".", 1)[-1]
            if name not in PASS_THROUGH or i == len(frames) - 1:
                own += int(n)
    return inside, own


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="dqn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train", type=int, default=3, help="train() iterations before timing")
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--timed", choices=("sample", "train"), default="sample",
                    help="time direct sample() calls on the remote runners, or --calls algo.train() iterations")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                    help="a flow1 arm importing flow1_ray from DIR (e.g. a git worktree of an older commit)")
    ap.add_argument("--arms", default="plain,flow1", help="arms of bench_throughput.ARMS, comma-separated")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--compare-profiles", action="store_true",
                    help="py-spy the first runner of every run and print the functions whose time differs most")
    ap.add_argument("--top", type=int, default=40, help="functions printed by --compare-profiles")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--profile-to", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one_arm(a)))
        return 0
    sys.path.insert(0, HERE)
    import bench_throughput as bt

    unknown = [n for n in a.arms.split(",") if n not in bt.ARMS]
    if unknown or "plain" not in a.arms.split(","):
        ap.error(f"--arms: expected names among {', '.join(bt.ARMS)}, plain among them; got {a.arms}")
    arms = [(n, None) for n in a.arms.split(",")] + [tuple(t.split("=", 1)) for t in a.tree]
    frames: dict[str, list[dict[str, float]]] = {name: [] for name, _ in arms}
    out: dict[str, list[float]] = {name: [] for name, _ in arms}
    cpu: dict[str, list[dict]] = {name: [] for name, _ in arms}
    profiled = False
    for r in range(a.rounds):
        for name, tree in (arms if r % 2 == 0 else arms[::-1]):
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "flow1" if tree else name,
                   "--preset", a.preset, "--train", str(a.train), "--calls", str(a.calls), "--steps", str(a.steps),
                   "--timed", a.timed,
                   "--seed", str(a.seed)]
            raw = None
            if (a.profile and name == "flow1" and not profiled) or a.compare_profiles:
                raw = os.path.join(tempfile.mkdtemp(), "runner.txt")
                cmd += ["--profile-to", raw]
            env = dict(os.environ)
            if tree:
                env["PYTHONPATH"] = os.path.abspath(tree) + os.pathsep + env.get("PYTHONPATH", "")
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree or os.getcwd())
            if p.returncode != 0:
                print(f"{name}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                return 1
            got = json.loads(p.stdout.strip().splitlines()[-1])
            out[name].append(got["median"])
            cpu[name].append(dict(got["cpu_ms_per_1k"], **{"(flow1's own accounting)": got["flow1_ms_per_1k"]}))
            print(f"round {r + 1} {name:10s} {a.timed}() median {got['median']:7.0f} steps/s "
                  f"(calls: {', '.join(f'{x:.0f}' for x in got['rates'])}); runner GC: {got['gc']['n']} collections, "
                  f"{got['gc']['full']} full, objects tracked {got['gc']['tracked']}; flow1_ray from "
                  f"{got['flow1_from']}", flush=True)
            if raw and os.path.exists(raw) and a.compare_profiles:
                frames[name].append(frame_ms(raw, PROFILE_RATE, got["steps_per_runner"]))
            if raw and os.path.exists(raw) and name == "flow1" and not profiled:
                profiled = True
                inside, own = flow1_share(raw)
                print(f"  py-spy: {inside} samples inside sample(), flow1's own work in {own} "
                      f"({100.0 * own / max(1, inside):.1f} %)", flush=True)
    geo = {n: math.exp(statistics.fmean(math.log(x) for x in v)) for n, v in out.items()}
    timed = (f"{a.calls} train() iterations" if a.timed == "train" else
             f"{a.calls} sample() calls of {a.steps} steps per runner")
    print(f"\npreset {a.preset}: {a.rounds} rounds, {a.train} train() iterations then {timed}, one arm per process, "
          f"alternated")
    for n in out:
        print(f"  {n:10s} geometric mean {geo[n]:7.0f} steps/s  ratio to plain {geo[n] / geo['plain']:.3f}  "
              f"(runs: {', '.join(f'{x:.0f}' for x in out[n])})")
    print("\neach round's ratio to plain (the same round: its arms ran back to back):")
    for n in [n for n in out if n != "plain"]:
        rate = [x / p for x, p in zip(out[n], out["plain"])]
        runner = [d["(inside sample(), sampling thread)"] / p["(inside sample(), sampling thread)"]
                  for d, p in zip(cpu[n], cpu["plain"])]
        print(f"  {n:12s} rate {', '.join(f'{x:.3f}' for x in rate)}; runners' CPU inside sample() per step "
              f"{', '.join(f'{x:.3f}' for x in runner)}")
    keys = sorted({k for v in cpu.values() for d in v for k in d}, key=lambda k: -statistics.fmean(
        d.get(k, 0.0) for v in cpu.values() for d in v))
    print("\nrunner CPU by thread, ms per 1,000 steps (the median of the runs; all runners together):")
    print(f"  {'thread':28s}" + "".join(f"{n:>12s}" for n in out))
    inside = ("(flow1's own accounting)", "(runner GC, inside the threads)", "(inside sample(), sampling thread)",
              "[flow1 actors, whole process]", "[driver, whole process]")
    for k in ["(all threads)"] + keys:
        row = [statistics.median(sum(v for kk, v in d.items() if kk not in inside) if k == "(all threads)"
                                 else d.get(k, 0.0) for d in cpu[n]) for n in out]
        if max(row) >= 0.05:
            print(f"  {k[:28]:28s}" + "".join(f"{x:12.1f}" for x in row))
    if a.compare_profiles:
        names = [n for n in frames if frames[n]]
        med = {n: {} for n in names}
        for n in names:
            for k in {k for d in frames[n] for k in d}:
                med[n][k] = statistics.median(d.get(k, 0.0) for d in frames[n])
        keys = {k for n in names for k in med[n]}
        base = names[0]
        top = sorted(keys, key=lambda k: -max(abs(med[n].get(k, 0.0) - med[base].get(k, 0.0)) for n in names))
        print(f"\nthe first runner's functions, inclusive, ms per 1,000 of its steps (py-spy at {PROFILE_RATE} Hz, "
              f"median of the runs), the largest differences from {base}:")
        print(f"  {'function':70s}" + "".join(f"{n:>12s}" for n in names))
        for k in sorted(keys, key=lambda k: -med[base].get(k, 0.0))[:12] + top[:a.top]:
            print(f"  {k[:70]:70s}" + "".join(f"{med[n].get(k, 0.0):12.1f}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
