"""podkit: pure logic for turning an SSH-reachable GPU box into a verified vLLM endpoint.

Nothing in this package imports pyinfra or click: the pyinfra operations in
``operations/`` and the click CLI in ``cli.py`` call into it, never the reverse.
"""

__version__ = "0.1.0"
