"""Conversion that falls behind a fast job: the spool holds what the Parquet
side has not converted yet, the live line says how far behind it is, and the
rest is converted after the job with a status line per segment, all of it
kept."""
from __future__ import annotations

import os
import shutil
import sys

from conftest import iotrace_cmd, keep_spool, needs_root
from iotrace.session import Session
from iotrace.tracedir import base_meta

import iotrace

PREADS = 20_000


@needs_root()
def test_the_rest_of_a_spool_is_converted_with_progress(tmp_path):
    """A real recording's spool, left whole as if conversion had fallen
    behind (keep_spool), converted by finish(): one progress message per
    segment, counted to the last, and every pread in the trace."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(4096))
    keep, env = keep_spool(tmp_path)
    # two bursts more than a second apart: the recorder closes a segment a second
    script = (f"import os, time\nfd = os.open({str(data)!r}, os.O_RDONLY)\n"
              f"for burst in range(2):\n"
              f"    for _ in range({PREADS // 2}): os.pread(fd, 1, 0)\n"
              f"    time.sleep(1.3)\n")
    res = iotrace_cmd("run", "-q", "--no-node-summary", "-o", str(tmp_path / "kept-run"), "--",
                      sys.executable, "-c", script, env=env)
    assert res.returncode == 0, res.stderr
    segments = sorted(keep.glob("*.ev"))
    assert len(segments) >= 2, segments

    meta = base_meta(["python"], "run", {})
    meta["probes"] = {}
    session = Session(out=tmp_path / "t", recorder_args=[], meta=meta)
    for f in keep.iterdir():
        shutil.copy(f, session.spool / f.name)
    assert session.pending_segments() == len(segments)
    said: list[str] = []
    session.finish(said.append)

    n = len(segments)
    assert len(said) == n, said
    assert said[0].startswith(f"segment 1 of {n}, 0 events written"), said
    assert said[-1].startswith(f"segment {n} of {n}, "), said
    assert session.pending_segments() == 0
    t = iotrace.open_trace(tmp_path / "t")
    preads = t.con.execute("select count(*) from events where op = 'pread64' and ret = 1 "
                           "and req_bytes = 1").fetchone()[0]
    assert preads == PREADS
    assert t.meta["events"] == session.writer.events


def test_live_line_says_how_far_conversion_is_behind(capsys):
    """One or two closed segments waiting is the normal rhythm; from three on
    the line says so."""
    from iotrace.cli import BEHIND_SHOWN, StatusLine
    from iotrace.session import Progress
    line = StatusLine(quiet=True)
    line.on = True     # as on a terminal
    line(Progress(elapsed_s=9.0, events=18_000_000, pending=BEHIND_SHOWN - 1))
    assert "behind" not in capsys.readouterr().err
    line(Progress(elapsed_s=10.0, events=20_000_000, pending=12))
    assert "Parquet 12 s behind" in capsys.readouterr().err
