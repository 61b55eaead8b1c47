"""Bad input to every reader: damaged traces give one line and a documented
exit code, never a traceback; odd but valid input (paths that are not UTF-8,
4 KiB paths, huge command lines) traces and reads.

Real traces are made once per module, then copied and damaged: a truncated,
emptied or overwritten events part, a missing or damaged table, a meta.json
of a newer major version, not an object, of the wrong types, an empty trace,
an empty directory. Each damage goes through `summary` (text, json), `report`
(text, json), `export --perfetto` and `view` (without a browser, serving for
no time). Then hypothesis fuzzes, with a fixed budget, the spool segment
reader (convert.read_segment + convert.convert, on mutated real segments and
on random records) and the trace reader (random meta.json values and random
Parquet damage through the command line, in process).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import iotrace_cmd, keep_spool, needs_root

import iotrace
from iotrace.abi import EVENT_DTYPE, OP_NAMES
from iotrace.cli import main as cli_main
from iotrace.convert import EVENTS_SCHEMA, convert, read_segment
from iotrace.errors import EXIT_TRACE, EXIT_USAGE, IotraceError
from iotrace.model import Model

pytestmark = needs_root()

# The job: files whose names are not UTF-8, a path of about 4 KiB (each
# component under 255 bytes), a second events part (segments close about
# every second); its command line is about 100 KB (the arguments).
JOB = r'''
import os, sys, time
base = os.fsencode(sys.argv[1])
for name in (b"caf\xe9.bin", b"bad\xff\xfe.bin"):
    fd = os.open(base + b"/" + name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * (1 << 20))
    os.close(fd)
    fd = os.open(base + b"/" + name, os.O_RDONLY)
    while os.read(fd, 1 << 16):
        pass
    os.close(fd)
deep = base + b"/deep"
while len(deep) + 201 < 3950:
    deep += b"/" + b"d" * 200
os.makedirs(deep, exist_ok=True)
fd = os.open(deep + b"/leaf\xff", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"y" * 4096)
os.close(fd)
time.sleep(1.3)
with open(base + b"/after.bin", "wb") as f:
    f.write(b"z" * 65536)
'''
BIG_ARGV = ["a" * 999] * 100          # ~100 KB of arguments

READERS = {
    "summary": ["summary", "{t}"],
    "summary-json": ["summary", "--format", "json", "{t}"],
    "report": ["report", "{t}"],
    "report-json": ["report", "--format", "json", "{t}"],
    "export": ["export", "--perfetto", "{t}", "-o", "{o}"],
    "view": ["view", "{t}", "--no-browser", "--port", "0", "--timeout", "0"],
}


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A real trace of JOB (two events parts)."""
    base = tmp_path_factory.mktemp("badinput")
    data = base / "data"
    data.mkdir()
    out = base / "trace"
    res = iotrace_cmd("run", "-q", "--no-node-summary", "-o", str(out), "--",
                      sys.executable, "-c", JOB, str(data), *BIG_ARGV)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert len(list((out / "events").glob("part-*.parquet"))) >= 2
    return out


@pytest.fixture(scope="module")
def segments(tmp_path_factory) -> list[tuple[bytes, bytes]]:
    """Real spool segments (K.ev, K.str) of a small job, kept by a recorder
    started with another spool directory than the one iotrace converts."""
    base = tmp_path_factory.mktemp("spool")
    keep, env = keep_spool(base)
    res = iotrace_cmd("run", "-q", "--no-node-summary", "-o", str(base / "t"), "--",
                      sys.executable, "-c",
                      "import os; os.listdir('/'); open('/etc/hostname').read(); "
                      f"os.open({str(base).encode()!r} + b'/n\\xe9', os.O_CREAT | os.O_RDWR)",
                      env=env)
    assert res.returncode == 0, res.stderr
    segs = [(ev.read_bytes(), ev.with_suffix(".str").read_bytes()
             if ev.with_suffix(".str").exists() else b"")
            for ev in sorted(keep.glob("*.ev"))]
    assert segs and len(segs[0][0]) >= 96 * 100
    return segs


