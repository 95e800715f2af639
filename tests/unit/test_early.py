"""The e2e layer's early installs (tests/e2e/early.py) without installing anything: what a fixture
waiting for a part gets when the part is done, failed, or never came, and what the run is told to
begin for which tests. The process is a stand-in (``sh``) that writes what the real one would."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import early as early_module
from tests.e2e.early import Early, EarlyError

pytestmark = pytest.mark.proc


def stand_in(folder: Path, script: str) -> Early:
    """An Early whose process is ``sh -c SCRIPT`` run in ``folder`` (its parts written there)."""
    early = Early(folder, {"folder": str(folder), "sandbox": "x", "agents": ["a"], "clients": None})
    with open(early.log, "w") as log:
        early.proc = subprocess.Popen(
            ["sh", "-c", script], cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return early


def test_a_done_part_is_returned_and_a_failed_one_raises_its_error(tmp_path):
    done = json.dumps({"result": {"rc": 0}, "seconds": 1.0})
    failed = json.dumps({"error": "Traceback ...\nOSError: no space", "seconds": 2.0})
    # written whole, then renamed, as the installs write each part (a reader never meets half a file)
    write = "printf '%s' '{1}' > {0}.part && mv {0}.part {0}.json"
    early = stand_in(tmp_path, write.format("sandbox", done) + "; " + write.format("agents", failed))
    assert early.wait("sandbox", timeout=30) == {"rc": 0}
    with pytest.raises(EarlyError, match="(?s)installing agents failed: .*OSError: no space"):
        early.wait("agents", timeout=30)
    early.proc.wait()


@pytest.mark.parametrize(
    "script, timeout, says",
    [
        ("echo pip broke >&2; exit 1", 30, "the early installs ended without sandbox: pip broke"),
        ("sleep 30", 0.5, "sandbox was not installed within 0 s"),
    ],
)
def test_a_part_that_never_comes_raises_with_the_log(tmp_path, script, timeout, says):
    early = stand_in(tmp_path, script)
    with pytest.raises(EarlyError, match=says):
        early.wait("sandbox", timeout=timeout)
    early.stop()
    assert early.proc.poll() is not None


def test_a_part_not_begun_says_so_at_once(tmp_path):
    with pytest.raises(EarlyError, match="clients was not begun at collection"):
        Early(tmp_path, {"folder": str(tmp_path)}).wait("clients", timeout=30)


def test_the_process_runs_each_asked_part_and_records_its_failure(tmp_path):
    """The real entry point with a plan asking for the clients part only, into a folder that cannot
    hold a venv (a file is in the way): the part's error is recorded, the others never begun."""
    (tmp_path / "venvs").write_text("not a folder\n")
    plan = {"folder": str(tmp_path), "sandbox": None, "agents": None, "clients": str(tmp_path / "venvs")}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    root = Path(early_module.__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.e2e.early", str(tmp_path / "plan.json")], cwd=root, capture_output=True
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["clients.json", "plan.json"]
    assert "venvs" in json.loads((tmp_path / "clients.json").read_text())["error"]
