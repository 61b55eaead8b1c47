"""The HTML report's flame graph (viewers/flamegraph.py): widths are the
frames' shares of the samples, one row per depth, the names escaped."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from iotrace.viewers.flamegraph import ROW, WIDTH, flame_svg

NS = "{http://www.w3.org/2000/svg}"


def frames(svg: str) -> list[tuple[str, float, float, float]]:
    """(tooltip, x, y, width) of each frame drawn."""
    root = ET.fromstring(svg.split("<!--")[0])
    out = []
    for g in root.iter(f"{NS}g"):
        r = g.find(f"{NS}rect")
        out.append((g.find(f"{NS}title").text, float(r.get("x")), float(r.get("y")),
                    float(r.get("width"))))
    return out


def test_widths_are_shares_of_the_samples():
    fold = {"samples": 10, "stacks": [
        {"stack": "main (t.py);load (<io>.py);decode (PIL/Image.py)", "samples": 6},
        {"stack": "main (t.py);collate (a.py)", "samples": 4}]}
    got = {t.split(":")[0]: (x, y, w) for t, x, y, w in frames(flame_svg(fold, "loop"))}
    assert got["main (t.py)"] == (0, 0, WIDTH)
    assert got["load (<io>.py)"] == (0, ROW, 0.6 * WIDTH)
    assert got["decode (PIL/Image.py)"] == (0, 2 * ROW, 0.6 * WIDTH)
    assert got["collate (a.py)"] == (0.6 * WIDTH, ROW, 0.4 * WIDTH)
    assert "&lt;io&gt;" in flame_svg(fold, "loop")       # escaped, and parsed above


def test_stacks_not_kept_still_count():
    # 100 samples, 10 of them in stacks not kept: the kept ones are 90% wide
    fold = {"samples": 100, "stacks": [{"stack": "main (t.py)", "samples": 90}]}
    svg = flame_svg(fold, "loop")
    (_, x, y, w), = frames(svg)
    assert w == 0.9 * WIDTH and "10 samples in stacks not kept" in svg


def test_nothing_to_draw():
    assert flame_svg({"samples": 0, "stacks": []}, "x") == ""
    assert flame_svg({}, "x") == ""


def test_report_card_per_loop():
    from iotrace.viewers.html import _flames
    fold = {"samples": 4, "stacks": [{"stack": "main (t.py);decode (PIL/Image.py)", "samples": 4}]}
    v = {"loops": [{"pid": 7, "tid": 8, "thread": "python", "loop_cpu_stacks": fold,
                    "prep_stacks": {"samples": 0, "stacks": []}},
                   {"pid": 9, "tid": 9, "thread": "python"}]}
    html = "\n".join(_flames(v))
    assert html.count('<section class="card flames">') == 1
    assert "thread 8 &#x27;python&#x27; of pid 7" in html and html.count("<svg") == 1
    assert "4 samples of Python stacks" in html
