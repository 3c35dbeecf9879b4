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


@needs_valgrind
def test_a_data_capture_gives_stores_the_lines_the_program_wrote(cli, tmp_path):
    # A program whose stores leave known bytes: Python writes the same 16-character string
    # into many list slots; the lines holding the string objects are then in the trace.
    src = tmp_path / "w.bin"
    out = tmp_path / "data.trace"
    payload = "secmem-fixture!!"
    prog = f"open({str(src)!r}, 'wb').write(({payload!r} * 4096).encode())"
    res = cli(
        "trace", "capture", "--data", "--data-interval", "4096", "-o", out, "--",
        "/usr/bin/python3", "-S", "-c", prog, check=True,
    )
    assert "writes carry their line" in res.stdout, res.stdout
    info = json.loads(cli("trace", "info", out, check=True).stdout)
    assert info["records_with_data"] > 0.9 * info["writes"], info
    assert 0 < info["distinct_data_share"] < 0.5, info
    import secmem._native as native  # noqa: F401  (the package is installed)
    # The bytes the program wrote are in some payload: read the binary trace back.
    text = tmp_path / "data.txt"
    cli("trace", "convert", out, text, "--to", "text", check=True)
    assert payload.encode().hex() in text.read_text()


@needs_valgrind
def test_skip_records_drops_the_start_of_the_program(cli, tmp_path):
    whole, window = tmp_path / "whole.trace", tmp_path / "window.trace"
    cli("trace", "capture", "-o", whole, "--max-records", "3000", "--", "ls", "/", check=True)
    cli("trace", "capture", "-o", window, "--skip-records", "1000", "--max-records", "2000", "--", "ls", "/", check=True)
    w, k = tmp_path / "whole.txt", tmp_path / "window.txt"
    cli("trace", "convert", whole, w, "--to", "text", check=True)
    cli("trace", "convert", window, k, "--to", "text", check=True)
    records = lambda p: [ln.split()[:3] for ln in p.read_text().splitlines() if not ln.startswith("#")]
    # The same program under the same valgrind: the window is the whole run's records 1000..3000
    # (the first one's instruction gap aside).
    assert records(k) == records(w)[1000:3000]


def test_a_bad_data_interval_or_skip_is_an_error(cli, tmp_path):
    res = cli("trace", "capture", "--data", "--data-interval", "0", "-o", tmp_path / "t.trace", "--", "ls")
    assert res.returncode != 0 and "--data-interval must be at least 1" in res.stderr, res.stderr
    res = cli("trace", "capture", "--skip-records", "-1", "-o", tmp_path / "t.trace", "--", "ls")
    assert res.returncode != 0 and "--skip-records must be at least 0" in res.stderr, res.stderr


def test_trace_info_names_the_compression_and_a_truncated_file_is_an_error(cli, tmp_path):
    import lzma

    t = tmp_path / "t.trace"
    cli("trace", "gen", "--pattern", "random", "--requests", "20000", "-o", t, check=True)
    xz = tmp_path / "t.trace.xz"
    xz.write_bytes(lzma.compress(t.read_bytes()))
    info = json.loads(cli("trace", "info", xz, check=True).stdout)
    assert info["compression"] == "xz" and info["records"] == 20000
    cut = tmp_path / "cut.trace.xz"
    cut.write_bytes(xz.read_bytes()[: len(xz.read_bytes()) // 2])
    res = cli("trace", "info", cut)
    assert res.returncode != 0 and "cut.trace.xz" in res.stderr and "xz data is corrupt or truncated" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
