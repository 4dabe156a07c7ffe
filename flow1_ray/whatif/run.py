"""``flow1 whatif``: branches of a run from its checkpoint, run as Ray tasks inside a quota,
judged against the baseline, written under ``RUN_DIR/whatif/<id>/``.

The Python entry point :func:`run_whatif` is the one to call from a script that registers
its env (``tune.register_env``) first: the branches build the run's own config, env
included, in Ray workers, and a name only the user's script registers is unknown to a
fresh ``flow1 whatif`` process.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ..common.schema import WHATIF_DIR
from .branch import BranchResult, BranchSpec, run_branch
from .plan import BASELINE, Branch, Source, describe, plan, resolve
from .verdict import NOT_IN_EFFECT, RETURN, Comparison, Signal, Verdict, compare, judge, reduce_series, signal_for

VERDICTS_JSON, VERDICTS_MD, CURVES_PARQUET = "verdicts.json", "verdicts.md", "curves.parquet"


@dataclass
class Outcome:
    """Everything a what-if found: where it wrote, the verdict rows, the branches' runs."""

    out_dir: Path
    source: Source
    branches: list[Branch]
    results: list[BranchResult]
    verdicts: list[dict] = field(default_factory=list)
    queued: str = ""
    seconds: float = 0.0
    cut: bool = False            # stopped before its branches finished (no verdict)

    def failed(self) -> list[BranchResult]:
        return [r for r in self.results if r.error]


def _per_seed(results: list[BranchResult], branch: str, sig: Signal, module_id: str | None) -> dict[int, float]:
    """One number per seed of a branch: ``stat`` over its iterations (one module, or the run's)."""
    out = {}
    for r in results:
        if r.branch != branch or r.error:
            continue
        rows = [row for row in r.curves if module_id is None or row.get("module_id") == module_id]
        if module_id is None:   # run-level: one row per iteration
            rows = list({row["iteration"]: row for row in rows}.values())
        key = "entropy_ratio" if sig.scale_by_max_entropy else sig.stats[0]
        v = reduce_series([row.get(key) for row in sorted(rows, key=lambda x: x["iteration"])], sig.reduce,
                          sig.worst())
        if v is not None:
            out[r.seed] = v
    return out


def _symptom(results: list[BranchResult], branch: str, code: str | None, mid: str | None) -> int:
    """How many of a branch's seeds the curve rules fired ``code`` on."""
    return sum(1 for r in results if r.branch == branch and not r.error and any(
        f["code"] == code and (mid is None or f.get("module_id") == mid) for f in r.findings))


def _compare(results: list[BranchResult], branch: str, sig: Signal, mid: str | None) -> Comparison | None:
    module = None if sig is RETURN else mid
    return compare(sig, list(_per_seed(results, BASELINE, sig, module).values()),
                   list(_per_seed(results, branch, sig, module).values()))


def verdicts(branches: list[Branch], results: list[BranchResult]) -> list[dict]:
    """One row per (branch, finding it is judged for); a branch no finding advised, on the
    return. A branch is harmful for all its rows when the return or any of its findings'
    signals grew worse: a cure that kills the policy is no cure. A branch none of whose runs
    ran (or a baseline that never ran) has no verdict: its failures are the what-if's answer."""
    rows = []
    if not any(r.branch == BASELINE and not r.error for r in results):
        return rows
    for b in branches:
        if b.name == BASELINE:
            continue
        mine = [r for r in results if r.branch == b.name]
        ran = [r for r in mine if not r.error]
        if not ran:
            continue
        off = [r for r in ran if not r.in_effect]
        advice = b.advice or [None]
        comps = {(a.code, a.module_id) if a else None: (signal_for(a.code) if a else RETURN) for a in advice}
        measured = {k: (sig, _compare(results, b.name, sig, k[1] if k else None)) for k, sig in comps.items()}
        ret = _compare(results, b.name, RETURN, None)
        guards = [c for _, c in measured.values() if c is not None] + ([ret] if ret is not None else [])
        for adv in advice:
            code, mid = (adv.code, adv.module_id) if adv else (None, None)
            sig, comp = measured[(code, mid) if adv else None]
            row = {"branch": b.name, "changes": [c.as_dict() for c in b.changes], "finding": code,
                   "module_id": mid, "signal": sig.describe(), "seeds_run": len(ran),
                   "seeds_failed": len(mine) - len(ran),
                   "readback": [x for r in ran for x in r.readback if mid is None or x["module_id"] == mid],
                   "symptom_in_branch": _symptom(results, b.name, code, mid),
                   "symptom_in_baseline": _symptom(results, BASELINE, code, mid)}
            if off:
                bad = sorted({f"{x['knob']} asked {x['asked']!r}, effective {x['effective']!r}"
                              for r in off for x in r.readback if x["status"] == "not in effect"})
                v = Verdict(NOT_IN_EFFECT, "the branch's knob is not what the Learner uses after the restore: "
                            + "; ".join(bad) + " (the branch is not counted)", None, None)
            else:
                v = judge(sig, comp, guards)
            row.update(v.as_dict())
            rows.append(row)
    return rows


