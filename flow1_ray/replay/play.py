"""Where a replay runs: a child process, like ``flow1 check``'s, that a hang or a crash of the
replayed code cannot take down. :func:`play` starts it and reads its answer (one JSON line);
``python -m flow1_ray.replay ENTRY TIMEOUT [ENV] [--pdb]`` is the child."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..common.events import one_line
from ..rundir.repro import read_entry
from .env import HUNG, REPRODUCED, STEP_TIMEOUT_S, build_env, failing_action, load, steps

#: a Learner dump's replay (rebuild, one update) must end within this, whatever the step timeout
LEARNER_TIMEOUT_S = 300.0


def play(entry: "str | os.PathLike", env: str | None = None, step_timeout_s: float = STEP_TIMEOUT_S,
         pdb: bool = False) -> dict:
    """Replay in a child process (see the module docstring); the outcome as a dict."""
    man, _ = read_entry(entry)   # a damaged entry: one line, before any child
    cmd = [sys.executable, "-m", "flow1_ray.replay", os.fspath(entry), str(step_timeout_s)] + ([env] if env else [])
    if pdb:
        return {"result": "debugged", "code": subprocess.call(cmd + ["--pdb"] if env else cmd + ["", "--pdb"])}
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    last = json.loads(lines[-1]) if lines else {}
    if last.get("result"):
        return last
    stepped = [json.loads(x)["at"] for x in lines if '"at"' in x]
    if "Timeout (" in p.stderr and man.get("kind") == "learner":
        return {"result": "failed", "step": None, "why": f"the update's replay did not end within "
                                                         f"{max(step_timeout_s, LEARNER_TIMEOUT_S):g} s",
                "stack": p.stderr[-4000:]}
    if "Timeout (" in p.stderr:   # faulthandler's dump: a step that did not return
        at = stepped[-1] if stepped else 0
        failure = man["failure"]
        same = bool(failure.get("hang")) and failure.get("step") == at
        return {"result": REPRODUCED if same else HUNG, "step": at, "hang": True,
                "why": f"step {at} did not return within {step_timeout_s:g} s" + (", as in the run" if same else ""),
                "stack": p.stderr[-4000:]}
    return {"result": "failed", "step": stepped[-1] if stepped else None,
            "why": f"the replay process ended with code {p.returncode}: {one_line(p.stderr[-400:])}"}


def _child(argv: list[str]) -> int:
    import faulthandler

    entry, timeout = argv[0], float(argv[1])
    override = argv[2] if len(argv) > 2 and argv[2] else None
    man, arrays = read_entry(entry)
    if man.get("kind") == "learner":
        from .learner import replay_update

        faulthandler.dump_traceback_later(max(timeout, LEARNER_TIMEOUT_S), exit=True)
        if "--pdb" in argv:
            import pdb

            pdb.runcall(replay_update, man, arrays)
            return 0
        out = replay_update(man, arrays)
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(out, default=str), flush=True)
        return 0
    if "--pdb" in argv:   # replayed to the failing step, then the debugger stops in its call
        import pdb

        if man["failure"].get("call") == "reset":
            pdb.runcall(steps, man, arrays, build_env(man["env"], override, bool(man["start"].get("multi_agent"))))
        else:
            env = load(entry, 1, override)
            print(f"flow1 replay: at step {man['failure'].get('step')}, the call the run failed in", flush=True)
            pdb.runcall(env.step, failing_action(entry))
        return 0
    env = build_env(man["env"], override, bool(man["start"].get("multi_agent")))

    def on_step(k: int) -> None:
        print(json.dumps({"at": k}), flush=True)
        faulthandler.dump_traceback_later(timeout, exit=True)

    out = steps(man, arrays, env, on_step)
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps(out, default=str), flush=True)
    return 0
