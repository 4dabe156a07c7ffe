"""ENV_HUNG and ENV_CRASHED: the findings of an isolated check whose child process hung past a
call's timeout (:func:`hung_finding`) or died (:func:`death_finding`), built from the call board's
call and step and the faulthandler dump read by :mod:`flow1_ray.envcheck.dumps`. Used by
:mod:`flow1_ray.envcheck.supervise`.
"""

from __future__ import annotations

import signal

from ..checks.findings import Finding
from ..common import codes as C
from .dumps import env_frame, main_thread_stack


def at_phrase(call: str, steps: int, episodes: int) -> str:
    """Where in the run a call stopped, as words: "at step 31, episode 2" for a step."""
    if call == "step":
        return f"at step {steps + 1}, episode {episodes}"
    if call == "reset":
        return f"after step {steps}, episode {episodes}"
    return "before the first step"


def hung_finding(call: str, limit: float, steps: int, episodes: int, dump: str, env_file: str | None,
                 thread_id: int) -> Finding:
    """ENV_HUNG for a call past its timeout: the call, the step, the env's frame and its stack."""
    block, frames = main_thread_stack(dump, thread_id)
    where = env_frame(frames, env_file)
    step = steps + 1 if call == "step" else steps
    what = {"import": "the import of the env's module", "start": "the check's process start"}.get(call, f"{call}()")
    return Finding(C.ENV_HUNG,
                   f"{what} did not return within {limit:g} s (the {_timeout_name(call)} timeout) "
                   f"{at_phrase(call, steps, episodes)}: the env was in {where or 'an unknown frame (no stack)'}",
                   {"call": call, "timeout_s": limit, "first_step": step, "episode": episodes, "frame": where,
                    "stack": block or "(no stack: faulthandler did not answer)"}, env_step=step)


def _timeout_name(call: str) -> str:
    return "make" if call in ("import", "start", "make") else call


def death_finding(exitcode: int | None, call: str, steps: int, episodes: int, fatal: str, env_file: str | None,
                  thread_id: int) -> Finding:
    """ENV_CRASHED for a child that died: the signal or exit code, the call, the env's frame."""
    block, frames = main_thread_stack(fatal, thread_id) if fatal.strip() else ("", [])
    where = env_frame(frames, env_file)
    sig = None
    if exitcode is not None and exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        how = f"was killed by {sig}"
    else:
        how = f"exited with code {exitcode}"
    step = steps + 1 if call == "step" else steps
    if call in ("import", "make", "reset", "step", "close"):
        what = "the import of the env module" if call == "import" else f"{call}()"
        inside = f"in {what} {at_phrase(call, steps, episodes)}"
    elif call == "start":
        inside = "while the check's process started"
    else:
        inside = f"between env calls (in flow1's checks or the action sampling), {steps} steps judged"
    hint = ""
    if sig == "SIGKILL":
        hint = " (SIGKILL leaves no report; the kernel's out-of-memory killer sends it)"
    elif sig is None and not block:
        hint = " (an exit without a Python traceback: os._exit() or a C exit())"
    message = f"the env's process {how} {inside}" + (f", in {where}" if where else "") + hint
    return Finding(C.ENV_CRASHED, message,
                   {"call": call, "signal": sig, "exit_code": None if sig else exitcode, "first_step": step,
                    "episode": episodes, "frame": where, "traceback_tail": block or None,
                    "stopped": f"the env's process {how} {inside}"}, env_step=step)
