"""``python -m flow1_ray`` is the ``flow1`` command."""

import sys

from .cli.main import main

sys.exit(main())
