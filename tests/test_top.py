"""`iotrace top` in a real terminal (tmux): its numbers against fio's own,
its keys, and a clean end on q and on Ctrl-C (no recorder, no BPF program
left behind)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iotrace.tracedir import mount_table

from conftest import needs_root

pytestmark = needs_root()
TMUX = shutil.which("tmux")
# JOB, DATA WAIT, READ MiB/s
ROW = re.compile(r"│\s*(\d+) fio\s*│\s*([-\d%]+)\s*│\s*([\d.]+)\s*│")
# JOB, MOUNT, READ MiB/s
MOUNT_ROW = re.compile(r"│\s*(\d+) fio\s*│\s*(/\S*)\s*│\s*([\d.]+)\s*│")


def tmux(*args: str) -> str:
    return subprocess.run([TMUX, *args], capture_output=True, text=True, check=True).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_screen(session: str, pattern: str, timeout: float = 30.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = screen(session)
        if re.search(pattern, s):
            return s
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} never on the screen:\n{screen(session)}")


def leftovers() -> tuple[str, str]:
    procs = subprocess.run(["pgrep", "-af", "iotrace-recorder"], capture_output=True,
                           text=True).stdout.strip()
    progs = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True).stdout
    return procs, "\n".join(line for line in progs.splitlines() if "name iot_" in line)


@pytest.fixture
def fio(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"\x5a" * (64 << 20))
    data.read_bytes()
    out = tmp_path / "fio.json"
    # its own bandwidth each second, on the wall clock: fio catches up after a
    # stall (its rate limit paces the bytes since its start), so a 5 s window
    # can read above 40 MiB/s on a busy machine
    p = subprocess.Popen(["fio", "--name=r", f"--filename={data}", "--rw=read", "--bs=128k",
                          "--ioengine=psync", "--invalidate=0", "--rate=40m", "--time_based",
                          "--runtime=30", "--output-format=json", f"--output={out}",
                          f"--write_bw_log={tmp_path / 'fio'}", "--log_avg_msec=1000",
                          "--log_unix_epoch=1"])
    yield p, out, data
    if p.poll() is None:
        p.kill()
        p.wait()


def start_top(session: str, pid: int) -> None:
    if TMUX is None:
        pytest.fail("tmux is not installed (make test installs it)")
    subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)
    cmd = [TMUX, "new-session", "-d", "-s", session, "-x", "170", "-y", "40",
           # the pane's own size, not one the tests' environment may carry
           f"env -u COLUMNS -u LINES {sys.executable} -m iotrace top --pid {pid}; "
           "echo TOP-EXITED $?; sleep 60"]
    # the server exits with its last session: a new-session that reaches it
    # as it goes fails, and the next one starts a new server
    for _ in range(5):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"tmux new-session failed: {done.stderr}")


def fio_windows(log: Path, at: float) -> tuple[float, float]:
    """The least and most MiB/s fio's own log allows over 5 s windows that end
    0 to 3.5 s before the wall-clock time `at`: top shows the sums over its
    last 5 s, which reach it 1-2 s after their second, redrawn each second.
    fio logs its bytes each second, paced evenly within it; a longer gap in
    its log is a stall it caught up on at a time its log does not say: those
    bytes count wholly or not at all where a window holds part of it."""
    pts = [(int(r[0]) / 1000, int(r[1]) * 1024)            # (end s, bytes/s)
           for r in (line.split(",") for line in log.read_text().splitlines()) if r[0]]
    spans = [(t0, t1, bps * (t1 - t0)) for (t0, _), (t1, bps) in zip(pts, pts[1:])]

    def bounds(a: float, b: float) -> tuple[float, float]:
        lo = hi = 0.0
        for t0, t1, n in spans:
            inside = min(b, t1) - max(a, t0)
            if inside <= 0:
                continue
            if t1 - t0 <= 1.2:                              # paced: its share
                lo, hi = lo + n * inside / (t1 - t0), hi + n * inside / (t1 - t0)
            else:
                lo, hi = lo + (n if inside >= t1 - t0 else 0), hi + n
        return lo / (b - a) / 2**20, hi / (b - a) / 2**20

    got = [bounds(end - 5, end) for end in (at - k / 10 for k in range(36))]
    return min(g[0] for g in got), max(g[1] for g in got)


def test_top_against_fio_keys_and_clean_exits(fio):
    """fio reads at 40 MiB/s: top's READ MiB/s for it, read off the screen
    over 5 s once steady, is within 5% of fio's own bandwidth over the 5 s it
    shows (from fio's per-second log), and so is its
    row in the mounts' table, on the data file's mount; the file is in the
    top files' table; its DATA WAIT is
    "-" (fio has no loop fed by worker processes: unknown, not 0%); s moves
    the sort from the data wait to the read column; q ends it with status 0, and so does Ctrl-C in a
    second run, each leaving no recorder and no BPF program behind."""
    proc, out, data = fio
    st = os.stat(data)
    mount = mount_table()[(os.major(st.st_dev), os.minor(st.st_dev))][0]
    session = f"iotrace-top-{proc.pid}"
    try:
        start_top(session, proc.pid)
        wait_screen(session, r"\d+ fio", 30)
        time.sleep(6)                       # past the first window's partial seconds
        seen, per_mount, named = [], [], 0
        for _ in range(10):
            shown = screen(session)
            m = ROW.search(shown)
            if m:
                assert m.group(2) == "-", m.group(0)
                seen.append((time.time(), float(m.group(3))))
            named += str(data) in shown             # the top files' table
            m = MOUNT_ROW.search(shown)
            if m:
                assert m.group(2) == mount, (m.group(0), mount)
                per_mount.append((time.time(), float(m.group(3))))
            time.sleep(0.5)
        assert len(seen) >= 8, screen(session)
        assert "DATA WAIT v" in screen(session), screen(session)
        tmux("send-keys", "-t", session, "s")
        s = wait_screen(session, r"s sort \(read\)", 10)
        assert "READ MiB/s v" in s and "DATA WAIT v" not in s, s   # the marker moved
        tmux("send-keys", "-t", session, "q")
        wait_screen(session, r"TOP-EXITED 0", 20)
        assert leftovers() == ("", ""), leftovers()
        # Ctrl-C ends it the same way
        start_top(session, proc.pid)
        wait_screen(session, r"\d+ fio", 30)
        tmux("send-keys", "-t", session, "C-c")
        wait_screen(session, r"TOP-EXITED 0", 20)
        assert leftovers() == ("", ""), leftovers()
    finally:
        subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)
    assert proc.wait(timeout=60) == 0
    bw = json.loads(out.read_text())["jobs"][0]["read"]["bw_bytes"] / 2**20
    assert bw == pytest.approx(40, rel=0.02), bw
    log = out.parent / "fio_bw.1.log"
    for what, readings in (("job", seen), ("mount", per_mount)):
        judged = [(got, *fio_windows(log, at)) for at, got in readings]
        print(f"{what}: top against fio's least and most over its windows: {judged}")
        off = [j for j in judged if not j[1] * 0.95 <= j[0] <= j[2] * 1.05]
        assert len(judged) >= 8 and not off, (what, off, judged, bw)
    assert named >= 8, named
