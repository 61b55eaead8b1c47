"""The HTML report: one self-contained page (no external URL), verdict and every
finding in it, four inline SVG plots; it loads in headless Chromium without
script errors, every plot is laid out and its SVG references resolve, and the
screenshot shows the plots (pixels in the read colour).

Two traces: a synthetic one (always; no root needed) and a real one, fio 4k
random reads for 2 s (root and fio needed)."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import iotrace_cmd, trace_run
from synth import ev, synth_trace

import iotrace
from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report
from iotrace.viewers import html as htmlview

MiB = 1 << 20
PLOTS = ("loop", "throughput", "sizes", "latency", "offsets")
EVIL_PATH = "/data/<script>alert(1)</script>&b.bin"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium"
                                        if os.path.exists("/usr/bin/chromium") else None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed: apt-get install chromium "
                             "(make test-deps installs it)")


def synthetic_events(n_random: int = 3000, n_seq: int = 400, n_write: int = 40):
    """4 s of a loader: 4 KiB random reads of one file (pid 100), 1 MiB sequential
    reads of another (pid 101, tid 102), a checkpoint of 1 MiB writes at 3 s."""
    events, step = [], 4 * 10**9 // n_random
    for i in range(n_random):
        off = (i * 7919 % 16384) * 4096
        events.append(ev("pread64", ts=i * step, dur=20_000 + (i % 50) * 3_000, off=off,
                         req=4096, ret=4096, file_id=0))
    step = 4 * 10**9 // n_seq
    for i in range(n_seq):
        events.append(ev("read", ts=i * step + 5000, dur=400_000, pid=101, tid=102, fd=4,
                         off=i * MiB, req=MiB, ret=MiB, file_id=1))
    for i in range(n_write):
        events.append(ev("pwrite64", ts=3 * 10**9 + i * 2_000_000, dur=1_500_000, pid=101,
                         tid=102, fd=5, off=i * MiB, req=MiB, ret=MiB, file_id=2))
    return events


FILES = [(0, "/data/random.bin"), (1, EVIL_PATH), (2, "/ckpt/step-100.pt")]
PROCS = [(100, 1, "python train.py --data /data"), (101, 100, "python loader <worker>")]


def make_synthetic(root: Path):
    return synth_trace(root, synthetic_events(), files=FILES, processes=PROCS)


@pytest.fixture(scope="module", params=["synthetic", "fio"])
def rendered(request, tmp_path_factory):
    """(trace dir, page text, JSON report) for each kind of trace."""
    tmp = tmp_path_factory.mktemp(f"html-{request.param}")
    trace_dir = tmp / "trace"
    if request.param == "synthetic":
        make_synthetic(trace_dir)
    else:
        if os.geteuid() != 0:
            pytest.skip("tracing needs root (real BPF)")
        if shutil.which("fio") is None:
            pytest.skip("fio not installed")
        data = tmp / "data.bin"
        with open(data, "wb") as f:
            for _ in range(32):
                f.write(os.urandom(MiB))
        proc, trace = trace_run(trace_dir, "fio", "--name=rand", f"--filename={data}",
                                "--ioengine=psync", "--rw=randread", "--bs=4k", "--size=32M",
                                "--time_based", "--runtime=2", "--output=/dev/null")
        assert proc.returncode == 0, proc.stderr
    page_file = tmp / "report.html"
    res = iotrace_cmd("report", str(trace_dir), "--format", "html", "-o", str(page_file),
                      "--target-read", "1GiB/s")
    assert res.returncode == 0, res.stderr
    res = iotrace_cmd("report", str(trace_dir), "--format", "json", "--target-read", "1GiB/s")
    assert res.returncode == 0, res.stderr
    return trace_dir, page_file, page_file.read_text(), json.loads(res.stdout)


def figures(page: str) -> dict[str, str]:
    """Each plot's <figure> element, by name."""
    found = re.findall(r'<figure class="plot[^"]*" id="plot-(\w+)">(.*?)</figure>', page, re.S)
    return dict(found)


def test_self_contained(rendered):
    _, _, page, _ = rendered
    assert page.startswith("<!DOCTYPE html>")
    # nothing fetched: no URL at all, links only to anchors in the page, data only inline
    assert not re.search(r"https?:|ftp:|//[a-z0-9.-]+\.[a-z]{2,}/", page, re.I)
    for ref in re.findall(r'\b(?:src|href|xlink:href)\s*=\s*["\']([^"\']*)', page):
        assert ref.startswith(("#", "data:")), ref
    for ref in re.findall(r"url\(\s*['\"]?([^)'\"]*)", page):
        assert ref.startswith(("#", "data:")), ref
    assert "@import" not in page and "@font-face" not in page
    assert not re.search(r"<(link|iframe|object|embed|img)\b", page, re.I)


def test_verdict_findings_and_plots(rendered):
    _, _, page, doc = rendered
    verdict = doc["verdict"]["summary"]
    assert html.escape(verdict) in page
    # the verdict comes before the findings, the findings before the plots
    assert page.index(html.escape(verdict)) < page.index('id="findings"') < page.index(
        'id="plots"')
    assert doc["findings"], "a 1 GiB/s target must at least give below-target"
    for f in doc["findings"]:
        assert f'<code class="fid">{html.escape(f["id"])}</code>' in page
        assert html.escape(f["summary"]) in page
        assert html.escape(f["recommendation"]) in page
    sev = [f["severity"] for f in doc["findings"]]
    assert sev == sorted(sev, key=("info", "warn", "high").index, reverse=True)
    figs = figures(page)
    assert list(figs) == list(PLOTS)
    for name, body in figs.items():
        assert body.count("<svg") == 1, f"plot {name} did not render: {body[:300]}"
    # the read target is drawn (its colour) on the throughput plot
    assert htmlview.TARGET_COLOUR in figs["throughput"]
    # SVG ids are unique on the page (several inline SVGs share one id space)
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))


