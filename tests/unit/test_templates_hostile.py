"""Every template rendered with hostile values runs nothing those values carry.

Settings refuse control characters before anything is rendered; these tests go
around them (``dataclasses.replace`` on a valid Settings) to prove the templates
hold on their own. Each hostile value lands everywhere a value can (the served
name in comments and in Description=, the model, parsers, extra argv and
environment, the package, the vLLM binary's path, the volume, the domain and
the address clients use, the units' user and group); each would create a file
named ``PWNED`` in the working folder if it ran. A volume path cannot hold a
line break (neither supervisord.conf nor a unit can write it: both refuse it),
so a value with a control character goes everywhere but the volume.

The shell scripts are run for real (``sh -n``, then for real against a stand-in
vLLM or Caddy that records its argv and environment); supervisord.conf is read
by supervisord's own parser; the Caddyfile is compared line by line with one
rendered from tame values; the units are read as systemd reads them: line by
line, key by key, their command line unquoted.
"""

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from podkit.host.filters import supervisor_command, supervisor_value
from podkit.host.hostplan import HostPlan
from podkit.host.render import host_files, serve_argv
from podkit.settings import PackageSpec
from podkit.wayin import way_in
from tests.helpers import podctl, settings

MARK = "PWNED"
HOSTILE = [
    f"coder\ntouch {MARK} #",
    f"coder\r\ntouch {MARK}\n#",
    f"x'; touch {MARK}; echo '",
    f'x"; touch {MARK}; echo "',
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"semi; touch {MARK}; & | > <",
    "100% %n %% $HOME ${HOME} $$",
    "back\\slash\\",
    f"unit\nExecStartPre=+/bin/touch {MARK}",
    f"unit\\\nExecStartPre=+/bin/touch {MARK}",
    "tab\there\x0bvt\x7fdel\x1besc",
]
KEY = "sk-test-" + "k" * 24
TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
# A vLLM stand-in: records its argv (NUL-separated), the key and the hostile variable it got.
FAKE_VLLM = """#!/bin/sh
printf '%s\\0' "$@" > "$PODKIT_TEST_OUT"
printf '%s' "$VLLM_API_KEY" > "$PODKIT_TEST_OUT.key"
printf '%s' "$HOSTILE" > "$PODKIT_TEST_OUT.env"
"""
# A Caddy stand-in: records its argv, the key it got and where it keeps its data.
FAKE_CADDY = """#!/bin/sh
printf '%s\\0' "$@" > "$PODKIT_TEST_OUT"
printf '%s' "$PODKIT_API_KEY" > "$PODKIT_TEST_OUT.key"
printf '%s\\0' "$XDG_DATA_HOME" "$XDG_CONFIG_HOME" "$HOME" > "$PODKIT_TEST_OUT.env"
"""
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def hostile(xfail=(lambda value: False), reason=""):
    """HOSTILE as parameters, those ``xfail`` picks marked as failing for ``reason``."""
    return [
        pytest.param(v, id=str(i), marks=pytest.mark.xfail(strict=True, reason=reason) if xfail(v) else ())
        for i, v in enumerate(HOSTILE)
    ]


def has_control(value: str) -> bool:
    return bool(CONTROL.search(value))


def representable_in_a_unit(value: str) -> bool:
    """A value systemd can take in a field with no escapes (User=, a path): one line, no trailing \\."""
    return not has_control(value) and not value.endswith("\\")


