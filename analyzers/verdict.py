"""The verdict: does the training loop wait for data, how much, and why.

status: io-bound when the loop's data-wait share of the training window is
at least `io_bound_share` (10%), not-io-bound below, no-io when the trace
has no file reads or writes, unknown when no training loop was found.
AU (accelerator utilisation, MLPerf Storage's measure) = 1 - data-wait share.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import intervals as ivl
from .base import Context
from .epochs import find_epochs
from .rates import human_bytes, human_rate, human_s
from .waits import STALL_KEYS, Waits

STALL_WORDS = {"fetch": "blocked in storage reads (fetch)",
               "prep": "on CPU preparing samples (prep)",
               "cpu_starved": "runnable but without a CPU (cpu-starved)",
               "transfer": "handing batches to the loop (transfer)",
               "other": "waiting on something else (other)",
               "loop_cpu": "the loop was on CPU itself inside the loader (loop-cpu)"}
HOW_WORDS = {"worker-processes": "fed by {n}",
             "loader-threads": "fed by {n} loader thread(s) of its process",
             "self-loading": "reads its data itself",
             "runtime-threads": "runs each step, its next() included, in its framework's "
                                "threads ({what}); fed by {n} thread(s) of its process",
             "checkpoint-only": "reads no dataset; it writes checkpoints"}


def workers_words(ctx, loop) -> str:
    """"2 loader worker processes", and, where a DataLoader started new ones
    each epoch, how many there were in all: the most alive at once is what
    the job was configured with."""
    rows = ctx.rows(f"""select distinct p.pid, p.start_ns, p.exit_ns from threads t
                        join processes p using (pid)
                        where t.tid in ({', '.join(map(str, loop.producers))})
                          and t.pid != {loop.pid}""")
    total = len(rows)
    edges = sorted([(s or 0, 1) for _, s, _ in rows] +
                   [(e, -1) for _, _, e in rows if e])
    now = most = 0
    for _, d in edges:              # an exit before a start at the same instant
        now += d
        most = max(most, now)
    most = most or total
    word = "process" if most == 1 else "processes"
    if total > most:
        return (f"{most} loader worker {word} at a time, {total} in all as each epoch "
                "started new ones")
    return f"{most} loader worker {word}"


def _stall_words(w: Waits, key: str) -> str:
    """STALL_WORDS, with fetch named for what it was: storage reads, or
    objects fetched over HTTP and the client's backoff between its tries."""
    if key != "fetch":
        return STALL_WORDS[key]
    parts = w.fetch_parts
    net = parts.get("object_get", 0.0) + parts.get("backoff", 0.0)
    if net < 0.5 * w.stall.get("fetch", 0.0):
        return STALL_WORDS[key]
    return "fetching objects over HTTP (fetch)"


def window_rates(ctx: Context, lo: int, hi: int) -> dict:
    """Dataset read rate while the dataset was being accessed in the window
    (its first to its last call on a dataset file: opens, advice and cache
    invalidation count, as a benchmark's own runtime counts them), and totals.
    Measured once per window: below-target quotes the same figures."""
    return dict(_measured(ctx, lo, hi)[0])


def window_read_span(ctx: Context, lo: int, hi: int) -> tuple[int, int]:
    """(start, end) ns of the span window_rates divides the dataset's bytes
    by (lo, hi when the dataset was not accessed in the window)."""
    return _measured(ctx, lo, hi)[1]


def _measured(ctx: Context, lo: int, hi: int) -> tuple[dict, tuple[int, int]]:
    key = ("window_rates", lo, hi)
    if key not in ctx.memo:
        ctx.memo[key] = _window_rates(ctx, lo, hi)
    return ctx.memo[key]


