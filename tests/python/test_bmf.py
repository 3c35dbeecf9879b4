"""Bonsai Merkle Forests: a quick reproduction, beside the paper's Table 3 and Fig. 9."""

import json


def test_reproduce_bmf_quick_sets_table_3_and_the_update_heights_beside_the_paper(cli, tmp_path):
    out = tmp_path / "bmf"
    cli("reproduce", "bmf", "--quick", "--out", out, check=True)
    rows = {r["metric"]: r for r in json.loads((out / "reproduce.json").read_text())}
    t3 = {k: v for k, v in rows.items() if v["figure"] == "table3"}
    assert t3["sp-dbmf overhead over secure_wb, full memory"]["paper"] == 567.0
    assert t3["sp-dbmf overhead over secure_wb, non-stack"]["paper"] == 89.0
    for cov in ("full memory", "non-stack"):
        # Each forest lowers the cost of each persistency model, and strict costs more than epochs.
        for model in ("sp", "o3"):
            base, sbmf, dbmf = (t3[f"{model}{s} overhead over secure_wb, {cov}"]["ours"] for s in ("", "-sbmf", "-dbmf"))
            assert 0 < dbmf < base and sbmf < base, (model, cov)
        assert t3[f"sp overhead over secure_wb, {cov}"]["ours"] > t3[f"o3 overhead over secure_wb, {cov}"]["ours"]
    # Leaving the stack out persists less, and costs less.
    for model in ("sp", "o3"):
        assert t3[f"{model} overhead over secure_wb, non-stack"]["ours"] < t3[f"{model} overhead over secure_wb, full memory"]["ours"], model
        assert rows[f"PPKI, {model}, non-stack"]["ours"] < rows[f"PPKI, {model}"]["ours"], model
    # Fig. 9: the full tree and the static forest's heights are the paper's exactly.
    assert rows["average update height, sp (BMT)"]["ours"] == 8.0
    assert rows["average update height, sp-sbmf (4 KB nvMC)"]["ours"] == 6.0
    assert rows["average update height, sp-dbmf"]["ours"] < 6.0
    for name in ("fig7-8.png", "fig10-11.png", "sensitivity.png"):
        assert (out / name).exists(), name
    report = (out / "report.md").read_text()
    assert "Where and why we differ" in report and "SPEC2006" in report
