"""Bare-metal boxes: the example inventory and its group data load as pyinfra loads them, the
tensor-parallel size follows the GPU count and the model's heads, and the systemd units render
into something systemd parses (checked with systemd-analyze; no systemd runs on this machine)."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from podkit.host.hostplan import HostPlan
from podkit.host.render import host_files, serve_argv
from podkit.paths import EDGE_UNIT_PATH, UNIT_PATH
from podkit.settings import KEYS, PackageSpec, Settings
from podkit.wayin import way_in
from podkit_cli.hosts import load_hosts
from tests.helpers import ROOT, sample_data
from tests.helpers import gpu_host as host
from tests.helpers import host_plan as plan

INVENTORY = ROOT / "inventories" / "baremetal.py"


@pytest.mark.proc
def test_inventory_loads_the_same_in_the_cli_and_in_pyinfra():
    ours = {h.name: h for h in load_hosts(str(INVENTORY))}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "pyinfra"), str(INVENTORY), "debug-inventory", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = {h["name"]: h for h in json.loads(out.stdout)}
    assert set(ours) == set(theirs) == {"gpu-box-1", "gpu-box-2"}
    for name, entry in theirs.items():
        assert entry["groups"] == ["gpu_boxes", "baremetal"]
        assert ours[name].data == entry["data"]
        Settings.from_mapping(entry["data"])  # every host's data validates
    assert theirs["gpu-box-1"]["data"]["podkit_volume"] == "/srv/vllm"  # from group_data/baremetal.py
    assert theirs["gpu-box-2"]["data"]["podkit_volume"] == "/data/vllm"  # the host's own wins
    for entry in theirs.values():
        data = entry["data"]
        assert data["ssh_user"] != "root" and data["ssh_hostname"].startswith(
            "192.0.2."
        )  # the example inventory names RFC 5737 addresses
        assert data["vllm_tensor_parallel_size"] is None and data["podkit_supervisor"] == "supervisord"
        # clients come in directly: HTTPS from the edge's own CA, on the edge's port
        way = way_in(name, data)
        assert (way.kind, way.tls, way.base_url) == ("direct", "internal", f"https://{data['ssh_hostname']}:8000")


def test_group_data_sets_only_known_keys_each_with_a_comment():
    source = (ROOT / "group_data" / "baremetal.py").read_text()
    lines = source.splitlines()
    assigned = {n.targets[0].id: n.lineno for n in ast.parse(source).body if isinstance(n, ast.Assign)}
    assert set(assigned) <= set(KEYS) and {"podkit_volume", "vllm_tensor_parallel_size", "podkit_supervisor"} <= set(
        assigned
    )
    for name, lineno in assigned.items():
        assert lines[lineno - 2].lstrip().startswith("#"), f"{name} needs a comment above it"


@pytest.mark.parametrize(
    "gpus, tp_datum, tp",
    [(1, None, 1), (2, None, 2), (4, None, 4), (8, None, 8), (4, 2, 2), (3, 2, 2)],
)
def test_tensor_parallel_size_comes_from_the_gpu_count_and_the_plan(hub, gpus, tp_datum, tp):
    # acme/Coder-7B has 8 attention heads: 1, 2, 4 and 8 GPUs divide them
    result = plan(hub, "acme/Coder-7B", host(gpus=gpus), vllm_tensor_parallel_size=tp_datum)
    assert result.problems == []
    assert result.tensor_parallel_size == result.plan.tensor_parallel_size == tp
    settings = Settings.from_mapping({**sample_data(), "vllm_tensor_parallel_size": tp_datum})
    argv = serve_argv(settings, "vllm", result)
    assert argv[argv.index("--tensor-parallel-size") + 1] == str(tp)


@pytest.mark.parametrize("gpus, tp_datum, valid", [(3, None, [1, 2]), (6, None, [1, 2, 4]), (4, 3, [1, 2, 4])])
def test_a_tp_size_that_does_not_divide_the_heads_stops_the_host_with_the_valid_sizes(hub, gpus, tp_datum, valid):
    result = plan(hub, "acme/Coder-7B", host(gpus=gpus), vllm_tensor_parallel_size=tp_datum)
    assert len(result.problems) == 1
    assert f"does not divide the 8 attention heads; valid sizes here: {valid}" in result.problems[0]


def test_a_tp_size_above_the_gpu_count_stops_the_host(hub):
    result = plan(hub, "acme/Coder-7B", host(gpus=2), vllm_tensor_parallel_size=4)
    assert result.problems == ["tensor_parallel_size 4 exceeds the 2 GPU(s); use at most 2"]


def files_for(volume: str, **data):
    settings = Settings.from_mapping({**sample_data(), "podkit_volume": volume, **data})
    files = host_files(
        settings,
        package=PackageSpec("vllm", "0.33.0"),
        vllm_bin="/v/bin/vllm",
        launch=HostPlan(settings.model, 4096, 2, None, None),
        way=way_in("gpu-box-1", {"ssh_hostname": "10.192.0.10"}),
        user="ubuntu",
        group="gpu",
    )
    return settings, files


@pytest.mark.proc
def test_caddy_gets_one_core_at_a_lower_priority_only_where_vllm_decodes_on_the_cpu(tmp_path):
    settings, gpu = files_for("/srv/vllm")
    cpu = host_files(
        settings,
        package=settings.vllm_cpu_package,
        vllm_bin="/v/bin/vllm",
        launch=HostPlan(settings.model, 4096, 1, None, None),
        way=way_in("cpu-box", {"ssh_hostname": "10.192.0.11"}),
    )
    assert "GOMAXPROCS" not in gpu["edge"].content
    assert "\nGOMAXPROCS=1\nexport GOMAXPROCS\n" in cpu["edge"].content
    assert "\nexec /srv/vllm/podkit/venv/bin/caddy run" in gpu["edge"].content
    assert "\nexec nice -n 10 /srv/vllm/podkit/venv/bin/caddy run" in cpu["edge"].content
    script = tmp_path / "edge.sh"
    script.write_text(cpu["edge"].content)
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0


def unit_for(volume: str, **data):
    return files_for(volume, podkit_supervisor="systemd", **data)


def test_systemd_replaces_supervisord_conf_with_three_units_on_the_volume():
    settings, files = unit_for("/srv/vllm")
    idle_files = {"idle_script", "idle_config", "plan"}
    assert set(files) == {"env", "launch", "edge", "caddyfile", "unit", "edge_unit", "idle_unit"} | idle_files
    idle = files["idle_unit"].content.splitlines()
    assert files["idle_unit"].path == "/srv/vllm/podkit/bin/podkit-idle.service"
    assert (
        'ExecStart="/srv/vllm/podkit/venv/bin/python" "/srv/vllm/podkit/bin/idle.py" "/srv/vllm/podkit/bin/idle.json"'
        in idle
    )
    assert {"User=ubuntu", "Restart=always", "StandardOutput=append:/srv/vllm/podkit/logs/idle.log"} <= set(idle)
    unit, edge = files["unit"], files["edge_unit"]
    assert unit.path == "/srv/vllm/podkit/bin/podkit-vllm.service" and unit.mode == "644"
    assert edge.path == "/srv/vllm/podkit/bin/podkit-edge.service" and edge.mode == "644"
    for rendered, script, log in (
        (unit, "launch.sh", "vllm.log"),
        (edge, "edge.sh", "edge.log"),
    ):
        lines = rendered.content.splitlines()
        for expected in [
            "User=ubuntu",
            "Group=gpu",
            f'ExecStart="/srv/vllm/podkit/bin/{script}"',
            "Restart=on-failure",
            f"StandardOutput=append:/srv/vllm/podkit/logs/{log}",
            f"StandardError=append:/srv/vllm/podkit/logs/{log}",
            "WantedBy=multi-user.target",
        ]:
            assert expected in lines, (script, expected)
        assert not any(line.startswith("ExecStartPre") for line in lines), "the scripts record their own sums"
    default, supervised = files_for("/srv/vllm")
    assert default.supervisor == "supervisord"
    assert set(supervised) == {"env", "launch", "edge", "caddyfile", "supervisord"} | idle_files
    # the scripts are the same whichever supervisor runs them, but for the name in launch.sh's comment
    for role in ("env", "edge", "caddyfile"):
        assert supervised[role].content == files[role].content, role
    launch = [line for line in files["launch"].content.splitlines() if not line.startswith("#")]
    assert launch == [line for line in supervised["launch"].content.splitlines() if not line.startswith("#")]
    assert (UNIT_PATH, EDGE_UNIT_PATH) == (
        "/etc/systemd/system/podkit-vllm.service",
        "/etc/systemd/system/podkit-edge.service",
    )


@pytest.mark.proc
@pytest.mark.parametrize(
    "role, script", [("unit", "launch_script"), ("edge_unit", "edge_script"), ("idle_unit", "venv_python")]
)
def test_systemd_parses_the_units_and_finds_their_scripts(tmp_path, role, script):
    """systemd-analyze verify reads each unit as systemd would: quoting, % and $ in paths included."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    volume = tmp_path / "my vllm 100% $HOME"
    settings, files = unit_for(str(volume))
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    group = subprocess.run(["id", "-gn"], capture_output=True, text=True).stdout.strip()
    unit = files[role].content.replace("User=ubuntu", f"User={user}").replace("Group=gpu", f"Group={group}")
    paths = settings.paths
    path = Path(f"{paths.venv}/bin/python" if script == "venv_python" else getattr(paths, script))
    path.parent.mkdir(parents=True)
    unit_file = tmp_path / Path(files[role].path).name
    unit_file.write_text(unit)
    missing = subprocess.run([analyze, "verify", str(unit_file)], capture_output=True, text=True)
    # before the script exists systemd names the exact path it would run
    assert f"Command {path} is not executable" in missing.stderr, missing.stderr
    path.write_text("#!/bin/sh\nexec sleep 1\n")
    os.chmod(path, 0o755)
    ok = subprocess.run([analyze, "verify", str(unit_file)], capture_output=True, text=True)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
