"""bench e2e on the embedded engine with real boots (a fresh process each) on the tiny
synthetic model: the seed's A B B A order runs end to end on the CPU, with the thermal gate
and the decode floor reported unavailable rather than faked; Ctrl-C ends the running boot's
process; a boot that fails in its process fails the run."""

import json
import os

import pytest

from det_suite.bench.e2e import EXIT_ERROR, EXIT_OK, Arm, E2ESettings, bench_e2e
from det_suite.bench.e2e.boot import weight_bytes
from det_suite.bench.e2e.processes import subprocess_boot

pytestmark = pytest.mark.model

TINY = dict(model="synthetic:tiny?seed=0", prefixes=(8,), batches=(1, 2), output_tokens=3,
            warmup=1, samples=1, device="cpu")


def _settings(out, **overrides):
    arms = (Arm("control", mode="stock"), Arm("control-again", mode="stock"))
    return E2ESettings(out=str(out), arms=arms, **{**TINY, **overrides})


@pytest.fixture(scope="module")
def aa_run(tmp_path_factory):
    """Two stock arms (an A/A run: the engine's cheapest arm on the interpreter) booted
    A B B A, each boot a fresh process."""
    out = tmp_path_factory.mktemp("e2e-aa")
    return out, bench_e2e(_settings(out))


def test_abba_runs_end_to_end_in_fresh_processes(aa_run):
    out, result = aa_run
    assert result.exit_code == EXIT_OK and result.payload["complete"]
    boots = result.payload["boots"]
    assert [b["arm"]["name"] for b in boots] == ["control", "control-again", "control-again",
                                                 "control"]
    assert len({b["pid"] for b in boots}) == 4
    assert sorted(p.name for p in (out / "boots").iterdir()) == [
        "boot-01-A-control.json", "boot-02-B-control-again.json",
        "boot-03-B-control-again.json", "boot-04-A-control.json"]


def test_every_sample_is_a_forced_length_request_on_an_empty_cache(aa_run):
    _, result = aa_run
    samples = [s for b in result.payload["boots"] for s in b["samples"]]
    assert len(samples) == 4 * 2 * 2
    assert all(s["output_tokens"] == 3 and s["e2e_ms"] > 0 and s["prefill_ms"] > 0
               for s in samples)


def test_the_same_prompts_give_the_same_tokens_in_every_boot(aa_run):
    _, result = aa_run
    digests = {}
    for b in result.payload["boots"]:
        for s in b["samples"]:
            digests.setdefault((s["prefix"], s["batch"]), set()).add(s["output_sha256"])
    assert all(len(d) == 1 for d in digests.values())


def test_on_the_cpu_gate_and_floor_are_unavailable_not_faked(aa_run):
    out, result = aa_run
    payload = result.payload
    assert not payload["speed_claim"]
    thermal = payload["summary"]["thermal"]
    assert not thermal["available"] and thermal["statuses"] == {"unavailable": 16}
    assert thermal["peak_temp_c"] is None
    assert any("needs a CUDA GPU" in r for r in thermal["unavailable_reasons"])
    floor = payload["summary"]["floor"]
    assert not floor["measured"] and "CUDA GPU" in floor["reason"]
    assert floor["weight_bytes"] > 0
    assert "**Not a speed claim**" in (out / "e2e.md").read_text()
    assert json.loads((out / "e2e.json").read_text())["headline"] == payload["headline"]


def test_weight_bytes_are_every_tensor_but_the_embedding(tiny):
    state = tiny.state_dict()
    linears = sum(t.numel() * t.element_size() for n, t in state.items()
                  if n.endswith("proj.weight"))
    assert weight_bytes(tiny) == sum(t.numel() * t.element_size() for n, t in state.items()
                                     if n != "model.embed_tokens.weight")
    assert weight_bytes(tiny) > linears + tiny.lm_head.numel() * 2 - 1


def _job(plan, index=0):
    return {"index": index, "letter": "A", "arm": Arm("control", mode="stock").as_dict(),
            "plan": plan, "gate_poll_s": 1.0}


def test_ctrl_c_ends_the_boot_process(tmp_path):
    pids = []

    def on_event(event):
        if event["event"] == "loading":
            pids.append(event["pid"])
            raise KeyboardInterrupt

    plan = _settings(tmp_path).plan()
    (tmp_path / "boots").mkdir()
    path = tmp_path / "boots" / "boot-01-A-control.json"
    with pytest.raises(KeyboardInterrupt):
        subprocess_boot(_job(plan), path, on_event)
    assert pids, "the boot never reported its pid"
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)
    assert not path.exists() and list((tmp_path / "boots").iterdir()) == []


def test_a_boot_that_fails_in_its_process_fails_the_run(tmp_path):
    not_a_checkpoint = tmp_path / "empty-model"
    not_a_checkpoint.mkdir()
    result = bench_e2e(_settings(tmp_path / "run", model=str(not_a_checkpoint), order="AB"))
    assert result.exit_code == EXIT_ERROR
    assert "boot 1 (control): the boot process exited with code 1" in result.payload["failure"]
    assert list((tmp_path / "run" / "boots").iterdir()) == []


def _interpreter_problem() -> str | None:
    from det_suite.platform.interpreter import interpreter_numpy_problem
    return interpreter_numpy_problem()


@pytest.mark.slow
def test_det_mode_against_the_control(tmp_path):
    """The default arms (stock control, det mode) on the interpreter: det's kernels run in a
    boot of their own and give the control's shape of results. Also run on GPU machines
    (slow tests do), where the boot chooses the interpreter for --device cpu itself."""
    problem = _interpreter_problem()
    if problem:
        pytest.skip(f"Triton's interpreter cannot run here: {problem}")
    settings = E2ESettings(out=str(tmp_path), order="AB", **{**TINY, "batches": (1,)})
    result = bench_e2e(settings)
    assert result.exit_code == EXIT_OK, result.payload.get("failure")
    assert [b["arm"]["mode"] for b in result.payload["boots"]] == ["stock", "det"]
    assert result.payload["cells"][0]["ratios"]["det"]["e2e_ms"]["ratio"] > 0

