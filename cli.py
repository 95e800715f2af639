"""``python cli.py ...``: the ``podkit`` command, for a checkout without ``pip install -e .``."""

from podkit_cli import main

if __name__ == "__main__":
    main()
