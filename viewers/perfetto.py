"""A trace as a Perfetto timeline: a native protobuf trace (`.pftrace`) that
ui.perfetto.dev and `trace_processor_shell` open.

What the file holds (docs/perfetto.md has the user's view):

- A process track per process (named by its command line) and a thread track
  per thread (named by its thread name).
- One slice per system call on its thread, named by op and file basename
  (`pread64 train_0042.npz`), with debug annotations `path`, `offset`,
  `bytes` (requested), `result` (bytes moved / new fd / ...), `errno` (failed
  calls, as `ENOENT (2)`) and `dur_ns` (the recorded duration). Futex waits are
  slices like any call; kernel lock waits (`lock_contention`, which can happen
  inside a system call) are slices on a child track "kernel lock waits" of
  their thread, so both stay properly nested.
- Process and thread life events (fork, exec, exit, thread start/exit, rename)
  as instant events on the process track.
- Counter tracks from exact SQL aggregates over *every* event, in 10 ms bins:
  file read and write MB/s (MB = 10^6 bytes) per process and for the whole job,
  and the job's file I/Os in flight (time-weighted average of read/write/sync
  calls on regular files in progress during the bin). A call's bytes are
  spread over the bins its duration covers, so the bins sum to the trace's
  bytes. "File" means the call's fd was a regular file (`file_id >= 0`), the
  same bytes the report's verdict counts.
- A "phases" track (a cheap heuristic: 100 ms windows classified by which
  direction dominates, runs of equal class merged: start-up load, reading,
  write burst, no file I/O) and a "findings" track: every example of every
  finding of the report as an instant event named by severity and title, with
  the finding's one-sentence summary, so a user can jump from a finding to its
  place in time.

Timing and nesting rules: timestamps are the trace's CLOCK_MONOTONIC ns. A
thread runs one system call at a time, so its slices never overlap; should two
recorded calls of one thread overlap anyway (clock skew between CPUs), the
earlier slice is cut at the start of the next one (its `dur_ns` annotation
keeps the recorded value), so slices always nest and close.

Size limit. Perfetto's UI loads the whole trace into a WebAssembly trace
processor; beyond a few million slices it gets slow and can run out of memory.
Above `max_slices` (default 2,000,000 slices; `--max-slices`), runs of short
calls on one thread are merged into one slice with a count:

- A run is a sequence of consecutive calls on one thread track, each shorter
  than T, that start in the same window of S (windows are aligned to the
  first event). A run of 2 or more calls becomes one slice named
  `pread64 x.npz (merged)` (or `calls (merged)` when ops or files differ), from
  the first call's start to the last call's end, with annotations `calls`,
  `bytes_moved`, `dur_ns` (summed), `errors`, and `path` if all calls were on
  one file. Calls at or above T are always their own slice.
- (T, S) is the first of (10 us, 1 ms), (10 us, 10 ms), (100 us, 10 ms),
  (100 us, 100 ms), (1 ms, 100 ms), (10 ms, 100 ms), (10 ms, 1 s),
  (100 ms, 1 s), (1 s, 10 s), (any, 10 s), (any, whole trace) whose result fits
  under `max_slices`: tiny page-cache hits go first, long calls stay visible
  as long as possible. The export's stats (and `iotrace export` output) say
  which T and S were used and how many calls were merged. Counters, phases
  and findings always come from all events and stay exact. Life events are
  never merged. Traces under the limit keep one slice per call.

Encoding. Perfetto's own Python protobuf classes would cost several
microseconds per message: 10 M events are 20 M packets, far over the 20 s
budget. So the writer encodes the protobuf wire format itself, column-wise
with numpy: each batch of rows is written into a 2-D byte matrix, one field
at a time for all rows at once (varints are computed with vector shifts), and
the rows are then packed. Field numbers are Perfetto's (trace_packet.proto,
track_event.proto, track_descriptor.proto, counter_descriptor.proto,
interned_data.proto, debug_annotation.proto); the tests decode the output with
the `perfetto` package's generated classes. Event names and annotation names
and string values (paths, errno names) are interned per sequence
(InternedData, SEQ_INCREMENTAL_STATE_CLEARED / SEQ_NEEDS_INCREMENTAL_STATE).
Each track has its own packet sequence, so timestamps never go back within a
sequence.
"""
from __future__ import annotations

import errno as errno_mod
import os
import struct
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa

from iotrace import abi
from iotrace.analyzers.folded_stacks import frame_label
from iotrace.analyzers.intervals import sorted_unique
from iotrace.abi import ASYNC_READ_OPS, ASYNC_WRITE_OPS, LIFE_OPS, SYNC_OPS, sql_list
from iotrace.storage_io import device_name

from .loop_timeline import segments

MAX_SLICES = 2_000_000
BIN_NS = 10_000_000                  # counter bins: 10 ms
PHASE_NS = 100_000_000               # phase classification windows: 100 ms
BATCH_ROWS = 262_144                 # rows per batch of interned-data headers
ENCODE_ROWS = 4_096                  # rows encoded at once: < 1 MB, stays in cache
US, MS, S_ = 1_000, 1_000_000, 1_000_000_000
# Size limit: (merge calls shorter than T, within windows of S), tried in order.
MERGE_STEPS = [(10 * US, 1 * MS), (10 * US, 10 * MS), (100 * US, 10 * MS),
               (100 * US, 100 * MS), (1 * MS, 100 * MS), (10 * MS, 100 * MS),
               (10 * MS, 1 * S_), (100 * MS, 1 * S_), (1 * S_, 10 * S_), (None, 10 * S_),
               (None, None)]

# Counters count bytes moved: copies are both read and written.
READ_OPS = abi.READ_OPS + abi.COPY_OPS
WRITE_OPS = abi.WRITE_OPS + abi.COPY_OPS
LOCK_OPS = ("lock_contention",)

KIND_CALL, KIND_LOCK = 0, 1
KIND_NET = 3           # NFS calls and RPCs: a track of their own per process
NET_OPS = ("rpc", "nfs_read", "nfs_write", "nfs_commit", "nfs_readahead")
KIND_RDMA = 4          # kernel RDMA events (rpcrdma, ib_core, rdma_cm): a track per process
RDMA_OPS = tuple(o for o in abi.OP_NAMES if o.startswith(("rpcrdma_", "rdma_")))
FIRST_UUID = 1000          # sequence ids 0/1 are the tracing service's: stay clear of them

# ---- protobuf wire format, one message at a time (descriptors, headers) --------

VARINT, I64, LEN = 0, 1, 2
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4


