"""One run's hub (Recorder + state clusterer, one process) against N simulated EnvRunners
sending at flow1's default cadence.

A real runner sends its sampled states at most every ``state_send_interval_s`` (2 s): the
share ``state_sample_rate`` (0.25) of its env steps since the last send, one call, with at
most ``max_pending_calls`` (4) in flight -- beyond that the batch is dropped and counted --
and an events call only when it has a new finding (here: one every ``--event-every`` s per
runner). Simulated runners do exactly that from ``--senders`` sender actors (each runner
keeps its own in-flight count, as each real runner's handle does), with CartPole-sized rows
(4 features) at ``--steps-per-s`` env steps per second per runner. Measured over
``--seconds``: state rows accepted per second, calls dropped, events written, the hub's CPU
(psutil, its process) and the senders', and one snapshot's time (clustering the window).

    .venv/bin/python scripts/bench_hub_scale.py [--runners 100 300 1000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def make_sender():
    import ray

    @ray.remote(num_cpus=0)
    class Sender:
        def __init__(self, hub, first: int, count: int, rows_per_send: int, interval_s: float,
                     max_pending: int, event_every_s: float) -> None:
            import numpy as np

            self.hub, self.first, self.count = hub, first, count
            self.rows, self.interval, self.max_pending = rows_per_send, interval_s, max_pending
            self.event_every = event_every_s
            rng = np.random.default_rng(first)
            self.payload = {"x": rng.normal(size=(rows_per_send, 4)).astype(np.float32),
                            "a": rng.integers(0, 2, rows_per_send), "fail": rng.random(rows_per_send) < 0.01,
                            "policy": np.full((rows_per_send, 2), 0.5, np.float32),
                            "labels": ["x0", "x1", "x2", "x3"], "policy_kind": "stochastic"}

        def run(self, seconds: float) -> dict:
            import ray

            from flow1_ray.common.events import Event

            start = time.monotonic()
            next_send = [start + self.interval * (i / self.count) for i in range(self.count)]
            next_event = [start + self.event_every * (i / self.count) for i in range(self.count)]
            inflight: dict = {}           # ref -> runner
            per_runner = [0] * self.count
            sent = dropped = events = 0
            while time.monotonic() - start < seconds:
                if inflight:
                    done, _ = ray.wait(list(inflight), num_returns=len(inflight), timeout=0)
                    for ref in done:
                        per_runner[inflight.pop(ref)] -= 1
                now = time.monotonic()
                for i in range(self.count):
                    if now >= next_send[i]:
                        next_send[i] += self.interval
                        if per_runner[i] >= self.max_pending:
                            dropped += 1
                            continue
                        ref = self.hub.ingest_states.remote({"modules": {"default_policy": self.payload},
                                                             "source": f"sim{self.first + i}", "dropped": 0})
                        inflight[ref] = i
                        per_runner[i] += 1
                        sent += 1
                    if now >= next_event[i]:
                        next_event[i] += self.event_every
                        ev = Event("STEP_DURATION_OUTLIER", "simulated finding", {"runner": self.first + i},
                                   worker_index=self.first + i)
                        self.hub.ingest.remote({"events": [ev.to_dict()], "source": f"sim{self.first + i}",
                                                "dropped": 0})
                        events += 1
                time.sleep(0.01)
            ray.wait(list(inflight), num_returns=len(inflight), timeout=30)
            return {"sent": sent, "dropped": dropped, "events": events}

        def cpu(self) -> float:
            t = os.times()
            return t.user + t.system

    return Sender


def one_size(n: int, args) -> dict:
    import psutil
    import ray

    from flow1_ray.hub.hub import make_hub_actor
    from flow1_ray.options import Flow1Options

    run_dir = tempfile.mkdtemp(prefix="flow1-hubscale-")
    opts = Flow1Options(output_dir=run_dir, run_id=f"scale{n}").as_dict()
    # no max_pending_calls on the hub here: the senders keep each simulated runner's own limit
    hub = make_hub_actor().remote(run_dir, f"scale{n}", ray.get_runtime_context().get_job_id(), opts, True)
    pid = ray.get(hub.status.remote(), timeout=60)["pid"]
    proc = psutil.Process(pid)
    rows = max(1, int(args.steps_per_s * args.interval * args.sample_rate))
    Sender = make_sender()
    per = -(-n // args.senders)
    senders = [Sender.remote(hub, k * per, min(per, n - k * per), rows, args.interval, args.max_pending,
                             args.event_every) for k in range(args.senders) if k * per < n]
    s_cpu0 = sum(ray.get([s.cpu.remote() for s in senders]))
    received0 = ray.get(hub.states_status.remote(), timeout=30).get("received", 0)
    c0 = proc.cpu_times()
    t0 = time.monotonic()
    results = ray.get([s.run.remote(args.seconds) for s in senders], timeout=args.seconds + 120)
    wall = time.monotonic() - t0
    c1 = proc.cpu_times()
    st = ray.get(hub.states_status.remote(), timeout=60)
    t1 = time.monotonic()
    ray.get(hub.finish_states.remote(1, 0.0, 300.0), timeout=330)   # one snapshot, waited for
    snap_s = time.monotonic() - t1
    ray.get(hub.flush.remote(), timeout=60)
    rec = ray.get(hub.status.remote(), timeout=60)
    s_cpu1 = sum(ray.get([s.cpu.remote() for s in senders]))
    sent = sum(r["sent"] for r in results)
    dropped = sum(r["dropped"] for r in results)
    out = {"runners": n, "rows_per_call": rows, "seconds": round(wall, 1),
           "calls_per_s": round(sent / wall, 1), "drop_share": round(dropped / max(1, sent + dropped), 4),
           "rows_accepted_per_s": round((st.get("received", 0) - received0) / wall),
           "events_written": rec["events"].get("WARN", 0),
           "hub_cpu_share": round(((c1.user + c1.system) - (c0.user + c0.system)) / wall, 3),
           "senders_cpu_share": round((s_cpu1 - s_cpu0) / wall, 3), "snapshot_s": round(snap_s, 2)}
    for a in senders + [hub]:
        ray.kill(a)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runners", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--senders", type=int, default=2)
    ap.add_argument("--steps-per-s", type=float, default=500.0, help="env steps per second per runner")
    ap.add_argument("--interval", type=float, default=2.0, help="state_send_interval_s")
    ap.add_argument("--sample-rate", type=float, default=0.25, help="state_sample_rate")
    ap.add_argument("--max-pending", type=int, default=4, help="max_pending_calls per runner")
    ap.add_argument("--event-every", type=float, default=60.0, help="one new finding per runner this often")
    args = ap.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=400 * 1024**2, log_to_driver=False)
    print(f"{'runners':>8} {'rows/call':>9} {'calls/s':>8} {'dropped':>8} {'rows/s kept':>12} {'events':>7} "
          f"{'hub CPU':>8} {'senders CPU':>12} {'snapshot':>9}")
    for n in args.runners:
        r = one_size(n, args)
        print(f"{r['runners']:>8} {r['rows_per_call']:>9} {r['calls_per_s']:>8} {r['drop_share']:>8.2%} "
              f"{r['rows_accepted_per_s']:>12} {r['events_written']:>7} {r['hub_cpu_share']:>8.2f} "
              f"{r['senders_cpu_share']:>12.2f} {r['snapshot_s']:>8.2f}s", flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