def _window_rates(ctx: Context, lo: int, hi: int) -> tuple[dict, tuple[int, int]]:
    # reads through memory maps too (data_reads)
    rd = ctx.one(f"""select coalesce(sum(nbytes), 0) from data_reads
                     where ts_ns >= {lo} and ts_ns < {hi}""")[0]
    wr = ctx.one(f"""select coalesce(sum(nbytes), 0) from all_data_io
                     where dir = 'write' and ts_ns >= {lo} and ts_ns < {hi}""")[0]
    first, last = ctx.one(f"""
        select min(ts_ns), max(e) from (
            select ts_ns, ts_ns + dur_ns as e from events
            where file_id in (select file_id from data_files) and op != 'offcpu'
            union all
            select ts_ns, ts_ns + dur_ns as e from net_gets
            where file_id in (select file_id from data_files)) as d
        where ts_ns >= {lo} and ts_ns < {hi}""")
    start, end = (max(first, lo), min(last, hi)) if first is not None else (lo, hi)
    span = max(((end - start) if first is not None else 0) / 1e9, 1e-9)
    return ({"bytes_read": int(rd), "bytes_written": int(wr),
             "read_bytes_per_s": rd / span if rd else 0.0, "reading_span_s": span if rd else 0.0},
            (int(start), int(end)))


def one_wait_per_step(w: Waits) -> bool:
    """Whether the loops' waits look like one per step: the time between them
    is regular (their median gap accounts for at least half of all of it). A
    loop whose loader keeps ahead waits now and then, with long gaps between."""
    for st in w.states:
        if len(st.waits) < 3:
            return False
        gaps = st.waits[1:, 0] - st.waits[:-1, 1]
        if float(np.median(gaps)) * len(gaps) < 0.5 * float(gaps.sum()):
            return False
    return bool(w.states)


