"""`secmem reproduce all`: does one command run every design's reproduction and write an index
that a real browser renders, with every design's rows and every figure?"""

import base64
import os
import re
import shutil
import subprocess

import pytest

from secmem.reproduce_all import DESIGNS


def test_reproduce_all_writes_an_index_a_browser_renders_with_every_figure(cli, tmp_path):
    res = cli("reproduce", "all", "--quick", "--workers", "2", "--out", "ra")
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "ra"
    md = (out / "index.md").read_text()
    page = (out / "index.html").read_text()
    plots = []
    for name in DESIGNS:
        assert (out / name / "reproduce.json").exists()
        assert f"[report]({name}/report.md)" in md
        assert f'id="{name}"' in page
        plots += sorted(p for p in os.listdir(out / name) if p.endswith(".png"))
    assert md.count("### Where and why we differ") == len(DESIGNS)
    # Self-contained: every plot embedded as a PNG, nothing linked.
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert sorted(alt for alt, _ in images) == sorted(plots)
    assert all(base64.b64decode(data).startswith(b"\x89PNG") for _, data in images)
    assert 'src="http' not in page and 'href="http' not in page

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium to render the index (.ci/run installs it)")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,4000",
         f"--screenshot={shot}", (out / "index.html").as_uri()],
        capture_output=True, timeout=120, check=True,
    )
    from PIL import Image

    pixels = list(Image.open(shot).convert("RGB").getdata())
    # matplotlib's first colour (#1f77b4), drawn only by the plots: they rendered.
    blue = sum(1 for r, g, b in pixels if abs(r - 31) < 25 and abs(g - 119) < 25 and abs(b - 180) < 25)
    assert blue > 10_000, f"the screenshot shows {blue} plot-blue pixels"
