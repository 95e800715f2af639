"""Shared by unit tests: the deploy's settings as group_data/all.py gives them."""

from pathlib import Path

from podkit.settings import KEYS, Settings

ROOT = Path(__file__).resolve().parent.parent


def default_data(**overrides):
    """group_data/all.py's values for every key (as pyinfra would load them), then ``overrides``."""
    namespace = {}
    exec((ROOT / "group_data" / "all.py").read_text(), namespace)
    return {**{key: namespace[key] for key in KEYS}, **overrides}


def settings(**overrides) -> Settings:
    return Settings.from_mapping(default_data(**overrides))
