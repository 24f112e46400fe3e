"""A boot's process ends with the run: stop_process ends the whole process group, and a
process that exits without its record is a failed boot."""

import subprocess
import sys
import time

import pytest

import det_suite.bench.e2e.processes as processes
from det_suite.bench.e2e.processes import BootFailed, stop_process, subprocess_boot


def _job():
    return {"index": 0, "letter": "A", "arm": {"name": "a"}, "plan": {}, "gate_poll_s": 1.0}


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """Dead within `within_s` (a signal is delivered asynchronously): no such process, or a
    zombie waiting for init to reap it."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(") ", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def test_stop_process_ends_the_group_including_grandchildren():
    # The child starts a grandchild in its own group and prints its pid.
    code = ("import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); "
            "print(p.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    grandchild = int(proc.stdout.readline())
    stop_process(proc, grace_s=5.0)
    assert proc.poll() is not None
    assert _gone(grandchild)


def test_stop_process_on_a_finished_process_is_a_no_op():
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    stop_process(proc)
    assert proc.returncode == 0


@pytest.mark.parametrize("program, message", [
    ("true", "exited with code 0 without a record"),
    ("false", "exited with code 1"),
], ids=["no-record", "non-zero-exit"])
def test_a_boot_without_its_record_fails(tmp_path, monkeypatch, program, message):
    monkeypatch.setattr(processes.sys, "executable", program)
    with pytest.raises(BootFailed, match=message):
        subprocess_boot(_job(), tmp_path / "boot.json", lambda event: None)
    assert list(tmp_path.iterdir()) == []       # the job file is removed too
