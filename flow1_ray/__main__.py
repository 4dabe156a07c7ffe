"""``python -m flow1_ray`` is the ``flow1`` command."""

import sys

from .cli import main

sys.exit(main())
