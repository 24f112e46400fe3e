"""det_suite.platform.triton_compat: each Triton version's code path, chosen by version."""

from __future__ import annotations

import inspect

import pytest

from det_suite.platform import triton_compat as tc


@pytest.mark.parametrize("text, expected", [
    ("3.6.0", (3, 6)), ("3.7.1", (3, 7)), ("3.9.0+git1a2b3c", (3, 9)),
    ("3.10.0.dev20270101", (3, 10)), ("4.0", (4, 0)),
], ids=["release", "patch", "local-build", "two-digit-minor-nightly", "no-patch"])
def test_parse_version(text, expected):
    assert tc.parse_version(text) == expected


@pytest.mark.parametrize("text", ["", "three.six", "3"], ids=["empty", "words", "major-only"])
def test_parse_version_rejects_non_versions(text):
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        tc.parse_version(text)


@pytest.mark.parametrize("version, status", [
    ((3, 5), "unsupported"), ((2, 3), "unsupported"),
    ((3, 6), "tested"), ((3, 7), "tested"), ((3, 8), "tested"), ((3, 9), "tested"),
    ((3, 10), "untested"), ((4, 0), "untested"),
], ids=["3.5", "2.3", "3.6", "3.7", "3.8", "3.9", "3.10", "4.0"])
def test_support_status(version, status):
    assert tc.support_status(version) == status


def test_unsupported_triton_gets_one_message_naming_version_and_minimum():
    with pytest.raises(tc.UnsupportedTritonError) as info:
        tc.require_supported((3, 4))
    message = str(info.value)
    assert "Triton 3.4 is not supported" in message
    assert "3.6 or newer" in message and "triton==3.6.0" in message


@pytest.mark.parametrize("version", [(3, 6), (3, 9), (3, 10)], ids=["3.6", "3.9", "3.10"])
def test_supported_and_newer_tritons_pass(version):
    assert tc.require_supported(version) == version


def test_installed_triton_is_supported():
    assert tc.support_status(tc.installed_version()) != "unsupported"


@pytest.mark.parametrize("version, protocol", [
    ((3, 6), tc.HOOK_STAGES_ONLY), ((3, 7), tc.HOOK_KEYED), ((3, 8), tc.HOOK_KEYED),
    ((3, 9), tc.HOOK_KEYED), ((3, 10), tc.HOOK_KEYED),
], ids=["3.6", "3.7", "3.8", "3.9", "3.10"])
def test_stage_hook_protocol_by_version(version, protocol):
    assert tc.stage_hook_protocol(version) == protocol


def _stages():
    return {"ttir": object(), "ptx": object(), "cubin": lambda src, metadata: b"real"}


@pytest.mark.parametrize("protocol", [tc.HOOK_STAGES_ONLY, tc.HOOK_KEYED],
                         ids=["stages-only", "keyed"])
def test_hook_replaces_cubin_stage_and_keeps_ptx(protocol):
    hook = tc.ptx_only_stage_hook(protocol)
    stages = _stages()
    ptx = stages["ptx"]
    hook(object(), stages, {}, "triton", 90)  # how the NVIDIA backend calls it
    assert stages["ptx"] is ptx
    assert stages["cubin"](None, {}) == b""


def test_hook_leaves_a_pipeline_without_cubin_alone():
    stages = {"ttir": object(), "llir": object()}
    tc.ptx_only_stage_hook(tc.HOOK_KEYED)(object(), stages, {}, "triton", 90)
    assert set(stages) == {"ttir", "llir"}


def test_keyed_hook_returns_cache_key_when_called_without_arguments():
    key, digest = tc.ptx_only_stage_hook(tc.HOOK_KEYED)()
    assert key == tc.PTX_ONLY_PIPELINE
    assert isinstance(digest, str) and len(digest) == 64


def test_stages_only_hook_fails_under_keyed_call():
    """Positive control: Triton >= 3.7 calls the hook with no arguments first; a hook
    written for 3.6 cannot answer (the 'failed to compile' every lint variant hit)."""
    with pytest.raises(TypeError):
        tc.ptx_only_stage_hook(tc.HOOK_STAGES_ONLY)()


def test_unknown_protocol_is_rejected():
    with pytest.raises(ValueError, match="protocol 'v2'"):
        tc.ptx_only_stage_hook("v2")


def test_installed_triton_calls_the_hook_as_its_protocol_says():
    """Read from the installed Triton's compile(): from 3.7 it asks the hook for a cache key
    (a call with no arguments). Catches a Triton release that changes the protocol."""
    from triton.compiler import compiler

    asks_for_key = "add_stages_inspection_hook()" in inspect.getsource(compiler.compile)
    expected = tc.HOOK_KEYED if asks_for_key else tc.HOOK_STAGES_ONLY
    assert tc.stage_hook_protocol(tc.installed_version()) == expected


@pytest.mark.parametrize("version, numpy_version, problem", [
    ((3, 6), "2.2.6", False), ((3, 6), "2.3.0", True), ((3, 6), "2.4.6", True),
    ((3, 9), "2.4.6", False), ((3, 7), "2.4.6", False),
], ids=["3.6-np2.2", "3.6-np2.3", "3.6-np2.4", "3.9-np2.4", "3.7-np2.4"])
def test_numpy_problem(version, numpy_version, problem):
    message = tc.numpy_problem(version, numpy_version)
    assert (message is not None) == problem
    if problem:
        assert "numpy<2.3" in message


@pytest.mark.parametrize("triton_version, numpy_version, expect_warning", [
    pytest.param((3, 6), "2.4.6", True, id="triton36-numpy24-warns"),
    pytest.param((3, 6), "2.2.6", False, id="triton36-numpy22-quiet"),
    pytest.param((3, 9), "2.4.6", False, id="triton39-numpy24-quiet"),
])
def test_choosing_the_interpreter_warns_about_a_numpy_it_cannot_run(
        monkeypatch, capsys, triton_version, numpy_version, expect_warning):
    import numpy

    from det_suite.platform import interpreter

    monkeypatch.setattr(tc, "installed_version", lambda: triton_version)
    monkeypatch.setattr(numpy, "__version__", numpy_version)
    monkeypatch.setenv(interpreter.INTERPRET_ENV, "1")
    interpreter.use_interpreter()
    err = capsys.readouterr().err
    assert ("numpy<2.3" in err) is expect_warning, err
