"""Profile mode's tables: the kernel's sums (bpf/profile.h) as Parquet.

`iotrace run --profile` keeps no record per call: the kernel sums the calls
per process, file, op, request-size and latency bucket (the whole run) and
per second, process and op. The recorder moves them to the spool
(profile-calls.bin, replaced at each snapshot; profile-rates.bin, appended
each second); this module writes them as

  profile/calls.parquet  pid, op, file_id, size and latency bucket bounds,
                         calls, errors, bytes, req_bytes, dur_ns, cache_bytes
                         (calls that found the kernel's table full: keyless)
  profile/rates.parquet  ts_ns (the second's start), pid, op, calls, bytes,
                         dur_ns, cache_bytes
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .abi import OP_NAMES
from .model import Model

# struct iot_prof_key + struct iot_prof_val (bpf/iotrace.h)
CALL_DTYPE = np.dtype([
    ("ino", "<u8"), ("dev", "<u4"), ("pid", "<u4"), ("op", "<u2"),
    ("size_bucket", "u1"), ("lat_bucket", "u1"), ("kpad", "<u4"),
    ("calls", "<u8"), ("errors", "<u8"), ("bytes", "<u8"), ("req_bytes", "<u8"),
    ("dur_ns", "<u8"), ("cache_bytes", "<u8"), ("fs_magic", "<u4"), ("imode", "<u2"),
    ("vpad", "<u2"),
])
assert CALL_DTYPE.itemsize == 24 + 56

# struct iot_prof_rate_key + struct iot_prof_rate_val
RATE_DTYPE = np.dtype([
    ("sec", "<u4"), ("pid", "<u4"), ("op", "<u2"), ("ftype", "<u2"), ("dev", "<u4"),
    ("calls", "<u8"), ("bytes", "<u8"), ("dur_ns", "<u8"), ("cache_bytes", "<u8"),
])
assert RATE_DTYPE.itemsize == 16 + 32

# struct iot_prof_wake_key + struct iot_prof_wake_val (recorder --loop-waits)
WAKE_DTYPE = np.dtype([
    ("sec", "<u4"), ("pid", "<u4"), ("tid", "<u4"), ("waker_pid", "<u4"),
    ("waker_tid", "<u4"), ("pad", "<u4"), ("wakes", "<u8"), ("dur_ns", "<u8"),
])
assert WAKE_DTYPE.itemsize == 24 + 16

# struct iot_prof_file_key + struct iot_prof_file_val (recorder --file-sums)
FILE_DTYPE = np.dtype([
    ("pid", "<u4"), ("dev", "<u4"), ("ino", "<u8"), ("calls", "<u8"), ("read_bytes", "<u8"),
    ("write_bytes", "<u8"), ("cache_bytes", "<u8"), ("dur_ns", "<u8"),
])
assert FILE_DTYPE.itemsize == 16 + 40

KEYLESS_BUCKET = 255   # the calls that found the kernel's table full

CALLS_SCHEMA = pa.schema([
    ("pid", pa.int32()), ("op", pa.string()), ("file_id", pa.int64()),
    ("req_bytes_min", pa.int64()), ("req_bytes_max", pa.int64()),
    ("dur_ns_min", pa.int64()), ("dur_ns_max", pa.int64()),
    ("calls", pa.int64()), ("errors", pa.int64()), ("bytes", pa.int64()),
    ("req_bytes", pa.int64()), ("dur_ns", pa.int64()), ("cache_bytes", pa.int64()),
    ("keyless", pa.bool_()),
])
RATES_SCHEMA = pa.schema([
    ("ts_ns", pa.int64()), ("pid", pa.int32()), ("op", pa.string()),
    ("calls", pa.int64()), ("bytes", pa.int64()), ("dur_ns", pa.int64()),
    ("cache_bytes", pa.int64()),
])


def bucket_bounds(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[min, max] of bucket b (bpf/profile.h): 0 -> [0, 0], 1 -> [1, 1],
    k >= 2 -> [2^(k-2) + 1, 2^(k-1)] (a power of two tops its bucket)."""
    b = b.astype(np.int64)
    hi = np.where(b <= 1, b, np.left_shift(1, np.clip(b - 1, 0, 62)))
    lo = np.where(b <= 1, b, np.left_shift(1, np.clip(b - 2, 0, 62)) + 1)
    return lo, hi


