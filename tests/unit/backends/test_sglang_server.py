"""The SGLang server launcher: the command line (flags read from the 0.5.23 wheel), the A/B
switch through SGLANG_PLUGINS, and the process lifecycle against a stand-in
`sglang.launch_server` (a small HTTP server put first on PYTHONPATH) that starts a child
of its own and "loads" det-suite's plugin only when SGLANG_PLUGINS names it: health wait,
log file, early exit, timeout, the arm check, and a stop that leaves no process behind."""

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from det_suite.backends.sglang import server
from det_suite.backends.sglang.plugin import ENTRY_POINT_NAME, LIVE_MARK, ROUTING_DIR_ENV, \
    STRICT_ENV
from det_suite.ops.dispatch import OTHER_ARCH_ENV
from det_suite.backends.sglang.server import (SGLangRoutingError, SGLangServer, SGLangServerError,
                                              SGLangServerTimeout, ServerSettings,
                                              plugins_value, server_command, server_env)

PY = sys.executable


# -- the command line --------------------------------------------------------------------------

def test_default_command_is_the_seeds_settings():
    assert server_command(ServerSettings("/models/q", python="py"), 31000) == [
        "py", "-m", "sglang.launch_server", "--model-path", "/models/q",
        "--host", "127.0.0.1", "--port", "31000", "--tp-size", "1", "--dtype", "bfloat16",
        "--attention-backend", "triton", "--enable-deterministic-inference"]


@pytest.mark.parametrize("options, tail", [
    pytest.param({"cuda_graph": False},
                 ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"], id="eager"),
    pytest.param({"chunked_prefill_size": 256}, ["--chunked-prefill-size", "256"],
                 id="chunked-prefill"),
    pytest.param({"page_size": 16}, ["--page-size", "16"], id="page-size"),
    pytest.param({"dp_size": 2}, ["--dp-size", "2", "--enable-deterministic-inference"],
                 id="data-parallel"),
    pytest.param({"page_size": 16, "extra_args": ("--mem-fraction-static", "0.8")},
                 ["--page-size", "16", "--mem-fraction-static", "0.8"], id="extra-args-last"),
])
def test_options_append_their_flags(options, tail):
    cmd = server_command(ServerSettings("m", **options), 1)
    assert cmd[-len(tail):] == tail


def test_without_deterministic_inference_the_flag_is_absent():
    cmd = server_command(ServerSettings("m", deterministic=False, attention_backend="fa3"), 1)
    assert "--enable-deterministic-inference" not in cmd


@pytest.mark.parametrize("options, match", [
    pytest.param({"model_path": ""}, "model_path", id="no-model"),
    pytest.param({"attention_backend": "torch_native"}, "attention_backend",
                 id="attention-without-deterministic-support"),
    pytest.param({"tp_size": 0}, "tp_size", id="zero-tp"),
    pytest.param({"dp_size": 0}, "dp_size", id="zero-dp"),
    pytest.param({"page_size": -4}, "page_size", id="negative-page"),
    pytest.param({"health_timeout": 0}, "health_timeout", id="no-health-time"),
    pytest.param({"extra_args": "--foo 1"}, "extra_args", id="extra-args-as-one-string"),
])
def test_bad_settings_are_refused_by_name(options, match):
    with pytest.raises(ValueError, match=match):
        ServerSettings(**{"model_path": "m", **options})


# -- the A/B switch ----------------------------------------------------------------------------

@pytest.mark.parametrize("plugin, installed, inherited, expected", [
    pytest.param(True, ["det_suite", "other"], "", "other,det_suite", id="plugin-arm"),
    pytest.param(False, ["det_suite", "other"], "", "other", id="upstream-arm"),
    pytest.param(False, ["det_suite"], "", "none", id="upstream-arm-no-other-plugin"),
    pytest.param(True, ["det_suite", "x", "y"], "x", "x,det_suite",
                 id="plugin-arm-keeps-a-user-whitelist"),
    pytest.param(False, ["det_suite", "x"], "x,det_suite", "x",
                 id="upstream-arm-drops-only-det-suite"),
])
def test_sglang_plugins_value(plugin, installed, inherited, expected):
    assert plugins_value(plugin, installed=installed, inherited=inherited) == expected


@pytest.mark.parametrize("plugin, strict", [pytest.param(True, "1", id="plugin-arm"),
                                            pytest.param(False, None, id="upstream-arm")])
def test_server_env_sets_the_arm(plugin, strict):
    env = server_env(ServerSettings("m", plugin=plugin), {STRICT_ENV: "1", "KEEP": "k"},
                     installed=[ENTRY_POINT_NAME])
    assert env["SGLANG_PLUGINS"] == (ENTRY_POINT_NAME if plugin else "none")
    assert env.get(STRICT_ENV) == strict and env["KEEP"] == "k"


@pytest.mark.parametrize("plugin, route", [pytest.param(True, "det_suite", id="plugin-arm"),
                                           pytest.param(False, "upstream", id="upstream-arm")])
def test_server_env_sets_the_routing_policy_per_arm_and_drops_the_interpreter(plugin, route):
    """On a non-SM12x GPU the det arm routes only with DET_SUITE_FP8_OTHER_ARCH=det_suite;
    TRITON_INTERPRET, set when the launching Python saw no CUDA, is not the server's."""
    base = {OTHER_ARCH_ENV: "det_suite" if not plugin else "upstream", "TRITON_INTERPRET": "1"}
    env = server_env(ServerSettings("m", plugin=plugin), base, installed=[ENTRY_POINT_NAME],
                     routing_dir="/r")
    assert env[OTHER_ARCH_ENV] == route and "TRITON_INTERPRET" not in env
    assert env.get(ROUTING_DIR_ENV) == ("/r" if plugin else None)


def test_plugin_arm_without_the_entry_point_is_refused():
    with pytest.raises(SGLangServerError, match="entry point 'det_suite'.*pip install"):
        server_env(ServerSettings("m"), {}, installed=["other"])


# -- the lifecycle, against a stand-in launch_server -------------------------------------------

FAKE_LAUNCH_SERVER = textwrap.dedent('''
    import argparse, os, subprocess, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args, _ = parser.parse_known_args()
    behaviour = os.environ.get("FAKE_SGLANG", "ok")
    print("stand-in launch_server", " ".join(sys.argv[1:]), flush=True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["FAKE_SGLANG_CHILD"], "w") as f:
        f.write(str(child.pid))
    if behaviour == "exit":
        print("model failed to load", flush=True)
        sys.exit(3)
    if ("det_suite" in os.environ.get("SGLANG_PLUGINS", "").split(",") \\
            or behaviour == "ignores-sglang-plugins") and behaviour != "not-live":
        print({live!r} + " on the stand-in", flush=True)
        routing = os.environ.get("DET_SUITE_SGLANG_ROUTING_DIR")
        if routing and behaviour != "routes-nothing":
            with open(os.path.join(routing, "routing-%d.json" % os.getpid()), "w") as f:
                f.write('{{"det_suite": 3, "upstream": 0, "reasons": {{}}}}')

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503 if behaviour == "never-healthy" else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    HTTPServer((args.host, args.port), Handler).serve_forever()
''').format(live=LIVE_MARK)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to see which processes are left")
    package = tmp_path / "stand_in" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_LAUNCH_SERVER)
    monkeypatch.setattr(server, "installed_plugins", lambda: [ENTRY_POINT_NAME])
    child_file = tmp_path / "child.pid"

    def make(behaviour="ok", *, plugin=True, health_timeout=20.0):
        settings = ServerSettings(
            "stand-in-model", plugin=plugin, python=PY, log_path=str(tmp_path / "server.log"),
            health_timeout=health_timeout, stop_timeout=5.0,
            env=(("PYTHONPATH", str(package.parent)), ("FAKE_SGLANG", behaviour),
                 ("FAKE_SGLANG_CHILD", str(child_file))))
        return SGLangServer(settings, progress=None, poll=0.05)

    make.child_pid = lambda: int(child_file.read_text())
    make.pythonpath = str(package.parent)
    make.child_file = child_file
    make.log = tmp_path / "server.log"
    return make