def make_verdict(ctx: Context, w: Waits) -> dict:
    th = ctx.th("verdict")
    lo, hi = w.window
    v: dict = {
        "status": "unknown", "reason": None,
        "accelerator_utilization": None, "data_wait_share": None,
        "training_window": {"start_ns": lo, "end_ns": hi, "source": w.window_source,
                            "start_s": round((lo - ctx.t0_ns) / 1e9, 3),
                            "end_s": round((hi - ctx.t0_ns) / 1e9, 3)},
        "stall": {k: round(w.stall.get(k, 0.0), 4) for k in STALL_KEYS},
        "fetch_parts": {k: round(x, 4) for k, x in w.fetch_parts.items()},
        "read_bytes_per_s": 0.0, "duration_s": round(ctx.duration_s, 3),
        "time_budget_s": {k: round(x, 4) for k, x in w.budget.items()},
        "loops": w.per_loop, "steps": w.steps,
        "read_target_bytes_per_s": ctx.targets.read_bps,
    }
    rates = window_rates(ctx, lo, hi)
    v.update(rates)
    drops_note = window_drops(ctx, v, lo, hi)
    any_io = ctx.one("select count(*) from all_io")[0]
    if not any_io:
        v.update(status="no-io", summary=f"No file reads or writes in {ctx.duration_s:.1f} s: "
                                         "nothing to judge." + drops_note)
        return v
    if not w.loops:
        v.update(status="unknown", reason=w.reason,
                 summary=f"Cannot tell whether a training loop waits: {w.reason}." + drops_note)
        return v
    win = w.budget.get("window", 0.0)
    share = w.budget["data_wait"] / win if win > 0 else 0.0
    au = 1.0 - share
    v["data_wait_share"] = round(share, 4)
    v["accelerator_utilization"] = round(au, 4)
    v["status"] = "io-bound" if share >= th["io_bound_share"] else "not-io-bound"
    v["after_first_step"] = after_first_step(w)
    short = too_little(w, th)
    if short:       # the numbers stay, for what they are worth; no status from them
        v.update(status="unknown", reason=short)
    loop = w.loops[0]
    n = len(loop.producers)
    if loop.how == "worker-processes" and loop.producers:
        # the loop's own process (a relay thread, its own reads) is not a worker
        n = workers_words(ctx, loop)
    who = (f"The training loop (thread {loop.tid} '{loop.name}' of pid {loop.pid}, "
           + HOW_WORDS[loop.how].format(n=n, what=loop.runtime.what if loop.runtime else "")
           + ")"
           if len(w.loops) == 1 else f"The {len(w.loops)} training loops")
    bar = th["au_target"]
    if loop.loader is not None:
        lf = loop.loader
        how = {"known": f"the {lf.what}'s", "option": "the given", "data": "found from the data:"}
        text = (f"{who} spent {share:.0%} of the {human_s(win)} training window inside its loader's "
                f"next() ({how[lf.source]} {lf.label()}), waiting for data "
                f"(AU ≈ {au:.0%}; MLPerf Storage asks ≥ {bar:.0%}).")
    elif loop.runtime is not None and loop.runtime.consumer is not None:
        text = (f"{who} waited for data {share:.0%} of the {human_s(win)} training window: "
                f"the time thread(s) {', '.join(map(str, loop.runtime.consumers))} took its "
                f"batches, its next() "
                f"(AU ≈ {au:.0%}; MLPerf Storage asks ≥ {bar:.0%}).")
    else:
        text = (f"{who} waited for data {share:.0%} of the {human_s(win)} training window "
                f"(AU ≈ {au:.0%}; MLPerf Storage asks ≥ {bar:.0%}).")
    if w.budget["data_wait"] > 0 and loop.how != "checkpoint-only":
        top = sorted(((k, x) for k, x in w.stall.items() if x > 0), key=lambda kv: -kv[1])[:2]
        subject = "it was " if loop.how == "self-loading" else "the producers were "
        parts, said = [], False
        for k, x in top:        # the subject once: "the producers were A and B"
            lead = "" if k == "loop_cpu" or said else subject
            said = said or k != "loop_cpu"
            parts.append(f"{lead}{_stall_words(w, k)} {x:.0%}")
        text += " During those waits " + " and ".join(parts) + " of the time."
        backoff = w.fetch_parts.get("backoff", 0.0)
        if backoff >= 0.05:
            text += (f" The object store's clients were backing off after refused requests "
                     f"(throttling) {backoff:.0%} of the wait.")
        names = _named_prep(w.per_loop[0], dict(top))
        if names:
            text += " " + names
    afs = v["after_first_step"]
    if afs and abs(afs["accelerator_utilization"] - au) >= 0.01:
        text += (f" Without the first step (its wait {human_s(afs['first_wait_s'])}, as DLIO "
                 f"counts): AU ≈ {afs['accelerator_utilization']:.0%}.")
    note = stacks_note(ctx, w)
    if note:
        v["stacks_note"] = note
        text += " " + note
    if short:
        text = f"Too little to judge ({short}): " + text
    steps = max(w.steps, 1)
    compute = w.budget["compute"]
    if rates["bytes_read"] and compute > 0:
        per_step = rates["bytes_read"] / steps
        # each loop needs per_step bytes in each step's compute / bar seconds; the
        # budget is the mean loop's, so compute per step is compute * loops / steps
        nl = len(w.loops)
        need = nl * per_step * bar / (compute * nl / steps)
        v["needed_read_bytes_per_s"] = need
        text += (f" Reads ran at {human_rate(rates['read_bytes_per_s'])} while the dataset was "
                 f"read; AU {bar:.0%} needs about {human_rate(need)}")
        # the waits count the steps only where the loop waits at every step
        if one_wait_per_step(w):
            v["bytes_per_step"] = per_step
            text += f" ({human_bytes(per_step)} per step)."
        else:
            text += "."
    t = ctx.targets
    if t.read_bps:
        ratio = rates["read_bytes_per_s"] / t.read_bps
        v["read_target_ratio"] = ratio
        text += (f" Against the {human_rate(t.read_bps)} read target: "
                 f"{ratio:.0%}" + (" (meets it)." if ratio >= 1 else "."))
    v["epochs"] = epochs(ctx, w)
    if v["epochs"]:
        shares = [f"{e['data_wait_share']:.0%}" for e in v["epochs"]]
        if len(shares) > 6:
            shares = shares[:3] + ["..."] + shares[-2:]
        text += f" Data wait by epoch ({len(v['epochs'])} seen): {', '.join(shares)}."
    v["summary"] = text + drops_note
    v["budget_line"] = budget_line(w)
    return v


