"""Trace sets made from real traces: a node's trace copied under another
host name, as another rank, its monotonic clock shifted (as after another
boot). What a set of hundreds of nodes is made of on one machine, for the
tests and bench/set_report_speed.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MINUTE_NS = 60 * 10**9


def _shift_table(path: Path, lo: int, hi: int, shift: int) -> None:
    """The table's timestamps (its integer columns whose values all lie in
    the trace's span, give or take a minute: ts_ns, start_ns, exit_ns)
    moved by shift."""
    t = pq.read_table(path)
    for i, name in enumerate(t.column_names):
        col = t[name]
        if not pa.types.is_integer(col.type) or col.null_count == len(col):
            continue
        mm = pc.min_max(col)
        if lo - MINUTE_NS <= mm["min"].as_py() and mm["max"].as_py() <= hi + MINUTE_NS:
            t = t.set_column(i, name, pc.add(col, pa.scalar(shift, col.type)))
    pq.write_table(t, path)


def _shift_times(x, lo: int, hi: int, shift: int):
    """A node report's (JSON) timestamps on the trace's monotonic clock
    (ints within the trace's span) moved by shift; durations stay."""
    if isinstance(x, dict):
        return {k: _shift_times(v, lo, hi, shift) for k, v in x.items()}
    if isinstance(x, list):
        return [_shift_times(v, lo, hi, shift) for v in x]
    if isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi:
        return x + shift
    return x


def copy_node(src: Path, dst: Path, host: str, rank: int, shift_s: int) -> None:
    """src's trace at dst as `host`, its ranked processes as `rank`, its
    clock shifted by shift_s whole seconds: the events, processes, threads
    and Python samples, the node summary's per-second rates and report, the
    clock samples that put it on the set's time axis."""
    shutil.copytree(src, dst)
    shift = shift_s * 10**9
    meta = json.loads((dst / "meta.json").read_text())
    lo, hi = meta["start_monotonic_ns"], meta["end_monotonic_ns"]
    for part in [*dst.glob("*.parquet"), *(dst / "events").glob("*.parquet")]:
        _shift_table(part, lo, hi, shift)
    procs = pq.read_table(dst / "processes.parquet")
    i = procs.schema.get_field_index("rank")
    ranks = pc.if_else(pc.is_null(procs["rank"]), procs["rank"],
                       pa.scalar(rank, procs.schema.field("rank").type))
    pq.write_table(procs.set_column(i, "rank", ranks), dst / "processes.parquet")
    rates = dst / "summary" / "rates.parquet"
    if rates.exists():
        t = pq.read_table(rates)
        i = t.schema.get_field_index("second")
        pq.write_table(t.set_column(i, "second", pc.add(t["second"], shift_s)), rates)
    rep = dst / "summary" / "node_report.json"
    if rep.exists():
        r = _shift_times(json.loads(rep.read_text()), lo, hi, shift)
        r["ranks"] = {pid: rank for pid, old in r.get("ranks", {}).items() if old is not None}
        r["rank_io"] = {str(rank): v for v in (r.get("rank_io") or {}).values()}
        rep.write_text(json.dumps(r))
    meta["host"] = host
    for key in ("start_monotonic_ns", "end_monotonic_ns"):
        meta[key] += shift
    for s in meta["clock"]["samples"]:
        s["monotonic_ns"] += shift
    (dst / "meta.json").write_text(json.dumps(meta))
