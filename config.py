"""pyinfra's config file: pyinfra executes it first, before it loads the inventory or reaches a host.

podkit sets no pyinfra option here (each setting is in ``podkit/settings.py``); it installs the
Ctrl-C handler (``operations/interrupt.py``) this early, so that a Ctrl-C while pyinfra loads the
inventory or connects ends the run non-zero with a line saying where it was, within a bound,
instead of pyinfra's exit 0 (or a hang while a channel opens). ``deploy.py`` installs it again.
"""

from operations import interrupt

interrupt.exit_nonzero_on_interrupt()
