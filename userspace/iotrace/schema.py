"""The trace directory's tables as written (docs/trace-format.md is the
contract): the schema version, each table's columns, the events' Parquet
settings, and the atomic writes (tmp + rename) that let a trace cut short
by kill -9 still be read. Imported by the writer (tracedir.py) and the
reader (trace.py) alike, neither of which imports the other for them."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = "1.11"

# Column names and DuckDB types of events (for an empty trace's view).
EVENTS_SCHEMA_NAMES = [
    ("ts_ns", "bigint"), ("dur_ns", "bigint"), ("pid", "integer"), ("tid", "integer"),
    ("op", "varchar"), ("fd", "integer"), ("offset", "bigint"), ("req_bytes", "bigint"),
    ("ret", "bigint"), ("file_id", "bigint"), ("fd_kind", "varchar"), ("flags", "bigint"),
    ("mode", "integer"), ("arg", "bigint"), ("path", "varchar"), ("path2", "varchar"),
    ("eflags", "smallint"), ("chan_ino", "bigint"), ("http", "varchar"),
]

FILES_SCHEMA = pa.schema([
    ("file_id", pa.int64()), ("path", pa.string()), ("fs_type", pa.string()),
    ("mount_point", pa.string()), ("dev_major", pa.int32()), ("dev_minor", pa.int32()),
    ("ino", pa.int64()), ("mount_options", pa.string()),
])
PROCESSES_SCHEMA = pa.schema([
    ("pid", pa.int32()), ("ppid", pa.int32()), ("cmdline", pa.string()),
    ("comm", pa.string()), ("start_ns", pa.int64()), ("exit_ns", pa.int64()),
    ("exit_code", pa.int32()), ("exit_signal", pa.int32()), ("execs", pa.int32()),
    ("threads", pa.int32()), ("before_trace", pa.bool_()),
    ("rank", pa.int32()), ("local_rank", pa.int32()),
])
THREADS_SCHEMA = pa.schema([
    ("tid", pa.int32()), ("pid", pa.int32()), ("name", pa.string()),
    ("start_ns", pa.int64()), ("exit_ns", pa.int64()),
])

# Parquet settings for events: dictionary for strings, delta for timestamps.
EVENT_WRITE_OPTS: dict[str, Any] = dict(
    compression="zstd",
    compression_level=3,
    use_dictionary=["op", "fd_kind", "path", "path2"],
    column_encoding={"ts_ns": "DELTA_BINARY_PACKED"},
    write_statistics=["ts_ns", "pid", "file_id", "op"],
)


def atomic_write_table(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def atomic_write_json(obj: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
