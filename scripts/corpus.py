"""The corpus of real reported faults (``tests/envs/corpus.py``), run: flow1's verdict on each
fault against the cause its thread established, each fixed twin's silence, and the same envs
through gymnasium's and SB3's ``check_env`` for comparison.

    python scripts/corpus.py [--json PATH] [--only ID ...] [--live]

``--live`` adds the live half (``tests/envs/corpus_live.py``): learning pathologies of PPO, DQN
and SAC reproduced as real RLlib trainings, each fault and its fixed twin trained with flow1 on
a local Ray of 2 CPUs (minutes; the time of each case is printed). The peers have no verdict on
a training run.

A peer checker "flags" an env when it raises or warns on it (whatever it says: a generous
count); flow1 "names" a fault when a WARN or FAIL carries a code that names the established
cause, "mis-names" it when its WARN/FAIL carry other codes, and "misses" it when nothing is
loud. A twin is silent when no WARN or FAIL is raised (flow1) or nothing is raised or warned
(the peers). Exit 0 when every fault is named and every twin silent, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "envs"))

from corpus import MISNAMED, MISSED, NAMED, cases, loud, verdict  # noqa: E402


def peer(check, make) -> str:
    """A peer checker on a fresh env: 'flagged: <first line>' or 'silent'."""
    env = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check(env)
        except Exception as e:   # noqa: BLE001 -- what the checker raises is its verdict
            return f"flagged: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
    said = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    return f"flagged: {str(said[0].message).splitlines()[0][:80]}" if said else "silent"


def peers(c) -> dict:
    if c.multi_agent:
        return {"gymnasium": "n/a (multi-agent)", "sb3": "n/a (multi-agent)"}
    from gymnasium.utils.env_checker import check_env as gym_check
    out = {"gymnasium": peer(lambda e: gym_check(e, skip_render_check=True), c.fault),
           "gymnasium_twin": peer(lambda e: gym_check(e, skip_render_check=True), c.twin)}
    try:
        from stable_baselines3.common.env_checker import check_env as sb3_check
    except ImportError:
        return {**out, "sb3": "n/a (not installed)", "sb3_twin": "n/a"}
    out["sb3"] = peer(lambda e: sb3_check(e, warn=True), c.fault)
    out["sb3_twin"] = peer(lambda e: sb3_check(e, warn=True), c.twin)
    return out


def run_case(c) -> dict:
    from flow1_ray import check_env

    t0 = time.perf_counter()
    fault = check_env(c.fault(), steps=c.steps, seed=0, **c.options)
    twin = check_env(c.twin(), steps=c.steps, seed=0, **c.options)
    return {"id": c.id, "category": c.category, "address": c.address, "cause": c.cause,
            "names": sorted(c.names), "flow1": verdict(c, fault),
            "flow1_codes": sorted({e.code for e in loud(fault)}),
            "twin_loud": sorted({e.code for e in loud(twin)}), "gap": c.gap,
            "seconds": round(time.perf_counter() - t0, 2), **peers(c)}


def run_live_case(c, out: Path) -> dict:
    """A live case: its fault and its twin trained with flow1 (``corpus_live.train``)."""
    from corpus_live import loud_codes, train

    fault, fault_s = train(c.fault, c.iterations, out / c.id / "fault", c.options)
    twin, twin_s = train(c.twin, c.iterations, out / c.id / "twin", c.options)
    codes = loud_codes(fault)
    named = NAMED if codes & c.names else (MISNAMED if codes else MISSED)
    return {"id": c.id, "category": c.category, "address": c.address, "cause": c.cause, "names": sorted(c.names),
            "flow1": named, "flow1_codes": sorted(codes), "twin_loud": sorted(loud_codes(twin)), "gap": c.gap,
            "seconds": round(fault_s + twin_s, 1), "gymnasium": "n/a (a training run)",
            "gymnasium_twin": "n/a", "sb3": "n/a (a training run)", "sb3_twin": "n/a"}


def live_rows(only: list[str] | None) -> list[dict]:
    import os
    import tempfile

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from corpus_live import LIVE_CASES

    todo = [c for c in LIVE_CASES if not only or c.id in only]
    if not todo:
        return []
    envs = str(Path(__file__).resolve().parents[1] / "tests" / "envs")   # remote runners import the cases' envs
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2,
             log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (envs, os.environ.get("PYTHONPATH", "")) if p)}})
    try:
        with tempfile.TemporaryDirectory() as out:
            rows = []
            for c in todo:
                rows.append(run_live_case(c, Path(out)))
                print(f"{c.id}: {rows[-1]['flow1']} {rows[-1]['flow1_codes']}, twin "
                      f"{rows[-1]['twin_loud'] or 'silent'} ({rows[-1]['seconds']} s)", flush=True)
            return rows
    finally:
        ray.shutdown()


def table(rows: list[dict]) -> str:
    lines = ["| case | category | flow1 | flow1's codes | twin | gymnasium | SB3 |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        twin = "silent" if not r["twin_loud"] else "LOUD: " + ", ".join(r["twin_loud"])
        lines.append(f"| {r['id']} | {r['category']} | {r['flow1']} | {', '.join(r['flow1_codes']) or '-'} | {twin} "
                     f"| {r['gymnasium'].split(':')[0]} | {r['sb3'].split(':')[0]} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    n = len(rows)
    count = {v: sum(r["flow1"] == v for r in rows) for v in (NAMED, MISNAMED, MISSED)}
    twins = sum(not r["twin_loud"] for r in rows)
    single = [r for r in rows if not r["gymnasium"].startswith("n/a")]
    g = sum(r["gymnasium"].startswith("flagged") for r in single)
    s = sum(r["sb3"].startswith("flagged") for r in single)
    gt = sum(r["gymnasium_twin"] == "silent" for r in single)
    st = sum(r.get("sb3_twin") == "silent" for r in single)
    return (f"flow1: {count[NAMED]}/{n} named, {count[MISNAMED]} mis-named, {count[MISSED]} missed; twins silent "
            f"{twins}/{n}\ngymnasium check_env: flagged {g}/{len(single)} single-agent faults, twins silent "
            f"{gt}/{len(single)}\nSB3 check_env: flagged {s}/{len(single)}, twins silent {st}/{len(single)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write every row as JSON to PATH")
    ap.add_argument("--only", nargs="+", metavar="ID", help="run these cases only")
    ap.add_argument("--live", action="store_true", help="add the live half: real RLlib trainings (minutes)")
    args = ap.parse_args()
    todo = [c for c in cases() if not args.only or c.id in args.only]
    t0 = time.perf_counter()
    rows = [run_case(c) for c in todo]
    if args.live:
        rows += live_rows(args.only)
    print(table(rows))
    print()
    for r in rows:
        if r["flow1"] != NAMED or r["twin_loud"]:
            print(f"{r['id']}: {r['flow1']} (expected {', '.join(r['names'])}){' -- ' + r['gap'] if r['gap'] else ''}")
    print(summary(rows))
    print(f"{len(rows)} cases in {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["flow1"] == NAMED and not r["twin_loud"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
