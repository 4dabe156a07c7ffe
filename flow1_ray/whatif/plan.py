"""What a what-if runs: where it starts (a checkpoint, the run it came from), the branches
(the baseline, one per advice or per ``--set`` group) and what each is judged on, all fixed
before anything runs. No Ray here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common import schema as S
from ..common.errors import Flow1InputError
from ..checks.advice import Knob
from .branch import change, change_from_knob, parse_value
from .inputs import MAX_VALUE_CHARS, check_value
from .verdict import RETURN, Signal, signal_for

CHECKPOINT_FILE = "class_and_ctor_args.pkl"
#: the guard's checkpoint beside the run directory (``on_fail="checkpoint"``) and the rolling
#: ones inside it
GUARD_CHECKPOINT = re.compile(r"^(?P<run_id>.+)-checkpoint-iter(?P<iteration>\d+)$")
BASELINE = "baseline"


@dataclass(frozen=True)
class Advice:
    """A finding of the run that advised knobs: what a branch tests."""

    code: str
    module_id: str | None
    status: str
    knobs: tuple[dict, ...]
    message: str = ""
    iteration: int | None = None


@dataclass
class Branch:
    """A baseline (no change) or a change tested against it, with the advice it tests and
    the signal its verdict reads (fixed here, before it runs)."""

    name: str
    changes: tuple[Knob, ...] = ()
    advice: list[Advice] = field(default_factory=list)
    signal: Signal = RETURN

    def as_dict(self) -> dict:
        return {"branch": self.name, "changes": [c.as_dict() for c in self.changes],
                "advice": [{"code": a.code, "module_id": a.module_id, "status": a.status} for a in self.advice],
                "signal": self.signal.describe()}


@dataclass
class Source:
    checkpoint: Path
    run_dir: Path | None
    iteration: int | None
    advice: list[Advice]


def is_checkpoint(p: Path) -> bool:
    return (p / CHECKPOINT_FILE).is_file()


def checkpoint_iteration(checkpoint: Path) -> int | None:
    m = GUARD_CHECKPOINT.match(checkpoint.name) or re.match(r"^iter(?P<iteration>\d+)$", checkpoint.name)
    return int(m.group("iteration")) if m else None


def checkpoints_of(run_dir: Path) -> list[Path]:
    """The run's checkpoints, oldest first: the guard's beside it and the rolling ones in it."""
    found = [p for p in run_dir.parent.glob(f"{run_dir.name}-checkpoint-iter*") if is_checkpoint(p)]
    rolling = run_dir / S.CHECKPOINTS_DIR
    if rolling.is_dir():
        found += [p for p in rolling.iterdir() if is_checkpoint(p)]
    return sorted(found, key=lambda p: (checkpoint_iteration(p) or 0, p.name))


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory a checkpoint came from, when flow1 wrote it (guard or rolling)."""
    m = GUARD_CHECKPOINT.match(checkpoint.name)
    candidates = []
    if m:
        candidates.append(checkpoint.parent / m.group("run_id"))
    if checkpoint.parent.name == S.CHECKPOINTS_DIR:
        candidates.append(checkpoint.parent.parent)
    from ..report.rundir import is_run_dir
    from ..rundir.store import Location

    return next((c for c in candidates if c.is_dir() and is_run_dir(Location(str(c)))), None)


def resolve(path: str) -> Source:
    """A checkpoint (``save_to_path``'s folder) or a flow1 run directory (its newest
    checkpoint); Flow1InputError with one line otherwise."""
    from ..report.rundir import is_run_dir
    from ..rundir.store import Location

    p = Path(path)
    if not p.exists():
        raise Flow1InputError(f"not found: {path}")
    if is_checkpoint(p):
        checkpoint, run_dir = p, run_dir_of(p)
    elif p.is_dir() and is_run_dir(Location(str(p))):
        run_dir = p
        found = checkpoints_of(p)
        if not found:
            raise Flow1InputError(
                f"{p} has no checkpoint to branch from: run with Flow1Callbacks.with_options(on_fail='checkpoint') "
                f"or checkpoint_every=N, or pass a checkpoint folder (algo.save_to_path)")
        advice = read_advice(p)
        return Source(before_symptom(found, advice), p, checkpoint_iteration(before_symptom(found, advice)), advice)
    else:
        raise Flow1InputError(f"{p} is neither a checkpoint (no {CHECKPOINT_FILE}) nor a flow1 run directory")
    return Source(checkpoint, run_dir, checkpoint_iteration(checkpoint), read_advice(run_dir) if run_dir else [])


def before_symptom(checkpoints: list[Path], advice: list[Advice]) -> Path:
    """The newest checkpoint taken before the run's first advised finding (a branch then
    starts from a state the symptom had not yet shaped); else the oldest there is (the
    guard's is taken at the FAIL's iteration)."""
    first = min((a.iteration for a in advice if a.iteration is not None), default=None)
    if first is None:
        return checkpoints[-1]
    earlier = [c for c in checkpoints if (checkpoint_iteration(c) or 0) < first]
    return earlier[-1] if earlier else checkpoints[0]


def read_advice(run_dir: Path) -> list[Advice]:
    """The run's WARN/FAIL findings that advised knobs, first of each (code, module)."""
    from ..report.rundir import read_events
    from ..rundir.store import Location

    events, _, _ = read_events(Location(str(run_dir)))
    seen, out = set(), []
    for e in sorted(events, key=lambda e: e.ts):
        ev = e.evidence if isinstance(e.evidence, dict) else {}
        knobs = ev.get("knobs")
        if e.status not in ("WARN", "FAIL") or not isinstance(knobs, list) or not knobs:
            continue
        key = (e.code, ev.get("module_id"))
        if key in seen:
            continue
        seen.add(key)
        out.append(Advice(e.code, ev.get("module_id"), e.status, tuple(k for k in knobs if isinstance(k, dict)),
                          e.message, e.iteration))
    return out