# ---- damages ----------------------------------------------------------------------


def _part(t: Path, i: int = 0) -> Path:
    return t / "events" / f"part-{i:06d}.parquet"


def _truncate(p: Path, keep: float) -> None:
    p.write_bytes(p.read_bytes()[: int(p.stat().st_size * keep)])


def _overwrite_column(p: Path, column: str) -> None:
    """Overwrites the column chunk of `column` (row group 0) from its first
    page header on: every reader of that column hits it."""
    md = pq.read_metadata(p)
    names = [md.schema.column(i).name for i in range(md.num_columns)]
    cc = md.row_group(0).column(names.index(column))
    start = cc.dictionary_page_offset if cc.has_dictionary_page else cc.data_page_offset
    b = bytearray(p.read_bytes())
    b[start: start + cc.total_compressed_size] = b"\xab" * cc.total_compressed_size
    p.write_bytes(bytes(b))


def _meta(t: Path, change) -> None:
    m = json.loads((t / "meta.json").read_text())
    change(m)
    (t / "meta.json").write_text(json.dumps(m))


def _replace_with(t: Path, what: str) -> None:
    shutil.rmtree(t, ignore_errors=True)
    if what == "dir":
        t.mkdir()
    elif what == "file":
        t.write_text("not a trace\n")


# name: (damage, exit code, a word the one line must hold)
DAMAGES = {
    "part-truncated": (lambda t: _truncate(_part(t, 1), 0.5), EXIT_TRACE, "part-000001"),
    "part-cut-to-3-bytes": (lambda t: _truncate(_part(t), 0.0001), EXIT_TRACE, "part-000000"),
    "part-empty": (lambda t: _part(t).write_bytes(b""), EXIT_TRACE, "part-000000"),
    "part-op-overwritten": (lambda t: _overwrite_column(_part(t, 1), "op"), EXIT_TRACE,
                            "part-000001"),
    "part-footer-overwritten": (
        lambda t: _part(t).write_bytes(_part(t).read_bytes()[:-200] + b"\xff" * 100 +
                                       _part(t).read_bytes()[-100:]),
        EXIT_TRACE, "part-000000"),
    "part-is-a-directory": (lambda t: (_part(t).unlink(), _part(t).mkdir()), EXIT_TRACE,
                            "part-000000"),
    "files-missing": (lambda t: (t / "files.parquet").unlink(), EXIT_TRACE, "files.parquet"),
    "files-truncated": (lambda t: _truncate(t / "files.parquet", 0.6), EXIT_TRACE,
                        "files.parquet"),
    # the summary counts processes from the footer: it need not read the pages
    "processes-overwritten": (lambda t: _overwrite_column(t / "processes.parquet", "pid"),
                              {"*": EXIT_TRACE, "summary": (0, EXIT_TRACE),
                               "summary-json": (0, EXIT_TRACE)}, "processes.parquet"),
    "meta-newer-major": (lambda t: _meta(t, lambda m: m.update(schema_version="2.0")),
                         EXIT_TRACE, "newer"),
    "meta-no-version": (lambda t: _meta(t, lambda m: m.pop("schema_version")), EXIT_TRACE,
                        "schema_version"),
    "meta-not-an-object": (lambda t: (t / "meta.json").write_text("[1, 2]"), EXIT_TRACE,
                           "corrupt"),
    "meta-garbage": (lambda t: (t / "meta.json").write_bytes(b"\xff\xfe{garbage"), EXIT_TRACE,
                     "corrupt"),
    "meta-truncated": (lambda t: _truncate(t / "meta.json", 0.5), EXIT_TRACE, "corrupt"),
    "meta-wrong-types": (lambda t: _meta(t, lambda m: m.update(counters=[1])), EXIT_TRACE,
                         "counters"),
    "meta-huge-int": (lambda t: _meta(t, lambda m: m.update(start_monotonic_ns=10 ** 30)),
                      EXIT_TRACE, "start_monotonic_ns"),
    "meta-missing": (lambda t: (t / "meta.json").unlink(), EXIT_TRACE, "no meta.json"),
    "empty-directory": (lambda t: _replace_with(t, "dir"), EXIT_TRACE, "no meta.json"),
    "no-such-directory": (lambda t: _replace_with(t, "none"), EXIT_TRACE, "no such"),
    # readable: an empty trace is a trace
    "no-events": (lambda t: [p.unlink() for p in (t / "events").glob("*.parquet")], 0, ""),
    "no-events-directory": (lambda t: shutil.rmtree(t / "events"), 0, ""),
}


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def _reader_args(t: Path, name: str) -> list[str]:
    return [a.replace("{t}", str(t)).replace("{o}", f"{t}.{name}.pftrace")
            for a in READERS[name]]


