"""`python -m sglang.launch_server` as a child process group: the seed's settings, a free
port, a health wait with a timeout, logs to a file, and a stop that takes the whole group
down on exit, error or Ctrl-C (no orphaned GPU process).

The A/B switch is SGLANG_PLUGINS, which names the `sglang.srt.plugins` entry points a
process may load: the plugin arm lists det-suite's, the upstream arm every other one (or a
name that matches nothing, since an empty value means "load all"). Both arms run SGLang's
deterministic inference; they differ only in whether det-suite's kernel serves the ModelOpt
FP8 linears. After the health wait the log must show the plugin's "hook live" line in the
plugin arm, and must not in the upstream arm, so a run never reports the wrong arm.

Flags were read from sglang 0.5.23 (`server_args.py`, `arg_groups/fields`): CUDA Graphs
are disabled with --disable-decode-cuda-graph / --disable-prefill-cuda-graph (the older
--disable-cuda-graph is deprecated there).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from det_suite.backends.sglang.client import SGLangClient, SGLangError
from det_suite.backends.sglang.plugin import ENTRY_POINT_GROUP, ENTRY_POINT_NAME, LIVE_MARK, \
    ROUTING_DIR_ENV, STRICT_ENV
from det_suite.ops.dispatch import OTHER_ARCH_ENV, Fp8Route
from det_suite.platform.interpreter import environment_without_interpreter

PLUGINS_ENV = "SGLANG_PLUGINS"
# An entry-point name nothing registers: SGLANG_PLUGINS="" would load every plugin.
NO_PLUGIN = "none"
# --enable-deterministic-inference supports these; of them, only fa3, fa4 and triton keep
# the radix cache on, which a cache-hit check needs.
DETERMINISTIC_ATTENTION = ("fa3", "fa4", "flashinfer", "triton")
LAUNCH_MODULE = "sglang.launch_server"


class SGLangServerError(SGLangError):
    """The server did not start, died, or is not the arm it was asked to be."""


class SGLangServerTimeout(SGLangServerError, TimeoutError):
    pass


class SGLangRoutingError(SGLangServerError):
    """The det-suite arm served, but its plugin routed no linear layer (or not every one)
    to det-suite's kernel: the arm is not what it claims (an environment problem, exit 2)."""


@dataclass(frozen=True)
class ServerSettings:
    """What one server boot is. `model_path`: a folder or hub id SGLang can load."""

    model_path: str
    plugin: bool = True                 # the det-suite arm (False: the upstream arm)
    deterministic: bool = True          # --enable-deterministic-inference
    attention_backend: str = "triton"
    tp_size: int = 1                    # tensor parallel ranks (GPUs per replica)
    dp_size: int = 1                    # data parallel replicas
    dtype: str = "bfloat16"
    cuda_graph: bool = True
    chunked_prefill_size: int | None = None
    page_size: int | None = None
    host: str = "127.0.0.1"
    port: int | None = None             # None: a free port
    extra_args: tuple[str, ...] = ()    # passed to launch_server verbatim, last
    python: str = sys.executable
    log_path: str | None = None         # None: a file in the working directory
    health_timeout: float = 1800.0      # seconds, model load and CUDA Graph capture included
    stop_timeout: float = 30.0          # SIGTERM to SIGKILL
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.model_path, str) or not self.model_path:
            raise ValueError(f"model_path: expected a folder or hub id, got {self.model_path!r}")
        if self.deterministic and self.attention_backend not in DETERMINISTIC_ATTENTION:
            raise ValueError(f"attention_backend: deterministic inference supports "
                             f"{', '.join(DETERMINISTIC_ATTENTION)}; got "
                             f"{self.attention_backend!r}")
        for name in ("tp_size", "dp_size", "chunked_prefill_size", "page_size", "port"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        for name in ("health_timeout", "stop_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected seconds > 0, got {getattr(self, name)!r}")
        if isinstance(self.extra_args, str):
            raise ValueError("extra_args: expected a sequence of arguments, got one string")

    @property
    def parallel(self) -> dict:
        return {"tp_size": self.tp_size, "dp_size": self.dp_size}

    @property
    def arm(self) -> str:
        return "det-suite" if self.plugin else "upstream"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def server_command(s: ServerSettings, port: int) -> list[str]:
    cmd = [s.python, "-m", LAUNCH_MODULE, "--model-path", s.model_path, "--host", s.host,
           "--port", str(port), "--tp-size", str(s.tp_size), "--dtype", s.dtype,
           "--attention-backend", s.attention_backend]
    if s.dp_size > 1:
        cmd += ["--dp-size", str(s.dp_size)]
    if s.deterministic:
        cmd.append("--enable-deterministic-inference")
    if not s.cuda_graph:
        cmd += ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]
    if s.chunked_prefill_size is not None:
        cmd += ["--chunked-prefill-size", str(s.chunked_prefill_size)]
    if s.page_size is not None:
        cmd += ["--page-size", str(s.page_size)]
    return cmd + list(s.extra_args)