def render(
    tmp_path: Path,
    value: str,
    *,
    supervisor: str = "supervisord",
    volume: str | None = None,
    user: str = "u",
    address: str | None = None,
    domain: str | None = "",
):
    """host_files with ``value`` everywhere, past the settings' own checks; the files written to
    their paths, the key file and a stand-in vLLM (under a folder named ``value``) beside them.
    The volume is named ``value`` unless ``volume`` is given; clients come in at ``address``
    (default: ``value``) as a direct way in (TLS from Caddy's CA), and ``domain`` names the host
    (default: ``value``)."""
    volume = volume or str(tmp_path / "volume" / value)
    valid = settings(podkit_volume="/workspace", podkit_supervisor=supervisor)
    hostile = dataclasses.replace(
        valid,
        volume=volume,
        served_model_name=value,
        model=value,
        domain=value if domain == "" else domain,
        extra_args=("--hostile", value),
        extra_env={"HOSTILE": value},
        generation_config={"k": value, value: "v"},
    )
    launch = HostPlan(value, 4096, 1, value, value, extra_args=(value,))
    vllm_bin = tmp_path / "bin" / value / "vllm"
    vllm_bin.parent.mkdir(parents=True)
    vllm_bin.write_text(FAKE_VLLM)
    vllm_bin.chmod(0o755)
    way = way_in("box", {"ssh_hostname": value if address is None else address})
    files = host_files(
        hostile,
        package=PackageSpec(value, value),
        vllm_bin=str(vllm_bin),
        launch=launch,
        way=way,
        user=user,
        group=user,
    )
    for file in files.values():
        Path(file.path).parent.mkdir(parents=True, exist_ok=True)
        Path(file.path).write_text(file.content)
        Path(file.path).chmod(int(file.mode, 8))
    paths = hostile.paths
    for folder in (Path(paths.api_key).parent, Path(paths.run), Path(paths.logs)):
        folder.mkdir(parents=True, exist_ok=True)
    Path(paths.api_key).write_text(KEY)
    return hostile, launch, str(vllm_bin), files


def tame_volume(tmp_path: Path, value: str) -> str | None:
    """The volume for ``value``: named ``value`` where a path can hold it, else a tame name."""
    return str(tmp_path / "volume" / "tame") if has_control(value) else None


