"""The local sandbox pod (see podkit/sandbox/box.py). Bring it up first:

    podkit sandbox up
    pyinfra -y inventories/sandbox.py deploy.py

Its CPU settings are in group_data/sandbox.py; its ports and paths come from
the sandbox's state folder (.sandbox/, or $PODKIT_SANDBOX_DIR).
"""

from podkit.sandbox.box import Sandbox

sandbox = [("sandbox", Sandbox().host_data())]