def installed_plugins() -> list[str]:
    """Entry-point names in group sglang.srt.plugins visible to this interpreter."""
    from importlib.metadata import entry_points
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def plugins_value(plugin: bool, *, installed: list[str], inherited: str = "") -> str:
    """SGLANG_PLUGINS for one arm. An inherited whitelist is kept (other plugins stay as the
    user chose); det-suite's entry point is added or removed, and nothing else changes."""
    base = [n.strip() for n in inherited.split(",") if n.strip()] if inherited.strip() \
        else list(installed)
    names = [n for n in base if n not in (ENTRY_POINT_NAME, NO_PLUGIN)]
    if plugin:
        names.append(ENTRY_POINT_NAME)
    return ",".join(names) or NO_PLUGIN


def server_env(s: ServerSettings, base: dict[str, str] | None = None, *,
               installed: list[str] | None = None,
               routing_dir: str | None = None) -> dict[str, str]:
    """The server's environment: this one without TRITON_INTERPRET (set for this process
    when it saw no CUDA; the server is a GPU process, maybe another interpreter), the arm's
    plugin list, and the routing policy for non-SM12x GPUs set explicitly per arm (the det
    arm routes, the stock arm stays upstream), so neither depends on the caller's shell."""
    env = environment_without_interpreter(dict(os.environ if base is None else base))
    if s.plugin and installed is not None and ENTRY_POINT_NAME not in installed:
        raise SGLangServerError(
            f"the plugin arm needs det-suite's entry point {ENTRY_POINT_NAME!r} in group "
            f"{ENTRY_POINT_GROUP!r}, and {s.python} does not see it (installed: "
            f"{', '.join(installed) or 'none'}); install det-suite in the server's "
            "environment (pip install -e '.[sglang]')")
    env[PLUGINS_ENV] = plugins_value(
        s.plugin, installed=installed if installed is not None else installed_plugins(),
        inherited=env.get(PLUGINS_ENV, ""))
    env.pop(ROUTING_DIR_ENV, None)
    if s.plugin:
        env[STRICT_ENV] = "1"
        env[OTHER_ARCH_ENV] = Fp8Route.DET_SUITE.value
        if routing_dir is not None:
            env[ROUTING_DIR_ENV] = routing_dir
    else:
        env.pop(STRICT_ENV, None)
        env[OTHER_ARCH_ENV] = Fp8Route.UPSTREAM.value
    env.update(dict(s.env))
    return env


def read_routing(folder: Path) -> dict:
    """The routing counts every process of one boot wrote, summed."""
    import json

    total = {"det_suite": 0, "upstream": 0, "reasons": {}, "processes": 0}
    for path in sorted(Path(folder).glob("routing-*.json")):
        counts = json.loads(path.read_text())
        total["processes"] += 1
        total["det_suite"] += int(counts.get("det_suite", 0))
        total["upstream"] += int(counts.get("upstream", 0))
        for reason, n in counts.get("reasons", {}).items():
            total["reasons"][reason] = total["reasons"].get(reason, 0) + int(n)
    return total