def parse_set(group: str) -> tuple[Knob, ...]:
    """``"lr=0.001 entropy_coeff=0.01"`` (one branch); ``method.knob=value`` names the config
    method (``rl_module.model_config={'fcnet_hiddens': [64, 64]}``), else ``training``."""
    changes = []
    if len(group) > 20 * MAX_VALUE_CHARS:
        raise Flow1InputError(f"--set: {len(group):,} characters; expected at most {20 * MAX_VALUE_CHARS:,}")
    try:
        items = shlex.split(group, posix=False)   # quotes kept: a value is a Python literal
    except ValueError as e:
        raise Flow1InputError(f"--set {group[:80]!r}: {e}") from None
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise Flow1InputError(f"--set {group!r}: expected knob=value, actual {item!r}")
        method, _, knob = name.rpartition(".")
        method = method or "training"
        if not knob.isidentifier() or not method.isidentifier():
            raise Flow1InputError(f"--set {group!r}: {name!r} is not a config knob name")
        if knob == "seed":
            raise Flow1InputError(f"--set {group!r}: the seed is the what-if's own (--seeds, --first-seed)")
        if len(value) > MAX_VALUE_CHARS:
            raise Flow1InputError(f"--set {name}=...: the value is {len(value):,} characters; expected at most "
                                  f"{MAX_VALUE_CHARS:,}")
        parsed = parse_value(value)
        check_value(knob, parsed, f"--set {name}")
        changes.append(change(knob, parsed, method))
    if not changes:
        raise Flow1InputError("--set needs at least one knob=value")
    return tuple(changes)


def branch_name(changes: tuple[Knob, ...]) -> str:
    return " ".join(f"{c.name}={c.value!r}" if isinstance(c.value, str) else f"{c.name}={c.value}"
                    for c in changes) or BASELINE


def plan(source: Source, sets: list[str], from_advice: bool, max_branches: int = 6,
         findings: list[str] | None = None) -> list[Branch]:
    """The baseline first, then one branch per ``--set`` group, then (``from_advice``) one
    per distinct first knob of the run's advice (``findings``: of these codes' advice only).
    A branch is judged for every finding that
    advised its knob (a lower lr advised for a KL spike is judged on the KL, and on the
    entropy where the collapse named the lr too); a ``--set`` branch that no finding
    advised is judged on the return."""
    if findings and not from_advice:
        raise Flow1InputError("--finding picks among the run's advice: give --from-advice with it")
    branches: dict[str, Branch] = {BASELINE: Branch(BASELINE)}
    for group in sets:
        changes = parse_set(group)
        name = branch_name(changes)
        branches.setdefault(name, Branch(name, changes))
    if from_advice:
        if not source.advice:
            where = source.run_dir or "no run directory beside the checkpoint"
            raise Flow1InputError(f"--from-advice: no finding with advised knobs in {where}")
        for adv in _advice_of(source, findings):   # the first knob ("try ..."), one branch per distinct change
            change = next((c for c in map(change_from_knob, adv.knobs) if c is not None), None)
            if change is not None:
                name = branch_name((change,))
                branches.setdefault(name, Branch(name, (change,), signal=signal_for(adv.code)))
    for b in branches.values():   # each branch judged for every finding that advised its knob
        knobs = {c.name for c in b.changes}
        b.advice = [a for a in source.advice if b.name != BASELINE and
                    any(isinstance(k, dict) and k.get("knob") in knobs for k in a.knobs)]
        if b.advice and b.signal is RETURN:
            b.signal = signal_for(b.advice[0].code)
    if len(branches) - 1 > max_branches:
        raise Flow1InputError(f"{len(branches) - 1} branches planned, more than --max-branches {max_branches}: "
                              f"{', '.join(list(branches)[1:])}")
    if len(branches) == 1:
        raise Flow1InputError("nothing to branch: give --set knob=value or --from-advice")
    return list(branches.values())


def _advice_of(source: Source, findings: list[str] | None) -> list[Advice]:
    """The run's advice, of ``findings`` only where given (each must have advised a knob)."""
    if not findings:
        return source.advice
    advised = sorted({a.code for a in source.advice})
    unknown = [f for f in findings if f not in advised]
    if unknown:
        raise Flow1InputError(f"--finding {', '.join(unknown)}: expected a finding that advised knobs in this run "
                              f"({', '.join(advised)}), actual none of that code")
    return [a for a in source.advice if a.code in findings]


def describe(branches: list[Branch], seeds: int, iterations: int) -> list[str]:
    lines = []
    for b in branches:
        tests = ", ".join(f"{a.code}" + (f" ({a.module_id})" if a.module_id else "") for a in b.advice)
        what = "no change" if not b.changes else " ".join(c.line() for c in b.changes)
        judged = "" if b.name == BASELINE else f"; judged on {b.signal.describe()}" + (f" for {tests}" if tests else "")
        lines.append(f"{b.name}: {what}{judged}; {seeds} seed(s) x {iterations} iteration(s)")
    return lines


def first_value(v: Any) -> Any:
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], (list, tuple)) and len(v[0]) == 2:
        return v[0][1]
    return v
