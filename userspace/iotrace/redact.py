"""Redaction of a trace before it leaves the machine.

A trace holds the job's paths and command lines (and thread names, HTTP
request lines, mount points, the host name). `redact_trace` replaces every
path component and every command-line word that one of the patterns matches
(a Python regular expression, searched within the component or word) with
`<redacted:HASH>`, HASH being 8 hex digits of an HMAC-SHA256 of the original
under a key: equal names stay equal (the analysis still groups them), and the
name cannot be read back. The key is random for each redaction unless
IOTRACE_REDACT_KEY is set (the same key for every trace of a set keeps their
placeholders equal too).

Every string of every Parquet table (dictionary and list columns included)
and every string (and key) of every JSON file is redacted, whatever its
column: paths, cmdline, comm, thread names, HTTP fields, meta.json's command.
Files of other kinds (a failed run's spool) are left out of the copy, or
removed when redacting in place: a redacted trace holds nothing unredacted.
meta.json gets a `redaction` object with the counts.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Paths split on "/", command lines and prose on white space.
_SPLIT = re.compile(r"([\s/]+)")


def compile_patterns(patterns) -> list[re.Pattern]:
    """The patterns compiled; ValueError naming the one that is not a valid
    regular expression."""
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p))
        except re.error as e:
            raise ValueError(f"--redact {p!r}: not a regular expression ({e})") from None
    return out


class Redactor:
    def __init__(self, patterns, key: Optional[bytes] = None) -> None:
        self.res = compile_patterns(patterns)
        env_key = os.environ.get("IOTRACE_REDACT_KEY")
        self.key = key or (env_key.encode() if env_key else os.urandom(32))
        self.keyed = "IOTRACE_REDACT_KEY" if (key or env_key) else "random"
        self.names: set[str] = set()      # distinct components/words replaced
        self.cells = 0                    # table cells and JSON strings changed
        self._memo: dict[str, str] = {}

    def placeholder(self, token: str) -> str:
        h = hmac.new(self.key, token.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return f"<redacted:{h.hexdigest()[:8]}>"

    def text(self, s: str) -> str:
        r = self._memo.get(s)
        if r is None:
            parts = _SPLIT.split(s)
            for i in range(0, len(parts), 2):       # even: the words, odd: separators
                tok = parts[i]
                if tok and any(p.search(tok) for p in self.res):
                    self.names.add(tok)
                    parts[i] = self.placeholder(tok)
            r = "".join(parts)
            self._memo[s] = r
        return r

    # ---- Arrow -----------------------------------------------------------

    def _strings(self, a: pa.Array) -> pa.Array:
        vals = a.to_pylist()
        new = [None if v is None else self.text(v) for v in vals]
        self.cells += sum(1 for v, n in zip(vals, new) if v != n)
        return pa.array(new, type=a.type)

    def array(self, a: pa.Array) -> pa.Array:
        t = a.type
        if pa.types.is_dictionary(t):
            if not _has_string(t.value_type):
                return a
            d = a.dictionary
            vals = d.to_pylist()
            new = [None if v is None else self.text(v) for v in vals]
            changed = [i for i, (v, n) in enumerate(zip(vals, new)) if v != n]
            if not changed:
                return a
            self.cells += int(pc.sum(pc.is_in(a.indices, pa.array(changed, a.indices.type)))
                              .as_py() or 0)
            return pa.DictionaryArray.from_arrays(a.indices, pa.array(new, type=d.type))
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return self._strings(a)
        if _has_string(t):                 # lists, structs of strings: the slow way
            vals = a.to_pylist()
            new = [self.value(v) for v in vals]
            return pa.array(new, type=t)
        return a

    def table(self, tbl: pa.Table) -> pa.Table:
        cols = []
        for col in tbl.columns:
            if _has_string(col.type):
                col = pa.chunked_array([self.array(c) for c in col.chunks], type=col.type)
            cols.append(col)
        return pa.Table.from_arrays(cols, schema=tbl.schema)

    # ---- JSON ------------------------------------------------------------

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            n = self.text(v)
            if n != v:
                self.cells += 1
            return n
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.value(k): self.value(x) for k, x in v.items()}
        return v


def _has_string(t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    if pa.types.is_dictionary(t):
        return _has_string(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_string(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_string(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _has_string(t.key_type) or _has_string(t.item_type)
    return False


def _write_opts(rel: Path) -> dict:
    if rel.parts and rel.parts[0] == "events" or "events" in rel.parts[:-1]:
        from .schema import EVENT_WRITE_OPTS
        return dict(EVENT_WRITE_OPTS)
    return dict(compression="zstd")


def _redact_parquet(r: Redactor, src: Path, dst: Path, rel: Path) -> None:
    pf = pq.ParquetFile(src)
    schema = pf.schema_arrow
    tmp = dst.with_name(dst.name + ".redact-tmp")
    if not any(_has_string(f.type) for f in schema):
        shutil.copyfile(src, tmp)
    else:
        opts = _write_opts(rel)
        if "use_dictionary" in opts:
            opts["use_dictionary"] = [c for c in opts["use_dictionary"] if c in schema.names]
        if "write_statistics" in opts:
            opts["write_statistics"] = [c for c in opts["write_statistics"]
                                        if c in schema.names]
        if "column_encoding" in opts:
            opts["column_encoding"] = {c: e for c, e in opts["column_encoding"].items()
                                       if c in schema.names}
        with pq.ParquetWriter(tmp, schema, **opts) as w:
            for i in range(pf.num_row_groups):
                w.write_table(r.table(pf.read_row_group(i)))
    os.replace(tmp, dst)


def _redact_rel(r: Redactor, rel: Path) -> Path:
    """A trace set's host=NAME directories carry the host name: redacted in
    the copy as the host is in meta.json, keeping the host= prefix."""
    parts = [("host=" + r.text(part[5:])) if part.startswith("host=") else part
             for part in rel.parts]
    return Path(*parts)


def redact_trace(src, dst, patterns, key: Optional[bytes] = None) -> dict:
    """Writes the redacted trace (or trace set) SRC to DST (the same directory:
    in place). Returns the counts: names (distinct components and words
    replaced), cells (values changed), files (redacted), dropped (files of
    other kinds not carried over)."""
    src, dst = Path(src), Path(dst)
    in_place = src.resolve() == dst.resolve()
    r = Redactor(patterns, key)
    files = sorted(p for p in src.rglob("*") if p.is_file() or p.is_symlink())
    metas, done, dropped = [], 0, 0
    for p in files:
        rel = p.relative_to(src)
        out = dst / rel if in_place else dst / _redact_rel(r, rel)
        if p.is_symlink() or p.suffix not in (".parquet", ".json"):
            dropped += 1
            if in_place:
                p.unlink()
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        if p.suffix == ".parquet":
            _redact_parquet(r, p, out, rel)
        else:
            obj = json.loads(p.read_text())
            new = r.value(obj)
            if rel.name == "meta.json" and isinstance(new, dict):
                metas.append((out, new))
                continue
            tmp = out.with_name(out.name + ".redact-tmp")
            tmp.write_text(json.dumps(new, indent=2) + "\n")
            os.replace(tmp, out)
        done += 1
    if in_place:      # directories emptied of dropped files (a spool)
        for d in sorted((p for p in src.rglob("*") if p.is_dir()), reverse=True):
            if not any(d.iterdir()):
                d.rmdir()
    stats = {"patterns": len(r.res), "names": len(r.names), "cells": r.cells,
             "files": done + len(metas), "dropped_files": dropped, "key": r.keyed}
    for out, meta in metas:
        meta["redaction"] = stats
        tmp = out.with_name(out.name + ".redact-tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n")
        os.replace(tmp, out)
    return stats
