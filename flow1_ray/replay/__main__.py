"""The replay's child process (:mod:`.play`): ``python -m flow1_ray.replay ENTRY TIMEOUT [ENV] [--pdb]``."""

import json
import sys

from ..common.errors import Flow1InputError
from .play import _child

try:
    sys.exit(_child(sys.argv[1:]))
except Flow1InputError as e:
    print(json.dumps({"result": "failed", "step": None, "why": str(e)}), flush=True)
    sys.exit(2)
