"""`secmem trace capture`: a real program's loads and stores, captured under valgrind lackey,
run through the simulator with its virtual addresses translated."""

import json
import os
import shutil

import pytest

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")


@needs_valgrind
def test_a_captured_program_is_a_virtual_trace_that_runs_translated(cli, tmp_path):
    out = tmp_path / "ls.trace"
    res = cli("trace", "capture", "-o", out, "--", "ls", "/", check=True)
    assert "captured" in res.stdout and str(out) in res.stdout
    info = json.loads(cli("trace", "info", out, check=True).stdout)
    assert info["addresses"] == "virtual"
    assert info["records"] > 10_000 and info["reads"] > 0 and info["writes"] > 0
    # Its stack lives far above any simulated memory: only translation lets it run.
    assert info["max_addr"] > 32 << 30
    run = tmp_path / "run"
    cli("run", "--preset", "horus", "--trace", out, "--out", run, check=True)
    report = json.loads((run / "report.json").read_text())
    assert report["config"]["translation"]["addresses"] == "virtual"
    assert report["meta"]["translation"]["pages_mapped"] * 4096 >= info["footprint_bytes"]
    assert report["stats"]["core"]["records"] == info["records"]
    # Valgrind reports unaligned vector accesses: split across lines, counted, not refused.
    assert report["meta"]["translation"]["unaligned_accesses_split"] > 0


@needs_valgrind
def test_max_records_stops_the_capture_there(cli, tmp_path):
    out = tmp_path / "short.trace"
    cli("trace", "capture", "-o", out, "--max-records", "5000", "--", "ls", "-R", "/usr/lib", check=True)
    assert json.loads(cli("trace", "info", out, check=True).stdout)["records"] == 5000


@needs_valgrind
def test_a_command_that_fails_or_does_not_exist_is_an_error_and_writes_no_trace(cli, tmp_path):
    out = tmp_path / "x.trace"
    res = cli("trace", "capture", "-o", out, "--", "false")
    assert res.returncode != 0 and "exited with status 1" in res.stderr, res.stderr
    assert not out.exists()
    res = cli("trace", "capture", "-o", out, "--", "no-such-program-secmem")
    assert res.returncode != 0 and "command not found: 'no-such-program-secmem'" in res.stderr, res.stderr
    assert not out.exists()


def test_without_valgrind_the_error_says_how_to_install_it(tmp_path):
    import secmem

    old = os.environ["PATH"]
    os.environ["PATH"] = str(tmp_path)  # nothing there
    try:
        with pytest.raises(secmem.SecmemError, match="apt-get install valgrind"):
            secmem.trace_capture(["ls"], str(tmp_path / "t.trace"))
    finally:
        os.environ["PATH"] = old


def test_no_command_is_an_error(cli, tmp_path):
    res = cli("trace", "capture", "-o", tmp_path / "t.trace")
    assert res.returncode != 0 and "no command given" in res.stderr, res.stderr
