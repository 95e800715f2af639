"""Shared by unit tests: the deploy's settings as their declarations give them."""

from pathlib import Path

from podkit.settings import Settings, defaults

ROOT = Path(__file__).resolve().parent.parent


def default_data(**overrides):
    """Every setting's declared default (what group_data/all.py gives every host), then ``overrides``."""
    return {**defaults(), **overrides}


def settings(**overrides) -> Settings:
    return Settings.from_mapping(default_data(**overrides))
