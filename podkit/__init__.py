"""podkit: pure logic for turning an SSH-reachable GPU box into a verified vLLM endpoint.

Nothing in this package imports pyinfra or click: the pyinfra operations in
``operations/`` and the click CLI in ``cli.py`` call into it, never the reverse.
"""

__version__ = "0.1.0"

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def project_path(path: str) -> Path:
    """A path from the settings: absolute as given, relative ones from the project root."""
    return Path(path) if Path(path).is_absolute() else PROJECT_ROOT / path
