"""What flow1's driver hook (``Flow1Callbacks.on_train_result``) costs each iteration, whole:
timed from outside the hook, its waits on the hub included, in this checkout against another
revision, in fresh processes alternated (ABAB...) with the same seed.

``result["flow1"]["driver_ms"]`` is the hook's own reading; it cannot compare two revisions
whose hooks end at different points (before 2026-12-03 it was read before the hook's last
wait, the metrics row's acknowledged send). Here the hook is wrapped on the class, so each
revision is timed the same way, from its first line to its return.

    .venv/bin/python scripts/bench_hook.py [--against HEAD~1] [--runs 3] [--iterations 40]
        [--preset light]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(a: argparse.Namespace) -> int:
    """One process: build the preset with flow1, train, print the hook's times as JSON."""
    import ray

    import bench_throughput as bt
    from flow1_ray import Flow1Callbacks

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 2**20, log_to_driver=False)
    times: list[float] = []
    orig = Flow1Callbacks.on_train_result

    def timed(self, **kwargs):
        t0 = time.perf_counter()
        try:
            return orig(self, **kwargs)
        finally:
            times.append((time.perf_counter() - t0) * 1e3)

    Flow1Callbacks.on_train_result = timed
    out_dir = tempfile.mkdtemp(prefix="flow1-bench-hook-")
    algo = bt.build(Flow1Callbacks.with_options(output_dir=out_dir, print_events=False), a.preset, a.seed)
    reported = [float(algo.train()["flow1"]["driver_ms"]) for _ in range(a.iterations)]
    algo.stop()
    ray.shutdown()
    whole, own = times[a.skip:], reported[a.skip:]
    q = statistics.quantiles(whole, n=4)
    print(json.dumps({"median": statistics.median(whole), "p25": q[0], "p75": q[2],
                      "driver_ms": statistics.median(own), "n": len(whole),
                      "flow1": os.path.dirname(os.path.dirname(sys.modules["flow1_ray"].__file__))}))
    return 0


def run_arm(tree: str, a: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.path.join(ROOT, "scripts")])}
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")   # a leftover local Ray of the last arm
    if os.path.exists(ray_cli):
        subprocess.run([ray_cli, "stop", "--force"], capture_output=True)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--preset", a.preset,
                        "--iterations", str(a.iterations), "--skip", str(a.skip), "--seed", str(a.seed)],
                       capture_output=True, text=True, env=env, cwd=tree, timeout=1800)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"bench_hook: the run in {tree} failed (rc {p.returncode}): {p.stderr.strip()[-400:]}")
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="HEAD~1", help="the git revision to compare this checkout with")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per arm")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--skip", type=int, default=5, help="first iterations left out (one-off costs)")
    ap.add_argument("--preset", default="light")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if a.iterations <= a.skip + 4:
        ap.error("--iterations must exceed --skip by at least 5")
    other = tempfile.mkdtemp(prefix="flow1-bench-hook-tree-")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-f", "--detach", other, a.against],
                   check=True, capture_output=True)
    try:
        got: dict[str, list[dict]] = {"this": [], a.against: []}
        for i in range(a.runs):
            order = [("this", ROOT), (a.against, other)]
            for name, tree in (order if i % 2 == 0 else order[::-1]):
                r = run_arm(tree, a)
                got[name].append(r)
                print(f"run {i + 1} {name:>10}: hook {r['median']:.2f} ms median (p25 {r['p25']:.2f}, "
                      f"p75 {r['p75']:.2f}), its own driver_ms {r['driver_ms']:.2f}", flush=True)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", other], capture_output=True)
    med = {k: statistics.median(r["median"] for r in v) for k, v in got.items()}
    print(f"\npreset {a.preset}, {a.runs} runs per arm of {a.iterations} iterations (first {a.skip} left out): "
          f"the whole hook, median of the runs' medians: this checkout {med['this']:.2f} ms, "
          f"{a.against} {med[a.against]:.2f} ms, ratio {med['this'] / med[a.against]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
