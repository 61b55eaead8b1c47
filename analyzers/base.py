"""What every analyzer shares: the Finding record, the rule declaration, the
analysis context (DuckDB views over the trace, targets, thresholds)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, Callable, Optional

SEVERITIES = ("info", "warn", "high")


def file_name(path) -> str:
    """A file's path for a sentence; a file iotrace could not name (an fd
    reused unseen before an attach: counters.fd_identity_mismatches) is said
    to be so, not printed as None."""
    return path if path else "a file of unknown path"


def severity_rank(sev: str) -> int:
    return SEVERITIES.index(sev)


@dataclass
class Finding:
    """One documented rule that fired. Field names are the JSON report schema."""
    id: str                       # stable rule id, e.g. "small-reads"
    severity: str                 # info | warn | high
    title: str                    # short name of the problem
    summary: str                  # one sentence: what is wrong, with the key number
    recommendation: str           # what to change
    evidence: dict[str, Any] = field(default_factory=dict)   # units in the key names
    files: list[dict] = field(default_factory=list)          # {"path", "share", ...}
    processes: list[dict] = field(default_factory=list)      # {"pid", "cmdline", "share", ...}
    examples: list[dict] = field(default_factory=list)       # {"ts_ns", "pid", "tid", "what"}
    impact_s: Optional[float] = None      # time of the training loop this explains
    impact_share: Optional[float] = None  # of the training window
    saving_s: Optional[float] = None      # what fixing it would save (finding_savings.py)
    saving_basis: Optional[str] = None    # "model": the what-if model's; "bound": at most
    saving_change: Optional[str] = None   # the change the model was asked, and what then limits
    rule_severity: Optional[str] = None   # what the rule's own thresholds said, before impact

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Targets:
    """Throughput targets of the job, in bytes per second (None: not given)."""
    read_bps: Optional[float] = None
    write_bps: Optional[float] = None
    gpus: Optional[int] = None
    per_gpu_bps: Optional[float] = None


@dataclass
class Rule:
    """A documented rule: docs/findings.md describes each one."""
    id: str
    title: str
    question: str                              # the question it answers
    thresholds: dict[str, float]               # defaults, overridable in TOML [id] tables
    run: Callable[["Context"], list[Finding]]


@dataclass
class Context:
    """What a rule sees. `con` has these views (see analyzers/views.py):
    events, files, processes, threads (the trace), and
      io      one row per read/write-family call with bytes moved and path
      data_io   io on the job's data: no code, libraries or system files
      async_io  one row per io_uring/libaio read or write request (iface)
      all_io, all_data_io   io and async_io together (for byte counts and rates)
      meta_ops  metadata calls (open/stat/close/getdents/unlink/rename/mkdir)
    and `t0_ns`/`t1_ns` (first and last event), `duration_s`."""
    con: Any
    meta: dict
    targets: Targets
    thresholds: dict[str, dict[str, float]]
    t0_ns: int = 0
    t1_ns: int = 0
    window: Optional[tuple[int, int]] = None   # the training window (ns), once known
    loop_tids: tuple[int, ...] = ()            # the training loop threads, once known
    checkpoints: list = field(default_factory=list)  # write bursts (checkpoint_burst.bursts)
    made: set = field(default_factory=set)     # shared tables made (views.shared_table)
    memo: dict = field(default_factory=dict)   # measures more than one rule asks for

    @property
    def duration_s(self) -> float:
        return max((self.t1_ns - self.t0_ns) / 1e9, 1e-9)

    @property
    def stacks(self) -> bool:
        """The trace has Python stacks to use (not with --kernel-only; a trace
        set's node summaries have none)."""
        if "stacks" not in self.memo:      # the report sets it from its analysis
            from .loader_frame import have_stacks
            try:
                self.memo["stacks"] = not self.memo.get("kernel_only") and have_stacks(self.con)
            except Exception:   # noqa: BLE001 - no pystacks view on this engine or set
                self.memo["stacks"] = False
        return self.memo["stacks"]

    def wait_cost_s(self, where: str) -> float:
        """Seconds of the loop's data wait attributed to the calls matching
        `where` (a condition on events e and files f): the time the loop
        waited while producers were in those calls."""
        r = self.con.execute(f"""
            select coalesce(sum(w.cost_ns), 0) from wait_cost w
            join events e on e.tid = w.tid and e.ts_ns = w.ts_ns
            left join files f on f.file_id = e.file_id where {where}""").fetchone()
        return float(r[0]) / 1e9

    def th(self, rule_id: str) -> dict[str, float]:
        return self.thresholds[rule_id]

    def rows(self, sql: str, *params) -> list[tuple]:
        """Query rows; DuckDB's DECIMAL/HUGEINT sums come back as int or float."""
        res = self.con.execute(sql, list(params))
        rows = res.fetchall()
        # only DECIMAL columns need it (HUGEINT comes back as int): a rule may
        # fetch a row per file, and converting every value was a third of a second
        desc = getattr(res, "description", None)
        if desc and all(len(d) > 1 and not str(d[1]).startswith("DECIMAL") for d in desc):
            return rows
        return [tuple(map(plain, r)) for r in rows]

    def one(self, sql: str, *params) -> tuple:
        r = self.con.execute(sql, list(params)).fetchone()
        return tuple(map(plain, r)) if r is not None else r


def plain(v):
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v