def _gone(*pids, within=5.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def test_starts_healthy_logs_to_its_file_and_stops_the_whole_group(stand_in):
    srv = stand_in()
    with srv:
        leader, child = srv.process.pid, stand_in.child_pid()
        assert alive(leader) and alive(child)
        assert srv.url == f"http://127.0.0.1:{srv.port}"
    log = stand_in.log.read_text()
    assert f"--port {srv.port}" in log and "SGLANG_PLUGINS=det_suite" in log
    assert _gone(leader, child)


def test_the_det_arm_records_its_routing_counts(stand_in):
    with stand_in() as srv:
        assert (srv.routing["det_suite"], srv.routing["upstream"]) == (3, 0)


def test_a_det_arm_that_routed_nothing_is_an_error_even_after_a_good_boot(stand_in):
    """Each boot gets an emptied routing folder: an earlier boot's counts never count."""
    with stand_in():
        pass
    with pytest.raises(SGLangRoutingError, match="det arm ran upstream kernels"):
        stand_in("routes-nothing").start()


def test_an_earlier_boots_live_line_does_not_satisfy_a_later_boot(stand_in):
    with stand_in():
        pass
    assert LIVE_MARK in stand_in.log.read_text()
    with pytest.raises(SGLangServerError, match="no 'det-suite sglang plugin: hook live'"):
        stand_in("not-live").start()


def test_an_early_exit_is_reported_with_the_log_tail(stand_in):
    srv = stand_in("exit")
    with pytest.raises(SGLangServerError, match="(?s)exited with code 3.*model failed to load"):
        srv.start()
    assert srv.process is None and _gone(stand_in.child_pid())


def test_a_server_that_never_gets_healthy_times_out_and_is_stopped(stand_in):
    srv = stand_in("never-healthy", health_timeout=1.0)
    with pytest.raises(SGLangServerTimeout, match="not healthy after 1 s"):
        srv.start()
    assert _gone(stand_in.child_pid())


def test_ctrl_c_inside_the_block_stops_the_server(stand_in):
    with pytest.raises(KeyboardInterrupt):
        with stand_in() as srv:
            leader, child = srv.process.pid, stand_in.child_pid()
            raise KeyboardInterrupt
    assert _gone(leader, child)


# The driver stands for a launching process in a terminal. Python keeps SIGINT ignored when
# it starts with it ignored (under nohup, or `trap '' INT`), so a driver started from such a
# pytest would never see Ctrl-C: it installs Python's own handler first, whatever its parent did.
DRIVER = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from det_suite.backends.sglang.server import SGLangServer, ServerSettings
    settings = ServerSettings("stand-in-model", plugin=False, log_path=sys.argv[1],
                              env=tuple(zip(sys.argv[2::2], sys.argv[3::2])))
    srv = SGLangServer(settings, progress=None, poll=0.05).start()
    print(srv.process.pid, flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="sigterm"),
                                 pytest.param(signal.SIGINT, id="ctrl-c")])