def _run_readers(t: Path, names=READERS, in_process: bool = False
                 ) -> dict[str, subprocess.CompletedProcess]:
    """Each reader on trace t: as a command (3 at a time), or in this process
    (the same main(), without the interpreter's start: the matrix is big)."""
    if in_process:
        out = {}
        for name in names:
            code, stdout, stderr = _cli(_reader_args(t, name))
            out[name] = subprocess.CompletedProcess(name, code, stdout, stderr)
        return out
    with ThreadPoolExecutor(3) as pool:
        return dict(pool.map(lambda n: (n, iotrace_cmd(*_reader_args(t, n), timeout=120)),
                             names))


def _check_damage(good: Path, tmp_path: Path, damage: str, in_process: bool) -> None:
    fn, codes, word = DAMAGES[damage]
    t = tmp_path / "t"
    shutil.copytree(good, t)
    fn(t)
    for name, res in _run_readers(t, in_process=in_process).items():
        what = f"{damage}, {name}: {res.stderr}"
        assert "Traceback" not in res.stderr, what
        code = codes if isinstance(codes, int) else codes.get(name, codes["*"])
        assert res.returncode in ((code,) if isinstance(code, int) else code), what
        if res.returncode:
            lines = _lines(res.stderr)
            assert len(lines) == 1 and lines[0].startswith("iotrace: "), what
            assert word in lines[0], what
            assert not res.stdout.strip() or name in ("view", "summary"), what


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_trace_one_line_and_exit_code(good, tmp_path, damage):
    """Every damage through every reader, in process (main(): what the
    command runs, exit code and stderr included)."""
    _check_damage(good, tmp_path, damage, in_process=True)


@pytest.mark.parametrize("damage", ["part-op-overwritten", "meta-newer-major"])
def test_damaged_trace_as_a_command(good, tmp_path, damage):
    """The same, as real commands (the interpreter's exit code and stderr)."""
    _check_damage(good, tmp_path, damage, in_process=False)


def test_a_file_is_not_a_trace(good, tmp_path):
    """A file where a trace directory is expected: bad usage (view serves a
    file as a .pftrace, so it is not in this list)."""
    t = tmp_path / "t"
    _replace_with(t, "file")
    for name, res in _run_readers(t, ["summary", "report-json", "export"]).items():
        assert "Traceback" not in res.stderr
        assert res.returncode == EXIT_USAGE, (name, res.stderr)
        assert len(_lines(res.stderr)) == 1, (name, res.stderr)


def test_trace_set_with_a_damaged_member(good, tmp_path):
    """A trace set whose second host has a truncated events part: the set's
    report and export name that host's part (exit 4, one line)."""
    shutil.copytree(good, tmp_path / "set" / "host=a")
    shutil.copytree(good, tmp_path / "set" / "host=b")
    _truncate(_part(tmp_path / "set" / "host=b", 1), 0.5)
    for args in (["report", "--format", "json", str(tmp_path / "set")],
                 ["export", "--perfetto", str(tmp_path / "set"), "-o", str(tmp_path / "x")]):
        code, _, err = _cli(args)
        assert code == EXIT_TRACE, (args, err)
        lines = _lines(err)
        assert len(lines) == 1 and "host=b/events/part-000001.parquet" in lines[0], err


