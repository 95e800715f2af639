"""Plain helpers shared by the tests (fixtures live in conftest.py): settings as their
declarations give them, a host with GPUs, a plan against a local hub, an unreaped child, a pid
file's line, a process podctl takes for supervisord, and podctl itself as the host runs it."""

import atexit
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from podkit.host.hostplan import plan_host
from podkit.host.hoststate import Gpu, HostState
from podkit.host.preflight import choose_vllm
from podkit.host.shipped import program
from podkit.plan.checkpoints import find_fp8_alternative, from_hub
from podkit.settings import Settings, defaults

ROOT = Path(__file__).resolve().parent.parent
_SHIPPED = Path(tempfile.mkdtemp(prefix="podkit-shipped-"))
atexit.register(shutil.rmtree, _SHIPPED, True)


def shipped(package: str, name: str) -> types.ModuleType:
    """The program ``package`` as the host runs it: its parts put together into one file (written
    under a temporary folder: ``module.__file__``, for a test that runs it with python3), loaded
    as a module, so a test calls (and monkeypatches) exactly what ships."""
    path = _SHIPPED / f"{name}.py"
    path.write_text(program(package))
    module = types.ModuleType(name, f"{name}, put together from {package}")
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


podctl = shipped("podkit.remote.podctl", "podctl")
idle = shipped("podkit.remote.idle", "idle")
#: The token the local hub of tests/unit/conftest.py's ``hub`` fixture accepts for gated repos.
HUB_TOKEN = "hf_" + "t" * 12


def default_data(**overrides):
    """Every setting's declared default (what group_data/all.py gives every host), then ``overrides``."""
    return {**defaults(), **overrides}


sample_data = default_data


def settings(**overrides) -> Settings:
    return Settings.from_mapping(default_data(**overrides))


def settings_for(volume: Path, **overrides) -> Settings:
    """Settings for a volume folder of the test's own (vLLM on port 1, the edge on port 2: nothing
    listens there)."""
    return settings(**{"podkit_volume": str(volume), "vllm_port": 1, "podkit_edge_port": 2, **overrides})


def gpu_host(gpus=1, name="NVIDIA H100 80GB HBM3", cap="9.0", free=100 * 10**9) -> HostState:
    """A probed host with ``gpus`` GPUs, a writable volume and ``free`` bytes free on it."""
    state = HostState.blank("")
    return dataclasses.replace(
        state,
        unreadable=None,
        volume_writable=True,
        free_bytes=free,
        gpus=[Gpu(i, name, 81559, cap) for i in range(gpus)],
    )


def host_plan(hub, model, state, token=None, nodes=1, **data):
    """The deploy's plan for ``model`` on ``state`` (one of ``nodes`` alike nodes), resolved against the local ``hub``."""
    api = HfApi(endpoint=hub.url, token=token or False)
    chosen = settings(**{"vllm_model": model, "vllm_max_model_len": 8192, **data})
    return plan_host(
        chosen,
        state,
        vllm_version=choose_vllm(chosen, state)[0].version,
        nodes=nodes,
        prefer_fp8=chosen.prefer_fp8,
        resolve=lambda m: from_hub(m, api=api),
        fp8_search=lambda ck: find_fp8_alternative(ck, api=api),
    )


def zombie() -> tuple[subprocess.Popen, str]:
    """A child that has exited and is not reaped yet, and its "PID STARTTIME" pid-file line."""
    proc = subprocess.Popen(["/bin/sh", "-c", "exit 0"])
    stat = Path(f"/proc/{proc.pid}/stat")
    for _ in range(100):
        fields = stat.read_text().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return proc, f"{proc.pid} {fields[19]}\n"
        time.sleep(0.05)
    raise AssertionError("the child never exited")


def pid_line(pid: int) -> str:
    """The "PID STARTTIME" line launch.sh and edge.sh write for live process ``pid``."""
    return f"{pid} {Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[19]}\n"


def stand_in_supervisord(conf: str) -> subprocess.Popen:
    """A sleeping process whose argv names supervisord and ``conf``, as podctl checks the pid in
    supervisord.pid; it has no control socket (the real one: tests/unit/test_supervision.py)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "supervisord", "-c", conf])
    for _ in range(100):  # the child's argv is in /proc once it has exec'd
        if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[-2:-1] == [conf.encode()]:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the stand-in supervisord did not start")


def known_gaps(cases, gaps: dict[str, str]) -> list:
    """Reference cases as pytest parameters, those the plan misses (``gaps``: id -> why) marked as
    strict expected failures, so that a model change that closes one shows as an unexpected pass."""
    return [
        pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=gaps[case["id"]]))
        if case["id"] in gaps
        else case
        for case in cases
    ]


def bash_env(snippet: str) -> dict[str, str]:
    """The environment after bash runs ``snippet`` (from an empty one but PATH)."""
    out = subprocess.run(
        ["bash", "-c", snippet + "\nenv -0"], capture_output=True, check=True, env={"PATH": os.environ["PATH"]}
    ).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def write_inventory(tmp_path: Path, hosts: dict[str, dict], key: str | None) -> str:
    """An inventory of ``hosts`` (name -> data) sharing one key file holding ``key`` (none when
    None) and an empty known_hosts file; its path."""
    key_file = tmp_path / "api_key"
    if key is not None:
        key_file.write_text(key + "\n")
        key_file.chmod(0o600)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.touch()
    rows = {
        name: {"podkit_api_key_file": str(key_file), "ssh_known_hosts_file": str(known_hosts), **data}
        for name, data in hosts.items()
    }
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {list(rows.items())!r}\n")
    return str(inventory)


def podkit(tmp_path: Path, *args):
    """``podkit ARGS`` through click's runner, its state under ``tmp_path``."""
    from click.testing import CliRunner

    from podkit_cli import cli

    return CliRunner().invoke(cli, list(args), env={"PODKIT_STATE_DIR": str(tmp_path / "state")})


def one_error_line(result) -> str:
    """The one ``Error: ...`` line a failed command wrote (and nothing on stdout, no traceback)."""
    assert "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


def load_docs_hooks():
    """docs/hooks.py (the site's generators), imported from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_config(path: str, content: str):
    """``content`` read by the parser of its format, told by ``path``'s suffix (TOML, JSON, YAML, Python)."""
    import ast
    import json
    import tomllib

    import yaml

    if path.endswith(".toml"):
        return tomllib.loads(content)
    if path.endswith(".json"):
        return json.loads(content)
    if path.endswith((".yaml", ".yml")):
        return yaml.safe_load(content)
    if path.endswith(".py"):
        return ast.parse(content)
    raise AssertionError(f"no parser for {path}")
