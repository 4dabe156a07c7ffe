"""The ``flow1`` command's parser: every sub-command and option, with its help text, declared
here once. :mod:`flow1_ray.cli.main` runs the commands; the docs' CLI reference is this
parser's ``--help``. Imports nothing of the commands, so ``flow1 --help`` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..common import codes as C

#: flow1 check's per-call timeouts (seconds); flow1_ray.envcheck.isolate.DEFAULT_TIMEOUTS, repeated
#: here so that the parser does not import the checker
DEFAULT_TIMEOUTS = {"make": 300.0, "reset": 120.0, "step": 60.0}
#: flow1 check's progress line (stderr): shown once a check has run this long, then every
#: PROGRESS_EVERY_S seconds (on a terminal: rewritten in place twice a second)
PROGRESS_AFTER_S, PROGRESS_EVERY_S = 2.0, 10.0
DEMO_FAULTY = "flow1_ray.envcheck.demo:faulty_cartpole"
DEMO_CLEAN = "CartPole-v1"


def parser() -> argparse.ArgumentParser:
    """The ``flow1`` command's parser: each sub-command's options and their help, declared once
    (``--help`` and the docs' CLI reference are made from it)."""
    p = argparse.ArgumentParser(prog="flow1", description="Diagnose RL environments and RLlib runs.")
    sub = p.add_subparsers(dest="command", required=True)
    _add_check(sub)
    _add_train(sub)
    _add_diagnose(sub)
    _add_report(sub)
    _add_whatif(sub)
    _add_serve(sub)
    _add_replay(sub)
    return p


def _add_check(sub: Any) -> None:
    """``flow1 check``: an env judged without training."""
    c = sub.add_parser("check", help="check an env's contracts on every step of a rollout, without training")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--env", help="registered id (CartPole-v1) or module:attr (a class, factory or instance)")
    src.add_argument("--config", metavar="MODULE:FUNCTION",
                     help="an RLlib config (a function returning an AlgorithmConfig): its env checked as --env checks "
                          "one, then one EnvRunner built from it samples with the config's connectors and RLModule, "
                          "and what the module sees and emits is judged (module PIPELINE)")
    src.add_argument("--demo", action="store_true",
                     help=f"check a built-in faulty env ({DEMO_FAULTY}) and a clean one ({DEMO_CLEAN})")
    c.add_argument("--checkpoint", metavar="DIR",
                   help="with --config: an Algorithm checkpoint folder whose RLModule weights and connector states "
                        "(a MeanStdFilter's statistics) the EnvRunner takes (default: the RLModule as initialised)")
    c.add_argument("--steps", type=int, default=1000, help="env steps to run (default 1000)")
    c.add_argument("--seed", type=int, default=0, help="seed for reset and action sampling (default 0)")
    c.add_argument("--json", metavar="PATH", help="write the JSON report to PATH ('-' for stdout)")
    c.add_argument("--output-dir", metavar="DIR", help="also write a run directory (events Parquet, log, report)")
    c.add_argument("--thresholds", metavar="PATH",
                   help="JSON object overriding default thresholds (see configs/thresholds.json)")
    c.add_argument("--audit-reward", action="store_true",
                   help="also read the env's attributes around every step: does the reward jump when the env "
                        "changes its own state (a target moved, a counter reset) whatever the action? "
                        "(REWARD_UNEARNED)")
    c.add_argument("--fail-on", choices=[C.FAIL, C.WARN], default=C.FAIL,
                   help="lowest status that makes the exit code 1 (default FAIL)")
    c.add_argument("--verbose", action="store_true",
                   help=f"the progress line from the start (else after {PROGRESS_AFTER_S:g} s); the check starts "
                        f"no Ray: its output is flow1's, and the env's own on stderr")
    for call, what in (("make", "importing module:attr and constructing the env"), ("reset", "one reset()"),
                       ("step", "one step()")):
        c.add_argument(f"--{call}-timeout", type=float, default=DEFAULT_TIMEOUTS[call], metavar="S",
                       help=f"seconds {what} may take before the check stops with ENV_HUNG and the env's stack "
                            f"(default {DEFAULT_TIMEOUTS[call]:g}; 0: no limit)")


def _add_train(sub: Any) -> None:
    """``flow1 train``: PPO with Flow1Callbacks on a local Ray."""
    t = sub.add_parser("train", help="PPO with Flow1Callbacks on a local Ray (the demo job)")
    t.add_argument("--env", default="CartPole-v1", help="registered id or module:attr (default CartPole-v1)")
    t.add_argument("--iterations", type=int, default=6)
    t.add_argument("--env-runners", type=int, default=2)
    t.add_argument("--inject", choices=["none", "crash", "hang"], default="none",
                   help="make EnvRunner 1 raise in env.step (crash) or hang there (hang); exit 0 if flow1 names it")
    t.add_argument("--output-dir", metavar="DIR", help="where run directories go (default ./flow1_runs)")
    t.add_argument("--stall-timeout", type=float, default=5.0, help="seconds without a step = stalled (default 5)")
    t.add_argument("--learner-gpus", type=float, default=0.0,
                   help="GPUs for one Learner actor (0: the Learner runs in the driver, on CPU)")
    t.add_argument("--quiet", action="store_true", help="no line per iteration")
    t.add_argument("--allow-short", action="store_true",
                   help="exit as the findings say when the run is too short to judge learning (default: exit 2)")
    t.add_argument("--verbose", action="store_true",
                   help="also show Ray's own output on the terminal (stderr); it always goes to <run dir>/ray.log")


def _add_diagnose(sub: Any) -> None:
    """``flow1 diagnose``: a finished run's result.json."""
    d = sub.add_parser("diagnose", help="read a finished run's result.json (Tune/RLlib, no flow1 needed) "
                                        "through the learner-curve rules")
    d.add_argument("path", help="a result.json (one RLlib result per line) or the directory holding it")
    d.add_argument("--env", help="registered env id whose action space sets the entropy maximum (made, so its "
                                 "module is imported: never taken from the file read; without it the entropy "
                                 "ratio is not assessable)")
    d.add_argument("--thresholds", metavar="PATH", help="JSON object overriding default thresholds")
    d.add_argument("--json", metavar="PATH", help="write the JSON report to PATH ('-' for stdout)")
    d.add_argument("--fail-on", choices=[C.FAIL, C.WARN], default=C.FAIL)
    d.add_argument("--allow-short", action="store_true",
                   help="exit as the findings say on a run too short to judge learning (default: exit 2, "
                        "\"not enough data to judge learning\")")


def _add_report(sub: Any) -> None:
    """``flow1 report``: a run directory summarised."""
    r = sub.add_parser("report", help="summarise a run directory from its Parquet files (no Ray needed)")
    r.add_argument("run_dir", help="a run directory: a path or a filesystem URI (s3://bucket/prefix/<run_id>?...)")
    r.add_argument("--json", metavar="PATH", help="write the JSON report to PATH ('-' for stdout)")
    r.add_argument("--format", choices=["md", "html", "json"],
                   help="also write the report in this format (html: one self-contained page)")
    r.add_argument("--out", metavar="FILE", help="where --format writes (default RUN_DIR/report.<format>; '-' stdout)")
    r.add_argument("--fail-on", choices=[C.FAIL, C.WARN], default=C.FAIL)
    r.add_argument("--allow-blind", action="store_true",
                   help="exit 0 on a run flow1 did not watch whole (a watcher off, no clean stop, events parts "
                        "skipped) when nothing reached --fail-on (default: exit 1)")
    r.add_argument("--allow-short", action="store_true",
                   help="exit as the findings say on a run too short to judge learning (default: exit 2, "
                        "\"not enough data to judge learning\")")


def _add_whatif(sub: Any) -> None:
    """``flow1 whatif``: a run's advice tested by branches."""
    w = sub.add_parser("whatif", help="test a run's advice: branches from its checkpoint with the advised (or given) "
                                      "knobs, each knob read back, judged against a baseline over seeds")
    w.add_argument("path", help="a checkpoint folder (algo.save_to_path) or a flow1 run directory (its newest "
                                "checkpoint: the guard's on_fail='checkpoint' or checkpoint_every)")
    w.add_argument("--set", action="append", default=[], metavar="'KNOB=VALUE ...'", dest="sets",
                   help="one branch with these changes (config.training unless METHOD.KNOB=VALUE); repeatable")
    w.add_argument("--from-advice", action="store_true",
                   help="one branch per distinct knob the run's findings advised first")
    w.add_argument("--finding", action="append", default=[], metavar="CODE", dest="findings",
                   help="with --from-advice: branch only on the knobs this finding advised (a code such as KL_SPIKE; "
                        "repeatable); each branch is still judged on every finding that advised its knob")
    w.add_argument("--iterations", type=int, default=5, help="train() iterations per branch run (default 5)")
    w.add_argument("--seeds", type=int, default=3,
                   help="seeds per branch (default 3: the least for the permutation test to reach p = 0.05)")
    w.add_argument("--first-seed", type=int, default=0, help="seeds are FIRST .. FIRST+SEEDS-1 (default 0)")
    w.add_argument("--parallel", type=int, default=2, help="branch runs at once (default 2)")
    w.add_argument("--cpus-per-branch", type=float, default=1.0, help="CPUs one branch run takes (default 1)")
    w.add_argument("--env-runners", type=int, default=0,
                   help="EnvRunners per branch run (default 0: it samples in its own process; batch sizes unchanged)")
    w.add_argument("--max-branches", type=int, default=6, help="refuse plans with more branches than this")
    w.add_argument("--output-dir", metavar="DIR", help="where the what-if's folder goes (default RUN_DIR/whatif)")
    w.add_argument("--json", metavar="PATH", help="write the verdicts as JSON to PATH ('-' for stdout)")


def _add_serve(sub: Any) -> None:
    """``flow1 serve``: the live panel."""
    s = sub.add_parser("serve", help="a live panel of a run in the browser: result, cause, hypothesis, risk "
                                     "(read-only; follows the run as it is written)")
    s.add_argument("path", help="a run directory, or an output directory whose runs the panel lists "
                                "(a path or a filesystem URI)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; the panel has no login)")
    s.add_argument("--port", type=int, default=8050, help="port (default 8050; 0 picks a free one)")


def _add_replay(sub: Any) -> None:
    """``flow1 replay``: a flight-recorder dump played again."""
    r = sub.add_parser("replay", help="play a run's dump (RUN_DIR/repro/<entry>) again on this machine: a runner's "
                                      "env crash, hang, NaN or space violation (reproduced, diverged: the env does "
                                      "not replay from its seed, or did not reproduce), or a Learner's NaN update "
                                      "(run again on the CPU, naming the operation and layer that made it)")
    r.add_argument("entry", help="a repro entry: RUN_DIR/repro/<entry>")
    r.add_argument("--env", metavar="MODULE:CLASS",
                   help="the env's class or creator, where the run's cannot be imported by name (the entry says so)")
    r.add_argument("--step-timeout", type=float, default=10.0,
                   help="seconds one step may take before the replay calls it a hang (default 10)")
    r.add_argument("--pdb", action="store_true",
                   help="replay up to the failing step, then stop in pdb inside the call the run failed in (a "
                        "Learner's dump: its update under pdb)")
    r.add_argument("--steps-before", type=int, metavar="N",
                   help="replay in this process up to N steps before the failing one, then open a Python console "
                        "with `env` (the env there) and `action` (the action the run failed on)")
    r.add_argument("--json", metavar="PATH", help="write the outcome as JSON to PATH ('-' for stdout)")
