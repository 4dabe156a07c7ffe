"""The CPU account the Recorder writes into a run's stop record (``stop.json``'s ``cost``,
made by :func:`flow1_ray.runner.cost.account`), read back as untrusted input: rows for the
report's cost section (Markdown and HTML)."""

from __future__ import annotations

from typing import Any


def cost_table(cost: Any) -> tuple[str, list[tuple[str, str, str, str]]] | None:
    """The stop record's CPU account (flow1_ray/runner/cost.py): a sentence and one row per
    feature (its CPU per env step, its share of the runners' own, its budget); None when the
    record has none or it is not numbers (a run directory is untrusted input)."""
    try:
        rows = [(str(k), float(f["us_per_step"]), float(f["share"]), float(f["budget"]))
                for k, f in dict(cost["features"]).items()]
        head = (f"In the EnvRunners, thread CPU over {int(cost['steps']):,} env steps after each runner's warm-up: "
                f"the runners' own {float(cost['runner_us_per_step']):.1f} us per step, flow1's "
                f"{float(cost['flow1_share']):.2%} of it.")
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    try:   # flow1's hub (runner/cost.py ProcessCpu): absent from older records
        hub = cost["hub_cpu"]
        head += (f" flow1's hub: {float(hub['cpu_s_per_1000_steps']):.3f} s of CPU per 1,000 env steps over "
                 f"{int(hub['steps']):,} steps ({float(hub['at_start_cpu_s']):.1f} s at its start).")
    except (TypeError, KeyError, ValueError, AttributeError):
        pass
    return head, [(k, f"{us:.3f} us", f"{share:.3%}" + (" (over its budget)" if share > budget else ""), f"{budget:.1%}")
                  for k, us, share, budget in rows]
