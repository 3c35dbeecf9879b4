"""Are the README's commands true? Runs the main job of command 1 and every line of the
README's command block, in order, in a scratch directory."""

import os
import re
import shlex

from conftest import REPO, secmem_cmd


def readme_blocks():
    text = open(os.path.join(REPO, "README.md")).read()
    return text, re.findall(r"```(\w*)\n(.*?)```", text, re.S)


def test_command_one_main_job_runs_on_built_in_defaults(cli, tmp_path):
    text, blocks = readme_blocks()
    first = blocks[0][1]
    assert "pip install ." in first and "bash .ci/run" in first
    main_job = re.search(r"\.venv/bin/(secmem run [^\n]*)", first).group(1)
    cli(*shlex.split(main_job)[1:], check=True)
    assert (tmp_path / "out" / "report.json").exists() and (tmp_path / "out" / "config.toml").exists()


def assert_each_varied_key_changes_a_figure(df, what):
    """A sweep example must show the effect it names: for every varied key, two points that
    differ only in it differ in some reported stat."""
    keys = [c for c in df.columns if c.startswith("sweep.") and c not in ("sweep.point", "sweep.param", "sweep.value")]
    stats = [c for c in df.columns if c.startswith("stats.")]
    for k in keys:
        others = [o for o in keys if o != k]
        groups = df.groupby(others) if others else [(None, df)]
        changed = any(len(g[stats].drop_duplicates()) > 1 for _, g in groups)
        assert changed, f"{what}: varying {k} changes no reported figure"


def test_every_readme_command_runs(cli, tmp_path):
    import pandas as pd

    text, _ = readme_blocks()
    block = re.search(r"<!-- readme-commands.*?-->\s*```sh\n(.*?)```", text, re.S).group(1)
    lines = [l for l in block.splitlines() if l.strip() and not l.startswith("#")]
    assert len(lines) >= 10
    for line in lines:
        args = shlex.split(line)
        assert args[0] == "secmem", line
        res = cli(*args[1:])
        assert res.returncode == 0, f"{line}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        if args[1] == "sweep":
            out = args[args.index("--out") + 1]
            assert_each_varied_key_changes_a_figure(pd.read_csv(tmp_path / out / "sweep.csv"), line)


def test_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes files (a sweep's out=)
    text, blocks = readme_blocks()
    code = next(b for lang, b in blocks if lang == "python")
    code = code.replace("100_000", "20_000").replace("per_class=100, clean_reads=10_000", "per_class=5, clean_reads=100")
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    for name in ("df", "grid"):
        assert_each_varied_key_changes_a_figure(scope[name], f"the Python example's {name}")


def test_config_reference_in_docs_is_current(cli):
    """docs/config.md embeds `secmem config show default`; a schema change must regenerate it."""
    text = open(os.path.join(REPO, "docs", "config.md")).read()
    block = re.search(r"<!-- config-reference:begin -->\n```toml\n(.*?)```\n<!-- config-reference:end -->", text, re.S)
    assert block, "docs/config.md lost its reference markers"
    assert block.group(1) == cli("config", "show", "default", check=True).stdout