def after_first_step(w: Waits) -> Optional[dict]:
    """The AU with the first step left out, as DLIO counts it (MLPerf Storage
    judges after warm-up): the window from the end of the loops' first data
    wait (the pipeline starting: workers forking, files opening, caches
    cold). The headline AU keeps the first step: it is the job's time too."""
    firsts = [st.waits[0] for st in w.states if len(st.waits) >= 2]
    if not firsts or len(firsts) != len(w.states):
        return None
    win, lo = w.budget.get("window", 0.0), w.window[0]
    first_wait = float(np.mean([(b - a) / 1e9 for a, b in firsts]))
    skipped = float(np.mean([(b - lo) / 1e9 for _, b in firsts]))
    rest = win - skipped
    if rest <= 0:
        return None
    share = max(w.budget["data_wait"] - first_wait, 0.0) / rest
    return {"accelerator_utilization": round(1 - share, 4), "window_s": round(rest, 4),
            "first_wait_s": round(first_wait, 6)}


def too_little(w: Waits, th: dict) -> Optional[str]:
    """Why the training window is too little to judge (under min_window_s, or
    fewer than min_data_waits waits), or None."""
    win = w.budget.get("window", 0.0)
    if win < th["min_window_s"]:
        return f"a training window of {human_s(win)}, under {th['min_window_s']:g} s"
    # few waits, and the window they give is uncertain; but a loop that
    # waits most of a long enough window is io-bound however its waits fall
    # (a script that only loads: one wait from start to end), and one that
    # waits under a quarter of the io-bound share is not io-bound even if that
    # window were 4 times too long (a loader that keeps ahead: no waits)
    share = w.budget.get("data_wait", 0.0) / win if win > 0 else 0.0
    clear = share >= 0.5 or share < th["io_bound_share"] / 4
    rl = w.loops[0].runtime if w.loops else None
    if rl is not None and rl.consumer is None:
        return rl.why
    if w.steps < th["min_data_waits"] and w.loops and w.loops[0].how != "checkpoint-only" \
            and not clear:
        return f"{w.steps} data wait(s) seen, under {th['min_data_waits']}"
    return None


# Python stack samples below which the verdict names no function of the
# loop's or the producers' CPU (their shares are then mostly noise)
MIN_NAMING_SAMPLES = 20


def _named_prep(loop: dict, top: dict) -> str:
    """'Prep: PIL ImageFile.load 41%, ...' for the loop's own CPU in the loader
    and its producers' CPU, where the stacks name them."""
    out = []
    for key, field in (("loop_cpu", "loop_cpu_top"), ("prep", "prep_top")):
        funcs = loop.get(field) or []
        what = "In the loop" if key == "loop_cpu" else "Prep"
        if key not in top or not funcs:
            continue
        n = sum(f["samples"] for f in funcs)
        total = (loop.get(field.replace("_top", "_stacks")) or {}).get("samples", n)
        if total < MIN_NAMING_SAMPLES:
            # a share of 8 samples is one sample in 8: no name from that
            out.append(f"{what}: {total} Python stack sample(s), too few to name its "
                       "functions.")
            continue
        out.append(f"{what}: " + ", ".join(
            f"{f['function']} ({f['file']}) {f['share']:.0%}" for f in funcs[:3]) + ".")
    return " ".join(out)


def stacks_note(ctx: Context, w: Waits) -> Optional[str]:
    """Why the verdict is the kernel's alone (no Python stacks in the trace,
    or none that show the loop's loader), or None where it is not."""
    loop = w.loops[0]
    ps = ctx.meta.get("py_stacks")
    if w.stacks:
        if loop.loader is not None or loop.how == "checkpoint-only" or \
                (loop.runtime is not None and loop.runtime.consumer is not None):
            return None
        why = loop.loader_why
    elif ctx.memo.get("kernel_only"):
        why = "asked for with --kernel-only"
    elif not ps:
        why = "the trace has no Python stacks (traced with --py-stacks 0, or by an older iotrace)"
    elif ps.get("error"):
        why = f"no Python stacks: {ps['error']}"
    elif ps.get("processes_not_sampled") and not ps.get("processes_sampled"):
        why = "no Python stacks: " + next(iter(ps["processes_not_sampled"].values()))
    else:
        why = "no Python stacks of the loop (it is not Python)"
    return (f"Kernel-only verdict ({why}): time the loop spends on its own CPU inside its "
            "loader (decoding, unpickling) counts as compute.")