def _uv(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _key(field: int, wt: int) -> bytes:
    return _uv(field << 3 | wt)


def _fv(field: int, v: int) -> bytes:
    return _key(field, VARINT) + _uv(int(v))


def _fb(field: int, b) -> bytes:
    if isinstance(b, str):
        b = b.encode("utf-8", "replace")
    return _key(field, LEN) + _uv(len(b)) + b


def _fd(field: int, x: float) -> bytes:
    return _key(field, I64) + struct.pack("<d", float(x))


def _ff64(field: int, v: int) -> bytes:
    return _key(field, I64) + struct.pack("<Q", int(v))


# Field numbers (perfetto/protos/perfetto/trace/...)
class F:
    TRACE_PACKET = 1                    # Trace.packet
    # TracePacket
    TIMESTAMP = 8
    SEQ_ID = 10                         # trusted_packet_sequence_id
    TRACK_EVENT = 11
    INTERNED_DATA = 12
    SEQ_FLAGS = 13                      # sequence_flags
    TRACK_DESCRIPTOR = 60
    # TrackEvent
    TE_DEBUG_ANNOTATIONS = 4
    TE_TYPE = 9
    TE_NAME_IID = 10
    TE_TRACK_UUID = 11
    TE_NAME = 23
    TE_DOUBLE_COUNTER_VALUE = 44
    TE_FLOW_IDS = 47                    # repeated fixed64
    TE_TERMINATING_FLOW_IDS = 48
    # DebugAnnotation
    DA_NAME_IID = 1
    DA_INT = 4
    DA_DOUBLE = 5
    DA_STRING = 6
    DA_NAME = 10
    DA_STRING_IID = 17
    # InternedData
    ID_EVENT_NAMES = 2
    ID_DEBUG_ANNOTATION_NAMES = 3
    ID_DEBUG_ANNOTATION_STRING_VALUES = 29
    # TrackDescriptor
    TD_UUID = 1
    TD_NAME = 2
    TD_PROCESS = 3
    TD_THREAD = 4
    TD_PARENT_UUID = 5
    TD_COUNTER = 8
    TD_SIBLING_ORDER_RANK = 12
    # ProcessDescriptor
    PD_PID = 1
    PD_CMDLINE = 2
    PD_PROCESS_NAME = 6
    # ThreadDescriptor
    THD_PID = 1
    THD_TID = 2
    THD_THREAD_NAME = 5
    # CounterDescriptor
    CD_UNIT = 3
    CD_UNIT_NAME = 6
    CD_Y_AXIS_SHARE_KEY = 7


def _packet(*fields: bytes) -> bytes:
    return _fb(F.TRACE_PACKET, b"".join(fields))


def _annotation(name: str, value) -> bytes:
    """A DebugAnnotation with an inline name (for the few scalar-encoded events)."""
    body = _fb(F.DA_NAME, name)
    if isinstance(value, bool) or isinstance(value, str) or value is None:
        body += _fb(F.DA_STRING, str(value))
    elif isinstance(value, int):
        body += _fv(F.DA_INT, value)
    else:
        body += _fd(F.DA_DOUBLE, float(value))
    return _fb(F.TE_DEBUG_ANNOTATIONS, body)


# ---- protobuf wire format, column-wise (numpy) for millions of rows -------------
#
# A row is a list of nodes written one after the other. Every node is written
# for all rows of a batch at once into a (rows x W) byte matrix at per-row
# cursor positions. A node absent from a row (present mask False) is written
# anyway but the cursor does not advance, so the next node overwrites it;
# bytes past a row's end are dropped when the rows are packed.

class _Const:
    def __init__(self, data: bytes, present=None):
        self.data, self.present = data, present


class _Var:
    """Field key + varint value (uint64 two's complement for negative ints)."""
    def __init__(self, key: bytes, values, present=None):
        self.key, self.present = key, present
        v = np.asarray(values)
        if v.dtype.kind == "i":
            v = v.astype(np.int64).view(np.uint64)
        self.values = v.astype(np.uint64, copy=False)


class _F64:
    def __init__(self, key: bytes, values, present=None):
        self.key, self.present = key, present
        self.values = np.ascontiguousarray(values, dtype="<f8")


class _Msg:
    def __init__(self, key: bytes, children: list, present=None):
        self.key, self.children, self.present = key, children, present


_VLIMITS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]


def _vlen(v: np.ndarray) -> tuple[np.ndarray, int]:
    """Varint lengths of uint64 values, and their maximum."""
    vmax = int(v.max()) if v.size else 0
    w = 1
    while w < 10 and vmax >= (1 << (7 * w)):
        w += 1
    n = np.ones(v.shape, np.int64)
    for k in range(w - 1):
        n += v >= _VLIMITS[k]
    return n, w


