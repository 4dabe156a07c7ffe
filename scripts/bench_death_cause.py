"""Time from a runner's death to its WORKER_DIED naming the cause, on real EnvRunners.

PPO CartPole, 2 EnvRunners, Flow1Callbacks, RLlib restarting failed runners. Two faults, each
per process on a rare call, so every runner (and each replacement) dies again after a while:
``connector`` (a user's env-to-module connector raises ValueError; RLlib ends the runner) and
``exit`` (the env calls ``os._exit(3)``). A thread of this process polls every lock file of the
run every 5 ms for its release (the process's end as the kernel sees it) and the hub's
Recorder every 20 ms for the WORKER_DIED line. Per death it prints: the detection (the event's
timestamp, the probe's scan that saw the lock released, minus the release) and the delivery
(the line in the Recorder minus the release: what the console and the panel can show), and
whether the message names the cause.

The cost on the path that does not raise: the ``try`` around ``sample()`` and the check that
no cause is left to clear, timed against the same call without them (1,000,000 calls each,
interleaved in 10 rounds, medians).

    .venv/bin/python scripts/bench_death_cause.py [--iterations 8] [--fault connector|exit|both|none]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import gymnasium as gym
from ray.rllib.connectors.connector_v2 import ConnectorV2

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
CALLS: Counter = Counter()   # per process
AT = 300


class FailingLookup(ConnectorV2):
    """An env-to-module connector that fails on its AT-th call in each process."""

    def __call__(self, *, batch=None, **kwargs):
        CALLS["lookup"] += 1
        if CALLS["lookup"] == AT:
            raise ValueError("feature lookup failed: key 'speed' missing")
        return batch


def failing_lookup(env=None, spaces=None, device=None):
    return FailingLookup()


class ExitingCartPole(gym.Wrapper):
    """CartPole whose AT-th step in each process calls os._exit(3)."""

    def __init__(self, config=None):
        super().__init__(gym.make("CartPole-v1"))

    def step(self, action):
        CALLS["step"] += 1
        if CALLS["step"] == AT:
            os._exit(3)
        return self.env.step(action)


def build(tmp: str, fault: str):
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks

    cb = Flow1Callbacks.with_options(output_dir=tmp, print_events=False, state_actions=False)
    config = (PPOConfig().environment("CartPole-v1").callbacks(cb)
              .env_runners(num_env_runners=2, sample_timeout_s=8)
              .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)
              .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=1.0))
    if fault == "connector":
        config = config.env_runners(env_to_module_connector=failing_lookup)
    else:
        config = config.environment(ExitingCartPole)
    return config.build_algo()


class Watch:
    """Lock releases (5 ms) and the Recorder's WORKER_DIED lines (20 ms), by pid."""

    def __init__(self, hub) -> None:
        self.hub, self.released, self.delivered = hub, {}, {}
        self.stop = False
        threading.Thread(target=self._locks, daemon=True).start()
        threading.Thread(target=self._lines, daemon=True).start()

    def _locks(self) -> None:
        from flow1_ray.liveness.lockdir import lock_root
        from flow1_ray.liveness.lockfile import probe_lock

        held: set[str] = set()
        while not self.stop:
            for p in glob.glob(str(lock_root()) + "/**/*.lock", recursive=True):
                try:
                    holder, _ = probe_lock(p)
                except OSError:
                    continue
                if holder is not None:
                    held.add(p)
                elif p in held and p not in self.released:
                    self.released[p] = time.time()
            time.sleep(0.005)

    def _lines(self) -> None:
        import ray

        cursor = 0
        while not self.stop:
            try:
                lines, cursor = ray.get(self.hub.lines_since.remote(cursor), timeout=5)
            except Exception:
                time.sleep(0.1)
                continue
            now = time.time()
            for ln in lines:
                if "WORKER_DIED" in ln and "(pid " in ln:
                    pid = int(ln.split("(pid ", 1)[1].split(")", 1)[0])
                    self.delivered.setdefault(pid, now)
            time.sleep(0.02)


def one_run(fault: str, iterations: int) -> list[dict]:
    import ray

    from flow1_ray import load_events
    from flow1_ray.common.names import hub_name

    with tempfile.TemporaryDirectory() as tmp:
        algo = build(tmp, fault)
        try:
            result = algo.train()
            run_dir = Path(result["flow1"]["run_dir"])
            hub = ray.get_actor(hub_name(run_dir.name), namespace="flow1")
            watch = Watch(hub)
            for _ in range(iterations):
                algo.train()
            time.sleep(3)
            watch.stop = True
            ray.get(hub.flush.remote(), timeout=10)
            events = [e for e in load_events(run_dir).to_pylist() if e["code"] == "WORKER_DIED"]
        finally:
            algo.stop()
    out = []
    for e in events:
        rel = next((t for p, t in watch.released.items() if p.endswith(f".{e['pid']}.lock")), None)
        if rel is None:
            continue   # died before the watch began
        exc = json.loads(e["evidence"]).get("exception") or {}
        out.append({"fault": fault, "pid": e["pid"], "detect_s": e["ts"].timestamp() - rel,
                    "deliver_s": watch.delivered.get(e["pid"], float("nan")) - rel,
                    "named": bool(exc) and "cause not seen" not in e["message"]})
    return out


def path_cost(calls: int = 1_000_000, rounds: int = 10) -> tuple[float, float]:
    """ns per call of a bare call and of the same call inside flow1's recording ``try``."""
    class Lv:
        cause_recorded = False

    lv = Lv()

    def sample():
        return None

    def wrapped():
        try:
            out = sample()
            if lv.cause_recorded:
                lv.clear_cause()
            return out
        except BaseException:
            raise

    def plain():
        return sample()

    bare, guarded = [], []
    for _ in range(rounds):
        for fn, into in ((plain, bare), (wrapped, guarded)):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            into.append((time.perf_counter() - t0) / calls * 1e9)
    return statistics.median(bare), statistics.median(guarded)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=8, help="training iterations watched per fault")
    ap.add_argument("--fault", choices=("connector", "exit", "both", "none"), default="both")
    args = ap.parse_args()
    bare, guarded = path_cost()
    print(f"path that does not raise: {bare:.1f} ns a call bare, {guarded:.1f} ns inside the recording try: "
          f"+{guarded - bare:.1f} ns a sample() call")
    if args.fault == "none":
        return
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 ** 2, log_to_driver=False)
    rows = []
    for fault in (("connector", "exit") if args.fault == "both" else (args.fault,)):
        rows += one_run(fault, args.iterations)
    for r in rows:
        print(f"{r['fault']:9s} pid {r['pid']:>7}  detected {r['detect_s']:6.3f} s  delivered {r['deliver_s']:6.3f} s"
              f"  cause named: {r['named']}")
    for fault in sorted({r["fault"] for r in rows}):
        d = [r["detect_s"] for r in rows if r["fault"] == fault]
        v = [r["deliver_s"] for r in rows if r["fault"] == fault and r["deliver_s"] == r["deliver_s"]]
        print(f"{fault}: {len(d)} deaths; detection median {statistics.median(d):.3f} s (max {max(d):.3f}); "
              f"delivery median {statistics.median(v) if v else float('nan'):.3f} s (max {max(v) if v else float('nan'):.3f}); "
              f"named {sum(r['named'] for r in rows if r['fault'] == fault)}/{len(d)}")


if __name__ == "__main__":
    main()