def test_the_launching_process_stopped_by_a_signal_takes_the_server_down(stand_in, sig):
    srv = stand_in(plugin=False)
    env_args = [x for pair in srv.settings.env for x in pair]
    driver = subprocess.Popen([PY, "-c", DRIVER, str(stand_in.log), *env_args],
                              stdout=subprocess.PIPE, text=True)
    try:
        leader = int(driver.stdout.readline())
        child = stand_in.child_pid()
        assert alive(leader) and alive(child)
        driver.send_signal(sig)
        # Generous: the claim is that the server goes down, not how fast a loaded 2-core
        # CI box tears down a Python process (20 s was once exceeded there).
        driver.wait(timeout=60)
    finally:
        driver.kill()
    assert _gone(leader, child)


def test_an_upstream_arm_that_loaded_the_plugin_anyway_is_refused(stand_in):
    with pytest.raises(SGLangServerError, match="upstream arm's log shows"):
        stand_in("ignores-sglang-plugins", plugin=False).start()
    assert _gone(stand_in.child_pid())


def test_the_upstream_arm_runs_without_the_plugin(stand_in):
    with stand_in(plugin=False):
        pass
    log = stand_in.log.read_text()
    assert "SGLANG_PLUGINS=none" in log and LIVE_MARK not in log


def test_a_plugin_arm_whose_hook_never_went_live_is_refused(stand_in, monkeypatch):
    # The stand-in "loads" det_suite only when SGLANG_PLUGINS names it; name another.
    monkeypatch.setattr(server, "plugins_value", lambda plugin, **kw: "other")
    with pytest.raises(SGLangServerError, match="no 'det-suite sglang plugin: hook live' line"):
        stand_in().start()


# -- the backend that boots it ----------------------------------------------------------------

@pytest.mark.parametrize("mode, arm", [
    pytest.param("det", "det_suite", id="det-boots-the-plugin-arm"),
    pytest.param("stock", "none", id="stock-boots-upstream"),
])
def test_backend_boots_one_server_for_its_arm_and_stops_it(stand_in, tmp_path, mode, arm):
    from det_suite.backends.sglang.backend import SGLangBackend

    (tmp_path / "config.json").write_text('{"vocab_size": 32}')  # the client's echo rule
    backend = SGLangBackend(
        str(tmp_path), mode=mode, cuda_graph=False, chunk_size=64, work_dir=tmp_path / "work",
        progress=None, python=PY, health_timeout=20.0,
        env=(("PYTHONPATH", stand_in.pythonpath), ("FAKE_SGLANG_CHILD",
                                                    str(stand_in.child_file))))
    leader = backend.server.process.pid
    log = tmp_path / "work" / f"sglang-{mode}-eager-chunk64.log"
    assert backend.name == f"sglang:{mode}:eager-chunk64"
    backend.close()
    text = log.read_text()
    assert f"SGLANG_PLUGINS={arm} " in text and "--chunked-prefill-size 64" in text
    assert f"--model-path {tmp_path} " in text
    assert _gone(leader, stand_in.child_pid())


@pytest.mark.model
def test_a_synthetic_model_is_written_once_for_the_server(tmp_path):
    from det_suite.backends.sglang.backend import model_vocab, served_model_path

    path = served_model_path("synthetic:tiny?seed=0", tmp_path, progress=None)
    config = Path(path) / "config.json"
    written = config.stat().st_mtime_ns
    assert served_model_path("synthetic:tiny?seed=0", tmp_path, progress=None) == path
    assert config.stat().st_mtime_ns == written
    assert model_vocab(path) == model_vocab("synthetic:tiny?seed=0") > 0


# Against the real SGLang: its parser on every command line the launcher builds is in
# test_sglang_real.py (a synthetic checkpoint; a hub id would need the network).


def test_tensor_parallel_size_reaches_the_command_line_and_the_result():
    settings = ServerSettings("m", tp_size=4)
    cmd = server_command(settings, 1)
    assert cmd[cmd.index("--tp-size") + 1] == "4" and "--dp-size" not in cmd
    assert settings.parallel == {"tp_size": 4, "dp_size": 1}

