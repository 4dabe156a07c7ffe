"""``flow1 serve``: a live panel of a run, in four quadrants (result, cause, hypothesis, risk).

A person reads a run in a fixed order: the result (top left: the return and its EMA, the
policy's entropy and KL, the latest state x action heatmap), the cause (top right: what
flow1 found, with its evidence), the hypothesis to test (bottom left: the knob values
computed from the run's config, the frame an env raised in, the batches snapshotted), and
the risk (bottom right: workers alive / stalled / dead, restarts, contention, memory,
dropped samples, the worker timeline).

Built on Dash (Flask, React, Plotly): its JavaScript comes from the installed package, so
the page loads nothing from the network; every string of the run is a React text node,
never parsed as HTML -- except inside Plotly figures, whose legends, titles, axis titles,
hover text and annotations take a subset of HTML (``<a href>``, ``<b>``, ``<br>``): every
run string handed to Plotly goes through :func:`~.panel_figures.esc` first. The page polls
once a second; each poll reads only the Parquet parts the Recorder wrote since the last one
(:class:`~.follow.RunFollower`), and a callback never raises: what cannot be read is named
on the page. Nothing here writes.

This module starts the server and builds the app; the page is in panel_layout.py, the
figures in panel_figures.py, the quadrants' contents in panel_blocks.py, the callbacks (and
the runs they follow) in panel_callbacks.py; the data it shows is computed in views.py and
follow.py.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
from typing import Any, Callable

from ..common.errors import Flow1InputError
from ..rundir.store import Location
from .panel_callbacks import REFRESH_TARGETS, Runs, panel_callbacks
from .panel_figures import esc, warm_up
from .panel_layout import INDEX, page

DEFAULT_PORT = 8050


def make_app(path: "str | os.PathLike | Location") -> Any:
    """The Dash app of a run directory or an output directory of runs (Flow1InputError when
    ``path`` holds no run)."""
    from dash import Dash, Input, Output, State

    runs = Runs(path)
    warm_up()
    app = Dash(__name__, title=esc(f"flow1: {runs.path.name}"), update_title=None, serve_locally=True,
               assets_folder=os.path.join(os.path.dirname(__file__), "no-assets"), assets_ignore=".*",
               index_string=INDEX)
    app.layout = lambda: page(runs)
    list_runs, refresh = panel_callbacks(runs)
    app.callback(Output("run-picker", "options"), Input("tick", "n_intervals"),
                 State("run-picker", "options"))(list_runs)
    app.callback(*[Output(i, prop) for i, prop in REFRESH_TARGETS.values()],
                 Input("tick", "n_intervals"), Input("run-picker", "value"), State("seen", "data"))(refresh)
    return app


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, or one clear Flow1InputError (port in use, unknown host)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise Flow1InputError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        why = "the port is in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise Flow1InputError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
    except (socket.gaierror, ValueError):
        return False


def serve(path: "str | os.PathLike | Location", host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the panel until interrupted. ``on_ready(url)`` is called once it listens."""
    from werkzeug.serving import make_server

    app = make_app(path)                # Flow1InputError: not a run
    sock = _listen(host, port)          # Flow1InputError: port in use
    logging.getLogger("werkzeug").setLevel(logging.WARNING)   # no line per poll
    server = make_server(host, sock.getsockname()[1], app.server, threaded=True, fd=sock.fileno())
    shown = f"[{host}]" if ":" in host else host
    if on_ready is not None:
        on_ready(f"http://{shown}:{server.socket.getsockname()[1]}/")
    try:
        server.serve_forever()
    finally:
        server.server_close()
        sock.close()
