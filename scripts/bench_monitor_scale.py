"""How many EnvRunners one monitor and its node probe keep up with, at a 1 s heartbeat.

Simulated EnvRunners: holder processes, each holding the POSIX record locks of many lock
files and rewriting each file's 72-byte heartbeat header every second, exactly as a real
runner's watchdog does. The real hub (the monitor, with this node's probe loop on one of
its threads) watches them. For
each size, holders are SIGKILLed one at a time; the figure is the time from the kill until
the monitor has counted every one of that holder's runners dead (``kill -> monitor``),
and the probe's scan time over all lock files.

    .venv/bin/python scripts/bench_monitor_scale.py [--sizes 500 1000 2000 4000] [--per-holder 100]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def holder(directory: str, first: int, count: int, interval: float) -> None:
    from flow1_ray.liveness.lockfile import HEADER, IDLE, MAGIC, META_OFFSET, META_SIZE, VERSION

    d, pid, fds = Path(directory), os.getpid(), []
    for i in range(first, first + count):
        fd = os.open(d / f"sim{i:06d}.{pid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, META_OFFSET + META_SIZE)
        os.pwrite(fd, json.dumps({"worker_index": i, "eval": False}).encode() + b"\0", META_OFFSET)
        fds.append((i, fd))
    print("ready", flush=True)
    steps = 0
    while True:
        now = time.time()
        steps += 100
        for i, fd in fds:
            os.pwrite(fd, HEADER.pack(MAGIC, VERSION, IDLE, pid, i, now, now, steps, 0.0, 0.0, 0.0, 0), 0)
        time.sleep(interval)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    ap.add_argument("--per-holder", type=int, default=100)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--holder", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.holder:
        holder(a.holder[0], int(a.holder[1]), int(a.holder[2]), 1.0)
        return
    import logging

    import psutil
    import ray

    from flow1_ray.hub.hub import make_hub_actor
    from flow1_ray.options import Flow1Options
    from flow1_ray.liveness.lockdir import job_lock_dir

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    ctx = ray.get_runtime_context()
    lock_dir = job_lock_dir(ctx.get_job_id(), ctx.get_node_id())
    print(f"{'runners':>8} {'scan ms (median)':>17} {'kill->monitor s (median, max)':>30} {'hub CPU %':>12}")
    for n in a.sizes:
        run_id = f"scale{n}"
        opts = Flow1Options(stall_timeout_s=30.0, probe_interval_s=0.1, heartbeat_interval_s=1.0).as_dict()
        mon = make_hub_actor().options(namespace="flow1").remote(
            tempfile.mkdtemp(), run_id, ray.get_runtime_context().get_job_id(), opts, False)
        holders = []
        for first in range(0, n, a.per_holder):
            p = subprocess.Popen([sys.executable, __file__, "--holder", str(lock_dir), str(first), str(a.per_holder)],
                                 stdout=subprocess.PIPE, text=True)
            holders.append(p)
        for p in holders:
            assert p.stdout.readline().strip() == "ready"
        ray.get(mon.set_keys.remote([f"sim{i:06d}" for i in range(n)], []))
        ray.get(mon.ensure_probes.remote())
        ray.get(mon.wait_probes.remote(60))
        t0 = time.time()
        while ray.get(mon.full_status.remote())["alive"] < n and time.time() - t0 < 60:
            time.sleep(0.1)
        pid = ray.get(mon.probe_pids.remote())[0]
        probe = psutil.Process(pid)
        probe.cpu_percent(None)
        time.sleep(5.0)
        cpu = probe.cpu_percent(None)
        lat, scans = [], []
        for k in range(min(a.kills, len(holders))):
            st = ray.get(mon.full_status.remote())
            dead0 = st["deaths"]
            scans += [v for v in st["scan_ms"].values() if v is not None]
            victim = holders[k]
            victim.send_signal(signal.SIGKILL)
            tk = time.time()
            victim.wait()
            while time.time() - tk < 10:
                if ray.get(mon.full_status.remote())["deaths"] >= dead0 + a.per_holder:
                    break
                time.sleep(0.005)
            lat.append(time.time() - tk)
            time.sleep(1.2)
        print(f"{n:>8} {statistics.median(scans):>17.2f} {statistics.median(lat):>20.3f}, {max(lat):.3f} "
              f"{cpu:>12.1f}", flush=True)
        ray.get(mon.stop_probes.remote())
        for p in holders:
            p.kill()
            p.wait()
        for f in lock_dir.glob("sim*"):
            f.unlink()
        ray.kill(mon)
    ray.shutdown()


if __name__ == "__main__":
    main()
