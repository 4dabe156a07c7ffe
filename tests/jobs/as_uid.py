"""``python tests/jobs/as_uid.py UID flow1-args...``: the flow1 CLI as another uid.

The interpreter starts as root and drops to ``UID`` (groups cleared) before it reads
anything of the run: what the test needs is a process the kernel refuses, and an
interpreter installed under a home directory of mode 0700 could not be started as
another uid at all. Everything the CLI imports later is imported first, for the same
reason.
"""

import os
import sys

if __name__ == "__main__":
    uid = int(sys.argv[1])
    import dash  # noqa: F401
    import jinja2  # noqa: F401
    import pyarrow.dataset  # noqa: F401
    import pyarrow.fs  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import rich.console  # noqa: F401
    import rich.table  # noqa: F401
    import werkzeug.serving  # noqa: F401

    import flow1_ray.cli.main
    import flow1_ray.report.html  # noqa: F401
    import flow1_ray.report.panel  # noqa: F401
    import flow1_ray.report.render  # noqa: F401
    import flow1_ray.report.rundir  # noqa: F401
    import flow1_ray.report.clusters  # noqa: F401
    import flow1_ray.report.follow  # noqa: F401
    import flow1_ray.report.whatif  # noqa: F401

    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    sys.exit(flow1_ray.cli.main.main(sys.argv[2:]))
