"""fio (psync engine) is the ground truth: every pread/pwrite it issues on its
data file must be in the trace, with exactly fio's counts and bytes."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import needs_root, rows, scalar, trace_run

pytestmark = [needs_root(),
              pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")]

FILE_MB = 64


@pytest.fixture(scope="module")
def datafile(tmp_path_factory):
    path = tmp_path_factory.mktemp("fio") / "data.bin"
    with open(path, "wb") as f:
        for _ in range(FILE_MB):
            f.write(b"\xa5" * (1 << 20))
    return path


def fio(tmp_path, datafile, *args):
    out = tmp_path / "trace"
    report = tmp_path / "fio.json"
    proc, trace = trace_run(out, "fio", "--name=job", f"--filename={datafile}",
                            "--ioengine=psync", f"--size={FILE_MB}M",
                            "--output-format=json", f"--output={report}", *args)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(report.read_text())["jobs"][0]
    return trace, job


def io_on(trace, path, op):
    return rows(trace, """
        select count(*), coalesce(sum(e.ret), 0), coalesce(sum(e.req_bytes), 0)
        from events e join files f using (file_id)
        where f.path = ? and e.op = ? and e.ret > 0""", str(path), op)[0]


def test_random_4k_reads_exact(tmp_path, datafile):
    trace, job = fio(tmp_path, datafile, "--rw=randread", "--bs=4k", "--io_size=16M")
    calls, nbytes, req = io_on(trace, datafile, "pread64")
    assert job["read"]["total_ios"] == 4096
    assert calls == job["read"]["total_ios"]
    assert nbytes == job["read"]["io_bytes"] == req
    # random: offsets are 4 KiB aligned and not sequential
    seq = scalar(trace, """
        select count(*) from (select "offset", lag("offset" + ret) over (order by ts_ns) as prev_end
        from events e join files f using (file_id) where f.path = ? and op = 'pread64')
        where "offset" = prev_end""", str(datafile))
    assert seq < calls * 0.05
    assert scalar(trace, "select count(*) from events e join files f using (file_id) "
                  'where f.path = ? and op = \'pread64\' and "offset" % 4096 <> 0',
                  str(datafile)) == 0
    assert trace.meta["drops"] == 0


def test_sequential_1m_reads_exact(tmp_path, datafile):
    trace, job = fio(tmp_path, datafile, "--rw=read", "--bs=1M")
    calls, nbytes, req = io_on(trace, datafile, "pread64")
    assert calls == job["read"]["total_ios"] == FILE_MB
    assert nbytes == job["read"]["io_bytes"] == FILE_MB << 20
    offsets = [r[0] for r in rows(trace, """
        select "offset" from events e join files f using (file_id)
        where f.path = ? and op = 'pread64' order by ts_ns""", str(datafile))]
    assert offsets == [i << 20 for i in range(FILE_MB)]


def test_sequential_64k_writes_with_end_fsync(tmp_path, datafile):
    trace, job = fio(tmp_path, datafile, "--rw=write", "--bs=64k", "--end_fsync=1")
    calls, nbytes, req = io_on(trace, datafile, "pwrite64")
    assert calls == job["write"]["total_ios"] == (FILE_MB << 20) // (64 << 10)
    assert nbytes == job["write"]["io_bytes"] == FILE_MB << 20
    syncs = rows(trace, """
        select e.ts_ns, e.ret from events e join files f using (file_id)
        where f.path = ? and op in ('fsync', 'fdatasync')""", str(datafile))
    assert len(syncs) >= 1 and all(r == 0 for _, r in syncs)
    last_write = scalar(trace, """select max(ts_ns) from events e join files f using (file_id)
                                  where f.path = ? and op = 'pwrite64'""", str(datafile))
    assert max(ts for ts, _ in syncs) > last_write
