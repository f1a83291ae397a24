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


def test_outputs_that_cannot_be_written_are_one_line(tmp_path, capsys):
    """Every command's output goes through an atomic write (or a folder it makes); a place that
    cannot take it is a one-line error naming the output, not an OSError traceback naming a
    temporary file. /proc refuses new entries even to root."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    m, s = repo / "machines", repo / "signatures" / "nbody-n2-1024"
    afile = tmp_path / "afile"
    afile.write_text("x")
    trace = tmp_path / "actions.txt"   # a SimGrid time-independent trace of two ranks
    trace.write_text("0 init\n1 init\n0 bcast 64\n1 bcast 64\n0 finalize\n1 finalize\n")
    cases = [
        (["combine", "--node", str(m / "devbox.yaml"), "--network", str(m / "emu-tcp.yaml"), "--name", "x",
          "-o", "/proc/pmac-x.yaml"],
         "pmac combine: error: /proc/pmac-x.yaml: cannot write here: No such file or directory"),
        (["combine", "--node", str(m / "devbox.yaml"), "--network", str(m / "emu-tcp.yaml"), "--name", "x",
          "-o", str(afile / "x.yaml")],
         f"pmac combine: error: {afile / 'x.yaml'}: cannot write here: {afile} is not a folder"),
        (["export", "simgrid", str(s), "-o", "/proc/pmac-x"],
         "pmac export: error: /proc/pmac-x: cannot create the export of per-rank files: No such file or directory"),
        (["export", "simgrid", str(s), "-o", str(afile)],
         f"pmac export: error: {afile}: exists and is not a folder (needed as the export of per-rank files)"),
        (["import", "simgrid", str(trace), "-o", str(afile)],
         f"pmac import: error: {afile}: exists and is not a folder (needed as the signature)"),
        (["predict", str(s), str(m / "devbox.yaml"), "--timeline", str(afile / "t.png")],
         f"pmac predict: error: {afile / 't.png'}: cannot write here: {afile} is not a folder"),
    ]
    for argv, line in cases:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.err.strip().splitlines() == [line]
    assert afile.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["actions.txt", "afile"]


def test_cli_choices_are_the_modules_constants():
    """The CLI spells some choices out (importing pmac.predict or the probes at parser build would
    slow every `pmac --help`): they must stay what the modules accept."""
    from pmac.cli import build_parser
    from pmac.predict import CAPACITY_MODES
    from probes.memory import PAGE_MODES

    def choices(cmd, flag):
        sub = next(a for a in build_parser()._actions if a.dest == "command").choices[cmd]
        return tuple(next(a for a in sub._actions if flag in a.option_strings).choices)

    assert choices("predict", "--capacity") == CAPACITY_MODES
    assert choices("probe", "--pages") == PAGE_MODES