def _prepare(node, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(length as written, an upper bound of the bytes written whatever is
    present) per row."""
    if isinstance(node, _Const):
        full = np.full(n, len(node.data), np.int64)
    elif isinstance(node, _Var):
        node.L, node.w = _vlen(node.values)
        full = len(node.key) + node.L
        length = full if node.present is None else np.where(node.present, full, 0)
        node.length = length
        return length, np.full(n, len(node.key) + node.w, np.int64)
    elif isinstance(node, _F64):
        full = np.full(n, len(node.key) + 8, np.int64)
    else:
        inner = np.zeros(n, np.int64)
        inner_full = np.zeros(n, np.int64)
        for c in node.children:
            a, b = _prepare(c, n)
            inner += a
            inner_full += b
        node.inner = inner
        node.L, node.w = _vlen(inner.astype(np.uint64))
        length = len(node.key) + node.L + inner
        node.length = length if node.present is None else np.where(node.present, length, 0)
        return node.length, len(node.key) + node.w + inner_full
    length = full if node.present is None else np.where(node.present, full, 0)
    node.length = length
    return length, full


def _put_const(buf, pos, data: bytes):
    if len(data) == 1:
        buf[pos] = data[0]
        return
    idx = pos.copy()
    for b in data:
        buf[idx] = b
        idx += 1


def _put_varint(buf, pos, v: np.ndarray, L: np.ndarray, w: int):
    small = w <= 4
    if small:
        v = v.astype(np.uint32)
    idx = pos.copy()
    for k in range(w):
        byte = (v >> (7 * k)).astype(np.uint8) & 0x7F
        if k < w - 1:
            byte |= (L > k + 1).astype(np.uint8) << 7
        buf[idx] = byte
        idx += 1


def _emit(node, buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    start = pos
    if isinstance(node, _Const):
        _put_const(buf, pos, node.data)
        end = pos + len(node.data)
    elif isinstance(node, _Var):
        _put_const(buf, pos, node.key)
        p = pos + len(node.key)
        _put_varint(buf, p, node.values, node.L, node.w)
        end = p + node.L
    elif isinstance(node, _F64):
        _put_const(buf, pos, node.key)
        p = pos + len(node.key)
        raw = node.values.view(np.uint8).reshape(-1, 8)
        for k in range(8):
            buf[p + k] = raw[:, k]
        end = p + 8
    else:
        _put_const(buf, pos, node.key)
        p = pos + len(node.key)
        _put_varint(buf, p, node.inner.astype(np.uint64), node.L, node.w)
        p = p + node.L
        for c in node.children:
            p = _emit(c, buf, p)
        end = p
    if node.present is not None:
        end = np.where(node.present, end, start)
    return end


def encode_rows(nodes: list, n: int) -> np.ndarray:
    """Encodes n rows (each the concatenation of `nodes`) as one uint8 array."""
    if n == 0:
        return np.zeros(0, np.uint8)
    total = np.zeros(n, np.int64)
    reach = np.zeros(n, np.int64)
    for node in nodes:
        a, b = _prepare(node, n)
        total += a
        reach += b
    W = int(reach.max()) + 16
    buf = np.empty(n * W, np.uint8)
    pos = np.arange(n, dtype=np.int64) * W
    base = pos
    for node in nodes:
        pos = _emit(node, buf, pos)
    rowlen = pos - base
    assert np.array_equal(rowlen, total)
    mask = np.arange(W)[None, :] < rowlen[:, None]
    return buf.reshape(n, W)[mask]


K = {name: _key(getattr(F, name), wt) for name, wt in [
    ("TRACE_PACKET", LEN), ("TIMESTAMP", VARINT), ("SEQ_ID", VARINT), ("TRACK_EVENT", LEN),
    ("SEQ_FLAGS", VARINT), ("TE_TYPE", VARINT), ("TE_NAME_IID", VARINT),
    ("TE_TRACK_UUID", VARINT), ("TE_DEBUG_ANNOTATIONS", LEN), ("DA_NAME_IID", VARINT),
    ("DA_INT", VARINT), ("DA_STRING_IID", VARINT)]}
K_DOUBLE_COUNTER = _key(F.TE_DOUBLE_COUNTER_VALUE, I64)

# Interned debug annotation names (iid -> name), the same on every sequence.
ANN_NAMES = ["path", "offset", "bytes", "result", "errno", "dur_ns", "calls", "bytes_moved",
             "errors"]
ANN = {name: i + 1 for i, name in enumerate(ANN_NAMES)}


def _ann_int(name: str, values, present=None) -> _Msg:
    return _Msg(K["TE_DEBUG_ANNOTATIONS"],
                [_Const(K["DA_NAME_IID"] + _uv(ANN[name])), _Var(K["DA_INT"], values)], present)


def _ann_str_iid(name: str, iids, present=None) -> _Msg:
    return _Msg(K["TE_DEBUG_ANNOTATIONS"],
                [_Const(K["DA_NAME_IID"] + _uv(ANN[name])), _Var(K["DA_STRING_IID"], iids)],
                present)


# ---- the exporter ---------------------------------------------------------------

def _basename(path: Optional[str]) -> str:
    if not path:
        return ""
    p = path.rstrip("/")
    return p.rsplit("/", 1)[-1] or p


def _errno_text(e: int) -> str:
    name = errno_mod.errorcode.get(e)
    return f"{name} ({e})" if name else str(e)


class _Uuids:
    def __init__(self, first: int = FIRST_UUID):
        self.first = self.next = first

    def take(self) -> int:
        self.next += 1
        return self.next


def export(trace, out_path, report=None, max_slices: int = MAX_SLICES,
           bin_ns: int = BIN_NS, first_uuid: int = FIRST_UUID) -> dict:
    """Writes `trace` (an iotrace.Trace) as a Perfetto trace to out_path.
    `report`: an analyzers Report whose findings go on the findings track.
    Returns stats: events, slices, merged_calls, instants, counter_points,
    tracks, bytes, seconds and the merge thresholds used (None: no merging).
    `first_uuid`: where its track uuids (and sequence ids) start, so that the
    exports of several hosts can be concatenated into one file."""
    started = time.perf_counter()
    con = trace.con
    try:
        con.execute("set enable_progress_bar = false")
    except Exception:
        pass
    out_path = Path(out_path)
    stats = {"events": 0, "slices": 0, "merged_slices": 0, "merged_calls": 0,
             "instants": 0, "counter_points": 0, "findings": 0, "phases": 0,
             "max_slices": max_slices, "merge_below_ns": None, "merge_window_ns": None}
    t0, t1, nev = con.execute(
        "select min(ts_ns), max(ts_ns + dur_ns), count(*) from events").fetchone()
    stats["events"] = int(nev)
    if t0 is None:
        t0 = int(trace.meta.get("start_monotonic_ns") or 0)
        t1 = int(trace.meta.get("end_monotonic_ns") or t0)
    t0, t1 = int(t0), int(t1)
    uuids = _Uuids(first_uuid)
    timings = stats["timings_s"] = {}      # stage -> [wall s, CPU s of all threads]
    lap = [time.perf_counter(), time.process_time()]

    def mark(what: str) -> None:
        now = [time.perf_counter(), time.process_time()]
        prev = timings.get(what, [0.0, 0.0])
        timings[what] = [round(prev[i] + now[i] - lap[i], 3) for i in (0, 1)]
        lap[:] = now

    # Names: one row per distinct (op, file_id, path) with its event name and path.
    files = dict(con.execute("select file_id, path from files").fetchall())
    # path2 only matters for an RPC (its procedure); elsewhere it is not a key
    keys = con.execute("""select op, file_id, path,
                                 case when op = 'rpc' then path2 end as path2
                          from events group by all""").fetchall()
    name_iid: dict[str, int] = {}
    str_iid: dict[str, int] = {}
    key_rows = []
    for op, file_id, path, path2 in keys:
        p = files.get(file_id) if file_id is not None and file_id >= 0 else None
        p = p or path
        name = f"{op} {_basename(p)}" if p else str(op)
        if op == "rpc":     # "RPC nfs READ": program and procedure
            name = f"RPC {path or '?'} {path2 or '?'}"
        ni = name_iid.setdefault(name, len(name_iid) + 1)
        si = str_iid.setdefault(p, len(str_iid) + 1) if p else 0
        kind = 2 if op in LIFE_OPS else (KIND_LOCK if op in LOCK_OPS else
                                         KIND_NET if op in NET_OPS else
                                         KIND_RDMA if op in RDMA_OPS else KIND_CALL)
        key_rows.append((op, file_id, path, len(key_rows), ni, si, kind, path2))
    key_tab = pa.table({
        "op": pa.array([r[0] for r in key_rows], pa.string()),
        "file_id": pa.array([r[1] for r in key_rows], pa.int64()),
        "path": pa.array([r[2] for r in key_rows], pa.string()),
        "path2": pa.array([r[7] for r in key_rows], pa.string()),
        "key_id": pa.array([r[3] for r in key_rows], pa.int32()),
        "kind": pa.array([r[6] for r in key_rows], pa.int8())})
    key_name = np.array([r[4] for r in key_rows] or [0], np.int64)
    key_str = np.array([r[5] for r in key_rows] or [0], np.int64)
    con.register("_pf_keys", key_tab)
    mark("names")

    # Processes and threads.
    procs = {int(pid): (cmd, comm) for pid, cmd, comm in
             con.execute("select pid, cmdline, comm from processes").fetchall()}
    thread_names = {}
    for tid, pid, name in con.execute("select tid, pid, name from threads").fetchall():
        thread_names[(int(pid), int(tid))] = name

    tmp = out_path.with_name(out_path.name + ".tmp")
    out = open(tmp, "wb")
    try:
        written = 0
        descriptors: list[bytes] = []
        desc_seq = uuids.take()

        def describe(body: bytes) -> None:
            descriptors.append(_packet(_fv(F.TIMESTAMP, t0), _fv(F.SEQ_ID, desc_seq),
                                       _fb(F.TRACK_DESCRIPTOR, body)))

        proc_uuid: dict[int, int] = {}
        thread_uuid: dict[tuple[int, int], int] = {}

        def thread_track(pid: int, tid: int) -> int:
            if (pid, tid) not in thread_uuid:
                u = thread_uuid[(pid, tid)] = uuids.take()
                describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, process_track(pid)) + _fb(
                    F.TD_THREAD, _fv(F.THD_PID, pid) + _fv(F.THD_TID, tid) + _fb(
                        F.THD_THREAD_NAME, thread_names.get((pid, tid)) or f"tid {tid}")))
            return thread_uuid[(pid, tid)]

        def process_track(pid: int) -> int:
            if pid not in proc_uuid:
                u = proc_uuid[pid] = uuids.take()
                cmd, comm = procs.get(pid, (None, None))
                label = (cmd or comm or (f"pid {pid}" if pid != abi.KERNEL_PID
                                         else "kernel (RDMA transports and consumers)"))
                if len(label) > 200:
                    label = label[:197] + "..."
                pd = _fv(F.PD_PID, pid) + _fb(F.PD_PROCESS_NAME, label)
                if cmd:
                    pd += _fb(F.PD_CMDLINE, cmd)
                describe(_fv(F.TD_UUID, u) + _fb(F.TD_PROCESS, pd))
            return proc_uuid[pid]

        # ---- calls and lock waits: one slice each (or merged runs) ----
        ev = con.execute("""
            select e.pid, e.tid, k.kind, e.ts_ns, e.dur_ns, k.key_id,
                   coalesce(e."offset", -1) as off, coalesce(e.req_bytes, 0) as req,
                   coalesce(e.ret, 0) as ret
            from events e join _pf_keys k
              on e.op = k.op and e.file_id is not distinct from k.file_id
                 and e.path is not distinct from k.path
                 and (e.op <> 'rpc' or e.path2 is not distinct from k.path2)
            where k.kind in (0, 1, 3, 4)
            order by e.pid, e.tid, k.kind, e.ts_ns""").fetchnumpy()
        ev = {k: np.asarray(v) for k, v in ev.items()}
        mark("fetch calls (sorted)")
        n = len(ev["ts_ns"])
        pid, tid, kind = ev["pid"], ev["tid"], ev["kind"]
        ts = ev["ts_ns"].astype(np.int64)
        dur = ev["dur_ns"].astype(np.int64)
        brk = np.ones(n, bool)
        if n:
            brk[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]) | (kind[1:] != kind[:-1])
        first = np.flatnonzero(brk)
        track_of = np.cumsum(brk) - 1
        # Clip so that slices of a track never overlap (see the module docstring).
        end = ts + np.maximum(dur, 0)
        if n > 1:
            same_next = ~brk[1:]
            end[:-1] = np.where(same_next, np.minimum(end[:-1], ts[1:]), end[:-1])
        track_uuid = np.zeros(len(first), np.int64)
        for j, i in enumerate(first):
            p, t, kd = int(pid[i]), int(tid[i]), int(kind[i])
            pu = process_track(p)
            if kd == KIND_NET:
                # RPCs complete in rpciod, not in a thread of the job (tid -1)
                u = uuids.take()
                describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, pu) + _fb(
                    F.TD_NAME, "NFS / RPC" if t < 0 else f"NFS / RPC (tid {t})"))
            elif kd == KIND_RDMA:
                u = uuids.take()
                describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, pu) + _fb(F.TD_NAME, "RDMA"))
            elif kd == KIND_CALL:
                u = thread_uuid[(p, t)] = uuids.take()
                tname = thread_names.get((p, t)) or f"tid {t}"
                describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, pu) + _fb(
                    F.TD_THREAD, _fv(F.THD_PID, p) + _fv(F.THD_TID, t)
                    + _fb(F.THD_THREAD_NAME, tname)))
            else:
                # child of the thread's call track; the call track comes first in
                # the sort order when the thread has calls
                parent = track_uuid[j - 1] if (j > 0 and pid[first[j - 1]] == p and
                                               tid[first[j - 1]] == t) else None
                if parent is None:
                    parent = thread_uuid[(p, t)] = uuids.take()
                    tname = thread_names.get((p, t)) or f"tid {t}"
                    describe(_fv(F.TD_UUID, parent) + _fv(F.TD_PARENT_UUID, pu) + _fb(
                        F.TD_THREAD, _fv(F.THD_PID, p) + _fv(F.THD_TID, t)
                        + _fb(F.THD_THREAD_NAME, tname)))
                u = uuids.take()
                describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, int(parent))
                         + _fb(F.TD_NAME, "kernel lock waits"))
            track_uuid[j] = u

        names = {v: k for k, v in name_iid.items()}
        strings = {v: k for k, v in str_iid.items()}
        nname = len(name_iid)
        nstr = len(str_iid)
        mixed_iid = 2 * nname + 1
        errno_base = nstr          # errno e -> string iid errno_base + e
        mark("tracks")
        rows = _slice_rows(ev, ts, end, dur, track_of, key_name, key_str, max_slices, stats,
                           nname, mixed_iid, errno_base)
        mark("size limit")
        ann_names_enc = b"".join(_fb(F.ID_DEBUG_ANNOTATION_NAMES,
                                     _fv(1, i) + _fb(2, s)) for s, i in ANN.items())

        def name_of(i: int) -> str:
            if i == mixed_iid:
                return "calls (merged)"
            if i > nname:
                return names[i - nname] + " (merged)"
            return names[i]

        def string_of(i: int) -> str:
            return strings[i] if i <= nstr else _errno_text(i - errno_base)

        name_cache: dict[int, bytes] = {}
        str_cache: dict[int, bytes] = {}

        # ---- life events: instants on the process tracks ----
        life = con.execute(f"""
            select pid, tid, ts_ns, op, ret, arg from events
            where op in {sql_list(LIFE_OPS)} order by pid, ts_ns""").fetchall()
        inst = []
        life_seq: dict[int, int] = {}
        for p, t, tsv, op, ret, arg in life:
            pu = process_track(int(p))
            if int(p) not in life_seq:
                life_seq[int(p)] = uuids.take()
            seq = life_seq[int(p)]
            label, anns = _life_label(op, int(t), ret, arg)
            te = (_fv(F.TE_TYPE, TYPE_INSTANT) + _fv(F.TE_TRACK_UUID, pu) + _fb(F.TE_NAME, label)
                  + b"".join(_annotation(k, v) for k, v in anns))
            inst.append(_packet(_fv(F.TIMESTAMP, int(tsv)), _fv(F.SEQ_ID, seq),
                                _fb(F.TRACK_EVENT, te)))
        stats["instants"] = len(inst)

        # ---- counters ----
        mark("life events")
        counter_rows, pid_counters, phases = _counters(con, t0, t1, bin_ns, stats)
        mark("counters (sql)")
        for p in sorted(pid_counters):
            pu = process_track(p)
            for label, key in (("file read MB/s", "read"), ("file write MB/s", "write")):
                u = uuids.take()
                pid_counters[p][key] = u
                describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, pu) + _fb(F.TD_NAME, label)
                         + _fb(F.TD_COUNTER, _fb(F.CD_UNIT_NAME, "MB/s")
                               + _fb(F.CD_Y_AXIS_SHARE_KEY, "file MB/s")))
        job = {}
        for rank, (label, key, unit) in enumerate((
                ("job: file read MB/s", "read", "MB/s"),
                ("job: file write MB/s", "write", "MB/s"),
                ("job: file I/Os in flight", "inflight", "calls"))):
            u = job[key] = uuids.take()
            describe(_fv(F.TD_UUID, u) + _fb(F.TD_NAME, label)
                     + _fv(F.TD_SIBLING_ORDER_RANK, rank)
                     + _fb(F.TD_COUNTER, _fb(F.CD_UNIT_NAME, unit)))
        ph_uuid = uuids.take()
        describe(_fv(F.TD_UUID, ph_uuid) + _fb(F.TD_NAME, "phases")
                 + _fv(F.TD_SIBLING_ORDER_RANK, 3))
        fi_uuid = uuids.take()
        describe(_fv(F.TD_UUID, fi_uuid) + _fb(F.TD_NAME, "findings")
                 + _fv(F.TD_SIBLING_ORDER_RANK, 4))

        extra = []
        for rank, (label, unit, bins, vals) in enumerate(
                _storage_series(con, trace.meta, t0, bin_ns), start=5):
            u = uuids.take()
            describe(_fv(F.TD_UUID, u) + _fb(F.TD_NAME, label)
                     + _fv(F.TD_SIBLING_ORDER_RANK, rank)
                     + _fb(F.TD_COUNTER, _fb(F.CD_UNIT_NAME, unit)))
            extra.append((u, bins, vals))
        ctr_bytes = _encode_counters(counter_rows, pid_counters, job, t0, bin_ns, stats, extra)
        mark("counters (encode)")

        # ---- phases and findings (few events, encoded one by one) ----
        small: list[bytes] = []
        ph_seq = uuids.take()
        for (s, e, label, anns) in phases:
            te = _fb(F.TE_NAME, label) + _fv(F.TE_TRACK_UUID, ph_uuid) + b"".join(
                _annotation(k, v) for k, v in anns)
            small.append(_packet(_fv(F.TIMESTAMP, s), _fv(F.SEQ_ID, ph_seq),
                                 _fb(F.TRACK_EVENT, _fv(F.TE_TYPE, TYPE_SLICE_BEGIN) + te)))
            small.append(_packet(_fv(F.TIMESTAMP, e), _fv(F.SEQ_ID, ph_seq), _fb(
                F.TRACK_EVENT, _fv(F.TE_TYPE, TYPE_SLICE_END) + _fv(F.TE_TRACK_UUID, ph_uuid))))
        stats["phases"] = len(phases)
        fi_seq = uuids.take()
        for tsv, label, anns in _finding_events(report, t0, t1):
            te = (_fv(F.TE_TYPE, TYPE_INSTANT) + _fv(F.TE_TRACK_UUID, fi_uuid)
                  + _fb(F.TE_NAME, label) + b"".join(_annotation(k, v) for k, v in anns))
            small.append(_packet(_fv(F.TIMESTAMP, tsv), _fv(F.SEQ_ID, fi_seq),
                                 _fb(F.TRACK_EVENT, te)))
            stats["findings"] += 1
        small += _loop_tracks(report, describe, thread_track, uuids, stats)
        small += _request_tracks(con, describe, uuids, stats)
        small += _stack_tracks(con, describe, thread_track, uuids, stats,
                               ((trace.meta or {}).get("py_stacks") or {}).get("rate_hz"))

        # Every track is described before any event, then batches of slices.
        out.write(b"".join(descriptors))
        written += sum(map(len, descriptors))
        descriptors.clear()
        seen_track = np.zeros(len(first), bool)
        nrows = len(rows["ts"])
        stats["slices"] = nrows
        for a in range(0, nrows, BATCH_ROWS):
            b = min(nrows, a + BATCH_ROWS)
            tr = rows["track"][a:b]
            heads = []
            starts = np.flatnonzero(np.r_[True, tr[1:] != tr[:-1]])
            ends_ = np.r_[starts[1:], b - a]
            for s, e in zip(starts, ends_):
                j = int(tr[s])
                ni = sorted_unique(rows["name"][a + s:a + e])
                si = sorted_unique(np.concatenate([rows["path"][a + s:a + e],
                                                   rows["errstr"][a + s:a + e]]))
                si = si[si > 0]
                body = b"".join(name_cache.get(int(i)) or name_cache.setdefault(
                    int(i), _fb(F.ID_EVENT_NAMES, _fv(1, int(i)) + _fb(2, name_of(int(i)))))
                    for i in ni)
                body += b"".join(str_cache.get(int(i)) or str_cache.setdefault(
                    int(i), _fb(F.ID_DEBUG_ANNOTATION_STRING_VALUES,
                                _fv(1, int(i)) + _fb(2, string_of(int(i))))) for i in si)
                flags = SEQ_NEEDS_INCREMENTAL_STATE
                if not seen_track[j]:
                    body += ann_names_enc
                    flags = SEQ_INCREMENTAL_STATE_CLEARED
                    seen_track[j] = True
                heads.append(_packet(_fv(F.TIMESTAMP, int(rows["ts"][a + s])),
                                     _fv(F.SEQ_ID, int(track_uuid[j])),
                                     _fb(F.INTERNED_DATA, body), _fv(F.SEQ_FLAGS, flags)))
            hb = b"".join(heads)
            out.write(hb)
            written += len(hb)
            for c in range(a, b, ENCODE_ROWS):
                d = min(b, c + ENCODE_ROWS)
                sl = {k: v[c:d] for k, v in rows.items()}
                data = encode_rows(_slice_nodes(sl, track_uuid), d - c)
                out.write(memoryview(data))
                written += data.size
        del ev, rows
        mark("slices (encode)")
        mark("phases, findings")
        for chunk in (b"".join(inst), ctr_bytes, b"".join(small)):
            out.write(chunk)
            written += len(chunk)
        out.close()
        os.replace(tmp, out_path)
        mark("write")
    except BaseException:
        out.close()
        tmp.unlink(missing_ok=True)
        raise
    finally:
        try:
            con.unregister("_pf_keys")
        except Exception:
            pass
    stats["tracks"] = uuids.next - uuids.first
    stats["bytes"] = out_path.stat().st_size
    stats["seconds"] = round(time.perf_counter() - started, 3)
    stats["path"] = str(out_path)
    return stats


def _life_label(op: str, tid: int, ret, arg) -> tuple[str, list]:
    ret = int(ret or 0)
    if op == "proc_fork":
        return f"fork -> pid {ret}", [("child_pid", ret), ("tid", tid)]
    if op == "thread_new":
        return f"thread {ret} started", [("new_tid", ret), ("tid", tid)]
    if op == "proc_exec":
        return "exec", [("tid", int(arg or tid))]
    if op == "thread_exit":
        return f"thread {tid} exit", [("tid", tid), ("status", ret)]
    if op == "proc_exit":
        sig = ret & 0x7F
        what = f"killed by signal {sig}" if sig else f"exit {ret >> 8}"
        return f"process exit ({what})", [("tid", tid), ("wait_status", ret)]
    if op == "task_rename":
        return f"thread {tid} renamed", [("tid", tid)]
    return str(op), [("tid", tid)]


def _slice_rows(ev, ts, end, dur, track_of, key_name, key_str, max_slices, stats,
                nname, mixed_iid, errno_base) -> dict:
    """Per output slice: ts, end, track, name iid, annotation columns. One row per
    call, or merged runs when there are more than max_slices calls."""
    n = len(ts)
    kid = ev["key_id"].astype(np.int64)
    name = key_name[kid] if n else np.zeros(0, np.int64)
    path = key_str[kid] if n else np.zeros(0, np.int64)
    off = ev["off"].astype(np.int64)
    req = ev["req"].astype(np.int64)
    ret = ev["ret"].astype(np.int64)
    if n <= max_slices:
        err = np.where(ret < 0, errno_base - ret, 0)
        return {"ts": ts, "end": end, "track": track_of, "name": name, "path": path,
                "off": off, "req": req, "ret": ret, "errstr": err, "dur": dur,
                "calls": np.ones(n, np.int64), "errors": np.zeros(n, np.int64)}
    # Merge runs of short calls: the first (T, S) of MERGE_STEPS that fits.
    new_track = np.r_[True, track_of[1:] != track_of[:-1]]
    rel = ts - int(ts.min())
    chosen = None
    for T, S in MERGE_STEPS:
        short = (dur < T) if T is not None else np.ones(n, bool)
        if n - int(np.count_nonzero(short)) > max_slices:
            continue
        b = new_track | ~short
        b[1:] |= ~short[:-1]
        if S is not None:
            bucket = rel // S
            b[1:] |= bucket[1:] != bucket[:-1]
        if int(np.count_nonzero(b)) <= max_slices:
            chosen = (T, S, b)
            break
    if chosen is None:
        chosen = (None, None, new_track)
    T, S, b = chosen
    stats["merge_below_ns"], stats["merge_window_ns"] = T, S
    starts = np.flatnonzero(b)
    lasts = np.r_[starts[1:], n] - 1
    count = lasts - starts + 1
    merged = count > 1
    stats["merged_slices"] = int(merged.sum())
    stats["merged_calls"] = int(count[merged].sum())
    moved = np.maximum(ret, 0)
    same_name = np.minimum.reduceat(name, starts) == np.maximum.reduceat(name, starts)
    same_path = np.minimum.reduceat(path, starts) == np.maximum.reduceat(path, starts)
    r_name = np.where(merged, np.where(same_name, name[starts] + nname, mixed_iid), name[starts])
    r_path = np.where(merged & ~same_path, 0, path[starts])
    r_ret = ret[starts]
    r_err = np.where(merged, 0, np.where(r_ret < 0, errno_base - r_ret, 0))
    return {"ts": ts[starts], "end": end[lasts], "track": track_of[starts], "name": r_name,
            "path": r_path, "off": np.where(merged, -1, off[starts]),
            "req": np.where(merged, 0, req[starts]),
            "ret": np.where(merged, np.add.reduceat(moved, starts), r_ret),
            "errstr": r_err, "dur": np.add.reduceat(dur, starts), "calls": count,
            "errors": np.where(merged, np.add.reduceat((ret < 0).astype(np.int64), starts), 0),
            "merged": merged}


def _slice_nodes(r: dict, track_uuid: np.ndarray) -> list:
    """Two packets per row: the slice's BEGIN (interned name, annotations) and END."""
    seq = track_uuid[r["track"]]
    merged = r.get("merged")
    single = ~merged if merged is not None else None
    ret = r["ret"]
    ok = ret >= 0
    anns = [
        _ann_str_iid("path", r["path"], r["path"] > 0),
        _ann_int("offset", r["off"], r["off"] >= 0),
        _ann_int("bytes", r["req"], r["req"] > 0),
        _ann_int("result", ret, ok if single is None else ok & single),
        _ann_str_iid("errno", r["errstr"], r["errstr"] > 0),
        _ann_int("dur_ns", r["dur"]),
    ]
    if merged is not None:
        anns += [_ann_int("calls", r["calls"], merged),
                 _ann_int("bytes_moved", ret, merged),
                 _ann_int("errors", r["errors"], merged & (r["errors"] > 0))]
    begin = _Msg(K["TRACE_PACKET"], [
        _Var(K["TIMESTAMP"], r["ts"]),
        _Var(K["SEQ_ID"], seq),
        _Const(K["SEQ_FLAGS"] + _uv(SEQ_NEEDS_INCREMENTAL_STATE)),
        _Msg(K["TRACK_EVENT"], [
            _Const(K["TE_TYPE"] + _uv(TYPE_SLICE_BEGIN)),
            _Var(K["TE_TRACK_UUID"], seq),
            _Var(K["TE_NAME_IID"], r["name"]),
            *anns,
        ]),
    ])
    end = _Msg(K["TRACE_PACKET"], [
        _Var(K["TIMESTAMP"], r["end"]),
        _Var(K["SEQ_ID"], seq),
        _Msg(K["TRACK_EVENT"], [
            _Const(K["TE_TYPE"] + _uv(TYPE_SLICE_END)),
            _Var(K["TE_TRACK_UUID"], seq),
        ]),
    ])
    return [begin, end]


def _counters(con, t0: int, t1: int, bin_ns: int, stats: dict):
    """Per (pid, bin): file bytes read, written, and ns of file I/O in flight.
    A call's bytes and time are spread over the bins its duration covers."""
    W = int(bin_ns)
    io = f"""
        select pid, ts_ns - {t0} as s, ts_ns - {t0} + greatest(dur_ns, 0) as e,
               case when op in {sql_list(READ_OPS + ASYNC_READ_OPS)} then greatest(ret, 0)
                    else 0 end as rb,
               case when op in {sql_list(WRITE_OPS + ASYNC_WRITE_OPS)} then greatest(ret, 0)
                    else 0 end as wb
        from events
        where file_id >= 0 and op in {sql_list(READ_OPS + WRITE_OPS + SYNC_OPS + ASYNC_READ_OPS
                                               + ASYNC_WRITE_OPS)}"""
    rows = con.execute(f"""
        with io as ({io}),
        one as (select pid, s // {W} as bin, sum(rb)::double as rb, sum(wb)::double as wb,
                       sum(e - s)::double as busy
                from io where (greatest(e - 1, s)) // {W} = s // {W} group by all),
        span as (select pid, s, e, rb, wb,
                        unnest(range(s // {W}, (e - 1) // {W} + 1)) as bin
                 from io where (greatest(e - 1, s)) // {W} > s // {W}),
        spread as (select pid, bin,
                          sum(rb * (least(e, (bin + 1) * {W}) - greatest(s, bin * {W}))
                              / (e - s)) as rb,
                          sum(wb * (least(e, (bin + 1) * {W}) - greatest(s, bin * {W}))
                              / (e - s)) as wb,
                          sum(least(e, (bin + 1) * {W}) - greatest(s, bin * {W}))::double
                              as busy
                   from span group by all)
        select pid, bin, sum(rb) as rb, sum(wb) as wb, sum(busy) as busy
        from (select * from one union all select * from spread)
        group by all order by pid, bin""").fetchnumpy()
    r = {k: np.asarray(v) for k, v in rows.items()}
    pid_counters = {int(p): {} for p in np.unique(r["pid"])} if len(r["pid"]) else {}
    phases = _phases(r, t0, W, stats)
    return r, pid_counters, phases


def _points(bins: np.ndarray, vals: np.ndarray, W: int, t0: int):
    """Counter points for sorted bins: the value at each bin's start, and 0 at
    the end of each run of consecutive bins (and at the trace start)."""
    if len(bins) == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    gap_after = np.r_[bins[1:] != bins[:-1] + 1, True]
    zb = bins[gap_after] + 1
    tb = np.concatenate([bins, zb])
    tv = np.concatenate([vals, np.zeros(len(zb))])
    if bins[0] > 0:
        tb = np.r_[0, tb]
        tv = np.r_[0.0, tv]
    order = np.argsort(tb, kind="stable")
    return t0 + tb[order].astype(np.int64) * W, tv[order]


def _storage_series(con, meta: dict, t0: int, W: int) -> list:
    """Counter series below the job's: per block device (read and write MB/s,
    requests in flight; a request's bytes and time spread over the bins it
    covers) and the page cache (MB/s the job's reads, faults and async
    requests had to bring from storage). [(label, unit, bins, values)]."""
    out = []
    scale = 1e9 / W / 1e6
    r = con.execute(f"""
        with rq as (select mode as dev, ts_ns - {t0} as s,
                           ts_ns - {t0} + greatest(dur_ns, 1) as e, req_bytes,
                           flags & 255 as k
                    from events where op = 'block_rq' and ts_ns >= {t0}),
        span as (select *, unnest(range(s // {W}, (e - 1) // {W} + 1)) as bin from rq),
        part as (select *, (least(e, (bin + 1) * {W}) - greatest(s, bin * {W}))::double
                               as ns from span)
        select dev, bin,
               sum(case when k = 0 then req_bytes * ns / (e - s) else 0 end) as rb,
               sum(case when k = 1 then req_bytes * ns / (e - s) else 0 end) as wb,
               sum(ns) as busy
        from part group by all order by dev, bin""").fetchnumpy()
    devs = np.asarray(r["dev"])
    for d in np.unique(devs):
        sel = devs == d
        name = device_name(meta, int(d))
        bins = np.asarray(r["bin"])[sel].astype(np.int64)
        for label, col, mult, unit in (("read MB/s", "rb", scale, "MB/s"),
                                       ("write MB/s", "wb", scale, "MB/s"),
                                       ("requests in flight", "busy", 1.0 / W, "requests")):
            vals = np.asarray(r[col])[sel].astype(float) * mult
            nz = vals > 0
            out.append((f"device {name}: {label}", unit, bins[nz], vals[nz]))
    m = con.execute(f"""
        select (ts_ns - {t0}) // {W} as bin, sum(b)::double as b from (
            select ts_ns, arg as b from events where op in {sql_list(abi.READ_OPS)} and arg > 0
            union all select ts_ns, ret from events
                where op in ('page_fault', 'cache_fill') and ret > 0)
        where ts_ns >= {t0} group by all order by bin""").fetchnumpy()
    if len(m["bin"]):
        out.append(("job: from storage (page-cache misses) MB/s", "MB/s",
                    np.asarray(m["bin"]).astype(np.int64), np.asarray(m["b"]) * scale))
    return out


def _encode_counters(r, pid_counters, job, t0, W, stats, extra=()) -> bytes:
    ts_l, val_l, uuid_l = [], [], []
    scale = 1e9 / W / 1e6          # bytes in a bin -> MB/s

    def add(uuid, bins, vals):
        t, v = _points(bins.astype(np.int64), vals, W, t0)
        ts_l.append(t)
        val_l.append(v)
        uuid_l.append(np.full(len(t), uuid, np.int64))

    pids, bins = r["pid"], r["bin"].astype(np.int64)
    if len(pids):
        starts = np.flatnonzero(np.r_[True, pids[1:] != pids[:-1]])
        ends = np.r_[starts[1:], len(pids)]
        for s, e in zip(starts, ends):
            p = int(pids[s])
            for key in ("read", "write"):
                col = r["rb" if key == "read" else "wb"][s:e]
                nz = col > 0
                add(pid_counters[p][key], bins[s:e][nz], col[nz] * scale)
        nb = int(bins.max()) + 1
        for key, col, mult in (("read", "rb", scale), ("write", "wb", scale),
                               ("inflight", "busy", 1.0 / W)):
            tot = np.bincount(bins, weights=r[col], minlength=nb)
            nz = np.flatnonzero(tot > 0)
            add(job[key], nz, tot[nz] * mult)
    for uuid, bins, vals in extra:
        if len(bins):
            add(uuid, bins, vals)
    if not ts_l:
        return b""
    ts = np.concatenate(ts_l)
    val = np.concatenate(val_l)
    uu = np.concatenate(uuid_l)
    stats["counter_points"] = len(ts)
    parts = []
    for a in range(0, len(ts), ENCODE_ROWS):
        b = min(len(ts), a + ENCODE_ROWS)
        nodes = [_Msg(K["TRACE_PACKET"], [
            _Var(K["TIMESTAMP"], ts[a:b]),
            _Var(K["SEQ_ID"], uu[a:b]),
            _Msg(K["TRACK_EVENT"], [
                _Const(K["TE_TYPE"] + _uv(TYPE_COUNTER)),
                _Var(K["TE_TRACK_UUID"], uu[a:b]),
                _F64(K_DOUBLE_COUNTER, val[a:b]),
            ]),
        ])]
        parts.append(encode_rows(nodes, b - a).tobytes())
    return b"".join(parts)


def _phases(r, t0: int, W: int, stats) -> list:
    """Heuristic phases from 100 ms windows of the job's file bytes."""
    if not len(r["bin"]):
        return []
    per = max(1, PHASE_NS // W)
    win = r["bin"].astype(np.int64) // per
    nw = int(win.max()) + 1
    rb = np.bincount(win, weights=r["rb"], minlength=nw)
    wb = np.bincount(win, weights=r["wb"], minlength=nw)
    cls = np.where((rb == 0) & (wb == 0), 0, np.where(rb >= wb, 1, 2))
    starts = np.flatnonzero(np.r_[True, cls[1:] != cls[:-1]])
    ends = np.r_[starts[1:], nw]
    out = []
    seen_read = False
    wn = per * W
    for s, e in zip(starts, ends):
        c = int(cls[s])
        if c == 1:
            label = "start-up load" if not seen_read and s * wn < 0.2 * nw * wn + 1e9 \
                else "reading"
            seen_read = True
        elif c == 2:
            label = "write burst"
        else:
            label = "no file I/O"
        secs = (e - s) * wn / 1e9
        anns = [("bytes_read", int(rb[s:e].sum())), ("bytes_written", int(wb[s:e].sum())),
                ("read_MB_per_s", round(rb[s:e].sum() / secs / 1e6, 3)),
                ("write_MB_per_s", round(wb[s:e].sum() / secs / 1e6, 3))]
        out.append((t0 + int(s) * wn, t0 + int(e) * wn, label, anns))
    return out


MAX_REQUEST_SLICES = 200_000


def _request_tracks(con, describe, uuids, stats) -> list[bytes]:
    """Per endpoint (host:port of the job's HTTP requests), a track "endpoint
    HOST:PORT" with one slice per request, named by its S3 operation or
    method and key; requests in flight together go on numbered lanes under
    it (slices of one track must nest)."""
    try:
        reqs = con.execute(f"""
            select host, port, ts_ns, dur_ns, coalesce(s3_op, method), bucket, key, status,
                   bytes, ttfb_ns, error_code, range, retry, pid, tid
            from requests order by host, port, ts_ns limit {MAX_REQUEST_SLICES}""").fetchall()
        total = con.execute("select count(*) from requests").fetchone()[0]
    except Exception:   # noqa: BLE001 - a trace without the requests table
        return []
    stats["requests"] = len(reqs)
    stats["requests_not_drawn"] = total - len(reqs)
    out: list[bytes] = []
    endpoint: dict[tuple, tuple[int, list]] = {}   # (host, port) -> (uuid, lanes)
    for (host, port, ts, dur, op, bucket, key, status, nbytes, ttfb, code, rng, retry,
         pid, tid) in reqs:
        if (host, port) not in endpoint:
            u = uuids.take()
            describe(_fv(F.TD_UUID, u) + _fb(F.TD_NAME, f"endpoint {host}:{port}")
                     + _fv(F.TD_SIBLING_ORDER_RANK, 10 + len(endpoint)))
            endpoint[(host, port)] = (u, [])
        parent, lanes = endpoint[(host, port)]
        end = ts + max(dur, 1)
        for lane in lanes:            # the first lane free at ts
            if lane[2] <= ts:
                break
        else:
            lane = [uuids.take(), uuids.take(), 0]
            describe(_fv(F.TD_UUID, lane[0]) + _fv(F.TD_PARENT_UUID, parent)
                     + _fb(F.TD_NAME, f"{host}:{port} #{len(lanes) + 1}"))
            lanes.append(lane)
        lane[2] = end
        name = f"{op} {key}" if key else f"{op} {bucket or ''}".strip()
        anns = [("status", status if status is not None else "none"), ("bytes", nbytes or 0),
                ("pid", pid), ("tid", tid)]
        if ttfb is not None:
            anns.append(("ttfb_ms", round(ttfb / 1e6, 3)))
        anns += [(k, v) for k, v in (("error_code", code), ("range", rng)) if v]
        if retry:
            anns.append(("retry", 1))
        begin = (_fv(F.TE_TYPE, TYPE_SLICE_BEGIN) + _fv(F.TE_TRACK_UUID, lane[0])
                 + _fb(F.TE_NAME, name) + b"".join(_annotation(k, v) for k, v in anns))
        out.append(_packet(_fv(F.TIMESTAMP, ts), _fv(F.SEQ_ID, lane[1]),
                           _fb(F.TRACK_EVENT, begin)))
        out.append(_packet(_fv(F.TIMESTAMP, end), _fv(F.SEQ_ID, lane[1]), _fb(
            F.TRACK_EVENT, _fv(F.TE_TYPE, TYPE_SLICE_END) + _fv(F.TE_TRACK_UUID, lane[0]))))
    return out


def _loop_tracks(report, describe, thread_track, uuids, stats) -> list[bytes]:
    """Per training loop, a track "training loop" under its thread: a slice per
    state (compute, data wait named by its main cause, checkpoint), and a flow
    from each wait to an instant on the thread that ended it (the worker's
    hand-off, "wakes the training loop")."""
    states = getattr(report, "loop_states", None) or []
    win = (getattr(report, "verdict", None) or {}).get("training_window") or {}
    if not states or win.get("start_ns") is None:
        return []
    lo, hi = int(win["start_ns"]), int(win["end_ns"])
    out: list[bytes] = []
    waker_track: dict[tuple[int, int], tuple[int, int]] = {}     # (pid, tid) -> (uuid, seq)
    flow = uuids.first << 20       # flow ids unique across hosts' concatenated exports
    stats["loop_states"] = stats["loop_flows"] = 0
    instants = []
    for st in states:
        u = uuids.take()
        describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, thread_track(st.pid, st.tid))
                 + _fb(F.TD_NAME, "training loop"))
        seq = uuids.take()
        for seg in segments(st, lo, hi):
            anns = [("state", seg.state)] + [(f"{k}_ms", v) for k, v in seg.causes_ms.items()]
            begin = _fv(F.TE_TYPE, TYPE_SLICE_BEGIN) + _fv(F.TE_TRACK_UUID, u) + _fb(
                F.TE_NAME, seg.label) + b"".join(_annotation(k, v) for k, v in anns)
            if seg.waker:
                tid, pid, wake = seg.waker
                flow += 1
                begin += _ff64(F.TE_FLOW_IDS, flow)
                instants.append((wake, pid, tid, flow, st.tid))
                begin += _annotation("woken_by_tid", tid)
            out.append(_packet(_fv(F.TIMESTAMP, seg.start_ns), _fv(F.SEQ_ID, seq),
                               _fb(F.TRACK_EVENT, begin)))
            out.append(_packet(_fv(F.TIMESTAMP, seg.end_ns), _fv(F.SEQ_ID, seq), _fb(
                F.TRACK_EVENT, _fv(F.TE_TYPE, TYPE_SLICE_END) + _fv(F.TE_TRACK_UUID, u))))
            stats["loop_states"] += 1
    for wake, pid, tid, fid, loop_tid in sorted(instants):
        if (pid, tid) not in waker_track:
            wu = uuids.take()
            describe(_fv(F.TD_UUID, wu) + _fv(F.TD_PARENT_UUID, thread_track(pid, tid))
                     + _fb(F.TD_NAME, "wakes the training loop"))
            waker_track[(pid, tid)] = (wu, uuids.take())
        wu, wseq = waker_track[(pid, tid)]
        te = (_fv(F.TE_TYPE, TYPE_INSTANT) + _fv(F.TE_TRACK_UUID, wu)
              + _fb(F.TE_NAME, f"wakes the training loop (tid {loop_tid})")
              + _ff64(F.TE_TERMINATING_FLOW_IDS, fid))
        out.append(_packet(_fv(F.TIMESTAMP, wake), _fv(F.SEQ_ID, wseq),
                           _fb(F.TRACK_EVENT, te)))
        stats["loop_flows"] += 1
    return out


