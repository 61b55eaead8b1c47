"""Synthetic traces for unit tests of the rules: write a trace directory from
plain rows, with the real schemas, so rules see exactly what a recording gives.

    t = synth_trace(tmp_path, events=[ev("pread64", ts=0, dur=1000, fd=3, off=0,
                                          req=4096, ret=4096, file_id=0)],
                    files=[(0, "/data/a.bin")])
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import iotrace
from iotrace.abi import OP_NAMES
from iotrace.convert import EVENTS_SCHEMA, FD_KINDS
from iotrace.schema import FILES_SCHEMA, PROCESSES_SCHEMA, SCHEMA_VERSION, THREADS_SCHEMA


def ev(op, ts=0, dur=1000, pid=100, tid=None, fd=3, off=-1, req=0, ret=0, file_id=-1,
       path=None, path2=None, flags=0, arg=0, mode=0, fd_kind=None, eflags=0):
    return dict(ts_ns=ts, dur_ns=dur, pid=pid, tid=tid or pid, op=op, fd=fd, offset=off,
                req_bytes=req, ret=ret, file_id=file_id,
                fd_kind=fd_kind or ("file" if file_id >= 0 else "none"), flags=flags,
                mode=mode, arg=arg, path=path, path2=path2, eflags=eflags, chan_ino=None, http=None)


def synth_trace(root: Path, events: list[dict], files=(), processes=(), threads=None,
                meta: dict | None = None):
    """files: (file_id, path[, fs_type]); processes: (pid, ppid, cmdline)."""
    root = Path(root)
    (root / "events").mkdir(parents=True, exist_ok=True)
    cols = {name: [e[name] for e in events] for name in EVENTS_SCHEMA.names}
    arrays = []
    for field in EVENTS_SCHEMA:
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(cols[field.name], type=pa.string())
                          .dictionary_encode().cast(field.type))
        else:
            arrays.append(pa.array(cols[field.name], type=field.type))
    table = pa.Table.from_arrays(arrays, schema=EVENTS_SCHEMA)
    if len(events):
        table = table.take(pa.array(np.argsort(np.array(cols["ts_ns"]), kind="stable")))
    pq.write_table(table, root / "events" / "part-000000.parquet")
    f = list(files)
    pq.write_table(pa.table({
        "file_id": [x[0] for x in f], "path": [x[1] for x in f],
        "fs_type": [x[2] if len(x) > 2 else "ext4" for x in f],
        "mount_point": ["/"] * len(f), "dev_major": [8] * len(f), "dev_minor": [1] * len(f),
        "ino": [1000 + x[0] for x in f],
        "mount_options": [x[3] if len(x) > 3 else "rw" for x in f]}, schema=FILES_SCHEMA), root / "files.parquet")
    procs = list(processes) or sorted({(e["pid"], 1, "job") for e in events})
    pq.write_table(pa.table({
        "pid": [p[0] for p in procs], "ppid": [p[1] for p in procs],
        "cmdline": [p[2] for p in procs], "comm": [p[2].split()[0] for p in procs],
        "start_ns": [0] * len(procs), "exit_ns": [None] * len(procs),
        "exit_code": [0] * len(procs), "exit_signal": [None] * len(procs),
        "execs": [1] * len(procs), "threads": [1] * len(procs),
        "before_trace": [False] * len(procs), "rank": [None] * len(procs),
        "local_rank": [None] * len(procs)}, schema=PROCESSES_SCHEMA),
        root / "processes.parquet")
    th = threads or sorted({(e["tid"], e["pid"], f"t{e['tid']}") for e in events})
    pq.write_table(pa.table({
        "tid": [t[0] for t in th], "pid": [t[1] for t in th], "name": [t[2] for t in th],
        "start_ns": [0] * len(th), "exit_ns": [None] * len(th)}, schema=THREADS_SCHEMA),
        root / "threads.parquet")
    m = {"schema_version": SCHEMA_VERSION, "state": "complete", "mode": "run", "events":
         len(events), "drops": 0, "counters": {}}
    m.update(meta or {})
    (root / "meta.json").write_text(json.dumps(m))
    return iotrace.open_trace(root)


assert set(FD_KINDS) and OP_NAMES  # the same vocabularies as recordings
