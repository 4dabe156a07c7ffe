"""The ``flow1`` command: ``check``, ``train``, ``report``, ``diagnose``, ``serve``, ``whatif``.

Exit codes: 0 no FAIL, 1 FAIL (or WARN with ``--fail-on WARN``), 2 usage or input error.
A :class:`Flow1InputError` becomes one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from typing import Any

from ..common import codes as C
from ..common.errors import Flow1InputError
from .parser import DEFAULT_TIMEOUTS, DEMO_CLEAN, DEMO_FAULTY, PROGRESS_AFTER_S, PROGRESS_EVERY_S, parser

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _cmd_train(args: argparse.Namespace) -> int:
    from .train import run_training

    report, expected = run_training(args.env, args.iterations, args.env_runners, args.inject, args.output_dir,
                                    args.stall_timeout, args.quiet, args.learner_gpus, args.verbose)
    if expected is None:
        return _judged(report, report.exit_code(allow_short=args.allow_short))
    caught = expected in report.codes()
    print(f"flow1 train: the injected {args.inject} was {'named (' + expected + ')' if caught else 'NOT named'}")
    return EXIT_OK if caught else EXIT_FAIL


def _cmd_report(args: argparse.Namespace) -> int:
    from ..report.render import console, print_events, print_run_report
    from ..report.rundir import load_run_report

    report = load_run_report(args.run_dir)
    text = None
    if args.format:   # rendered first: a plot it cannot draw is named in every rendering below
        from ..report.html import render_html

        text = {"md": report.to_markdown, "json": report.to_json,
                "html": lambda: render_html(report, args.run_dir)}[args.format]()
    human = console(sys.stderr if "-" in (args.json, args.out) else None)
    print_events(human, [e for e in report.events if e.status != C.PASS or e.advisory])
    print_run_report(human, report)
    _write_json(args.json, report.to_json())
    if text is not None:
        from ..rundir.store import Location

        out = args.out or str(Location(args.run_dir) / f"report.{args.format}")
        if out == "-":
            sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
        else:
            try:
                Location(out).write_text(text)
            except OSError as e:
                raise Flow1InputError(f"cannot write {out}: {e}") from None
            human.print(f"report: {out}")
    return _judged(report, report.exit_code(args.fail_on, args.allow_blind, args.allow_short))


def _judged(report: "Any", code: int) -> int:
    """Exit 2 with the one line that says why there is no verdict."""
    from ..common.events import one_line
    from ..report.model import NOT_JUDGED

    if code == EXIT_USAGE and report.not_judged:
        print(f"flow1: error: {NOT_JUDGED}: {one_line(report.not_judged)}", file=sys.stderr)
    elif code == EXIT_USAGE and report.short:
        print(f"flow1: {one_line(report.short)} (--allow-short: exit as the findings say)", file=sys.stderr)
    return code


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from ..checks.thresholds import Thresholds
    from ..checks.learner.curve_diagnosis import diagnose_run
    from .diagnose import action_space_of, not_assessable, read_results
    from ..report.model import Report
    from ..checks.advice import config_settings
    from ..report.diagnosis_view import console_lines
    from ..report.render import console, plain, print_events, print_gaps, print_references, verdict_text

    th = Thresholds.from_file(args.thresholds) if args.thresholds else None
    results, config = read_results(args.path)
    # only the env the user names is made: the file's own config env may name a module to import
    space = action_space_of(args.env, required=True) if args.env else None
    events, enough = diagnose_run(results, config=config, action_space=space, thresholds=th)
    missing, judged = not_assessable(results, space)
    report = Report(target=str(args.path), events=events, not_assessable=missing,
                    not_judged=None if judged else "no signal the rules read is ever a finite number",
                    learning=enough.to_dict(), settings=config_settings(config) if config else None,
                    summary={"iterations": len(results), "config": "found" if config else "none (advice without "
                             "current values)", "action_space": str(space) if space is not None else "unknown"})
    human = console(sys.stderr if args.json == "-" else None)
    print_events(human, events)
    loud = [e for e in events if e.status != C.PASS]
    line = verdict_text("flow1 diagnose", report)
    line.append(f"; {len(results)} iterations read, {len(loud)} finding(s)"
                f"{'' if config else ' (no config in the results: advice has no current values)'}")
    human.print(line)
    for text in console_lines(report.diagnosis()):
        human.print(plain(text))
    print_gaps(human, report)
    print_references(human, report)
    _write_json(args.json, report.to_json())
    return _judged(report, report.exit_code(args.fail_on, allow_short=args.allow_short))


def _cmd_whatif(args: argparse.Namespace) -> int:
    """Exit 0 when every branch ran with its knobs in effect (whatever the verdicts), 1 when
    a branch failed or a knob could not be put in effect (the what-if did not test what it
    was asked to), 2 on bad input."""
    import json

    from ..whatif.run import VERDICTS_MD, run_whatif, summary_lines
    from ..whatif.verdict import NOT_IN_EFFECT

    def say(line: str) -> None:   # the stream looked up per line: Ray's log routing replaces them for a while
        print(line, file=sys.stderr if args.json == "-" else sys.stdout, flush=True)

    o = run_whatif(args.path, sets=args.sets, from_advice=args.from_advice, findings=args.findings,
                   iterations=args.iterations,
                   seeds=args.seeds, parallel=args.parallel, cpus_per_branch=args.cpus_per_branch,
                   env_runners=args.env_runners, output_dir=args.output_dir, max_branches=args.max_branches,
                   first_seed=args.first_seed, ray_log=True, say=say)
    for line in summary_lines(o):
        say(line)
    say(f"verdicts: {o.out_dir / VERDICTS_MD}")
    _write_json(args.json, json.dumps({"out_dir": str(o.out_dir), "verdicts": o.verdicts}, default=str))
    bad = o.failed() or [v for v in o.verdicts if v["verdict"] == NOT_IN_EFFECT]
    return EXIT_FAIL if bad else EXIT_OK


def _cmd_serve(args: argparse.Namespace) -> int:
    from ..report.panel import is_loopback, serve

    if not 0 <= args.port <= 65535:
        raise Flow1InputError(f"--port must be in 0..65535, got {args.port}")

    def ready(url: str) -> None:
        print(f"flow1 serve: {url} ({args.path}); Ctrl-C to stop", flush=True)
        if not is_loopback(args.host):
            print(f"flow1 serve: listening on {args.host}, beyond this machine: the panel is read-only but has "
                  f"no login, anyone who reaches it sees the run", file=sys.stderr, flush=True)

    serve(args.path, host=args.host, port=args.port, on_ready=ready)
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    """0: reproduced; 1: diverged or did not reproduce; 2: the entry or the env could not be used."""
    import json

    from ..replay import REPRODUCED, play

    if not args.step_timeout > 0:
        raise Flow1InputError(f"--step-timeout must be > 0, got {args.step_timeout}")
    if args.steps_before is not None:
        import code

        from ..replay import failing_action, load

        if args.steps_before < 1:
            raise Flow1InputError(f"--steps-before must be >= 1, got {args.steps_before}")
        env, action = load(args.entry, args.steps_before, args.env), failing_action(args.entry)
        code.interact(banner=f"flow1 replay: the env {args.steps_before} step(s) before the failing one: `env`; "
                             f"the action the run failed on: `action` ({action!r})", local={"env": env, "action": action})
        return 0
    out = play(args.entry, env=args.env, step_timeout_s=args.step_timeout, pdb=args.pdb)
    if args.pdb:
        return 0
    _write_json(args.json, json.dumps(out, indent=1, default=str))
    line = f"flow1 replay: {out.get('result')} at {out.get('unit', 'step')} {out.get('step')}"
    if out.get("exception"):
        line += f": {out['exception']}" + (f" in {out['frame']}" if out.get("frame") else "")
    if out.get("nonfinite"):
        line += f": {out['nonfinite']}"
    if out.get("why"):
        line += f" ({out['why']})"
    print(line)
    if out.get("stack"):
        print(out["stack"], file=sys.stderr)
    if out.get("result") == "failed":
        return EXIT_USAGE
    return 0 if out.get("result") == REPRODUCED else 1


def _write_json(dest: str | None, text: str) -> None:
    if not dest:
        return
    if dest == "-":
        sys.stdout.write(text + "\n")
        return
    try:
        Path(dest).write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        raise Flow1InputError(f"cannot write JSON report to {dest}: {e.strerror}") from None


def _cmd_check(args: argparse.Namespace) -> int:
    """Each env runs in a child process (flow1_ray.envcheck.isolate): a hang past its timeout, a
    crash or a print of the env cannot take this process, its report or its stdout. Ctrl-C
    stops the child and still writes the partial report (--json, --output-dir), exit 130."""
    from ..report.render import console, print_report

    from ..checks.thresholds import Thresholds

    if args.steps < 1:
        raise Flow1InputError(f"--steps must be >= 1, got {args.steps}")
    for call in DEFAULT_TIMEOUTS:
        value = getattr(args, f"{call}_timeout")
        if not value >= 0:  # NaN too
            raise Flow1InputError(f"--{call}-timeout must be >= 0 seconds (0: no limit), got {value}")
    th = Thresholds.from_file(args.thresholds) if args.thresholds else None
    human = console(sys.stderr if args.json == "-" else None)
    opts = {"steps": args.steps, "seed": args.seed, "thresholds": th, "isolate": True,
            "audit_reward": args.audit_reward,
            **{f"{call}_timeout_s": getattr(args, f"{call}_timeout") for call in DEFAULT_TIMEOUTS}}
    if args.checkpoint and not args.config:
        raise Flow1InputError("--checkpoint needs --config (the config whose EnvRunner takes its state)")
    if args.config:
        if args.audit_reward:
            raise Flow1InputError("--audit-reward checks an env: use it with --env")
        opts = {k: v for k, v in opts.items() if k not in ("isolate", "audit_reward")}
        reports, interrupted = _checked([args.config], {**opts, "checkpoint": args.checkpoint}, args.verbose,
                                        config=True)
    else:
        reports, interrupted = _checked([DEMO_FAULTY, DEMO_CLEAN] if args.demo else [args.env], opts, args.verbose)
    for i, r in enumerate(reports):
        if i:
            human.print()
        print_report(human, r)
    if interrupted:
        code = EXIT_INTERRUPTED
    elif args.demo:
        faulty, clean = reports
        ok = faulty.status == C.FAIL and clean.status == C.PASS
        human.print(f"demo: the faulty env {'was' if faulty.status == C.FAIL else 'was NOT'} caught "
                    f"({', '.join(sorted(faulty.codes()))}); the clean env "
                    f"{'passed' if clean.status == C.PASS else 'did NOT pass'}")
        code = EXIT_OK if ok else EXIT_FAIL
    else:
        code = reports[0].exit_code(args.fail_on)
    if args.output_dir:
        for r in reports:
            r.write(Path(args.output_dir) / _slug(r.target) if args.demo else args.output_dir)
    if args.json:
        _write_json(args.json, reports[0].to_json() if not args.demo
                    else "[" + ",".join(r.to_json() for r in reports) + "]")
    if interrupted:
        print("flow1: interrupted; the partial report was written", file=sys.stderr)
    return code


class _CheckProgress:
    """``flow1 check``'s progress line on stderr (stdout may be the JSON report): how far a
    check that takes long is, so that a slow env is not taken for a hung ``flow1``."""

    def __init__(self, verbose: bool) -> None:
        self.tty = sys.stderr.isatty()
        self.after = 0.0 if verbose else PROGRESS_AFTER_S
        self.next = self.after
        self.last = 0.0
        self.shown = False

    def __call__(self, name: str, call: str, steps: int, budget: int, episodes: int, elapsed: float) -> None:
        from ..common.events import one_line

        if elapsed < self.last:   # the next env of --demo
            self.next = self.after
        self.last = elapsed
        if elapsed < self.next:
            return
        line = (f"flow1 check: {one_line(name)}: {steps:,}/{budget:,} steps, {episodes:,} episodes, {elapsed:.0f} s"
                + ("" if call in ("step", "reset") else f" ({call})"))
        self.next = elapsed + (0.5 if self.tty else PROGRESS_EVERY_S)
        sys.stderr.write(f"\r{line}\x1b[K" if self.tty else line + "\n")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        """A rewritten line is taken away before the report prints."""
        if self.tty and self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        self.shown = False


def _checked(targets: list[str], opts: dict, verbose: bool, config: bool = False) -> tuple[list, bool]:
    """Each target's report (the partial one of a Ctrl-C, then no more), with the progress
    line; True when interrupted. ``config``: the targets are configs (``--config``)."""
    from ..envcheck import supervise
    from ..envcheck.api import CheckInterrupted, check_env
    from ..pipeline.api import check_config

    run_check = check_config if config else check_env

    progress = _CheckProgress(verbose)
    supervise.progress_listener = progress
    reports: list = []
    try:
        for target in targets:
            reports.append(run_check(target, **opts))
            progress.clear()
    except CheckInterrupted as e:
        reports.append(e.report)
        return reports, True
    finally:
        supervise.progress_listener = None
        progress.clear()
    return reports, False


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "check":
            return _cmd_check(args)
        if args.command == "train":
            return _cmd_train(args)
        if args.command == "report":
            return _cmd_report(args)
        if args.command == "diagnose":
            return _cmd_diagnose(args)
        if args.command == "serve":
            return _cmd_serve(args)
        if args.command == "whatif":
            return _cmd_whatif(args)
        if args.command == "replay":
            return _cmd_replay(args)
    except Flow1InputError as e:
        from ..common.events import one_line

        print(f"flow1: error: {one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("flow1: interrupted", file=sys.stderr)
        return 130
    return EXIT_USAGE
