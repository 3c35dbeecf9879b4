"""Trace formats by one name: does --trace-format reach run and sweep (and the saved config),
are the old spellings still taken, and does the advice for an undetectable trace work?"""

TEXT = "# secmem-trace v1\nR 0x40 64 0\nW 0x80 64 3\nR 0x1000 64 1\n"


def test_an_empty_trace_s_advice_can_be_followed(cli, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    res = cli("run", "--trace", "empty.txt", "--out", "o")
    assert res.returncode == 2 and "--trace-format" in res.stderr, res.stderr
    # The named format is the one read: a secmem text trace read as lackey fails at its line.
    (tmp_path / "t.txt").write_text(TEXT)
    res = cli("run", "--trace", "t.txt", "--trace-format", "lackey", "--out", "o")
    assert res.returncode == 2 and "t.txt:2: unknown operation" in res.stderr, res.stderr
    cli("run", "--trace", "t.txt", "--trace-format", "text", "-p", "run.progress=false", "--out", "o", check=True)
    assert 'trace_format = "text"' in (tmp_path / "o" / "config.toml").read_text()


def test_sweep_takes_the_trace_format_and_a_wrong_one_lists_them_all(cli, tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    cli("sweep", "--trace", "t.txt", "--trace-format", "text", "--vary", "tree.update=lazy,eager", "--out", "s", check=True)
    res = cli("run", "--trace", "t.txt", "--trace-format", "gem5", "--out", "o")
    assert res.returncode == 2, res.stderr
    for name in ("binary", "text", "ramulator", "dramsim3", "lackey", "champsim", "auto"):
        assert name in res.stderr
    res = cli("run", "--trace-format", "text", "--out", "o")
    assert res.returncode == 2 and "no --trace" in res.stderr, res.stderr


def test_trace_commands_share_the_vocabulary_and_keep_the_old_spellings(cli, tmp_path):
    cli("trace", "gen", "--requests", 10, "--to", "text", "-o", "a.txt", check=True)
    cli("trace", "gen", "--requests", 10, "--format", "text", "-o", "b.txt", check=True)  # the old name
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    for flag in ("--trace-format", "--format"):
        assert '"records": 10' in cli("trace", "info", "a.txt", flag, "text", check=True).stdout
    for flag in ("--trace-format", "--from"):
        cli("trace", "convert", "a.txt", "a.bin", flag, "text", "--to", "binary", check=True)
    for cmd in (("run",), ("sweep",), ("trace", "info"), ("trace", "convert")):
        assert "ramulator, dramsim3, lackey, champsim" in " ".join(cli(*cmd, "--help", check=True).stdout.split())
