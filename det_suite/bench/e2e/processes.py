"""Running one boot as a child process, and making sure it ends with us.

The child runs in its own session, so a Ctrl-C in the terminal reaches only the parent,
which then ends the child's whole process group (SIGTERM, then SIGKILL after a grace
period) before it returns: no engine process outlives the run. The child watches for the
parent too (worker.py), in case the parent is killed outright.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

GRACE_S = 10.0
# What a boot's process prints before each progress event, and the schema of its record.
# Here rather than in worker.py: importing the package must not import the module that
# `python -m` runs as __main__.
EVENT_PREFIX = "det-suite-e2e-event"
BOOT_SCHEMA = "det-suite/e2e-boot/1"


class BootFailed(RuntimeError):
    """A boot's process failed or timed out; its record was not written."""


def _reader(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def stop_process(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """End `proc` and its process group: SIGTERM, then SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def subprocess_boot(job: dict, out_path: Path, on_event: Callable[[dict], None], *,
                    timeout_s: float | None = None) -> None:
    """Run `job` in `python -m det_suite.bench.e2e.worker`; return once OUT is written.
    Raises BootFailed (non-zero exit, timeout, no record) and re-raises KeyboardInterrupt
    after ending the child."""
    job_path = out_path.with_name(f".{out_path.stem}.job.json")
    job_path.write_text(json.dumps({**job, "parent_pid": os.getpid()}))
    command = [sys.executable, "-m", "det_suite.bench.e2e.worker", str(job_path), str(out_path)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=None, text=True,
                            start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise BootFailed(f"boot {job['index'] + 1} ({job['arm']['name']}): no result "
                                 f"within {timeout_s:g} s; stopped")
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            if line.startswith(EVENT_PREFIX):
                on_event(json.loads(line[len(EVENT_PREFIX):]))
            else:
                sys.stderr.write(line)
        code = proc.wait()
    finally:
        stop_process(proc)
        job_path.unlink(missing_ok=True)
    if code != 0 or not out_path.exists():
        raise BootFailed(f"boot {job['index'] + 1} ({job['arm']['name']}): the boot process "
                         f"exited with code {code}" + ("" if code else " without a record"))