STACK_TRACK = "Python stack (sampled)"
MAX_STACK_SLICES = 500_000      # of all threads; beyond, the deepest frames go first
# a gap of more mean sampling intervals than this, and of more than GAP_S,
# ends all frames: the intervals are exponential (over 10 of them: 1 in
# 20,000), and failed reads (of a thread running Python, up to a fifth of
# them in a tight loop) make gaps of several
GAP_SAMPLES, GAP_S = 10, 0.1


def _stack_tracks(con, describe, thread_track, uuids, stats, rate_hz: Optional[float] = None,
                  max_slices: int = MAX_STACK_SLICES) -> list[bytes]:
    """Per thread with Python stack samples, a child track "Python stack
    (sampled)": its samples as nested slices, one per frame (outermost at
    the top), from the first sample that frame is on the stack in to the
    first it is not in (a sample stands for the time to the next one; where
    the next is more than GAP_SAMPLES mean intervals and GAP_S away, the
    frames end one interval after it; a failed read is no sample). Times are as fine as the sampling:
    10 ms at 100 Hz. Over max_slices in all, stacks are cut to the depth
    that fits (stats: stack_slices, stack_depth_cut)."""
    stats["stack_slices"], stats["stack_depth_cut"] = 0, None
    # a failed read is no sample: the state then is unknown, and the frames
    # on either side of it are taken to go on (a gap too long ends them)
    r = con.execute("""select pid, tid, ts_ns, stack_id from pystacks
                       where tid > 0 and stack_id >= 0 order by tid, ts_ns""").fetchnumpy()
    if len(r["ts_ns"]) == 0:
        return []
    frames: dict[int, list[str]] = {}
    for sid, fn, f in con.execute("""select stack_id, function, file from pyframes
                                     order by stack_id, depth""").fetchall():
        frames.setdefault(int(sid), []).append(frame_label(fn, f))
    pid, tid = np.asarray(r["pid"]), np.asarray(r["tid"])
    ts, sid = np.asarray(r["ts_ns"], np.int64), np.asarray(r["stack_id"], np.int64)
    cuts = np.flatnonzero(np.r_[True, tid[1:] != tid[:-1], True])
    runs = []           # per thread: (pid, tid, [(start, end, depth, name)])
    for a, b in zip(cuts[:-1], cuts[1:]):
        t0, s0 = ts[a:b], sid[a:b]
        per = int(1e9 / rate_hz) if rate_hz else \
            int((t0[-1] - t0[0]) / (b - a - 1)) if b - a > 1 else 10_000_000
        gapped = np.r_[False, np.diff(t0) > max(GAP_SAMPLES * per, GAP_S * 1e9)]
        # a sample with its predecessor's stack and no gap before it changes
        # nothing: only the others are walked (an idle thread's minutes of
        # one stack are one step)
        walk = np.r_[True, s0[1:] != s0[:-1]] | gapped
        t, st_ids, gap_from = t0[walk], s0[walk], np.r_[t0[0], t0[:-1]][walk]
        gapped = gapped[walk]
        open_: list[tuple[str, int]] = []       # (name, start)
        out = []
        for i in range(len(t)):
            st = frames.get(int(st_ids[i]), [])
            now = int(t[i])
            prev_end = int(gap_from[i]) + per if gapped[i] else now
            keep = 0
            if prev_end == now:
                while keep < min(len(open_), len(st)) and open_[keep][0] == st[keep]:
                    keep += 1
            for d in range(len(open_) - 1, keep - 1, -1):
                out.append((open_[d][1], min(prev_end, now), d, open_[d][0]))
            open_ = open_[:keep] + [(name, now) for name in st[keep:]]
        end = int(t0[-1]) + per
        for d in range(len(open_) - 1, -1, -1):
            out.append((open_[d][1], end, d, open_[d][0]))
        # two samples at one instant (none since pystacks keeps one a read,
        # in older traces): what the first opened ends as it begins, and an
        # end sorted before its begin would leave an END without a BEGIN
        out = [x for x in out if x[1] > x[0]]
        runs.append((int(pid[a]), int(tid[a]), out))
    total = sum(len(o) for _, _, o in runs)
    depth = None
    if total > max_slices:              # the deepest frames go first
        hist = np.bincount(np.array([d for _, _, o in runs for _, _, d, _ in o]))
        fits = np.flatnonzero(np.cumsum(hist) <= max_slices)
        depth = int(fits[-1]) + 1 if len(fits) else 0
        stats["stack_depth_cut"] = depth
    pkts: list[bytes] = []
    for p, t_, out in runs:
        if depth is not None:
            out = [x for x in out if x[2] < depth]
        if not out:
            continue
        u = uuids.take()
        seq = uuids.take()
        describe(_fv(F.TD_UUID, u) + _fv(F.TD_PARENT_UUID, thread_track(p, t_))
                 + _fb(F.TD_NAME, STACK_TRACK))
        pkts.append(_stack_packets(out, u, seq))
        stats["stack_slices"] += len(out)
    return pkts


