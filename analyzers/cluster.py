"""The report of a trace set: one trace per node of a job.

Each node's trace gets the single-trace report (its verdict and findings,
against the per-node target). Then, across nodes:
  nodes       per node: read and write rate over its training window, AU and
              data-wait share, its verdict and top finding
  stragglers  nodes whose training loops waited for data much longer than the
              median node's (data_wait_share - median >= straggler_margin): in
              synchronous data-parallel training every rank waits for the
              slowest at each step, so the others' time is lost to it.
              reason = its own stall cause and top finding; impact_s = its
              data wait minus the median node's (what the job lost to it);
              nodes whose verdict is unknown (too little to judge) left out.
              And nodes that did the same work much slower (`by` "work"):
              read about as many bytes as the median node (within 2x) at
              under half its rate, taking at least slow_work_min_s longer
              (pure readers, whose every second is a wait, and loops that
              found no straggler by their waits); impact_s = its reading
              span minus the median node's
  verdict     the job's: io-bound when any node is (the slowest rank gates each
              step), AU the mean of the nodes' (MLPerf Storage asks each to
              reach the bar: the minimum is given too), read rate the sum
  checkpoints the nodes' write bursts aligned on the set's time axis: one
              entry per checkpoint step, its slowest node (whose time is the
              job's: the other ranks wait at the next collective) and spread
  timeline    the job's read and write rate per second on the set's common
              time axis (wall_ns: iotrace.traceset), per node and in total
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import statistics
import sys
from dataclasses import dataclass, field
from typing import Optional

from iotrace.engine import DUCKDB, Engine
from iotrace.nodesummary import RATES, SUMMARY_DIR, add_ranks, rates_sql, read_node_report
from iotrace.traceset import TraceSet

from .base import Targets
from .rates import human_bytes, human_rate, human_s
from .report import build_report
from .verdict import STALL_WORDS

STRAGGLER_MARGIN = 0.10
# the same work done much slower: bytes read within SAME_WORK of the median
# node's, at under 1 / SLOW_WORK_FACTOR of its rate, SLOW_WORK_MIN_S longer
SAME_WORK = 2.0
SLOW_WORK_FACTOR = 2.0
SLOW_WORK_MIN_S = 0.5
# write bursts of different nodes closer than this belong to one checkpoint step
CHECKPOINT_ALIGN_GAP_S = 5.0
SET_SCHEMA = "iotrace-report-set/1"


@dataclass
class SetReport:
    root: str
    targets: Targets
    verdict: dict
    nodes: list[dict]
    stragglers: list[dict]
    timeline: list[dict]
    clock: dict
    reports: dict[str, dict] = field(default_factory=dict)   # each node's report (JSON)
    sources: dict[str, str] = field(default_factory=dict)    # "summary" or "events"
    engine: str = "duckdb"
    checkpoints: list = field(default_factory=list)          # aligned_checkpoints

    def to_dict(self) -> dict:
        return {"schema": SET_SCHEMA, "trace_set": self.root,
                "targets": {"read_bytes_per_s": self.targets.read_bps,
                            "write_bytes_per_s": self.targets.write_bps,
                            "gpus": self.targets.gpus,
                            "per_gpu_bytes_per_s": self.targets.per_gpu_bps,
                            "per": "node"},
                "verdict": self.verdict, "nodes": self.nodes, "stragglers": self.stragglers,
                "checkpoints": self.checkpoints, "timeline": self.timeline,
                "clock": self.clock,
                "node_report_sources": self.sources, "engine": self.engine,
                "node_reports": self.reports}

    def worst(self) -> Optional[str]:
        from .base import severity_rank
        return max((f["severity"] for r in self.reports.values() for f in r["findings"]),
                   key=severity_rank, default=None)


def _top_stall(v: dict) -> Optional[str]:
    """The stall cause with the largest share, None when there was none."""
    stall = {k: x for k, x in (v.get("stall") or {}).items() if x > 0}
    return max(stall, key=stall.get) if stall else None


def _ranks(v: dict, ranks: dict, io: dict, targets: Targets) -> list[dict]:
    """Per rank of the node: its training loop (when found) and its data
    read and write rates over the node's training window, against the
    per-GPU target (one GPU per rank, as torchrun starts them)."""
    out = [{"rank": ranks.get(str(lp["pid"])), "pid": lp["pid"], "tid": lp["tid"],
            "thread": lp["thread"], "data_wait_share": lp["data_wait_share"]}
           for lp in v.get("loops", [])]
    seen = {str(x["rank"]) for x in out}
    out += [{"rank": int(k), "pid": None, "tid": None, "thread": None, "data_wait_share": None}
            for k in sorted(io, key=int) if k not in seen]
    for x in out:
        r = io.get(str(x["rank"]))
        x["read_bytes"] = r["read_bytes"] if r else None
        x["read_bytes_per_s"] = r["read_bytes"] / r["window_s"] if r else None
        x["write_bytes_per_s"] = r["write_bytes"] / r["window_s"] if r else None
        x["per_gpu_target_ratio"] = (x["read_bytes_per_s"] / targets.per_gpu_bps
                                     if r and targets.per_gpu_bps else None)
    return out


def _node(host: str, path: str, r: dict, ranks: dict, targets: Targets = Targets()) -> dict:
    v = r["verdict"]
    tw = v.get("training_window") or {}
    win = max((tw.get("end_s") or 0) - (tw.get("start_s") or 0), 0) or v.get("duration_s") or 0
    top = r["findings"][0] if r["findings"] else None
    return {"host": host, "trace": path, "status": v.get("status"),
            "read_bytes_per_s": v.get("read_bytes_per_s") or 0.0,
            "reading_span_s": v.get("reading_span_s"),
            "write_bytes_per_s": v.get("bytes_written", 0) / win if win else 0.0,
            "bytes_read": v.get("bytes_read", 0), "bytes_written": v.get("bytes_written", 0),
            "accelerator_utilization": v.get("accelerator_utilization"),
            "data_wait_share": v.get("data_wait_share"),
            "data_wait_s": (v.get("time_budget_s") or {}).get("data_wait", 0.0),
            "read_target_ratio": v.get("read_target_ratio"),
            "stall_top": _top_stall(v),
            "ranks": _ranks(v, ranks, r.get("rank_io") or {}, targets),
            "top_finding": ({"id": top["id"], "severity": top["severity"], "title": top["title"]}
                            if top else None)}


def stragglers(nodes: list[dict], margin: float = STRAGGLER_MARGIN) -> list[dict]:
    # a node whose verdict is too little to judge (a 10 ms "training window")
    # is no measure of waiting: its share neither names nor sets the median
    known = [n for n in nodes if n["data_wait_share"] is not None and n["status"] != "unknown"]
    out: list[dict] = []
    if len(known) < 2:          # no median to wait against: the work done alone
        known = []
    else:
        med = statistics.median(n["data_wait_share"] for n in known)
        med_s = statistics.median(n["data_wait_s"] for n in known)
    for n in sorted(known, key=lambda n: -n["data_wait_share"]):
        if n["data_wait_share"] - med < margin:
            continue
        rank = max(n["ranks"], key=lambda r: r["data_wait_share"] or 0, default=None)
        who = f"rank {rank['rank']}'s" if rank and rank["rank"] is not None else "its"
        out.append(_straggler(
            n, rank, "data_wait",
            f"{who} training loop waited for data {n['data_wait_share']:.0%} of its window "
            f"(median node {med:.0%})", max(n["data_wait_s"] - med_s, 0.0)))
    named = {s["host"] for s in out}
    return out + [s for s in slow_work(nodes) if s["host"] not in named]


def _straggler(n: dict, rank: Optional[dict], by: str, first: str, impact_s: float) -> dict:
    """A straggler entry: its reason (first, then the node's stall cause and
    top finding, in its own terms) and what it cost."""
    why = [first]
    if n["stall_top"]:
        why.append(f"mostly {STALL_WORDS[n['stall_top']]}")
    if n["top_finding"]:
        why.append(f"top finding: {n['top_finding']['id']}: {n['top_finding']['title']}")
    return {"host": n["host"], "rank": rank["rank"] if rank else None,
            "pid": rank["pid"] if rank else None, "by": by,
            "reason": "; ".join(why), "cause": n["stall_top"],
            "finding": n["top_finding"]["id"] if n["top_finding"] else None,
            "data_wait_share": n["data_wait_share"], "impact_s": round(impact_s, 3)}


def straggler_cost(s: dict) -> str:
    """What a straggler cost, in words (the report's sentence after its reason)."""
    if s.get("by") == "work":
        return (f"It read for about {s['impact_s']:.1f} s longer than the median node: in "
                "synchronous training the other ranks wait that long for it")
    return f"The job lost about {s['impact_s']:.1f} s waiting for it"


def slow_work(nodes: list[dict]) -> list[dict]:
    """Nodes that read about as much as the median node at under half its
    rate (SAME_WORK, SLOW_WORK_FACTOR), the slowest first: a node whose
    storage, network or CPU is slower than the others' (throttled, a failing
    disk, a busy neighbour) whether or not its job waits in a way the
    verdict can measure."""
    known = [n for n in nodes if n["bytes_read"] > 0 and n["read_bytes_per_s"] > 0
             and n.get("reading_span_s")]
    if len(known) < 2:
        return []
    med_b = statistics.median(n["bytes_read"] for n in known)
    med_r = statistics.median(n["read_bytes_per_s"] for n in known)
    med_span = statistics.median(n["reading_span_s"] for n in known)
    out = []
    for n in sorted(known, key=lambda n: n["read_bytes_per_s"]):
        if not med_b / SAME_WORK <= n["bytes_read"] <= med_b * SAME_WORK:
            continue
        if n["read_bytes_per_s"] * SLOW_WORK_FACTOR > med_r:
            continue
        lost = n["reading_span_s"] - med_span
        if lost < SLOW_WORK_MIN_S:
            continue
        rank = max(n["ranks"], key=lambda r: r["read_bytes"] or 0, default=None)
        s = _straggler(
            n, rank, "work",
            f"read {human_bytes(n['bytes_read'])} at {human_rate(n['read_bytes_per_s'])} "
            f"over {human_s(n['reading_span_s'])}, {med_r / n['read_bytes_per_s']:.0f}x "
            f"slower than the median node ({human_rate(med_r)} over {human_s(med_span)}) "
            f"for about the same bytes", lost)
        out.append({**s, "read_bytes_per_s": n["read_bytes_per_s"],
                    "median_read_bytes_per_s": med_r})
    return out


def timeline(ts: TraceSet, engine: Engine = DUCKDB) -> tuple[list[dict], Optional[int]]:
    """Read and write bytes per second of the whole job on the common axis,
    from each node's summary (rates.parquet), or the same computed from its
    raw events where it has none; and the axis' origin (wall ns of t_s 0).
    The summaries' rates (a few rows a second a node) are read by the set's
    DuckDB whatever the engine: on Spark each file was a query of its own
    (45 s for 64 nodes on a two-worker cluster); raw events are the
    engine's."""
    duck, other = [], []
    con = None
    for i, m in enumerate(ts.members):
        p = m.path / SUMMARY_DIR / RATES
        if p.exists():
            DUCKDB.parquet_view(ts.con, f"m{i}_rates", p)
            src, parts = f"m{i}_rates", duck
        elif engine == DUCKDB:          # the set's DuckDB has these views already
            src, parts = f"({rates_sql(f'm{i}_events')})", duck
        else:
            con = con or engine.connect()
            engine.trace_views(con, m.path, prefix=f"m{i}_")
            src, parts = f"({rates_sql(f'm{i}_events')})", other
        parts.append(f"select '{m.host.replace(chr(39), chr(39) * 2)}' as host, "
                     f"second * 1000000000 + {int(ts.clock[m.host]['offset_ns'])} as wall_ns, "
                     f"read_bytes as r, write_bytes as w from {src}")
    per_second: list[tuple] = []        # (host, wall ns of its second, read, written)
    for c, parts in ((ts.con, duck), (con, other)):
        if parts:
            per_second += c.execute(f"""
                select host, wall_ns, sum(r), sum(w)
                from ({" union all ".join(parts)}) group by all""").fetchall()
    if not per_second:
        return [], None
    origin = min(int(w) for _, w, _, _ in per_second)
    sums: dict[tuple[int, str], list[int]] = {}
    for host, wall, r, w in per_second:
        e = sums.setdefault(((int(wall) - origin) // 1_000_000_000, host), [0, 0])
        e[0] += int(r or 0)
        e[1] += int(w or 0)
    out: dict[int, dict] = {}
    for (s, host), (r, w) in sorted(sums.items()):
        e = out.setdefault(s, {"t_s": s, "read_bytes_per_s": 0, "write_bytes_per_s": 0,
                               "read_by_host": {}})
        e["read_bytes_per_s"] += r
        e["write_bytes_per_s"] += w
        e["read_by_host"][host] = r
    return [out[k] for k in sorted(out)], origin


def aligned_checkpoints(ts: TraceSet, reports: dict[str, dict], origin_ns: Optional[int],
                        gap_s: float = CHECKPOINT_ALIGN_GAP_S) -> list[dict]:
    """The job's checkpoints: the nodes' write bursts on the set's time axis,
    grouped where they overlap or follow within gap_s (the ranks of one
    checkpoint step). In synchronous training the ranks meet at the next
    collective, so the slowest node's checkpoint time is the job's; the
    rest of the ranks wait `spread_s` for it."""
    items = []
    for m in ts.members:
        off = int(ts.clock[m.host]["offset_ns"])
        ranks = reports[m.host].get("ranks", {})
        for c in reports[m.host].get("checkpoints") or []:
            start = int(c["ts_ns"]) + off
            items.append((start, start + int(c["duration_s"] * 1e9), m.host,
                          ranks.get(str(c["pid"])), c))
    items.sort(key=lambda x: (x[0], x[2]))
    groups: list[list] = []
    end = 0                             # the current group's last end
    for it in items:
        if groups and it[0] <= end + gap_s * 1e9:
            groups[-1].append(it)
            end = max(end, it[1])
        else:
            groups.append([it])
            end = it[1]
    base = origin_ns if origin_ns is not None else (items[0][0] if items else 0)
    out = []
    for g in groups:
        per: dict[str, dict] = {}          # a node's part: from its first burst to its last
        for start, end, host, rank, c in g:
            p = per.setdefault(host, {"host": host, "rank": rank, "start": start, "end": end,
                                      "bytes": 0, "fsync_s": 0.0})
            p["start"], p["end"] = min(p["start"], start), max(p["end"], end)
            p["bytes"] += c["bytes"]
            p["fsync_s"] += c["fsync_s"]
        nodes = sorted(per.values(), key=lambda p: (-(p["end"] - p["start"]), p["host"]))
        durs = [(p["end"] - p["start"]) / 1e9 for p in nodes]
        slow = nodes[0]
        total = sum(p["bytes"] for p in nodes)
        start = min(p["start"] for p in nodes)
        job = (max(p["end"] for p in nodes) - start) / 1e9
        out.append({"t_s": round((start - base) / 1e9, 3), "nodes": len(nodes), "bytes": total,
                    "job_duration_s": round(job, 6),
                    "slowest": {"host": slow["host"], "rank": slow["rank"],
                                "duration_s": round(durs[0], 6), "bytes": slow["bytes"],
                                "fsync_s": round(slow["fsync_s"], 6)},
                    "median_duration_s": round(statistics.median(durs), 6),
                    "spread_s": round(durs[0] - statistics.median(durs), 6),
                    "write_bytes_per_s": total / job if job > 0 else None,
                    "per_node": [{"host": p["host"], "rank": p["rank"], "bytes": p["bytes"],
                                  "start_s": round((p["start"] - base) / 1e9, 3),
                                  "duration_s": round((p["end"] - p["start"]) / 1e9, 6)}
                                 for p in sorted(nodes, key=lambda p: p["host"])]})
    return out


def job_verdict(nodes: list[dict], strag: list[dict], targets: Targets) -> dict:
    aus = [n["accelerator_utilization"] for n in nodes if n["accelerator_utilization"] is not None]
    shares = [n["data_wait_share"] for n in nodes if n["data_wait_share"] is not None]
    statuses = {n["status"] for n in nodes}
    status = ("io-bound" if "io-bound" in statuses else
              "not-io-bound" if "not-io-bound" in statuses else
              "no-io" if statuses == {"no-io"} else "unknown")
    rd = sum(n["read_bytes_per_s"] for n in nodes)
    v = {"status": status, "nodes": len(nodes),
         "accelerator_utilization": round(statistics.mean(aus), 4) if aus else None,
         "accelerator_utilization_min": round(min(aus), 4) if aus else None,
         "data_wait_share": round(statistics.mean(shares), 4) if shares else None,
         "read_bytes_per_s": rd,
         "write_bytes_per_s": sum(n["write_bytes_per_s"] for n in nodes),
         "read_target_bytes_per_s": targets.read_bps * len(nodes) if targets.read_bps else None}
    text = f"{len(nodes)} nodes; "
    if aus:
        text += (f"training loops waited for data {v['data_wait_share']:.0%} of the time on "
                 f"average (AU ≈ {v['accelerator_utilization']:.0%}, lowest node "
                 f"{v['accelerator_utilization_min']:.0%}). ")
    else:
        text += "no training loop found on any node. "
    text += f"The job read at {human_rate(rd)} in total"
    if targets.read_bps:
        ratio = rd / (targets.read_bps * len(nodes))
        v["read_target_ratio"] = ratio
        text += f", {ratio:.0%} of the {human_rate(targets.read_bps)} per node target"
    text += "."
    if strag:
        s = strag[0]
        cost = straggler_cost(s)
        text += f" Straggler: {s['host']} ({s['reason']}). {cost}."
        if len(strag) > 1:
            text += f" {len(strag) - 1} more straggler(s) below."
    v["summary"] = text
    return v


def node_report(path: str, targets: Targets, thresholds_path: Optional[str],
                engine: Engine = DUCKDB, threads: Optional[int] = None) -> dict:
    """One node's report from its raw events, as JSON (run in a worker);
    DuckDB with `threads` threads (None: the machine's CPUs)."""
    trace = engine.open_trace(path)
    try:
        # a Spark task: the CPUs Spark gave it, not the whole executor host's
        threads = _spark_task_cpus() or threads
        if threads and engine.name == "duckdb":
            trace.con.execute(f"set threads = {int(threads)}")
        d = add_ranks(trace, build_report(trace, targets, thresholds_path).to_dict())
    finally:
        trace.con.close()
    return d


def _spark_task_cpus() -> Optional[int]:
    """The CPUs of the Spark task this runs in (spark.task.cpus), or None.
    (A Spark worker has imported PySpark already; nothing else pays for it.)"""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import TaskContext
    tc = TaskContext.get()
    return int(tc.cpus()) if tc is not None else None


def build_set_report(ts: TraceSet, targets: Targets, thresholds_path: Optional[str] = None,
                     progress=None, jobs: Optional[int] = None, engine: Engine = DUCKDB,
                     from_events: bool = False) -> SetReport:
    """Nodes' reports run `jobs` at a time (default: the CPUs, at most the
    nodes). On DuckDB each is a process with a DuckDB of its own over its
    own files. On Spark each is a task of one Spark job, run by DuckDB on an
    executor over that node's files; with engine.sql (--spark-sql), a
    thread with a Spark session of its own that runs the rules' SQL on
    Spark (one SparkContext: the cluster runs the nodes' queries side by
    side)."""
    reports: dict[str, dict] = {}
    sources: dict[str, str] = {}
    # a node's own summary serves when the report asks what it answered
    if targets == Targets() and thresholds_path is None and not from_events:
        for m in ts.members:
            d = read_node_report(m.path, m.meta)
            if d is not None:
                reports[m.host], sources[m.host] = d, "summary"
    todo = [m for m in ts.members if m.host not in reports]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
    args = [(str(m.path), targets, thresholds_path, engine) for m in todo]
    if progress and todo:
        progress(len(todo), len(ts.members))
    if engine.name == "spark" and not engine.sql:
        # each node a task on the executors: DuckDB over its own files
        from iotrace.spark_engine import map_tasks
        # (absolute paths: an executor runs in a directory of its own)
        results = map_tasks(engine.master, node_report,
                            [(os.path.abspath(p), t, th and os.path.abspath(th), DUCKDB)
                             for p, t, th, _ in args]) if args else []
    elif engine.name == "spark":
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(node_report, *zip(*args))) if args else []
    elif jobs > 1:
        ctx = multiprocessing.get_context("spawn")   # no DuckDB state forked
        # the CPUs shared among the workers: a node's queries are small, and
        # more DuckDB threads than CPUs cost more in their hand-offs than they
        # gain (64 nodes on 2 CPUs: 23.0 s with 1 thread a worker, 24.8 s with 2,
        # medians of 3 interleaved)
        share = [max(1, (os.cpu_count() or 1) // jobs)] * len(args)
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            results = list(pool.map(node_report, *zip(*args), share))
    else:
        results = [node_report(*a) for a in args]
    for m, d in zip(todo, results):
        reports[m.host], sources[m.host] = d, "events"
    reports = {m.host: reports[m.host] for m in ts.members}
    nodes = [_node(m.host, str(m.path), reports[m.host], reports[m.host].get("ranks", {}),
                   targets) for m in ts.members]
    strag = stragglers(nodes)
    clock = {"hosts": ts.clock,
             "error_bound_ns": (max(c["error_bound_ns"] for c in ts.clock.values())
                                if all(c["error_bound_ns"] is not None for c in ts.clock.values())
                                else None)}
    tl, origin = timeline(ts, engine)
    ckpts = aligned_checkpoints(ts, reports, origin)
    verdict = job_verdict(nodes, strag, targets)
    if ckpts:
        verdict["checkpoints"] = len(ckpts)
        verdict["checkpoint_time_s"] = round(sum(c["job_duration_s"] for c in ckpts), 6)
        slow = max(ckpts, key=lambda c: c["spread_s"])
        verdict["summary"] += (
            f" {len(ckpts)} checkpoint(s) across nodes took {verdict['checkpoint_time_s']:.2f} s "
            f"of the job; the slowest node's part ({slow['slowest']['host']}, "
            f"{slow['slowest']['duration_s']:.2f} s) sets each one's time.")
    return SetReport(str(ts.root), targets, verdict, nodes, strag, tl, clock, reports, sources,
                     engine.name, ckpts)
