"""What the live panel costs while it follows a run.

1. Reading: a run directory written by the real Recorder (``RecorderCore``), one flush per
   iteration (an events part, a metrics part, a learner part), at several lengths. Side by
   side in one process: the panel's incremental poll after one more flush
   (``RunFollower.poll``) against re-reading the run from its files (what a page reload, or
   ``flow1 report``, does: ``load_run_report`` plus the metrics table). Ratio = reread /
   poll, median of repeats.
2. Serving (``--browser``): ``flow1 serve`` on the longest run with one headless Chromium tab
   open (it asks once a second), the Recorder adding a flush every 2 s: the serve process's
   CPU time over the window, as a share of one core (psutil), and the browser's too.

    python scripts/bench_panel.py [--iterations 200 1000 3000] [--browser] [--window-s 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from flow1_ray.common import codes as C
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.common.events import Event
from flow1_ray.report import follow
from flow1_ray.report.follow import RunFollower
from flow1_ray.report.rundir import load_run_report
from flow1_ray.rundir.reading import load_metrics


def flush_once(rec: RecorderCore, i: int) -> None:
    rec.add_events([Event(C.STATE_SNAPSHOT, f"iteration {i}", {"i": i},
                          iteration=i, worker_index=1, status=C.PASS)])
    rec.add_metrics({"iteration": i, "env_steps": 1000 * i, "episode_return_mean": 20.0 + i * 0.01,
                     "flow1/worker/alive": 2, "flow1/samples_dropped": 0, "flow1/learner/return_ema": 20.0})
    rec.add_learner_rows([{"iteration": i, "module_id": "default_policy", "kind": "module", "layer": None,
                           "entropy_ratio": 0.9, "mean_kl_loss": 0.01, "grad_rms": None}])
    rec.flush()


def reading(iterations: int, repeats: int, root: Path) -> dict:
    run = root / f"run-{iterations}"
    rec = RecorderCore(str(run), "bench", flush_interval_s=3600)
    t0 = time.perf_counter()
    for i in range(1, iterations + 1):
        flush_once(rec, i)
    written_s = time.perf_counter() - t0
    f = RunFollower(run)
    t0 = time.perf_counter()
    f.poll()
    first = time.perf_counter() - t0
    polls, rereads = [], []
    follow.MIN_POLL_INTERVAL_S = 0.0
    for k in range(repeats):
        flush_once(rec, iterations + k + 1)
        t0 = time.perf_counter()
        assert f.poll()
        polls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        load_run_report(run)
        load_metrics(run)
        rereads.append(time.perf_counter() - t0)
    poll, reread = statistics.median(polls), statistics.median(rereads)
    return {"iterations": iterations, "parts": 3 * (iterations + repeats), "write_s": written_s, "first_poll_s": first,
            "poll_ms": poll * 1e3, "reread_ms": reread * 1e3, "ratio": reread / poll, "run": run, "rec": rec}


def serving(run: Path, rec: RecorderCore, window_s: float, flush_every_s: float) -> dict:
    import psutil

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
    from browser import Served, chrome, wait_for

    with Served(run) as served:
        d = chrome()
        try:
            d.get(served.url)
            wait_for(lambda: d.find_element("id", "n-iteration").text, 60)
            time.sleep(3)   # the first full read is done
            server = psutil.Process(served.proc.pid)
            browser = [psutil.Process(d.service.process.pid)]
            browser += browser[0].children(recursive=True)

            def cpu(procs):
                total = 0.0
                for p in procs:
                    try:
                        t = p.cpu_times()
                        total += t.user + t.system
                    except psutil.NoSuchProcess:
                        pass
                return total

            s0, b0, t0 = cpu([server]), cpu(browser), time.monotonic()
            i = int(d.find_element("id", "n-iteration").text.replace(",", ""))
            next_flush = time.monotonic()
            while time.monotonic() - t0 < window_s:
                if flush_every_s > 0 and time.monotonic() >= next_flush:
                    i += 1
                    flush_once(rec, i)
                    next_flush += flush_every_s
                time.sleep(0.05)
            wall = time.monotonic() - t0
            shown = int(d.find_element("id", "n-iteration").text.replace(",", ""))
            return {"server_core": (cpu([server]) - s0) / wall, "browser_core": (cpu(browser) - b0) / wall,
                    "window_s": wall, "last_flush": i, "shown": shown}
        finally:
            d.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, nargs="+", default=[200, 1000, 3000])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--flush-every-s", type=float, nargs="+", default=[2.0, 0.0],
                    help="the Recorder's flush cadence while serving (0: the run is idle)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flow1-bench-panel-") as tmp:
        print("| iterations (parts) | first poll (s) | poll after one flush (ms) | reread (ms) | reread / poll |")
        print("|---|---|---|---|---|")
        last = None
        for n in args.iterations:
            r = reading(n, args.repeats, Path(tmp))
            print(f"| {n:,} ({r['parts']:,}) | {r['first_poll_s']:.2f} | {r['poll_ms']:.2f} | {r['reread_ms']:.0f} "
                  f"| {r['ratio']:.0f}x |", flush=True)
            last = r
        for every in (args.flush_every_s if args.browser and last is not None else []):
            s = serving(last["run"], last["rec"], args.window_s, every)
            cadence = f"a flush every {every:g} s" if every > 0 else "no flush (idle run)"
            print(f"\nflow1 serve on the {last['iterations']:,}-iteration run, one Chromium tab, {cadence}, "
                  f"{s['window_s']:.0f} s: serve process {s['server_core'] * 100:.1f} % of a core, browser "
                  f"{s['browser_core'] * 100:.1f} %; last flush iteration {s['last_flush']}, shown {s['shown']}")


if __name__ == "__main__":
    main()