def _ray(parallel: int, cpus: float) -> str:
    """Ray started here unless it runs (at most this machine's cores: a ``--parallel`` beyond
    them waits in Ray's queue, said by :func:`_quota`); on a cluster (``RAY_ADDRESS``) it is
    joined, and the branches spread over its nodes."""
    import ray

    if ray.is_initialized():
        return "joined"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False)
        return "cluster"
    ray.init(address="local", num_cpus=max(1, min(math.ceil(parallel * cpus), os.cpu_count() or 1)),
             include_dashboard=False,
             object_store_memory=150 * 1024**2, log_to_driver=False, configure_logging=False)
    return "local"


def _quota(parallel: int, cpus: float, tasks: int) -> str:
    """What the cluster can take at once; the rest is queued, said, never forced."""
    import ray

    free = float(ray.available_resources().get("CPU", 0.0))
    fit = int(free // cpus) if cpus > 0 else parallel
    if fit >= min(parallel, tasks):
        return ""
    return (f"{tasks} branch runs, --parallel {parallel} x {cpus:g} CPU asked, {free:g} CPU free: "
            f"{max(0, min(parallel, tasks) - fit)} wait in Ray's queue at a time")


def run_whatif(path: str, *, sets: list[str] | None = None, from_advice: bool = False,
               findings: list[str] | None = None, iterations: int = 5,
               seeds: int = 3, parallel: int = 2, cpus_per_branch: float = 1.0, env_runners: int = 0,
               output_dir: str | None = None, max_branches: int = 6, ray_log: bool = False, first_seed: int = 0,
               say: Callable[[str], None] = lambda s: None) -> Outcome:
    """Plan, run and judge; ``say`` gets progress lines. Raises Flow1InputError on bad input.
    A Ray this call starts it also stops; ``ray_log``: Ray's own output goes to the what-if's
    ``ray.log`` (the CLI), not the terminal."""
    from .inputs import check_budget, check_source

    check_budget(iterations, seeds, parallel, cpus_per_branch, env_runners, first_seed)
    source = resolve(path)
    branches = plan(source, list(sets or []), from_advice, max_branches, findings=findings)
    check_source(str(source.checkpoint), str(source.run_dir) if source.run_dir else None, branches)
    base = Path(output_dir) if output_dir else (source.run_dir or source.checkpoint.parent) / WHATIF_DIR
    return run_source(source, branches, base, iterations=iterations, seeds=seeds, parallel=parallel,
                      cpus_per_branch=cpus_per_branch, env_runners=env_runners, ray_log=ray_log,
                      first_seed=first_seed, say=say)


def run_source(source: Source, branches: list[Branch], base: Path, *, iterations: int, seeds: int, parallel: int,
               cpus_per_branch: float = 1.0, env_runners: int = 0, ray_log: bool = False, first_seed: int = 0,
               say: Callable[[str], None] = lambda s: None, stop: Any = None) -> Outcome:
    """The planned branches run and judged, written under ``base/<UTC stamp>/``; ``stop``
    (a ``threading.Event``): set, the runs in flight are cancelled and no verdict is made
    (the live what-if of a run that ended first)."""
    from ..common.errors import Flow1InputError

    t0 = time.monotonic()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = base / stamp
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Flow1InputError(f"cannot write {out_dir}: {e.strerror or e}") from None
    say(f"whatif from {source.checkpoint}" + (f" (iteration {source.iteration})" if source.iteration else "")
        + (f", run {source.run_dir}" if source.run_dir else ""))
    for line in describe(branches, seeds, iterations):
        say("  " + line)
    specs = [BranchSpec(b.name, str(source.checkpoint), b.changes, seed, iterations, env_runners)
             for seed in range(first_seed, first_seed + seeds) for b in branches]
    if ray_log:
        from ..rundir.raylog import RAY_LOG, RayLog

        with RayLog(out_dir / RAY_LOG) as log:
            results, queued = _run(specs, parallel, cpus_per_branch, say, log.ray_speaks, stop)
    else:
        results, queued = _run(specs, parallel, cpus_per_branch, say, None, stop)
    cut = stop is not None and stop.is_set()
    outcome = Outcome(out_dir, source, branches, results, [] if cut else verdicts(branches, results), queued,
                      time.monotonic() - t0, cut)
    write(outcome, seeds, iterations, parallel)
    return outcome


def _run(specs: list[BranchSpec], parallel: int, cpus: float, say: Callable[[str], None],
         speaks: Any, stop: Any = None) -> tuple[list[BranchResult], str]:
    """The branch runs as Ray tasks, at most ``parallel`` in flight (a slot freed is taken
    by the next); a task lost (its worker died) is named like a branch that failed."""
    import contextlib

    import ray

    started = _ray(parallel, cpus) != "joined"
    try:
        queued = _quota(parallel, cpus, len(specs))
        if queued:
            say("  " + queued)
        task = ray.remote(num_cpus=cpus, max_retries=0)(run_branch)
        results: list[BranchResult] = []
        pending, waiting = list(specs), {}
        while pending or waiting:
            if stop is not None and stop.is_set():
                for ref in waiting:
                    ray.cancel(ref, force=True)
                break
            while pending and len(waiting) < parallel:
                spec = pending.pop(0)
                waiting[task.remote(spec)] = spec
            done, _ = ray.wait(list(waiting), num_returns=1, timeout=1.0)
            for ref in done:
                spec = waiting.pop(ref)
                try:
                    r = ray.get(ref)
                except Exception as e:   # noqa: BLE001 -- a lost task is named like a failed branch
                    r = BranchResult(spec.branch, spec.seed, error=f"{type(e).__name__}: {e}".splitlines()[0][:300])
                results.append(r)
                its = max((x["iteration"] for x in r.curves), default=0)
                say(f"  {r.branch} seed {r.seed}: " + (f"FAILED: {r.error}" if r.error else
                                                        f"{its} iterations in {r.seconds:.0f} s"))
    finally:
        if started:
            with (speaks() if speaks else contextlib.nullcontext()):
                ray.shutdown()
    return results, queued


def write(o: Outcome, seeds: int, iterations: int, parallel: int) -> None:
    """``verdicts.json`` (the plan, each branch run, the verdicts), ``verdicts.md`` (the
    table) and ``curves.parquet`` (each branch's curves, a row per iteration, seed, module)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    o.out_dir.mkdir(parents=True, exist_ok=True)
    rows = [row for r in o.results for row in r.curves]
    if rows:
        pq.write_table(pa.Table.from_pylist(rows), o.out_dir / CURVES_PARQUET)
    doc = {"checkpoint": str(o.source.checkpoint), "run_dir": str(o.source.run_dir) if o.source.run_dir else None,
           "iteration": o.source.iteration, "seeds": seeds, "iterations": iterations, "parallel": parallel,
           "seconds": round(o.seconds, 1), "queued": o.queued, "cut": o.cut,
           "branches": [b.as_dict() for b in o.branches],
           "runs": [{k: v for k, v in asdict(r).items() if k != "curves"} for r in o.results],
           "verdicts": o.verdicts}
    (o.out_dir / VERDICTS_JSON).write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    (o.out_dir / VERDICTS_MD).write_text(table(o), encoding="utf-8")


def table(o: Outcome) -> str:
    lines = ["| branch | finding | verdict | why |", "|---|---|---|---|"]
    for v in o.verdicts:
        finding = (v["finding"] or "(--set: the return)") + (f" ({v['module_id']})" if v.get("module_id") else "")
        lines.append(f"| {v['branch']} | {finding} | {v['verdict']} | {v['why']} |")
    for r in o.failed():
        lines.append(f"| {r.branch} | seed {r.seed} | failed | {r.error} |")
    return "\n".join(lines) + "\n"


def summary_lines(o: Outcome) -> list[str]:
    out = []
    for v in o.verdicts:
        finding = v["finding"] or "--set"
        out.append(f"{v['branch']:24s} {finding:18s} {v['verdict'].upper():14s} {v['why']}")
    said = set()
    for r in o.results:
        for x in r.readback:
            line = (f"read back in {r.branch}: {x['knob']} ({x['module_id']}) asked {x['asked']!r}, after the restore "
                    f"{x['after_restore']!r}: {x['status']}")
            if x["status"] != "in effect" and line not in said:
                said.add(line)
                out.append(line)
    times = [r.seconds for r in o.results if not r.error]
    if times:
        out.append(f"{len(o.results)} branch runs in {o.seconds:.0f} s (one: median {statistics.median(times):.0f} s)")
    return out
