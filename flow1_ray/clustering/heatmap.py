"""The state-cluster x action heatmap: P(action | cluster) from the counts alone.

The live writer (``hub/heatmaps.py``) and the offline map (``StateActionMap.heatmap``)
draw with the same function from what a snapshot holds: counts, action labels, verdicts.
"""

from __future__ import annotations

import textwrap
from typing import Sequence

import numpy as np

from ..common import codes as C
from ..common import schema as S

COLOURS = {C.CHAOS: "darkorange", C.BLIND_SPOT: "red", C.ERROR_FIXATION: "magenta", C.RARE_STATE: "grey",
           S.VERDICT_FIXATED: "dimgray"}
OK_COLOUR = "seagreen"


def verdict_colour(verdict: str) -> str:
    """A verdict's colour in every picture of the clusters (heatmap labels, cluster map)."""
    return OK_COLOUR if verdict == S.VERDICT_OK else COLOURS.get(verdict, "black")


def row_labels(visits: np.ndarray, descriptions: Sequence[str] | None = None) -> list[str]:
    """``12 (340)``, or ``12 (340) obs[1] +1.8 (+2.1sd), ...`` with the cluster's description
    (what its states hold: a row a user can act on)."""
    out = [f"{i} ({int(v)})" for i, v in enumerate(visits)]
    if descriptions is not None and len(descriptions) == len(out):
        out = [f"{head}  {d}" if d else head for head, d in zip(out, descriptions)]
    return out


#: row height (inches) of a heatmap without / with thumbnails, and a thumbnail's height on it
ROW_IN, THUMB_ROW_IN, THUMB_PX = 0.22, 0.5, 40
DPI = 90


def _picture(png: bytes | None) -> np.ndarray | None:
    """A thumbnail's pixels (PNG bytes from the clusterer), None when it cannot be read."""
    if not png:
        return None
    try:
        import io

        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    except Exception:   # a picture that cannot be drawn leaves its row without one
        return None


def draw_heatmap(path: str, counts: np.ndarray, action_labels: Sequence[str], verdicts: Sequence[str],
                 title: str, descriptions: Sequence[str] | None = None,
                 thumbnails: Sequence[bytes | None] | None = None) -> str:
    """PNG at ``path``: rows clusters (with their visits and, given, what their states hold),
    columns actions, each non-OK verdict named on the right of its row; an image env's
    thumbnails (a real state of each cluster) beside the rows, which then are taller."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    counts = np.asarray(counts)
    visits = counts.sum(1)
    probs = counts / np.maximum(visits, 1)[:, None]
    k, n = counts.shape
    rows = row_labels(visits, descriptions)
    pics = [_picture(t) for t in thumbnails] if thumbnails is not None and len(thumbnails) == k else []
    pics = pics if any(p is not None for p in pics) else []
    row_in, thumb_in = (THUMB_ROW_IN, THUMB_ROW_IN) if pics else (ROW_IN, 0.0)
    # the row labels' width: ~0.052 inch a character at 7 pt (DejaVu Sans), plus the axis title
    label_in = 0.45 + 0.052 * max((len(r) for r in rows), default=6)
    # fixed margins in inches and one draw (no bbox_inches="tight", which draws twice):
    # the render runs off the request path, but its CPU is still taken from the node
    w_in = min(max(6.0, 3.6 + 0.4 * n), 16) + max(0.0, label_in - 1.0) + thumb_in
    h_in = min(max(3.5, 2.4 + row_in * k), 30 if pics else 22)
    fig = plt.figure(figsize=(w_in, h_in), dpi=DPI)
    left, right_m, top, bottom = max(1.0, label_in) / w_in, (1.4 + thumb_in) / w_in, 0.75 / h_in, \
        (1.35 + (0.35 if n > 8 else 0)) / h_in
    ax = fig.add_axes((left, bottom, 1 - left - right_m, 1 - top - bottom))
    im = ax.imshow(probs, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks(range(n), list(action_labels), rotation=90 if n > 8 else 0, fontsize=7)
    ax.set_yticks(range(k), [r.replace("$", r"\$") for r in rows], fontsize=7)   # "$" is TeX to matplotlib
    ax.set_xlabel("action", fontsize=8)
    ax.set_ylabel("state cluster (visits)" + ("  what sets its states apart" if descriptions else ""), fontsize=8)
    shift = 4.0   # points right of the heatmap where a verdict is written
    if pics:
        from matplotlib.offsetbox import AnnotationBbox, OffsetImage

        px = min(THUMB_PX, DPI * (h_in * (1 - top - bottom)) / k * 0.9)   # one row's height at most
        shift += 3 + px * 72 / DPI
        for i, pic in enumerate(pics):
            if pic is not None:
                box = OffsetImage(pic, zoom=px / max(pic.shape[:2]), dpi_cor=False)   # px: the figure's pixels
                ax.add_artist(AnnotationBbox(box, (1.0, i), xycoords=("axes fraction", "data"), box_alignment=(0, 0.5),
                                             xybox=(3, 0), boxcoords="offset points", frameon=False, pad=0))
    for i, v in enumerate(verdicts):
        if v != S.VERDICT_OK:
            ax.annotate(v, (1.0, i), xycoords=("axes fraction", "data"), xytext=(shift, 0),
                        textcoords="offset points", va="center", fontsize=7, color=verdict_colour(v))
    cax = fig.add_axes((left, 0.35 / h_in, min(0.5, 1 - left - right_m), 0.12 / h_in))
    fig.colorbar(im, cax=cax, orientation="horizontal")
    cax.tick_params(labelsize=7)
    cax.set_xlabel("P(action | cluster)", fontsize=7)
    ax.set_title("\n".join(textwrap.wrap(title, int(11 * w_in))), fontsize=8)
    fig.savefig(path)
    plt.close(fig)
    return path
