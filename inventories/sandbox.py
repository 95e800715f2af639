"""The local sandbox pod (see podkit/sandbox/box.py). Bring it up first:

    podkit sandbox up
    pyinfra -y inventories/sandbox.py deploy.py

Its CPU settings are in group_data/sandbox.py; its ports and paths come from
the sandbox's state folder (.sandbox/, or $PODKIT_SANDBOX_DIR). When the
sandbox is down, loading this inventory stops with one line saying to run
``podkit sandbox up`` (as inventories/runpod.py does for its own refusals).
"""

import sys

from podkit.sandbox.box import Sandbox, SandboxError

try:
    _data = Sandbox().host_data()
except SandboxError as exc:
    sys.exit(f"inventories/sandbox.py: {exc}")

sandbox = [("sandbox", _data)]
