"""Spool segment -> Arrow table of events (the `events/*.parquet` rows).

A segment is K.ev (fixed 96-byte records, read zero-copy into numpy) and
K.str (payloads: u32 record index, u32 length, bytes). Column work is
vectorised; only events that change the model (opens, dups, chdir, forks...)
or carry a string go through model.apply one by one.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa

from .abi import (ANON_INODE_FS_MAGIC, EF_NET_ADDR, EF_NET_DATA, EF_UNFINISHED, EVENT_DTYPE,
                  NAMED_PAYLOAD_OPS, OP, OP_NAMES,
                  S_IFBLK, S_IFCHR,
                  S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK)
from .http_head import peer_address, summarize
from .model import Model

# Ops that pass through the model (state changes or string payloads).
MODEL_OPS = np.zeros(len(OP_NAMES), dtype=bool)
for _name in ("open", "openat", "openat2", "creat", "close", "close_range", "dup", "dup2",
              "dup3", "fcntl", "chdir", "fchdir", "stat", "lstat", "newfstatat", "statx",
              "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
              "rmdir", "mmap", "munmap", "proc_fork", "thread_new", "proc_exec",
              "thread_exit", "proc_exit", "task_rename") + NAMED_PAYLOAD_OPS:
    MODEL_OPS[OP[_name]] = True

# Records of a file that carry no path and no fd (faults, block requests)
STORAGE_OPS = frozenset((OP["page_fault"], OP["block_rq"], OP["cache_fill"]))

FD_KINDS = ["none", "file", "dir", "socket", "pipe", "anon", "chr", "blk", "link", "other"]

EVENTS_SCHEMA = pa.schema([
    ("ts_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("pid", pa.int32()),
    ("tid", pa.int32()),
    ("op", pa.dictionary(pa.int16(), pa.string())),
    ("fd", pa.int32()),
    ("offset", pa.int64()),
    ("req_bytes", pa.int64()),
    ("ret", pa.int64()),
    ("file_id", pa.int64()),
    ("fd_kind", pa.dictionary(pa.int8(), pa.string())),
    ("flags", pa.int64()),
    ("mode", pa.int32()),
    ("arg", pa.int64()),
    ("path", pa.dictionary(pa.int32(), pa.string())),
    ("path2", pa.dictionary(pa.int32(), pa.string())),
    ("eflags", pa.int16()),
    ("chan_ino", pa.int64()),
    ("http", pa.dictionary(pa.int32(), pa.string())),
])


def read_segment(ev_path: Path) -> tuple[np.ndarray, dict[int, bytes]]:
    """Reads one closed segment: records and {record index: payload}."""
    raw = ev_path.read_bytes()
    usable = len(raw) - len(raw) % EVENT_DTYPE.itemsize  # a torn tail is dropped
    recs = np.frombuffer(raw[:usable], dtype=EVENT_DTYPE)
    payloads: dict[int, bytes] = {}
    str_path = ev_path.with_suffix(".str")
    if str_path.exists():
        data = str_path.read_bytes()
        off = 0
        while off + 8 <= len(data):
            idx, n = struct.unpack_from("<II", data, off)
            payloads[idx] = data[off + 8: off + 8 + n]
            off += 8 + n
    return recs, payloads


def fd_kind_codes(recs: np.ndarray) -> np.ndarray:
    imode = recs["imode"].astype(np.int32) & S_IFMT
    magic = recs["fs_magic"]
    conds = [
        recs["fd"] < 0,
        imode == S_IFREG,
        imode == S_IFDIR,
        imode == S_IFSOCK,
        imode == S_IFIFO,
        (imode == 0) & (magic == ANON_INODE_FS_MAGIC),
        imode == S_IFCHR,
        imode == S_IFBLK,
        imode == S_IFLNK,
        imode == 0,
    ]
    choices = [0, 1, 2, 3, 4, 5, 6, 7, 8, 0]
    return np.select(conds, choices, default=9).astype(np.int8)


def channel_inodes(recs: np.ndarray) -> pa.Array:
    """Inode of a pipe or socket the call used (null otherwise): both ends of a
    pipe share it, so it links a loader worker's writes to the loop's reads."""
    imode = recs["imode"].astype(np.int32) & S_IFMT
    chan = ((imode == S_IFIFO) | (imode == S_IFSOCK)) & (recs["ino"] != 0)
    return pa.array(recs["ino"].view(np.int64), mask=~chan)


def _dict_column(idx: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(idx, type=pa.int32(), mask=idx < 0), pa.array(values, type=pa.string()))


def convert(recs: np.ndarray, payloads: dict[int, bytes], model: Model) -> pa.Table:
    """Replays the segment through the model and builds its events table,
    sorted by ts_ns."""
    n = len(recs)
    file_id = np.full(n, -1, dtype=np.int64)
    path_idx = np.full(n, -1, dtype=np.int32)
    path2_idx = np.full(n, -1, dtype=np.int32)
    path_values: list[str] = []
    path_lookup: dict[str, int] = {}

    def intern(s: str) -> int:
        i = path_lookup.get(s)
        if i is None:
            i = path_lookup[s] = len(path_values)
            path_values.append(s)
        return i

    ops = recs["op"]
    in_range = ops < len(OP_NAMES)
    is_model = np.zeros(n, dtype=bool)
    is_model[in_range] = MODEL_OPS[ops[in_range]]
    # a call that had not returned when the trace stopped changed nothing yet
    is_model &= (recs["eflags"] & EF_UNFINISHED) == 0
    overrides: dict[int, int] = {}
    for i in np.flatnonzero(is_model):
        e = recs[i]
        path, path2, fid = model.apply(e, payloads.get(int(i)))
        if path is not None:
            path_idx[i] = intern(path)
        if path2 is not None:
            path2_idx[i] = intern(path2)
        if fid != -2:
            overrides[int(i)] = fid

    # file_id for every event on a regular file: (dev, ino) -> id. Consecutive
    # events mostly hit the same file, so only the heads of runs are looked up.
    sel = np.flatnonzero(((recs["imode"] & S_IFMT) == S_IFREG) & (recs["ino"] != 0))
    if len(sel):
        dev, ino = recs["dev"][sel], recs["ino"][sel]
        heads = np.flatnonzero(np.concatenate(
            ([True], (dev[1:] != dev[:-1]) | (ino[1:] != ino[:-1]))))
        run_ids = np.empty(len(heads), dtype=np.int64)
        cache: dict[tuple[int, int], int] = {}
        for j, h in enumerate(heads.tolist()):
            key = (int(dev[h]), int(ino[h]))
            fid = cache.get(key)
            if fid is None:
                row = recs[sel[h]]
                if int(row["op"]) in STORAGE_OPS and key not in model.files:
                    fid = -1   # no path to give it: counted below, not a nameless file
                else:
                    # the fd table's path only for a file not named yet (a
                    # lookup for a named one would count a reused fd for nothing)
                    known = model.files.get(key)
                    path = (None if known is not None and known.path is not None
                            else model.fd_path(int(row["pid"]), int(row["fd"]), key))
                    fid = cache[key] = model.file_id(
                        key[0], key[1], int(row["imode"]), int(row["fs_magic"]), path)
            run_ids[j] = fid
        file_id[sel] = np.repeat(run_ids, np.diff(np.append(heads, len(sel))))
        lost = (file_id[sel] < 0) & np.isin(recs["op"][sel], list(STORAGE_OPS))
        model.counters["storage_rows_without_file"] += int(lost.sum())
    for i, fid in overrides.items():
        file_id[i] = fid

    # socket and TLS calls that moved an HTTP message's start, and connects:
    # the message's kept part (http_head.py), the peer's address as the path
    http_idx = np.full(n, -1, dtype=np.int32)
    http_values: list[str] = []
    for i in np.flatnonzero(recs["eflags"] & (EF_NET_DATA | EF_NET_ADDR)).tolist():
        data = payloads.get(i)
        if not data:
            continue
        if recs["eflags"][i] & EF_NET_ADDR:
            peer = peer_address(data)
            if peer:
                path_idx[i] = intern(peer)
            continue
        text = summarize(data)
        if text is None:
            model.counters["http_captures_not_http"] += 1
            continue
        http_idx[i] = len(http_values)
        http_values.append(text)

    op_codes = np.where(in_range, ops, 0).astype(np.int16)
    table = pa.table({
        "ts_ns": recs["ts_ns"].astype(np.int64),
        "dur_ns": recs["dur_ns"].astype(np.int64),
        "pid": recs["pid"],
        "tid": recs["tid"],
        "op": pa.DictionaryArray.from_arrays(pa.array(op_codes), pa.array(OP_NAMES)),
        "fd": recs["fd"],
        "offset": recs["offset"],
        "req_bytes": recs["req_bytes"].astype(np.int64),
        "ret": recs["ret"],
        "file_id": file_id,
        "fd_kind": pa.DictionaryArray.from_arrays(pa.array(fd_kind_codes(recs)),
                                                  pa.array(FD_KINDS)),
        "flags": recs["flags"].astype(np.int64),
        "mode": recs["mode"].astype(np.int32),
        "arg": recs["arg"].view(np.int64),
        "path": _dict_column(path_idx, path_values),
        "path2": _dict_column(path2_idx, path_values),
        "eflags": recs["eflags"].astype(np.int16),
        "chan_ino": channel_inodes(recs),
        "http": _dict_column(http_idx, http_values),
    }, schema=EVENTS_SCHEMA)
    ts = recs["ts_ns"]
    if n > 1 and not (ts[1:] >= ts[:-1]).all():
        table = table.take(pa.array(np.argsort(ts, kind="stable")))
    return table