def test_trace_directory_not_utf8(good, tmp_path):
    """A trace whose own path is not UTF-8 (DuckDB cannot open it): each
    reader says so in one line, exit 4; `run -o` such a path: exit 2 and
    nothing created."""
    t = tmp_path / os.fsdecode(b"tr\xe9")
    shutil.copytree(good, t)
    for name, res in _run_readers(t, in_process=True).items():
        assert res.returncode == EXIT_TRACE, (name, res.stderr)
        lines = _lines(res.stderr)
        assert len(lines) == 1 and "tr\\xe9" in lines[0] and "UTF-8" in lines[0], res.stderr
    out = tmp_path / os.fsdecode(b"out\xff")
    res = iotrace_cmd("run", "-q", "-o", str(out), "--", "true")
    assert res.returncode == EXIT_USAGE and len(_lines(res.stderr)) == 1, res.stderr
    assert not out.exists()


def test_odd_paths_and_huge_command_line(good, tmp_path):
    """Names that are not UTF-8 are traced, escaped as \\xNN; a path of about
    4 KiB is whole; a 100 KB command line is cut at its cap and counted; every
    reader reads the trace."""
    t = iotrace.open_trace(good)
    q = lambda sql: t.con.execute(sql).fetchall()
    paths = [r[0] for r in q("select path from files")]
    assert any(p.endswith("/caf\\xe9.bin") for p in paths), paths
    assert any(p.endswith("/bad\\xff\\xfe.bin") for p in paths), paths
    leaf = [p for p in paths if p.endswith("/leaf\\xff")]
    assert leaf and len(leaf[0]) > 3800, leaf
    assert q("select count(*) from events where op in ('open', 'openat') "
             "and path like '%/leaf\\xff' and eflags & 1 = 0")[0][0] >= 1
    cmd = q("select max(length(cmdline)) from processes")[0][0]
    assert 3000 < cmd < 8192
    assert t.meta["counters"]["path_truncated"] >= 1
    shutil.copytree(good, tmp_path / "t")
    for name, res in _run_readers(tmp_path / "t", in_process=True).items():
        assert res.returncode == 0 and "Traceback" not in res.stderr, (name, res.stderr)
        if name == "summary":
            assert "caf\\xe9.bin" in res.stdout, res.stdout
        if name == "summary-json":
            files = [f["path"] for f in json.loads(res.stdout)["files"]]
            assert any(f.endswith("bad\\xff\\xfe.bin") for f in files), files