def run_sh(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """``sh ARGS`` in an empty working folder, with a bare environment."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home")}
    done = subprocess.run(["sh", *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, timeout=60)
    return done, cwd


def assert_nothing_ran(tmp_path: Path) -> None:
    assert not list(tmp_path.rglob(MARK)), "a hostile value ran as a command"


def header(content: str, first_code_line: str) -> list[str]:
    """The lines of a script before ``first_code_line``: its comment header."""
    lines = content.split("\n")
    return lines[1 : lines.index(first_code_line)]


# --- launch.sh and env.sh --------------------------------------------------------------------------


@pytest.mark.proc
@pytest.mark.parametrize("value", hostile())
def test_env_and_launch_scripts_run_nothing_they_carry(tmp_path, value):
    hostile, launch, vllm_bin, files = render(tmp_path, value, volume=tame_volume(tmp_path, value))
    for role in ("env", "launch"):
        syntax, _ = run_sh(tmp_path, "-n", files[role].path)
        assert syntax.returncode == 0, syntax.stderr
    out = tmp_path / "out"
    done, _ = run_sh(tmp_path, files["launch"].path, env={"PODKIT_TEST_OUT": str(out)})
    assert done.returncode == 0, done.stderr
    assert_nothing_ran(tmp_path)
    # every value reached vLLM whole, as one argument or one variable each
    argv = out.read_bytes().decode().split("\0")[:-1]
    assert argv == serve_argv(hostile, vllm_bin, launch)[1:]
    assert (tmp_path / "out.env").read_bytes().decode() == value
    assert (tmp_path / "out.key").read_bytes().decode() == KEY
    # what it started from is recorded, each path whole (as the probe reads it), whatever the volume holds
    recorded = podctl.sums(str(Path(hostile.paths.run, "serving.sha256")))
    assert set(recorded) == {hostile.paths.launch_script, hostile.paths.env_file, hostile.paths.api_key}
    # a comment stays a comment: the header before the first command is all comment lines
    assert all(line.startswith("#") for line in header(files["launch"].content, "set -u"))


# --- edge.sh and the Caddyfile -----------------------------------------------------------------------


@pytest.mark.proc
@pytest.mark.parametrize("value", hostile())
def test_edge_script_runs_nothing_it_carries(tmp_path, value):
    hostile, _, _, files = render(tmp_path, value, volume=tame_volume(tmp_path, value))
    paths = hostile.paths
    caddy = Path(paths.venv) / "bin" / "caddy"
    caddy.parent.mkdir(parents=True)
    caddy.write_text(FAKE_CADDY)
    caddy.chmod(0o755)
    syntax, _ = run_sh(tmp_path, "-n", files["edge"].path)
    assert syntax.returncode == 0, syntax.stderr
    out = tmp_path / "out"
    done, _ = run_sh(tmp_path, files["edge"].path, env={"PODKIT_TEST_OUT": str(out)})
    assert done.returncode == 0, done.stderr
    assert_nothing_ran(tmp_path)
    assert out.read_bytes().decode().split("\0")[:-1] == ["run", "--config", paths.caddyfile, "--adapter", "caddyfile"]
    assert (tmp_path / "out.key").read_bytes().decode() == KEY, "the key travels in the environment only"
    assert (tmp_path / "out.env").read_bytes().decode().split("\0")[:-1] == [paths.edge_data] * 3
    assert set(podctl.sums(str(Path(paths.run, "edge.sha256")))) == {paths.edge_script, paths.caddyfile, paths.api_key}
    assert Path(paths.run, "edge.pid").read_text().split()[0].isdigit()
    assert all(line.startswith("#") for line in header(files["edge"].content, "set -eu"))
    assert KEY not in files["edge"].content and KEY not in files["caddyfile"].content


@pytest.mark.parametrize("value", hostile())
def test_caddyfile_names_only_checked_addresses(tmp_path, value):
    """The domain and the address clients use are hostile here: neither is an IP address or a
    DNS name, so the Caddyfile serves loopback only; the served name stays in its comment."""
    hostile, _, _, files = render(tmp_path, value, volume=tame_volume(tmp_path, value))
    tame_root = tmp_path / "tame"
    tame_root.mkdir()
    _, _, _, tame = render(tame_root, "coder", volume=str(tame_root / "volume"), address="box", domain=None)
    ours, theirs = files["caddyfile"].content.split("\n"), tame["caddyfile"].content.split("\n")
    assert len(ours) == len(theirs), "a value added or removed a line of the Caddyfile"
    loopback = f"https://127.0.0.1:{hostile.edge_port}, https://localhost:{hostile.edge_port} {{"
    for mine, other in zip(ours, theirs):
        if mine != other and not (mine.startswith("#") and other.startswith("#")):
            # only the names differ: loopback's alone, where the tame host adds its own name
            assert (mine, other) in (
                (loopback, f"https://box:{hostile.edge_port}, {loopback}"),
                ("\tdefault_sni 127.0.0.1", "\tdefault_sni box"),
            ), (mine, other)
    assert loopback in ours and "\tdefault_sni 127.0.0.1" in ours and "\ttls internal" in ours


# --- supervisord.conf ------------------------------------------------------------------------------


def conf_keys(conf: str) -> list[str]:
    """supervisord.conf as its parser sees it: sections and keys in order."""
    seen = []
    for line in conf.split("\n"):
        line = line.strip()
        if line and line[0] not in "#;":
            seen.append(line if line.startswith("[") else line.split("=", 1)[0].strip())
    return seen


READ_CONF = """
import json, shlex, sys
from supervisor.options import ServerOptions
options = ServerOptions()
options.realize(["-c", sys.argv[1]])
print(json.dumps({
    "logfile": options.logfile, "pidfile": options.pidfile, "directory": options.directory,
    "childlogdir": options.childlogdir, "socket": [c["file"] for c in options.server_configs],
    "programs": {p.name: [shlex.split(p.command), p.stdout_logfile]
                 for g in options.process_group_configs for p in g.process_configs},
}))
"""


@pytest.mark.proc
@pytest.mark.parametrize(
    "value",
    [v for v in HOSTILE if not has_control(v)],
)
def test_supervisord_reads_every_path_whole_from_its_conf(tmp_path, value, supervisor_bin):
    hostile, _, _, files = render(tmp_path, value)
    conf = files["supervisord"].content
    assert conf_keys(conf) == conf_keys(render(tmp_path / "tame", "coder")[3]["supervisord"].content)
    out = subprocess.run(
        [str(supervisor_bin / "python"), "-c", READ_CONF, files["supervisord"].path],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    read = json.loads(out.stdout)
    paths = hostile.paths
    assert read == {
        "logfile": paths.supervisord_log,
        "pidfile": paths.supervisord_pid,
        "directory": paths.root,
        "childlogdir": paths.logs,
        "socket": [paths.supervisor_socket],
        "programs": {
            "vllm": [[paths.launch_script], paths.log_file],
            "edge": [[paths.edge_script], paths.edge_log],
            "idle": [[f"{paths.venv}/bin/python", paths.idle_script, paths.idle_config], paths.idle_log],
        },
    }
    assert_nothing_ran(tmp_path)


@pytest.mark.parametrize("value", [v for v in HOSTILE if has_control(v)])
def test_supervisord_conf_refuses_a_path_it_cannot_write_on_one_line(tmp_path, value):
    with pytest.raises(ValueError, match="cannot be written in supervisord.conf"):
        render(tmp_path, value, volume=str(tmp_path / "volume" / value))


@pytest.mark.parametrize(
    "argv",
    [["/w/podkit/bin/launch.sh"], ["/w/my vol/launch.sh", "--flag=100%"], ["/w/x'y\"z/$(a)`b`;c.sh", "a b", ""]],
)
def test_a_supervisord_command_is_split_back_into_the_same_words(argv):
    """supervisord expands % once in command= (%% is one %), then splits it with shlex."""
    assert shlex.split(supervisor_command(argv).replace("%%", "%")) == argv
    assert supervisor_value("100%") == "100%%"


# --- the systemd units ------------------------------------------------------------------------------


def keys(unit: str) -> list[str]:
    """The unit as systemd's parser sees it: sections and keys in order (lines split at \\n only)."""
    seen = []
    for line in unit.split("\n"):
        line = line.strip()
        if line and line[0] not in "#;":
            seen.append(line if line.startswith("[") else line.split("=", 1)[0])
    return seen


def systemd_word(word: str, program: bool = False) -> str:
    """What systemd passes on for one double-quoted word of an Exec line: C escapes, ``%%`` and
    (in arguments) ``$$`` undone."""
    assert word[0] == word[-1] == '"', word
    out, body, i = [], word[1:-1], 0
    while i < len(body):
        if body[i] == "\\":
            if body[i + 1] == "x":
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(body[i + 1])
            i += 2
            continue
        assert body[i] != '"', "an unescaped quote ends the word early"
        out.append(body[i])
        i += 1
    text = "".join(out).replace("%%", "%")
    return text if program else text.replace("$$", "$")


@pytest.mark.parametrize("value", hostile())
def test_units_keep_their_keys_and_run_nothing_they_carry(tmp_path, value):
    tame = representable_in_a_unit(value)
    volume = str(tmp_path / "volume" / (value if tame else "tame"))
    hostile, _, _, files = render(tmp_path, value, supervisor="systemd", volume=volume, user=value if tame else "u")
    assert "supervisord" not in files
    paths = hostile.paths
    for role, template, script, log in (
        ("unit", "podkit-vllm.service.j2", paths.launch_script, paths.log_file),
        ("edge_unit", "podkit-edge.service.j2", paths.edge_script, paths.edge_log),
    ):
        unit = files[role].content
        assert keys(unit) == keys((TEMPLATES / template).read_text()), "a value added or removed a line"
        assert not any(line.endswith("\\") for line in unit.split("\n")), "a line continues into the next"
        (description,) = [line for line in unit.split("\n") if line.startswith("Description=")]
        assert not CONTROL.search(description)
        lines = dict(line.split("=", 1) for line in unit.split("\n") if "=" in line and not line.startswith("#"))
        if tame:
            assert lines["User"] == value.replace("%", "%%") and lines["Group"] == lines["User"]
        assert lines["StandardOutput"] == "append:" + log.replace("%", "%%") == lines["StandardError"]
        assert systemd_word(lines["ExecStart"], program=True) == script
        assert "ExecStartPre" not in lines, "launch.sh records what it started from itself"
    assert_nothing_ran(tmp_path)


@pytest.mark.parametrize("value", [v for v in HOSTILE if not representable_in_a_unit(v)])
def test_unit_refuses_a_user_or_path_it_cannot_write_on_one_line(tmp_path, value):
    with pytest.raises(ValueError, match="cannot be written in a systemd unit"):
        render(tmp_path, value, supervisor="systemd", volume=str(tmp_path / "volume" / "tame"), user=value)
    if has_control(value):  # a path ending in \ is fine: the unit's end in vllm.log
        shutil.rmtree(tmp_path / "bin")
        with pytest.raises(ValueError, match="cannot be written in a systemd unit"):
            render(tmp_path, value, supervisor="systemd")


@pytest.mark.parametrize("name", ["A\n", "A;touch PWNED", "A B", "$(touch PWNED)", "1A"])
def test_env_file_refuses_a_variable_name_it_cannot_write(tmp_path, name):
    valid = settings(podkit_volume=str(tmp_path / "volume"))
    hostile = dataclasses.replace(valid, extra_env={name: "x"})
    with pytest.raises(ValueError, match="is not a shell variable name"):
        host_files(
            hostile,
            package=PackageSpec("vllm", "0.33.0"),
            vllm_bin="vllm",
            launch=HostPlan(valid.model, 4096, 1, None, None),
            way=way_in("box", {"ssh_hostname": "127.0.0.1"}),
        )