def window_drops(ctx: Context, v: dict, lo: int, hi: int) -> str:
    """Records the full ring buffer lost in the window: how many, and what
    share of the window they fall in (meta.json drop_intervals); a sentence
    for the verdict, empty when none."""
    from iotrace.trace import drop_time
    total = int(ctx.meta.get("drops") or 0)
    if not total:
        return ""
    secs, n = drop_time(ctx.meta, lo, hi)
    win = max((hi - lo) / 1e9, 1e-9)
    known = bool(ctx.meta.get("drop_intervals"))
    v["drops"] = {"records": total, "in_window": n if known else None,
                  "window_s_affected": round(secs, 3) if known else None,
                  "window_share_affected": round(min(secs / win, 1.0), 4) if known else None}
    if not known:
        return (f" {total:,} records were dropped (ring buffer full), when is not known: "
                "counts and waits are lower bounds.")
    return (f" {total:,} records were dropped (ring buffer full), {n:,} of them in "
            f"{secs:.1f} s of the {win:.1f} s window ({min(secs / win, 1.0):.0%}): counts and "
            "waits there are lower bounds; raise --ringbuf-mb.")


def epochs(ctx: Context, w: Waits) -> list[dict]:
    """Per epoch (analyzers/epochs.py), the mean loop's data-wait share, its
    main stall cause, and the dataset bytes read; [] when epochs do not show."""
    out = []
    spans = find_epochs(ctx.con, *w.window)
    if spans and w.states and len(w.states[0].waits):
        # an epoch starts when the loop starts waiting for its first batch, not
        # at the first file its workers open (after they start)
        wt = w.states[0].waits
        cut = [s for s, _ in spans[1:]]
        i = np.searchsorted(wt[:, 0], cut, side="right") - 1
        cut = [int(wt[j, 0]) if j >= 0 and wt[j, 1] > c else c for j, c in zip(i, cut)]
        bounds = [spans[0][0]] + cut + [spans[-1][1]]
        spans = list(zip(bounds, bounds[1:]))
    # dataset bytes read per epoch, in one range join
    rd = dict(ctx.rows(f"""
        select k, sum(nbytes) from data_reads d
        join (values {', '.join(f'({k}, {s}, {e})' for k, (s, e) in enumerate(spans))})
             as ep(k, s, e) on d.ts_ns >= ep.s and d.ts_ns < ep.e
        where d.file_id in (select file_id from data_files)
        group by k""")) if spans else {}
    for k, (s, e) in enumerate(spans):
        span = max(e - s, 1)
        waits = [ivl.total(ivl.clip(st.waits, s, e)) for st in w.states]
        causes = np.zeros(len(STALL_KEYS))
        for st in w.states:
            if len(st.waits):
                causes += st.causes[(st.waits[:, 0] >= s) & (st.waits[:, 0] < e)].sum(axis=0)
        top = STALL_KEYS[int(causes.argmax())] if causes.sum() > 0 else None
        out.append({"start_s": round((s - ctx.t0_ns) / 1e9, 3),
                    "end_s": round((e - ctx.t0_ns) / 1e9, 3),
                    "data_wait_share": round(sum(waits) / len(waits) / span, 4) if waits else None,
                    "stall_top": top, "bytes_read": int(rd.get(k, 0))})
    return out


def budget_line(w: Waits) -> Optional[str]:
    b = w.budget
    win = b.get("window", 0.0)
    if win <= 0:
        return None
    parts = [f"compute {b['compute'] / win:.0%}"]
    sub = [f"{k} {b['compute_' + k] / win:.0%}" for k in ("sleep", "gpu") if b["compute_" + k] > 0]
    if sub:
        parts[0] += " (" + ", ".join(sub) + ")"
    dw = f"data wait {b['data_wait'] / win:.0%}"
    causes = [f"{k.replace('_', '-')} {x:.0%}" for k, x in
              sorted(w.stall.items(), key=lambda kv: -kv[1]) if x >= 0.05]
    if b["data_wait"] > 0 and causes:
        dw += " (" + ", ".join(causes) + " of it)"
    parts.append(dw)
    parts.append(f"checkpoint {b['checkpoint'] / win:.0%}")
    if b["other"] / win >= 0.005:
        parts.append(f"other {b['other'] / win:.0%}")
    return f"Time budget of the loop over {win:.1f} s: " + " | ".join(parts)