def test_text_is_escaped(tmp_path):
    t = make_synthetic(tmp_path / "t")
    page = htmlview.render_html(build_report(t, Targets(read_bps=1 << 30)),
                                iotrace.open_trace(tmp_path / "t"))
    assert "<script>alert" not in page and "<worker>" not in page
    assert html.escape(EVIL_PATH) in page
    assert "<script" not in page


def test_no_target_no_target_line(tmp_path):
    t = make_synthetic(tmp_path / "t")
    report = build_report(t, Targets())
    page = htmlview.render_html(report, iotrace.open_trace(tmp_path / "t"))
    figs = figures(page)
    assert list(figs) == list(PLOTS) and all("<svg" in b for b in figs.values())
    assert htmlview.TARGET_COLOUR not in figs["throughput"]
    assert html.escape(report.verdict["summary"]) in page


def test_trace_without_io(tmp_path):
    """No reads or writes: a verdict, no plots but a note in place of each."""
    t = synth_trace(tmp_path / "t", [ev("openat", ts=0, dur=5000, fd=3, ret=3,
                                        path="/etc/hosts")])
    report = build_report(t, Targets(read_bps=1 << 30))
    page = htmlview.render_html(report, iotrace.open_trace(tmp_path / "t"))
    assert html.escape(report.verdict["summary"]) in page
    figs = figures(page)
    assert list(figs) == list(PLOTS)
    assert all("<svg" not in b and 'class="empty"' in b for b in figs.values())


def test_offset_scatter_is_sampled(tmp_path):
    """At most ~MAX_POINTS_PER_FILE points per file, whatever the number of reads."""
    cap = 2000
    n = 5 * cap + 123
    events = [ev("pread64", ts=i * 1000, dur=500, off=(i * 7919 % n) * 4096, req=4096,
                 ret=4096, file_id=0) for i in range(n)]
    events += [ev("pread64", ts=i * 1000 + 1, dur=500, off=i * 4096, req=4096, ret=4096,
                  file_id=1, fd=4) for i in range(cap // 2)]
    t = synth_trace(tmp_path / "t", events, files=[(0, "/big.bin"), (1, "/small.bin")])
    from iotrace.analyzers.views import create_views
    create_views(t.con)
    old = htmlview.MAX_POINTS_PER_FILE
    htmlview.MAX_POINTS_PER_FILE = cap
    try:
        files = htmlview.offset_samples(t.con, 0)
    finally:
        htmlview.MAX_POINTS_PER_FILE = old
    assert [f["path"] for f in files] == ["/big.bin", "/small.bin"]
    big, small = files
    assert big["calls"] == n and big["every"] == 6
    assert 0.7 * n / 6 < len(big["t_s"]) <= 1.3 * cap
    assert len(small["t_s"]) == cap // 2 and small["every"] == 1   # small files: every read


# ------------------------------------------------------------------ headless Chromium

PROBE = """<script>
window.__errors = [];
window.onerror = function (msg) { window.__errors.push(String(msg)); };
window.addEventListener('load', function () {
  var bad = window.__errors.slice();
  var svgs = document.querySelectorAll('figure.plot svg');
  if (svgs.length !== %d) bad.push('plots: ' + svgs.length);
  svgs.forEach(function (svg) {
    var r = svg.getBoundingClientRect();
    if (r.width < 300 || r.height < 150) bad.push('small plot ' + r.width + 'x' + r.height);
    svg.querySelectorAll('use, image').forEach(function (u) {
      var ref = u.getAttribute('xlink:href') || u.getAttribute('href') || '';
      if (ref.charAt(0) === '#' && !document.getElementById(ref.slice(1)))
        bad.push('dangling ' + ref);
    });
  });
  document.title = bad.length ? 'fail: ' + bad.slice(0, 5).join('; ') : 'ok';
});
</script>"""


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-extensions", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=180)


@needs_chromium
def test_loads_in_chromium_without_errors(rendered, tmp_path):
    _, _, page, _ = rendered
    probed = tmp_path / "probed.html"
    # the probe goes first in <head>, so it sees errors of anything after it
    probed.write_text(page.replace("<head>", "<head>" + PROBE % len(PLOTS), 1))
    res = chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom",
                   probed.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", res.stdout, re.S)
    assert title and title.group(1) == "ok", (title and title.group(1), res.stderr[-2000:])
    assert "Uncaught" not in res.stderr


@needs_chromium
def test_screenshot_shows_the_plots(rendered, tmp_path):
    _, page_file, _, _ = rendered
    png = tmp_path / "report.png"
    res = chromium(tmp_path, f"--screenshot={png}", "--window-size=1280,2400",
                   "--hide-scrollbars", page_file.as_uri())
    assert res.returncode == 0 and png.exists(), res.stderr[-2000:]
    assert png.stat().st_size > 50_000      # a page of text and plots, not a blank one
    try:
        from PIL import Image
    except ImportError:                     # pillow comes with matplotlib; size check only
        return
    im = Image.open(png).convert("RGB")
    assert im.size == (1280, 2400)
    colours = im.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200, "screenshot is (nearly) uniform"
    # the plots are there: many pixels of the read series' colour (lines, fills, bars)
    r0, g0, b0 = (int(htmlview.READ_COLOUR[i:i + 2], 16) for i in (1, 3, 5))
    blue = sum(n for n, (r, g, b) in colours
               if abs(r - r0) < 40 and abs(g - g0) < 40 and abs(b - b0) < 40)
    assert blue > 2000, f"only {blue} pixels in the read colour: plots not drawn?"
