"""det_suite.bench.sweep_cli: what the kernel sweep tools share. Loading a sibling tool, the
CPU switch they read before Triton is imported, their device and integer-list options, and
how a sweep ends: both files written, exit 0 only when the control was flagged and the
candidates kept the bits."""

import argparse
import json
import sys

import pytest
import torch

from det_suite.bench.sweep_cli import (add_device_option, control_verdict, cpu_requested,
                                       finish, int_list, load_tool, same_bits, wants_gpu)


@pytest.mark.parametrize("argv, wanted", [
    (["out", "--device", "cpu"], True),
    (["out", "--device=cpu"], True),
    (["out", "--device", "xpu"], False),
    (["out", "--arms", "cpu"], False),      # "cpu" as another option's value is not a device
    (["out"], False),
], ids=["spaced", "joined", "another-device", "other-option", "default"])
def test_cpu_is_requested_only_by_the_device_option(argv, wanted):
    assert cpu_requested(argv) is wanted


def _device_parser():
    parser = argparse.ArgumentParser(prog="sweep")
    add_device_option(parser)
    return parser


def test_the_cpu_device_runs_without_a_gpu():
    parser = _device_parser()
    assert wants_gpu(parser, parser.parse_args(["--device", "cpu"])) is False


def test_the_default_device_is_refused_by_name_where_there_is_no_gpu(capsys, monkeypatch):
    # What a CPU machine answers, on any machine.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    parser = _device_parser()
    with pytest.raises(SystemExit) as exit_info:
        wants_gpu(parser, parser.parse_args([]))
    assert exit_info.value.code == 2
    assert "--device cuda: no CUDA device here" in capsys.readouterr().err


def test_an_integer_list_parses_in_order():
    assert int_list("128,2048,1") == [128, 2048, 1]


@pytest.mark.parametrize("text, message", [("1,x", "comma-separated integers"),
                                           ("0,4", "integers >= 1"), ("", "comma-separated")],
                         ids=["not-a-number", "zero", "empty"])
def test_a_bad_integer_list_is_refused_with_what_was_expected(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        int_list(text)


@pytest.mark.parametrize("flagged, equal, status, failure", [
    (True, True, 0, None),
    (False, True, 1, "the control was not flagged"),
    (True, False, 1, "the arm changed the bits"),
], ids=["passed", "control-missed", "bits-changed"])
def test_a_sweep_ends_with_both_files_and_a_verdict(tmp_path, capsys, flagged, equal, status,
                                                    failure):
    payload = {"control_flagged": flagged, "candidates_equal": equal, "cells": []}
    assert finish(tmp_path / "out", "sweep", payload, "# table\n", candidates="the arm") == status
    assert json.loads((tmp_path / "out" / "sweep.json").read_text()) == payload
    assert (tmp_path / "out" / "sweep.md").read_text() == "# table\n"
    printed = capsys.readouterr().out
    assert ("FAILED" in printed) is (failure is not None)
    if failure:
        assert failure in printed


@pytest.mark.parametrize("row, cell", [({"equal": True, "differing_elements": 0}, "yes"),
                                       ({"equal": False, "differing_elements": 30},
                                        "NO (30 elements)")], ids=["equal", "differs"])
def test_a_bit_check_reads_as_a_table_cell(row, cell):
    assert same_bits(row) == cell


def test_a_missed_control_is_called_untrustworthy():
    assert "did in every cell" in control_verdict("c", True)
    assert "not to be trusted" in control_verdict("c", False)


def test_a_tool_loads_as_a_registered_module(tmp_path):
    tool = tmp_path / "tiny_tool.py"
    tool.write_text("from dataclasses import dataclass\n\n\n@dataclass\nclass Row:\n    x: int\n")
    module = load_tool(tool)
    assert module.Row(3).x == 3    # a dataclass needs its module in sys.modules
    assert sys.modules[module.__name__] is module
