"""Numbers read from RLlib's result dicts: finite floats, nested or Tune-flattened keys.

No Ray here: the driver reads each iteration's numbers live, and the same code reads a
finished run's results offline.
"""

from __future__ import annotations

import math
from typing import Any


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