def routing_problem(counts: dict) -> str | None:
    """Why a det arm's counts do not back its claim, or None: every counted linear layer
    went to det-suite, and at least one was counted."""
    if counts["det_suite"] == 0:
        return (f"det arm ran upstream kernels: no ModelOpt FP8 linear layer was routed to "
                f"det-suite ({counts['upstream']} went upstream: "
                f"{counts['reasons'] or 'none counted'}; is the model a ModelOpt static FP8 "
                "checkpoint and deterministic inference on?)")
    if counts["upstream"]:
        return (f"det arm ran upstream kernels for {counts['upstream']} of "
                f"{counts['upstream'] + counts['det_suite']} ModelOpt FP8 linear layers: "
                f"{counts['reasons']}")
    return None


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class SGLangServer:
    """One server process group. `start()` returns once it is healthy; `stop()` (also on
    exit, error, Ctrl-C or SIGTERM of this process) takes the group down. A context
    manager."""

    def __init__(self, settings: ServerSettings, *, progress=print, poll: float = 1.0) -> None:
        self.settings = settings
        self.progress = progress or (lambda _line: None)
        self.poll = poll
        self.port = settings.port or free_port(settings.host)
        self.url = f"http://{settings.host}:{self.port}"
        self.log_path = Path(settings.log_path or f"sglang-{settings.arm}-{self.port}.log")
        self.process: subprocess.Popen | None = None
        self._previous_sigterm = None
        # This boot's routing counts (det arm); its own folder, emptied before each boot.
        self.routing_dir = self.log_path.with_name(self.log_path.stem + ".routing")
        self.routing: dict | None = None
        self._log_start = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "SGLangServer":
        if self.process is not None:
            raise RuntimeError(f"server at {self.url} already started")
        s = self.settings
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.routing_dir.exists():
            import shutil
            shutil.rmtree(self.routing_dir)
        self.routing_dir.mkdir(parents=True)
        env = server_env(s, installed=installed_plugins() if s.python == sys.executable
                         else None, routing_dir=str(self.routing_dir.resolve()))
        cmd = server_command(s, self.port)
        # The log is appended to across boots; only this boot's part is checked.
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.progress(f"sglang: starting the {s.arm} arm on {self.url} "
                      f"({PLUGINS_ENV}={env[PLUGINS_ENV]}); log {self.log_path}")
        with open(self.log_path, "ab") as log:
            log.write(f"$ {PLUGINS_ENV}={env[PLUGINS_ENV]} {' '.join(cmd)}\n".encode())
            log.flush()
            # A new session: the server and every process it spawns share one process
            # group, which stop() signals as a whole.
            self.process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        atexit.register(self.stop)
        self._catch_sigterm()
        try:
            self._wait_healthy()
            self._check_arm()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        atexit.unregister(self.stop)
        self._release_sigterm()
        if process is None:
            return
        if process.poll() is None:
            self.progress(f"sglang: stopping the server at {self.url} (pid {process.pid})")
            self._signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=self.settings.stop_timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(process, signal.SIGKILL)
                process.wait()
        # Children that outlived the leader (a crashed launcher's schedulers) are still in
        # its group.
        self._signal_group(process, signal.SIGKILL)

    def __enter__(self) -> "SGLangServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------------
    @staticmethod
    def _signal_group(process: subprocess.Popen, sig) -> None:
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _catch_sigterm(self) -> None:
        # SIGTERM would end this process without unwinding, orphaning the server; turn it
        # into SystemExit so stop() runs. Only the main thread may install handlers.
        if threading.current_thread() is not threading.main_thread():
            return
        def on_sigterm(signum, frame):
            raise SystemExit(128 + signum)
        self._previous_sigterm = signal.signal(signal.SIGTERM, on_sigterm)

    def _release_sigterm(self) -> None:
        if self._previous_sigterm is not None \
                and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._previous_sigterm = None

    def _fail(self, what: str, kind=None) -> SGLangServerError:
        return (kind or SGLangServerError)(
            f"sglang server ({self.settings.arm} arm, {self.url}): {what}; last lines of "
            f"{self.log_path}:\n{log_tail(self.log_path)}")

    def _wait_healthy(self) -> None:
        client = SGLangClient(self.url, timeout=30.0)
        started = time.monotonic()
        last_said = started
        while True:
            code = self.process.poll()
            if code is not None:
                raise self._fail(f"exited with code {code} before it was healthy")
            if client.healthy():
                break
            now = time.monotonic()
            if now - started > self.settings.health_timeout:
                raise self._fail(f"not healthy after {self.settings.health_timeout:.0f} s",
                                 SGLangServerTimeout)
            if now - last_said >= 30:
                self.progress(f"sglang: waiting for {self.url} ({now - started:.0f} s)")
                last_said = now
            time.sleep(self.poll)
        try:
            # One real generation: the model serves, and /flush_cache won't wait on a
            # server that has never seen a request.
            client.health_generate()
        except SGLangError as exc:
            raise self._fail(f"healthy, but /health_generate failed: {exc}") from None
        self.progress(f"sglang: {self.url} healthy after {time.monotonic() - started:.0f} s")

    def boot_log(self) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def _check_arm(self) -> None:
        live = LIVE_MARK in self.boot_log()
        if self.settings.plugin and not live:
            raise self._fail(f"the det-suite arm's log has no '{LIVE_MARK}' line: the plugin "
                             "did not load or its hook is not live (is det-suite installed "
                             "in the server's environment, and is the model a ModelOpt FP8 "
                             "checkpoint?)")
        if not self.settings.plugin and live:
            raise self._fail(f"the upstream arm's log shows '{LIVE_MARK}': {PLUGINS_ENV} did "
                             "not exclude det-suite's plugin")
        if self.settings.plugin:
            self.routing = read_routing(self.routing_dir)
            self.progress(f"sglang: det-suite arm routing: {self.routing['det_suite']} linear "
                          f"layers to det-suite, {self.routing['upstream']} upstream "
                          f"({self.routing['processes']} processes)")
            problem = routing_problem(self.routing) if self.settings.deterministic else None
            if problem is not None:
                raise self._fail(problem, SGLangRoutingError)