def _stack_packets(out: list, track: int, seq: int) -> bytes:
    """One thread's stack slices ((start, end, depth, name)) as packets on
    their own sequence: the frame names interned in its first packet, then
    the begins and ends in time order (at one instant ends, deepest first,
    before begins, outermost first), encoded column-wise (encode_rows)."""
    names = sorted({x[3] for x in out})
    iid = {n: i + 1 for i, n in enumerate(names)}
    n = len(out)
    start = np.fromiter((x[0] for x in out), np.int64, n)
    end = np.fromiter((x[1] for x in out), np.int64, n)
    dep = np.fromiter((x[2] for x in out), np.int64, n)
    name = np.fromiter((iid[x[3]] for x in out), np.int64, n)
    when = np.r_[start, end]
    begin = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    order = np.lexsort((np.r_[dep, -dep], begin, when))
    when, begin, name = when[order], begin[order], np.r_[name, name][order]
    head = _packet(_fv(F.TIMESTAMP, int(when[0])), _fv(F.SEQ_ID, seq),
                   _fb(F.INTERNED_DATA, b"".join(_fb(F.ID_EVENT_NAMES, _fv(1, i) + _fb(2, nm))
                                                 for nm, i in iid.items())),
                   _fv(F.SEQ_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED))
    fixed = (_Const(K["SEQ_ID"] + _uv(seq)),
             _Const(K["SEQ_FLAGS"] + _uv(SEQ_NEEDS_INCREMENTAL_STATE)))
    parts = [head]
    for c in range(0, len(when), ENCODE_ROWS):
        sl = slice(c, c + ENCODE_ROWS)
        row = _Msg(K["TRACE_PACKET"], [_Var(K["TIMESTAMP"], when[sl]), *fixed, _Msg(
            K["TRACK_EVENT"], [
                _Var(K["TE_TYPE"], np.where(begin[sl], TYPE_SLICE_BEGIN, TYPE_SLICE_END)),
                _Const(K["TE_TRACK_UUID"] + _uv(track)),
                _Var(K["TE_NAME_IID"], name[sl], present=begin[sl])])])
        parts.append(encode_rows([row], len(when[sl])).tobytes())
    return b"".join(parts)


def _finding_events(report, t0: int, t1: int) -> list:
    if report is None:
        return []
    evs = []
    v = getattr(report, "verdict", None) or {}
    if v.get("summary"):
        evs.append((t0, f"verdict: {v.get('status', '')}", [("summary", v["summary"])]))
    for f in report.findings:
        for ex in f.examples or []:
            tsv = ex.get("ts_ns")
            if tsv is None:
                continue
            tsv = min(max(int(tsv), t0), t1)
            anns = [("finding", f.id), ("severity", f.severity), ("summary", f.summary)]
            if ex.get("what"):
                anns.append(("what", str(ex["what"])))
            for k in ("pid", "tid"):
                if ex.get(k) is not None:
                    anns.append((k, int(ex[k])))
            anns.append(("recommendation", f.recommendation))
            evs.append((tsv, f"{f.severity}: {f.title}", anns))
    evs.sort(key=lambda x: x[0])
    return evs
