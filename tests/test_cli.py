"""The pmac entry point: errors are one line naming the file, exit code 2, never a traceback."""

import subprocess
import sys

from pmac.cli import main


def test_missing_file_is_one_line(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert main(["show", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"pmac show: error: {missing}: no such file or folder"


def test_malformed_profile_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: pmac.machine\nschema_version: 1\nname: x\nnode: {cpu_model: [\n")
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "malformed YAML" in err


def test_entry_point_runs_as_module():
    out = subprocess.run([sys.executable, "-m", "pmac", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("pmac ")
