"""A trace that leaves the machine: `--redact PATTERN` on run, and `iotrace
redact TRACE -o OUT -p PATTERN` on an existing trace, leave no byte of a
secret that was in the job's argv and file names, in any file of the trace
(Parquet decoded, meta.json, the node summary, the Perfetto file), keep
equal names equal, count what was replaced, and the report still works."""
from __future__ import annotations

import json
import secrets
from pathlib import Path

import pyarrow.parquet as pq

from conftest import iotrace_cmd, needs_root, trace_run

import iotrace


def _all_text(root: Path) -> list[tuple[Path, str]]:
    """Every file under root: raw bytes, and Parquet tables decoded to text."""
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        out.append((p, p.read_bytes().decode("latin-1")))
        if p.suffix == ".parquet":
            t = pq.read_table(p)
            out.append((p, json.dumps(t.to_pylist(), default=str)))
            out.append((p, str(pq.ParquetFile(p).metadata.to_dict())))
    return out


def _assert_clean(root: Path, secret: str, *extra: Path) -> None:
    texts = _all_text(root) + [(p, p.read_bytes().decode("latin-1")) for p in extra]
    assert texts
    for p, text in texts:
        assert secret not in text, p


def _job(tmp_path: Path, secret: str) -> tuple[str, ...]:
    d = tmp_path / f"data_{secret}"
    d.mkdir()
    (d / f"shard_{secret}.bin").write_bytes(b"x" * 8192)
    (tmp_path / "plain.bin").write_bytes(b"y" * 4096)
    return ("sh", "-c", 'cat "$1"/shard_*.bin "$2" > /dev/null; ls "$1" > /dev/null',
            "sh", str(d), str(tmp_path / "plain.bin"), f"--api-key={secret}")


@needs_root()
def test_run_redact_and_redact_command(tmp_path):
    secret = "s3cr3t" + secrets.token_hex(6)
    pattern = "s3cr3t[0-9a-f]+"
    job = _job(tmp_path, secret)

    # 1. --redact while tracing, with the node summary and the Perfetto file
    out = tmp_path / "red"
    res = iotrace_cmd("run", "-q", "--perfetto", "--redact", pattern, "-o", str(out), "--", *job)
    assert res.returncode == 0, res.stderr
    _assert_clean(out, secret, tmp_path / "red.pftrace")
    t = iotrace.open_trace(out)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["redaction"]["names"] >= 3 and meta["redaction"]["cells"] > 0
    assert meta["options"]["redact"] == 1
    assert meta["command"][-1].startswith("<redacted:")     # the --api-key=... argument
    # equal names stay equal: the shard's path (directory and name redacted) in
    # files and in the events' opens
    like = "%/<redacted:________>/<redacted:________>"
    shard = t.con.execute("select path from files where path like ?", [like]).fetchall()
    assert len(shard) == 1
    opened = t.con.execute("select distinct path from events where op like 'open%' "
                           "and path like ?", [like]).fetchall()
    assert opened == shard
    assert t.con.execute("select count(*) from files where path like '%/plain.bin'"
                         ).fetchone()[0] == 1          # what no pattern matches is kept
    res = iotrace_cmd("report", str(out))
    assert res.returncode == 0, res.stderr

    # 2. an existing trace, redacted into a copy; the original is untouched
    plain = tmp_path / "plain"
    proc, _ = trace_run(plain, *job)
    assert proc.returncode == 0, proc.stderr
    assert any(secret in text for _, text in _all_text(plain))
    copy = tmp_path / "copy"
    res = iotrace_cmd("redact", str(plain), "-o", str(copy), "-p", pattern)
    assert res.returncode == 0, res.stderr
    assert "names redacted" in res.stderr
    _assert_clean(copy, secret)
    assert any(secret in text for _, text in _all_text(plain))
    c = iotrace.open_trace(copy)
    assert c.con.execute("select count(*) from events").fetchone()[0] == \
        iotrace.open_trace(plain).con.execute("select count(*) from events").fetchone()[0]
    res = iotrace_cmd("summary", str(copy))
    assert res.returncode == 0 and "<redacted:" in res.stdout + res.stderr


def test_bad_pattern_makes_nothing(tmp_path):
    res = iotrace_cmd("run", "--redact", "([", "-o", str(tmp_path / "t"), "--", "true")
    assert res.returncode == 2 and "not a regular expression" in res.stderr
    assert not (tmp_path / "t").exists()
    res = iotrace_cmd("redact", str(tmp_path), "-o", str(tmp_path / "c"), "-p", "([")
    assert res.returncode == 2
    assert not (tmp_path / "c").exists()


def test_trace_set_names_spool_and_shared_key(tmp_path, monkeypatch):
    """A trace set: the host=NAME directories and meta.json's host are
    redacted too, a spool left by a failed run is not carried over, and with
    IOTRACE_REDACT_KEY both nodes give a name the same placeholder."""
    from synth import ev, synth_trace

    from iotrace.redact import redact_trace
    secret = "s3cr3t" + secrets.token_hex(4)
    src = tmp_path / "set"
    for host in (f"node-{secret}", "plain"):
        synth_trace(src / f"host={host}", events=[
            ev("openat", ts=1000, dur=50, ret=3, file_id=0, path=f"/data/{secret}/a.bin"),
            ev("pread64", ts=2000, dur=500, req=100, ret=100, file_id=0)],
            files=[(0, f"/data/{secret}/a.bin")],
            processes=[(100, 1, f"python train.py --key={secret}")],
            meta={"host": host, "command": ["python", "train.py", f"--key={secret}"]})
    spool = src / f"host=node-{secret}" / ".spool"
    spool.mkdir()
    (spool / "000001.ev").write_bytes(secret.encode())
    monkeypatch.setenv("IOTRACE_REDACT_KEY", "one key for the job")
    stats = redact_trace(src, tmp_path / "out", [secret[:8]])
    assert stats["dropped_files"] == 1 and stats["key"] == "IOTRACE_REDACT_KEY"
    out = tmp_path / "out"
    assert not any(secret in str(p) for p in out.rglob("*"))
    _assert_clean(out, secret)
    paths = {iotrace.open_trace(d).con.execute("select path from files").fetchone()[0]
             for d in out.iterdir()}
    assert len(paths) == 1 and "<redacted:" in paths.pop()
    assert len(list(out.iterdir())) == 2
