"""ENV_HUNG and ENV_CRASHED: the findings of an isolated check whose child process hung past a
call's timeout (:func:`hung_finding`) or died (:func:`death_finding`), built from the call board's
call and step and the faulthandler dump read by :mod:`flow1_ray.common.stacks`. Used by
:mod:`flow1_ray.envcheck.supervise`.
"""

from __future__ import annotations

import signal

from ..checks.env.reward_logic import AUDIT_WATCHER
from ..checks.findings import Finding
from ..checks.own.watchers import watcher_off_finding
from ..common import codes as C
from ..common.stacks import env_frame, main_thread_stack

#: what the reward audit was doing in each of its calls on the call board
AUDIT_DOING = {"audit_read": "reading the env's attributes", "audit_copy": "copying the env (copy.deepcopy)",
               "audit_try": "stepping its copy of the env with another action"}


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
    sig, how = died_how(exitcode)
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


def died_how(exitcode: int | None) -> tuple[str | None, str]:
    """(the signal's name or None, "was killed by SIGSEGV" / "exited with code 3")."""
    if exitcode is not None and exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        return sig, f"was killed by {sig}"
    return None, f"exited with code {exitcode}"


def audit_off_finding(call: str, how: str, steps: int, episodes: int, dump: str, env_file: str | None,
                      thread_id: int) -> Finding:
    """WATCHER_OFF for the reward audit whose own call (a read of the env's attributes, a copy
    of the env, a step of that copy) hung or killed the check's process: flow1's doing, not
    the env's, so never ENV_HUNG or ENV_CRASHED; the check runs again without the audit."""
    block, frames = main_thread_stack(dump, thread_id) if dump.strip() else ("", [])
    where = env_frame(frames, env_file)
    what = (f"{AUDIT_DOING.get(call, call)} {how} after step {steps} (episode {episodes})"
            + (f", in {where}" if where else ""))
    f = watcher_off_finding(AUDIT_WATCHER, "a reward the env pays for a change it made itself", what, "",
                            "this is the audit's call, not one training makes: the env was checked again without "
                            "the audit, and REWARD_UNEARNED is not judged on it")
    f.evidence.update({"call": call, "frame": where, "stack": block or None, "after_step": steps})
    return f
