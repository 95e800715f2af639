"""The last line for real: supervisord runs a stand-in vLLM from the rendered files (the pod of
tests/unit/test_supervision.py); the deploy's copy of the served files, a new launch that cannot
start, and ``podctl restore`` putting the copies back and restarting vLLM from them."""

import json
import subprocess
from pathlib import Path

import pytest

from podkit.host.programs import copy_of, kept_files
from podkit.host.start.rollback import keep_command, restore_config, to_keep
from tests.unit.test_supervision import pod, wait_for  # noqa: F401 - the fixture, with its stand-ins

pytestmark = pytest.mark.proc  # real supervisord, shells and podctl

BROKEN_LAUNCH = "#!/bin/sh\necho 'podkit: starting vLLM'\necho 'ValueError: no KV cache for one request'\nexit 1\n"


def test_restore_puts_back_the_served_files_and_restarts_vllm_from_them(pod):  # noqa: F811
    box = pod()
    box.supervise()
    served_pid, edge = box.running()
    served = {path: Path(path).read_text() for path in kept_files(box.settings)}

    # the deploy keeps the files that serve (the probe's sums say which copies are missing)
    probed = box.probe()
    assert to_keep(box.settings, probed) == kept_files(box.settings)
    subprocess.run(["sh", "-c", keep_command(to_keep(box.settings, probed))], check=True)
    assert to_keep(box.settings, box.probe()) == []
    assert all(Path(copy_of(path)).read_text() == text for path, text in served.items())

    # a new launch that fails at start, as the deploy would write and start it
    Path(box.paths.launch_script).write_text(BROKEN_LAUNCH)
    started = box.supervise(restart=["vllm"])
    assert started["ok"], started
    wait_for(lambda: box.programs().get("vllm") in ("BACKOFF", "FATAL") or int(box.crashes() or 0) >= 1)

    answer = json.loads(box.podctl("restore", restore_config(box.settings, probed)))
    assert answer == {"ok": True, "done": ["restarted vllm"]}, answer
    vllm, _ = box.running()
    assert vllm != served_pid and box.pid("edge.pid") == edge  # only vLLM restarted
    assert {path: Path(path).read_text() for path in served} == served
    assert box.crashes() == "0"
    # it serves the files it was started from: the probe says so, as a re-apply's would
    assert box.probe().serving_current_files()


def test_restore_says_which_file_it_could_not_put_back(pod):  # noqa: F811
    box = pod()
    cfg = restore_config(box.settings, box.probe())
    missing = copy_of(box.paths.launch_script)
    answer = json.loads(box.podctl("restore", cfg))
    assert answer["ok"] is False
    assert answer["error"].startswith(f"could not put back {box.paths.launch_script} from {missing}: ")