def read_rows(path: Path, dtype: np.dtype) -> np.ndarray:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return np.zeros(0, dtype)
    whole = len(raw) // dtype.itemsize * dtype.itemsize   # a torn last row is left out
    return np.frombuffer(raw[:whole], dtype=dtype)


def _op_names(ops: np.ndarray) -> pa.Array:
    names = np.array(OP_NAMES + ["unknown"], dtype=object)
    return pa.array(names[np.minimum(ops.astype(np.int64), len(OP_NAMES))], pa.string())


def calls_table(rows: np.ndarray, model: Model) -> pa.Table:
    keyless = rows["size_bucket"] == KEYLESS_BUCKET
    # regular files get their file_id (named by the opens the trace kept)
    file_id = np.fromiter(
        (model.file_id(int(r["dev"]), int(r["ino"]), int(r["imode"]), int(r["fs_magic"]), None)
         for r in rows), dtype=np.int64, count=len(rows))
    slo, shi = bucket_bounds(np.where(keyless, 0, rows["size_bucket"]))
    dlo, dhi = bucket_bounds(np.where(keyless, 0, rows["lat_bucket"]))
    nul = pa.array(keyless)
    return pa.table({
        "pid": rows["pid"].astype(np.int32), "op": _op_names(rows["op"]), "file_id": file_id,
        "req_bytes_min": pa.array(slo, mask=keyless), "req_bytes_max": pa.array(shi, mask=keyless),
        "dur_ns_min": pa.array(dlo, mask=keyless), "dur_ns_max": pa.array(dhi, mask=keyless),
        "calls": rows["calls"].astype(np.int64), "errors": rows["errors"].astype(np.int64),
        "bytes": rows["bytes"].astype(np.int64), "req_bytes": rows["req_bytes"].astype(np.int64),
        "dur_ns": rows["dur_ns"].astype(np.int64),
        "cache_bytes": rows["cache_bytes"].astype(np.int64), "keyless": nul,
    }, schema=CALLS_SCHEMA)


def rates_table(rows: np.ndarray) -> pa.Table:
    # a second may come in two rows (moved out, then a late call re-created it)
    return pa.table({
        "ts_ns": rows["sec"].astype(np.int64) * 1_000_000_000,
        "pid": rows["pid"].astype(np.int32), "op": _op_names(rows["op"]),
        "calls": rows["calls"].astype(np.int64), "bytes": rows["bytes"].astype(np.int64),
        "dur_ns": rows["dur_ns"].astype(np.int64),
        "cache_bytes": rows["cache_bytes"].astype(np.int64),
    }, schema=RATES_SCHEMA)


def write_profile(spool: Path, root: Path, model: Model,
                  owner: Optional[tuple[int, int]] = None) -> dict:
    """Writes root/profile/{calls,rates}.parquet from the spool; returns the
    counts for meta.json."""
    calls = read_rows(spool / "profile-calls.bin", CALL_DTYPE)
    rates = read_rows(spool / "profile-rates.bin", RATE_DTYPE)
    out = root / "profile"
    out.mkdir(exist_ok=True)
    for name, table in (("calls", calls_table(calls, model)), ("rates", rates_table(rates))):
        path = out / f"{name}.parquet"
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        if owner:
            os.chown(path, *owner)
    if owner:
        os.chown(out, *owner)
    keyless = calls["size_bucket"] == KEYLESS_BUCKET
    return {"profile_calls": int(calls["calls"].sum()),
            "profile_rows": int(len(calls)),
            "profile_keyless_calls": int(calls["calls"][keyless].sum()),
            "profile_rate_rows": int(len(rates))}
