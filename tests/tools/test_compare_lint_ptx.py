"""tools/compare_lint_ptx.py: the restructuring's PTX-equivalence check must see a change."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "compare_lint_ptx.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("det_suite_compare_lint_ptx", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _variant(tile: int, digest: str) -> dict:
    return {"kernel": "fp8_scaled_mm_kernel", "label": f"tile {tile}", "tile": tile,
            "num_stages": 3, "split_k": 1, "tma": False, "fixup": "", "launch": "selected",
            "pdl": False, "ptx_sha256": digest}


LINT = {"triton_version": "3.6.0", "tables": [{"family": "sm90", "arch": "sm_90", "entries": [
    {"key": "default", "variants": [_variant(0, "a" * 64), _variant(1, "b" * 64)]}]}]}


def _write(tmp_path: Path, name: str, lint: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"lint": lint}))
    return path


def test_identical_listings_pass(tool, tmp_path, capsys):
    old, new = _write(tmp_path, "old.json", LINT), _write(tmp_path, "new.json", LINT)
    assert tool.main([str(old), str(new)]) == 0
    assert "2 of 2 (old) / 2 (new) variants compile to identical PTX" in capsys.readouterr().out


def test_a_changed_listing_fails_naming_the_variant(tool, tmp_path, capsys):
    changed = copy.deepcopy(LINT)
    changed["tables"][0]["entries"][0]["variants"][1]["ptx_sha256"] = "c" * 64
    old, new = _write(tmp_path, "old.json", LINT), _write(tmp_path, "new.json", changed)
    assert tool.main([str(old), str(new)]) == 1
    assert "different_ptx: ('sm90', 'sm_90', 'default', 'fp8_scaled_mm_kernel', 'tile 1'" \
        in capsys.readouterr().out


def test_a_missing_variant_fails(tool, tmp_path):
    fewer = copy.deepcopy(LINT)
    fewer["tables"][0]["entries"][0]["variants"].pop()
    old, new = _write(tmp_path, "old.json", LINT), _write(tmp_path, "new.json", fewer)
    assert tool.main([str(old), str(new)]) == 1


def test_unreadable_input_exits_2(tool, tmp_path, capsys):
    assert tool.main([str(tmp_path / "absent.json"), str(tmp_path / "absent.json")]) == 2
    assert "compare_lint_ptx:" in capsys.readouterr().err


def _renamed_pair(tmp_path: Path, new_body: str):
    """An old lint whose kernel `old_kernel` became `new_kernel`, with both lints' listings."""
    import hashlib

    def lint_with(kernel: str, ptx: str, ptx_dir: Path) -> dict:
        digest = hashlib.sha256(ptx.encode()).hexdigest()
        ptx_dir.mkdir()
        (ptx_dir / f"{kernel}-sm_90-{digest[:12]}.ptx").write_text(ptx)
        lint = copy.deepcopy(LINT)
        lint["tables"][0]["entries"][0]["variants"] = [
            {**_variant(0, digest), "kernel": kernel}]
        return lint

    old = lint_with("old_kernel", ".entry old_kernel(.param .u64 old_kernel_param_0)\n",
                    tmp_path / "ptx_old")
    new = lint_with("new_kernel", new_body, tmp_path / "ptx_new")
    return (_write(tmp_path, "old.json", old), _write(tmp_path, "new.json", new),
            ["--ptx", str(tmp_path / "ptx_old"), str(tmp_path / "ptx_new")])


def test_a_renamed_kernel_with_the_same_listing_passes(tool, tmp_path, capsys):
    old, new, ptx = _renamed_pair(tmp_path, ".entry new_kernel(.param .u64 new_kernel_param_0)\n")
    assert tool.main([str(old), str(new), "--renamed", "old_kernel=new_kernel", *ptx]) == 0
    assert "1 of 1 (old) / 1 (new) variants compile to identical PTX" in capsys.readouterr().out


def test_a_renamed_kernel_whose_listing_changed_otherwise_fails(tool, tmp_path):
    old, new, ptx = _renamed_pair(tmp_path, ".entry new_kernel(.param .u32 new_kernel_param_0)\n")
    assert tool.main([str(old), str(new), "--renamed", "old_kernel=new_kernel", *ptx]) == 1


def test_a_renamed_kernel_without_listings_compares_raw_hashes_and_fails(tool, tmp_path):
    old, new, _ = _renamed_pair(tmp_path, ".entry new_kernel(.param .u64 new_kernel_param_0)\n")
    assert tool.main([str(old), str(new), "--renamed", "old_kernel=new_kernel"]) == 1
    assert tool.main([str(old), str(new)]) == 1  # unrenamed: only in old / only in new


def test_a_malformed_rename_exits_2(tool, tmp_path):
    old = _write(tmp_path, "old.json", LINT)
    assert tool.main([str(old), str(old), "--renamed", "old_kernel"]) == 2


def test_listings_that_differ_only_in_debug_information_are_the_same_code(tool, tmp_path):
    """Code moved into a shared @triton.jit helper keeps its instructions; only its source
    lines and inline-site labels move."""
    body = "\tld.global.b32 %r1, [%rd1];\n$L__tmp{label}:\n\t.loc\t1 {line} 5\n\tret;\n"
    tail = "\t.section\t.debug_abbrev\n\t{{\n.b8 {line}\n\t}}\n"
    old, new, ptx = _renamed_pair(tmp_path, ".entry new_kernel(.param .u64 new_kernel_param_0)\n"
                                  + body.format(label=9, line=120) + tail.format(line=7))
    old_listing = next((tmp_path / "ptx_old").iterdir())
    old_listing.write_text(old_listing.read_text() + body.format(label=8, line=94)
                           + tail.format(line=3))
    assert tool.main([str(old), str(new), "--renamed", "old_kernel=new_kernel", *ptx]) == 0
    (tmp_path / "ptx_new" / next((tmp_path / "ptx_new").iterdir()).name).write_text(
        ".entry new_kernel(.param .u64 new_kernel_param_0)\n" + body.replace("b32", "b16")
        .format(label=9, line=120))
    assert tool.main([str(old), str(new), "--renamed", "old_kernel=new_kernel", *ptx]) == 1