# ---- fuzzing: the spool segment reader ----------------------------------------------

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _convert_segment(ev: bytes, st_bytes: bytes | None):
    """read_segment + convert on these bytes, as the session does."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "000000.ev"
        p.write_bytes(ev)
        if st_bytes is not None:
            p.with_suffix(".str").write_bytes(st_bytes)
        try:
            recs, payloads = read_segment(p)
            table = convert(recs, payloads, Model())
        except IotraceError:
            return None
    assert table.schema == EVENTS_SCHEMA
    assert table.num_rows == len(ev) // EVENT_DTYPE.itemsize
    return table


@FUZZ
@given(data=st.data())
def test_fuzz_spool_segment_mutated(segments, data):
    """Real segments, truncated anywhere (torn records), bytes overwritten in
    the records and the payloads, payload file cut or missing: they convert,
    every whole record becomes a row."""
    ev, strs = data.draw(st.sampled_from(segments))
    ev = bytearray(ev[: data.draw(st.integers(0, min(len(ev), 96 * 400)))])
    strs = bytearray(strs)
    for _ in range(data.draw(st.integers(0, 30))):
        target = data.draw(st.sampled_from([ev, strs])) if strs else ev
        if target:
            i = data.draw(st.integers(0, len(target) - 1))
            target[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(strs))))
    if cut is not None:
        strs = strs[:cut]
    _convert_segment(bytes(ev), data.draw(st.sampled_from([bytes(strs), None])))


_record = st.fixed_dictionaries({
    "raw": st.binary(min_size=96, max_size=96),
    "op": st.integers(0, len(OP_NAMES) + 2),
    "pid": st.sampled_from([1, 2, 3, 0, -1, 2 ** 31 - 1]),
    "fd": st.sampled_from([-100, -1, 0, 3, 4, 2 ** 31 - 1]),
    "dirfd": st.sampled_from([-100, -1, 3, 4]),
    "ret": st.sampled_from([-1, 0, 2, 3, 4, 2 ** 62, -2 ** 63, 2 ** 63 - 1]),
    "imode": st.sampled_from([0, 0o100644, 0o040755, 0o140000, 0o010000, 0o170000]),
    "payload": st.one_of(st.none(), st.binary(max_size=80),
                         st.sampled_from([b"/a/b\0c", b"rel/../x", b"\xff\xfe", b"",
                                          b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"])),
})


@FUZZ
@given(records=st.lists(_record, min_size=1, max_size=40))
def test_fuzz_spool_random_records(records):
    """Random records with op codes in and out of range, state-changing ops
    (fork, exec, open, dup, chdir, rename...) in any order, any payload."""
    recs = np.frombuffer(b"".join(r["raw"] for r in records), dtype=EVENT_DTYPE).copy()
    for k in ("op", "pid", "fd", "dirfd", "ret", "imode"):
        recs[k] = [r[k] for r in records]
    recs["tid"] = recs["pid"]
    payloads = {i: r["payload"] for i, r in enumerate(records) if r["payload"] is not None}
    table = convert(recs, payloads, Model())
    assert table.num_rows == len(records)


# ---- fuzzing: the trace reader ------------------------------------------------------


def _cli(args: list[str]) -> tuple[int, str, str]:
    """iotrace's command line in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(args)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _check_reader(t: Path, command: str) -> None:
    args = [a.replace("{t}", str(t)).replace("{o}", str(t) + ".pftrace")
            for a in READERS[command]]
    code, _, err = _cli(args)
    assert code in (0, EXIT_TRACE), (command, code, err)
    if code:
        lines = _lines(err)
        assert len(lines) == 1 and lines[0].startswith("iotrace: "), (command, err)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=6)
_FAST_READERS = ["summary", "summary-json", "summary-json", "report-json", "export"]


@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_fuzz_meta_json(good, data):
    """meta.json with keys removed, or set to any JSON value (also inside the
    objects it holds), or cut short: each reader reads it or says in one line
    that it cannot (exit 4)."""
    meta = json.loads((good / "meta.json").read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        holder = meta
        if data.draw(st.booleans()):
            nested = [k for k, v in meta.items() if isinstance(v, dict) and v]
            if nested:
                holder = meta[data.draw(st.sampled_from(sorted(nested)))]
        key = data.draw(st.sampled_from(sorted(holder)) | st.text(max_size=8))
        if data.draw(st.booleans()):
            holder.pop(key, None)
        else:
            holder[key] = data.draw(_json)
    text = json.dumps(meta)
    if data.draw(st.integers(0, 9)) == 0:
        text = text[: data.draw(st.integers(0, len(text)))]
    with tempfile.TemporaryDirectory() as d:
        t = Path(d) / "t"
        shutil.copytree(good, t)
        (t / "meta.json").write_text(text)
        _check_reader(t, data.draw(st.sampled_from(_FAST_READERS)))


@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_fuzz_parquet_bytes(good, data):
    """Any Parquet file of the trace cut at any length, or bytes of it
    overwritten anywhere: each reader reads it or says in one line which file
    is damaged (exit 4)."""
    files = sorted(p.relative_to(good) for p in good.rglob("*.parquet"))
    with tempfile.TemporaryDirectory() as d:
        t = Path(d) / "t"
        shutil.copytree(good, t)
        for _ in range(data.draw(st.integers(1, 2))):
            p = t / data.draw(st.sampled_from(files))
            b = bytearray(p.read_bytes())
            if data.draw(st.booleans()):
                b = b[: data.draw(st.integers(0, len(b)))]
            else:
                i = data.draw(st.integers(0, max(len(b) - 1, 0)))
                chunk = data.draw(st.binary(min_size=1, max_size=64))
                b[i: i + len(chunk)] = chunk
            p.write_bytes(bytes(b))
        _check_reader(t, data.draw(st.sampled_from(_FAST_READERS)))
