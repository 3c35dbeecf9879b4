"""`secmem run --out`: checked before the run, and left as it was when the run fails."""

import os


def test_an_out_that_is_a_file_is_refused_as_not_a_folder(cli, tmp_path):
    f = tmp_path / "x"
    f.write_text("keep me")
    res = cli("run", "--preset", "horus", "-p", "workload.requests=1000", "--out", f)
    assert res.returncode == 2
    assert "--out" in res.stderr and "exists and is not a folder" in res.stderr, res.stderr
    assert f.read_text() == "keep me"


def test_an_out_that_cannot_be_created_fails_before_simulating(cli, tmp_path):
    # /proc takes no new folders, even for root; a billion requests would run for minutes.
    res = cli("run", "--preset", "horus", "-p", "workload.requests=1000000000", "--out", "/proc/self/secmem-out")
    assert res.returncode == 2
    assert "--out /proc/self/secmem-out: cannot write results there" in res.stderr, res.stderr


def test_a_failed_run_leaves_no_empty_folder_behind(cli, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("# secmem-trace v1\nR 0x40 64 0\nX 0x80 64 0\n")
    out = tmp_path / "out"
    res = cli("run", "--preset", "horus", "--trace", bad, "--out", out)
    assert res.returncode == 2 and "unknown operation" in res.stderr, res.stderr
    assert not out.exists()
    # An existing folder is left in place (and its contents alone).
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = cli("run", "--preset", "horus", "--trace", bad, "--out", out)
    assert res.returncode == 2
    assert sorted(os.listdir(out)) == ["notes.txt"]
