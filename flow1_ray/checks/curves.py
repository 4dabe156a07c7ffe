"""Numbers read from RLlib's result dicts: finite floats, nested or Tune-flattened keys.

No Ray here: the driver reads each iteration's numbers live, and the same code reads a
finished run's results offline.
"""

from __future__ import annotations

import math
from typing import Any, Mapping


def finite(v: Any) -> float | None:
    """``v`` as a finite float, or None (numpy scalars, numeric strings; NaN/inf/None -> None)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def result_number(result: dict, *path: str) -> float | None:
    """A finite float at ``result[path[0]][path[1]]...`` (Tune's flattened "a/b" key too), or None."""
    v: Any = result.get("/".join(path))
    if v is None:
        v = result
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
            if v is None:
                return None
    return finite(v)


def result_section(result: Mapping, key: str) -> dict:
    """``result[key]`` as a nested dict, also when Tune flattened it to ``key/a/b`` keys."""
    v = result.get(key)
    if isinstance(v, Mapping):
        return dict(v)
    prefix = key + "/"
    out: dict = {}
    for k, val in result.items():
        if isinstance(k, str) and k.startswith(prefix):
            parts = k[len(prefix):].split("/")
            d = out
            for part in parts[:-1]:
                d = d.setdefault(part, {})
                if not isinstance(d, dict):
                    break
            else:
                d[parts[-1]] = val
    return out
