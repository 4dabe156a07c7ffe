"""A trained remote EnvRunner's direct ``sample()`` rate with and without flow1, and with
flow1 from another source tree (a commit to compare against), one arm per fresh process.

Each arm run starts its own Ray, builds the preset's algorithm (``bench_throughput``'s
presets), trains ``--train`` iterations (the runner's policy trained, flow1's hub and
clusterer up), then times ``--calls`` synchronous ``sample(num_timesteps=--steps)`` calls on
every remote runner, and stops. Arms alternate ABC CBA ... over ``--rounds``; the figure
per arm is the geometric mean of its runs' medians, and each arm's ratio to the first arm.
``--profile`` records the first flow1 arm's runner with py-spy (raw stacks) and prints the
share of its samples inside ``sample()`` whose deepest flow1 frame does work (not the
wrappers' pass-through).

Each run also reads every thread's CPU time of each runner process (``/proc/PID/task``)
around the timed calls, grouped by what the thread is (the sampling thread, Ray's named C++
threads, other Python threads: flow1's watchdog among them), as ms of CPU per 1,000 steps:
where a remote runner's CPU goes beside flow1's own accounting (``runner_cost``), which
times flow1's code on the sampling thread only.

    .venv/bin/python scripts/bench_remote_sample.py --preset dqn --rounds 3 \
        [--tree before=/path/to/a/worktree] [--profile]
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
PASS_THROUGH = ("wrapped_sample", "wrapped", "wrapped_reset")


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


def one_arm(a: argparse.Namespace) -> dict:
    """Runs in a child process: one arm, one Ray."""
    import logging

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    sys.path.insert(0, HERE)
    import bench_throughput as bt
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    cb = None
    if a.child != "plain":
        from flow1_ray import Flow1Callbacks

        cb = Flow1Callbacks.with_options(output_dir=tempfile.mkdtemp(), print_events=False)
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
            prof = subprocess.Popen([spy, "record", "--nonblocking", "-r", "200", "-p", str(where[0][0]), "-f", "raw",
                                     "-o", a.profile_to, "-d", "600"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        rates, steps = [], 0
        flow1_s0 = sum(group.foreach_env_runner(_flow1_s, local_env_runner=False))
        cpu0 = [_thread_cpu(pid, named) for pid, _, named in where]
        for _ in range(a.calls):
            t0 = time.perf_counter()
            n = group.foreach_env_runner(lambda w, k=a.steps: sum(len(e) for e in w.sample(num_timesteps=k)),
                                         local_env_runner=False, timeout_seconds=300)
            rates.append(sum(n) / (time.perf_counter() - t0))
            steps += sum(n)
        cpu1 = [_thread_cpu(pid, named) for pid, _, named in where]
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
    return {"median": statistics.median(rates), "rates": rates, "flow1_from": where[0][1], "cpu_ms_per_1k": per_k,
            "flow1_ms_per_1k": 1e6 * (flow1_s1 - flow1_s0) / max(1, steps)}


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
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                    help="a flow1 arm importing flow1_ray from DIR (e.g. a git worktree of an older commit)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--profile-to", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one_arm(a)))
        return 0
    arms = [("plain", None), ("flow1", None)] + [tuple(t.split("=", 1)) for t in a.tree]
    out: dict[str, list[float]] = {name: [] for name, _ in arms}
    cpu: dict[str, list[dict]] = {name: [] for name, _ in arms}
    profiled = False
    for r in range(a.rounds):
        for name, tree in (arms if r % 2 == 0 else arms[::-1]):
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "plain" if name == "plain" else "flow1",
                   "--preset", a.preset, "--train", str(a.train), "--calls", str(a.calls), "--steps", str(a.steps),
                   "--seed", str(a.seed)]
            raw = None
            if a.profile and name == "flow1" and not profiled:
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
            print(f"round {r + 1} {name:10s} sample() median {got['median']:7.0f} steps/s "
                  f"(calls: {', '.join(f'{x:.0f}' for x in got['rates'])}); flow1_ray from {got['flow1_from']}",
                  flush=True)
            if raw and os.path.exists(raw):
                profiled = True
                inside, own = flow1_share(raw)
                print(f"  py-spy: {inside} samples inside sample(), flow1's own work in {own} "
                      f"({100.0 * own / max(1, inside):.1f} %)", flush=True)
    geo = {n: math.exp(statistics.fmean(math.log(x) for x in v)) for n, v in out.items()}
    print(f"\npreset {a.preset}: {a.rounds} rounds, {a.train} train() iterations then {a.calls} sample() calls of "
          f"{a.steps} steps per runner, one arm per process, alternated")
    for n in out:
        print(f"  {n:10s} geometric mean {geo[n]:7.0f} steps/s  ratio to plain {geo[n] / geo['plain']:.3f}  "
              f"(runs: {', '.join(f'{x:.0f}' for x in out[n])})")
    keys = sorted({k for v in cpu.values() for d in v for k in d}, key=lambda k: -statistics.fmean(
        d.get(k, 0.0) for v in cpu.values() for d in v))
    print("\nrunner CPU by thread, ms per 1,000 steps (the median of the runs; all runners together):")
    print(f"  {'thread':28s}" + "".join(f"{n:>12s}" for n in out))
    for k in ["(all threads)"] + keys:
        row = [statistics.median(sum(d.values()) - d.get("(flow1's own accounting)", 0.0) if k == "(all threads)"
                                 else d.get(k, 0.0) for d in cpu[n]) for n in out]
        if max(row) >= 0.05:
            print(f"  {k[:28]:28s}" + "".join(f"{x:12.1f}" for x in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
