"""bench e2e's arms, boot order and settings: what a spec means, and a clear error naming the
argument for every spec that cannot run."""

import pytest

from det_suite.bench.e2e.arms import Arm, E2ESettings, default_arms, parse_arm, parse_order


@pytest.mark.parametrize("spec, expected", [
    ("det=mode=det", Arm("det", mode="det")),
    ("ctl=mode=stock,graph=on", Arm("ctl", mode="stock", cuda_graph=True)),
    ("s3=mode=det,graph=off,stages=3", Arm("s3", mode="det", stages=3)),
    ("tab=mode=det,stages=table", Arm("tab", mode="det", stages=None)),
    ("e=mode=det, backend=embedded", Arm("e", mode="det", backend="embedded")),
], ids=["mode-only", "graph-on", "stages", "stages-table", "backend-spaces"])
def test_parse_arm(spec, expected):
    assert parse_arm(spec) == expected


@pytest.mark.parametrize("spec, message", [
    ("=mode=det", "expected NAME=key=value"),
    ("a=mode=fast", "mode: expected one of det, fast-stock, stock"),
    ("a=graph=maybe", "graph: expected on or off"),
    ("a=stages=1", "stages: expected one of"),
    ("a=stages=three", "stages: expected an int or 'table'"),
    ("a=mode=stock,stages=3", "the stock control has no pipeline depth"),
    ("a=colour=red", "unknown key 'colour'"),
    ("a=mode", "expected key=value"),
    ("a=backend=vllm", "backend: expected one of"),
    ("a b=mode=det", "arm name"),
], ids=["no-name", "bad-mode", "bad-graph", "unsupported-stages", "stages-not-int",
        "stages-on-stock", "unknown-key", "no-value", "unknown-backend", "bad-name"])
def test_parse_arm_rejects(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_arm(spec)


@pytest.mark.parametrize("order, arms, expected", [
    ("ABBA", 2, (0, 1, 1, 0)),
    ("a,b,b,a", 2, (0, 1, 1, 0)),
    ("AB", 2, (0, 1)),
    ("ABCCBA", 3, (0, 1, 2, 2, 1, 0)),
], ids=["seed-order", "commas-lowercase", "one-each", "three-arms"])
def test_parse_order(order, arms, expected):
    assert parse_order(order, arms) == expected


@pytest.mark.parametrize("order, arms, message", [
    ("ABCA", 2, "expected letters from AB"),
    ("", 2, "expected letters from AB"),
    ("AAAA", 2, "arm\\(s\\) B never boot"),
], ids=["unknown-letter", "empty", "arm-never-boots"])
def test_parse_order_rejects(order, arms, message):
    with pytest.raises(ValueError, match=message):
        parse_order(order, arms)


def test_default_arms_are_the_fast_stock_control_then_det_with_graphs_on_cuda():
    control, det = default_arms(cuda=True)
    assert (control.name, control.mode, det.mode) == ("stock", "fast-stock", "det")
    assert control.cuda_graph and det.cuda_graph
    assert not any(a.cuda_graph for a in default_arms(cuda=False))


@pytest.mark.parametrize("overrides, message", [
    (dict(output_tokens=1), "output_tokens: expected >= 2"),
    (dict(samples=0), "samples: expected positive ints"),
    (dict(warmup=-1), "warmup: expected an int >= 0"),
    (dict(prefixes=()), "prefixes: expected positive ints"),
    (dict(batches=(1, 0)), "batches: expected positive ints"),
    (dict(arms=(Arm("a"),)), "arms: expected at least two"),
    (dict(arms=(Arm("a"), Arm("a"))), "arms: names must be unique"),
    (dict(order="ABC"), "order: expected letters from AB"),
    (dict(resume=True, force=True), "resume and force"),
    (dict(max_temp_c=0), "max_temp_c: expected a positive number"),
    (dict(max_ratio=-1.0), "max_ratio: expected a positive number"),
    (dict(gate_timeout_s=0), "gate_timeout_s: expected a positive number"),
], ids=["one-output-token", "no-samples", "negative-warmup", "no-prefixes", "zero-batch",
        "one-arm", "duplicate-arms", "order-letter", "resume-and-force", "zero-temp",
        "negative-ratio-gate", "zero-gate-timeout"])
def test_settings_reject(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        E2ESettings(out=str(tmp_path), **overrides)


def test_plan_names_everything_a_measurement_depends_on(tmp_path):
    plan = E2ESettings(out=str(tmp_path), order="A,B,B,A").plan()
    assert plan["order"] == "ABBA"
    assert set(plan) >= {"model", "arms", "order", "prefixes", "batches", "output_tokens",
                         "warmup", "samples", "page_size", "seed", "max_temp_c"}
    assert [a["name"] for a in plan["arms"]] == ["stock", "det"]
