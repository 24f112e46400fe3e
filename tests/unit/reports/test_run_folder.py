"""Run folders (reports.run_folder): a run replaces its --out whole or not at all, every
result carries the run_id, and `det-suite report` refuses a folder that mixes two runs."""

from __future__ import annotations

import json

import pytest

from det_suite.cli import main
from det_suite.reports.run_folder import MANIFEST, staged_run


def _old_results(out):
    """An earlier run's folder (with its manifest)."""
    out.mkdir()
    (out / "invariance.json").write_text(json.dumps({"old": True}))
    (out / MANIFEST).write_text(json.dumps({"run_id": "R0"}))
    return out


def test_a_finished_run_replaces_the_folder_whole_and_stamps_its_id(tmp_path):
    out = _old_results(tmp_path / "run")
    with staged_run(out, "R1") as (staging, run_id):
        (staging / "sub").mkdir()
        (staging / "sub" / "cache_hit.json").write_text(json.dumps({"x": 1}))
    assert sorted(p.name for p in out.rglob("*")) == [MANIFEST, "cache_hit.json", "sub"]
    assert json.loads((out / "sub" / "cache_hit.json").read_text()) == {"run_id": "R1", "x": 1}
    assert json.loads((out / MANIFEST).read_text())["run_id"] == "R1"
    assert [p.name for p in tmp_path.iterdir()] == ["run"]   # nothing hidden left beside it


def test_an_interrupted_run_leaves_the_previous_results_untouched(tmp_path):
    out = _old_results(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        with staged_run(out) as (staging, _):
            (staging / "invariance.json").write_text("{}")
            raise KeyboardInterrupt
    assert json.loads((out / "invariance.json").read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_det_suite_run_interrupted_in_the_model_layer_keeps_the_old_folder(
        tmp_path, monkeypatch, capsys):
    """The issue's case: Ctrl-C after the kernel layer wrote its reports must not leave new
    invariance files beside an older cache_hit/."""
    from det_suite.checks import main_job
    from det_suite.invariance.harness import InvarianceRun

    out = _old_results(tmp_path / "run")

    def fake_invariance(settings):
        path = f"{settings.out}/invariance.json"
        with open(path, "w") as handle:
            json.dump({"new": True}, handle)
        return InvarianceRun(0, {}, "", {"json": path}, [], 0.0)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(main_job, "run_invariance", fake_invariance)
    monkeypatch.setattr(main_job, "run_cache_hit", interrupted)
    assert main(["run", "--out", str(out)]) == 130
    assert json.loads((out / "invariance.json").read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def _result(run_id=None, revision="abc"):
    payload = {"kind": "outputs", "check": "demo", "outputs": [],
               "environment": {"git_revision": revision}}
    return payload if run_id is None else {"run_id": run_id, **payload}


def _run_folder(tmp_path, nested_run_id):
    """A run folder of run NEW holding a.json from NEW and cache_hit/b.json from
    `nested_run_id`."""
    folder = tmp_path / "run"
    (folder / "cache_hit").mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"run_id": "NEW"}))
    (folder / "a.json").write_text(json.dumps(_result("NEW")))
    (folder / "cache_hit" / "b.json").write_text(json.dumps(_result(nested_run_id)))
    return folder


def test_report_refuses_a_run_folder_that_mixes_two_runs(tmp_path, capsys):
    folder = _run_folder(tmp_path, "OLD")
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 3
    out = capsys.readouterr().out
    assert "NOT COMPARABLE" in out and "b.json is not from run NEW" in out


def test_report_of_one_run_folder_is_comparable(tmp_path, capsys):
    """Control for the refusal above: the same folder with one run_id throughout."""
    folder = _run_folder(tmp_path, "NEW")
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) != 3
    assert "NOT COMPARABLE" not in capsys.readouterr().out


def test_report_notes_inputs_from_different_runs_and_revisions(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(_result("R1", "abc")))
    (tmp_path / "b.json").write_text(json.dumps(_result("R2", "def")))
    main(["report", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out",
          str(tmp_path / "report")])
    out = capsys.readouterr().out
    assert "2 different runs (R1, R2)" in out and "2 different git revisions" in out


def test_a_folder_det_suite_did_not_make_keeps_what_the_run_does_not_write(tmp_path):
    """--out results (a shared folder): the run replaces its own entries, nothing else."""
    out = tmp_path / "results"
    (out / "cache_hit").mkdir(parents=True)
    (out / "cache_hit" / "old.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    with staged_run(out, "R2") as (staging, _):
        (staging / "cache_hit").mkdir()
        (staging / "cache_hit" / "cache_hit.json").write_text("{}")
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (out / "cache_hit").iterdir()) == ["cache_hit.json"]
    assert json.loads((out / MANIFEST).read_text())["run_id"] == "R2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_an_interrupted_first_run_leaves_no_empty_folders(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with staged_run(tmp_path / "results" / "run"):
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
