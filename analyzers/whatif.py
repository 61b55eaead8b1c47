"""What would help: the AU of a change to the input pipeline, predicted from
one trace (`iotrace whatif`, the report's `whatif`).

The model (docs/whatif.md) is a pipeline in steady state, fitted to what the
trace measured in the window after the loop's first wait
(waits.pipeline_costs): per batch, the loop's compute c (its time outside
its waits; c_cpu of it on CPU) and its own work inside next() s (unpacking,
collating; for a loop that loads itself, none: its loading is the producer);
each producer's time per batch fetching f (in storage reads or object GETs,
the client's backoff included; f_cpu of it on CPU), preparing on CPU r and
handing over x;
the job's other threads' time on CPU o (a runtime's executor and daemons);
P producers (the ones that fetched or prepared); K usable CPUs (the job's
affinity and cgroup quota, meta.json `machine`); and, where the producers
fetched most of their busy time, the storage's rate as measured, a ceiling
shared by all of them. Batches come at the rate of the slowest stage:

    producers   P / (f + r + x)             each producer turns out a batch
    CPU         K / (r + x + s + c_cpu + f_cpu + o)  the CPU time a step needs, on K CPUs
    storage     R / b                       R the storage's rate, b bytes a batch
    the loop    1 / (c + s)                 it cannot go faster than its steps

and AU = c x rate: the slower of the producers' and the CPUs' stages,
combined with the storage's and the loop's as a smooth maximum (_step);
where the producers start anew each epoch, what the epochs' starts cost
over the steady pace is simulated (epoch_sim.py).
A loop that loads itself (num_workers=0) is one producer that is also the
loop: its step is c + f + r, one after the other. The measured step over
the model's for the measured configuration (`calibration`) says how much the
model explains: more than 25% off and the predictions are marked rough. Each
scenario changes the inputs and names the stage that limits.
"""
from __future__ import annotations

import math
import re
from typing import Optional

from iotrace.errors import EXIT_USAGE, IotraceError

from . import epoch_sim
from .rates import parse_rate

# producers' fetch over their busy time from which the storage is taken to be
# at its ceiling (its measured rate then caps any number of producers)
STORAGE_BOUND_SHARE = 0.5
ROUGH = 0.25            # |calibration - 1| above which predictions are rough
CACHED_ALREADY = 0.9    # page_cache_share from which the data counts as cached already
SMOOTH = 8              # the norm that combines the stages' times (_step)
EPOCH_SIM = 512         # batches of an epoch simulated at most (_epochs_extra)

SETTINGS = {
    "workers": "producers (DataLoader workers, reader threads): N or Nx",
    "read_bw": "storage read rate: a rate (2GiB/s, 100MB/s) or a factor (2x)",
    "cached": "the dataset read from the page cache (objects, NFS: from a copy in local "
              "memory): yes",
    "compute": "the loop's compute per step: a factor (0.5x: an accelerator twice as fast; "
               "the loop's own CPU time around it stays) or seconds (0.05)",
    "cores": "usable CPUs: N or Nx",
}


def fit(pipe: dict, machine: Optional[dict], bytes_read: Optional[float]) -> dict:
    """The model's inputs from the loop's measured pipeline (per batch)."""
    n = max(pipe.get("batches", pipe["steps"]), 1)
    prods = active_producers(pipe)
    tot = {k: sum(p[k] for p in prods) for k in BUSY}
    busy = sum(tot.values())
    inp = {
        "imbalance": in_order_imbalance(pipe, [busy_time(p) for p in prods]),
        "how": pipe["how"],
        "steps": n,
        "step_s": pipe["span_s"] / n,
        "compute_s": pipe["compute_s"] / n,
        "compute_cpu_s": pipe["compute_cpu_s"] / n,
        "loop_serial_s": pipe["loop_serial_s"] / n,
        # producers at a time: their time alive over the span (a DataLoader
        # starts new workers each epoch: two epochs of one worker are one)
        "producers": max(1, round(sum(p["alive"] for p in prods) / pipe["span_s"]))
        if prods and pipe["span_s"] > 0 else len(prods),
        # per batch, of one producer: its time divided among the batches
        "fetch_s": (tot["fetch"] + tot["backoff"]) / n,
        # of it, the client asleep between a refused request and its retry:
        # a faster storage does not shorten a backoff
        "backoff_s": tot["backoff"] / n,
        # of it on CPU: reads copying from the page cache, a client's own
        # work inside its requests (the CPUs' stage counts it)
        "fetch_cpu_s": sum(p.get("fetch_cpu", 0.0) for p in prods) / n,
        "prep_cpu_s": tot["cpu"] / n,
        "transfer_s": tot["transfer"] / n,
        # the job's other threads on CPU, a batch (a runtime's executor and
        # daemons, a framework's compute threads): CPU the pipeline shares
        # (at most what the measured run left of its CPUs: spare_cpu)
        "other_cpu_s": pipe.get("other_cpu_s", 0.0) / n,
        "cpus": usable_cpus(machine),
        "bytes_per_step": bytes_read / n if bytes_read else None,
        "storage_bytes_per_s": None,
        # the share of the reads' bytes the page cache (or memory) served:
        # local files' bytes the block devices did not complete
        "page_cache_share": round(max(0.0, pipe.get("local_bytes_read", 0)
                                      - (pipe.get("device_bytes_read") or 0)) / bytes_read, 4)
        if bytes_read and "local_bytes_read" in pipe else None,
        # the share of the reads' bytes from files on local disks or in
        # memory (the rest objects over HTTP, network file systems): whether
        # "cached" means the page cache or a copy kept in local memory
        "local_share": round(min(pipe.get("local_bytes_read", 0) / bytes_read, 1.0), 4)
        if bytes_read and "local_bytes_read" in pipe else None,
        # producers started anew in the window (each epoch's new DataLoader
        # workers): how many times, and their start-up's waits (the median)
        "restarts": len(pipe.get("restarts") or []),
        "startup_s": _median([r["startup_s"] for r in pipe.get("restarts") or []]),
        # what each new worker process cost the loop at a restart (its fork),
        # counted in the loop's compute
        "spawn_s": _median([r["spawn_s"] for r in pipe.get("restarts") or []
                            if r.get("spawn_s") is not None]),
    }
    inp["other_cpu_s"] = spare_cpu(inp)
    # each batch is made by one producer: the producers' summed busy time
    # over the batches is what one batch costs one producer (their time
    # blocked otherwise, waiting for room or work, and runnable, waiting for
    # a CPU, is not: the CPU stage accounts for CPUs)
    # (their backoff after refused requests is the client's sleep, not the
    # storage delivering: a throttled store's pace is no bandwidth ceiling)
    if busy > 0 and tot["fetch"] / busy >= STORAGE_BOUND_SHARE \
            and bytes_read and pipe["span_s"] > 0:
        # the device's completions where it served the reads (the reads
        # themselves also count what readahead brought before the window:
        # 10% more under a 50 MB/s throttle); the reads' bytes elsewhere
        # (objects over the network, NFS)
        dev = pipe.get("device_bytes_read") or 0
        inp["storage_bytes_per_s"] = (dev if dev >= 0.5 * bytes_read else bytes_read) \
            / pipe["span_s"]
    return inp


# a producer's busy time: working, fetching, backing off, handing over,
# waiting for a CPU
BUSY = ("cpu", "fetch", "backoff", "transfer", "starved")


def spare_cpu(inp: dict) -> float:
    """The job's other threads' CPU a batch, as far as the measured run's CPUs
    had room for it beside the pipeline's: K CPUs do at most K x step of work
    a step. Beyond that the other threads ran on CPUs the pipeline did not
    want, work that yields to it (a framework's op threads spinning while
    they wait for work: TensorFlow's, 0.38 s a 0.37 s step beside 0.41 s of
    the loop's and tf.data's, on 2 CPUs), or the pipeline's own CPU is
    counted high: neither is a demand that slows the CPUs' stage. Without
    the CPU count, as measured."""
    o = inp["other_cpu_s"]
    if not inp["cpus"] or o <= 0:
        return o
    return min(o, max(inp["cpus"] * inp["step_s"] - pipeline_cpu(inp), 0.0))


def pipeline_cpu(m: dict) -> float:
    """The loop's and the producers' CPU time a step (r + x + s + c_cpu + f_cpu)."""
    return m["prep_cpu_s"] + m["transfer_s"] + m["loop_serial_s"] + m["compute_cpu_s"] \
        + m.get("fetch_cpu_s", 0.0)


def active_producers(pipe: dict) -> list[dict]:
    """The producers that fetched or prepared (not relays that only hand on)."""
    return [p for p in pipe["producers"] if p["cpu"] + p["fetch"] + p["backoff"] > 0]


def busy_time(p: dict) -> float:
    return sum(p[k] for k in BUSY)


def in_order_imbalance(pipe: dict, busy: list) -> float:
    """How much slower than their mean the slowest producer is (its `busy`
    time over the mean's), where a DataLoader's workers backed off: it takes
    its batches from its workers in turn, so a worker asleep seconds before
    a retry holds the loop while the others sit idle with their batches
    ready (two workers busy 4.2 s and 2.3 s: a step 1.29 times the mean's,
    0.51 s against the 0.53 s measured; the mean said 0.40 s). Without
    backoff a worker's batches cost about the same, and 1."""
    busy = [b for b in busy if b > 0]
    backoff = sum(p["backoff"] for p in pipe["producers"])
    if pipe["how"] != "worker-processes" or backoff <= 0 or len(busy) < 2:
        return 1.0
    return max(busy) / (sum(busy) / len(busy))


def _median(xs: list) -> float:
    return float(sorted(xs)[len(xs) // 2]) if xs else 0.0


def cached_already(base: dict) -> bool:
    """Whether the reads came from the page cache already (page_cache_share)."""
    return (base.get("page_cache_share") or 0) >= CACHED_ALREADY


def usable_cpus(machine: Optional[dict]) -> Optional[float]:
    if not machine:
        return None
    k = [x for x in (machine.get("cpus_allowed"), machine.get("cgroup_cpu_limit")) if x]
    return float(min(k)) if k else None


def _rates(m: dict) -> dict:
    """Batches a second each stage allows (inf: no limit)."""
    c, s = m["compute_s"], m["loop_serial_s"]
    f, r, x = m["fetch_s"], m["prep_cpu_s"], m["transfer_s"]
    inf = math.inf
    if m["how"] == "self-loading":
        per = c + s + f + r
        out = {"the loop loading its own data": 1 / per if per > 0 else inf}
    else:
        out = {"the loop's compute": 1 / (c + s) if c + s > 0 else inf,
               "producers": (m["producers"] / ((f + r + x) * m.get("imbalance", 1.0)))
               if m["producers"] and f + r + x > 0 else inf}
    cpu = pipeline_cpu(m) + m.get("other_cpu_s", 0.0)
    if m["cpus"] and cpu > 0:
        out["CPU"] = m["cpus"] / cpu
    if m["storage_bytes_per_s"] and m["bytes_per_step"]:
        out["storage"] = m["storage_bytes_per_s"] / m["bytes_per_step"]
    return out


# the producers' own pace and the CPUs' are one constraint: the producers'
# CPU work on CPUs they share (with the loop's), the slower of the two
SHARED_CPU = ("producers", "CPU")


def _step(m: dict) -> tuple[float, str]:
    """The step time, and the slowest stage. The producers' own pace and the
    CPUs' are the same threads' work on shared CPUs: the slower sets it (2
    workers that fill 2 CPUs run at the CPUs' pace, not slower). That, the
    storage and the loop hand work on through queues (requests, batches)
    and make each other wait (a batch late from one is late for the next,
    a device idle while the producers decode): their times are combined as
    a smooth maximum (their SMOOTH-norm), so two of the same pace take
    about 9% longer than either alone, while a far slower one sets the
    pace alone."""
    rates = {k: v for k, v in _rates(m).items() if v < math.inf}
    if not rates:
        return 0.0, "nothing"
    name = min(rates, key=rates.get)
    shared = [1 / v for k, v in rates.items() if k in SHARED_CPU]
    times = ([max(shared)] if shared else []) + [1 / v for k, v in rates.items()
                                                 if k not in SHARED_CPU]
    return sum(t ** SMOOTH for t in times) ** (1 / SMOOTH), name


def _epochs_extra(base: dict, m: dict) -> float:
    """What the epochs' starts add to the window over the steady pace under
    inputs m, where the producers start anew each epoch (a DataLoader
    without persistent workers): each restart's start-up waits (measured)
    and a pipeline that starts empty, less what the window's first epoch
    gained from the batches made during the loop's first wait (left out of
    the window); simulated (epoch_sim.py)."""
    restarts = base.get("restarts") or 0
    if not restarts or m["how"] == "self-loading" or not m["producers"]:
        return 0.0
    fc = min(m.get("fetch_cpu_s", 0.0), m["fetch_s"])    # the fetch's CPU work
    f, cpu = m["fetch_s"] - fc, m["prep_cpu_s"] + m["transfer_s"] + fc
    slots = math.inf
    if m["storage_bytes_per_s"] and m["bytes_per_step"] and f > 0:
        slots = m["storage_bytes_per_s"] * f / m["bytes_per_step"]
    # the CPUs left to the pipeline by the job's other threads (their share
    # of the CPU time a step needs)
    need = cpu + m["loop_serial_s"] + m["compute_cpu_s"]
    other = m.get("other_cpu_s", 0.0)
    cpus = m["cpus"] * need / (need + other) if m["cpus"] and need > 0 else m["cpus"]
    pipe = epoch_sim.Pipeline(producers=max(int(round(m["producers"])), 1), fetch_s=f,
                              cpu_s=cpu, loop_s=m["compute_s"] + m["loop_serial_s"],
                              cpus=cpus or math.inf, fetch_slots=slots)
    n = min(EPOCH_SIM, round((base["steps"] + 1) / (restarts + 1)))
    # an epoch's batches are known to one or so (a wait split in two, an
    # epoch's last call to next() that waited), and where they do not divide
    # among the workers the last of them works alone: the mean of n - 1 to n + 1
    return sum(epoch_sim.restart_extra(pipe, k, restarts, base["startup_s"])
               for k in (n - 1, n, n + 1) if k >= 1) / (3 if n > 1 else 2)


def mean_step(base: dict, m: dict) -> tuple[float, str]:
    """The step time over the window (the steady step and the restarts'
    losses spread over the steps), and the slowest stage."""
    t, lim = _step(m)
    if t > 0 and base.get("restarts"):
        t = max(t + _epochs_extra(base, m) / max(base["steps"], 1), 0.5 * t)
    return t, lim


def predict(base: dict, changes: dict) -> dict:
    """The inputs changed (scenario): their step time, AU and the stage that
    limits then."""
    m = {**base, **changes}
    t, lim = mean_step(base, m)
    au = min(m["compute_s"] / t, 1.0) if t > 0 else None
    return {"step_s": round(t, 6), "predicted_au": round(au, 4) if au is not None else None,
            "limited_by": lim}


def parse_set(text: str) -> dict:
    """--set workers=8,read_bw=2GiB/s,cores=16,compute=0.5x -> {key: (value, is_factor)}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = part.partition("=")
        key = key.strip()
        if not eq or key not in SETTINGS:
            raise IotraceError(f"--set {part!r}: give KEY=VALUE with KEY one of "
                               f"{', '.join(SETTINGS)} (e.g. --set workers=8,read_bw=2GiB/s)",
                               EXIT_USAGE)
        val = val.strip()
        if key == "cached":
            if val.lower() not in ("yes", "true", "1"):
                raise IotraceError(f"--set cached={val}: only cached=yes is a scenario",
                                   EXIT_USAGE)
            out[key] = (True, False)
            continue
        fac = re.fullmatch(r"([0-9.]+)x", val)
        if fac:
            out[key] = (float(fac.group(1)), True)
        elif key == "read_bw":
            try:
                out[key] = (parse_rate(val), False)
            except ValueError as e:
                raise IotraceError(f"--set {part!r}: {e}, or as a factor (2x)",
                                   EXIT_USAGE) from None
        else:
            try:
                out[key] = (float(val), False)
            except ValueError:
                raise IotraceError(f"--set {part!r}: {key} takes {SETTINGS[key]}",
                                   EXIT_USAGE) from None
        if out[key][0] <= 0:
            raise IotraceError(f"--set {part!r}: must be above 0", EXIT_USAGE)
    return out


def apply(base: dict, settings: dict) -> tuple[dict, Optional[str]]:
    """The model's inputs under settings ({key: (value, is_factor)}), or why
    the model cannot predict it."""
    m: dict = {}
    for key, (val, factor) in settings.items():
        if key == "workers":
            if base["how"] == "self-loading":
                return {}, ("the loop loads its own data (num_workers=0): moving that work to "
                            "worker processes costs handing batches over, which this trace "
                            "did not measure")
            if not base["producers"]:
                return {}, "no producer was measured"
            n = base["producers"] * val if factor else val
            m["producers"] = n
            if base["restarts"] and base["spawn_s"]:
                # each epoch's start forks the workers: the loop's own time,
                # on its CPU, grows or shrinks with their number
                more = base["restarts"] * (n - base["producers"]) * base["spawn_s"] \
                    / max(base["steps"], 1)
                m["compute_s"] = max(base["compute_s"] + more, 0.0)
                m["compute_cpu_s"] = max(base["compute_cpu_s"] + more, 0.0)
        elif key == "read_bw":
            if base["fetch_s"] <= 0 or cached_already(base):
                continue                    # nothing read from storage: no change
            cur = base["storage_bytes_per_s"]
            k = val if factor else (val / cur if cur else None)
            if k is None:
                return {}, ("the storage was not the limit (its rate is not measured as a "
                            "ceiling): give a factor, read_bw=2x")
            # the device's time shrinks; the copying on CPU and the client's
            # backoff after refused requests stay
            fc, bo = base.get("fetch_cpu_s", 0.0), base.get("backoff_s", 0.0)
            m["fetch_s"] = max(base["fetch_s"] - fc - bo, 0.0) / k + fc + bo
            if cur:
                m["storage_bytes_per_s"] = cur * k
        elif key == "cached":
            if cached_already(base):
                continue        # its reads were page-cache hits: their time is copying
            m["fetch_s"] = m["fetch_cpu_s"] = 0.0
            m["storage_bytes_per_s"] = None
        elif key == "compute":
            c, cpu = base["compute_s"], base["compute_cpu_s"]
            if not factor:                  # seconds: the loop's compute a step
                m["compute_s"], m["compute_cpu_s"] = val, min(cpu, val)
            elif c <= 0:
                return {}, "the loop had no compute to scale"
            elif c - cpu >= 0.5 * c:
                # a faster accelerator speeds up what runs on it (the loop's
                # time on a device or asleep), not the loop's own Python
                # around it
                m["compute_s"] = cpu + (c - cpu) * val
            else:                           # a loop that computes on its CPU: whole
                m["compute_s"], m["compute_cpu_s"] = c * val, cpu * val
        elif key == "cores":
            if not base["cpus"]:
                return {}, ("the trace does not record the machine's CPUs (meta.json "
                            "`machine`, recorded since iotrace 0.x: trace again)")
            m["cpus"] = base["cpus"] * val if factor else val
    return m, None


def label(settings: dict, base: dict) -> str:
    parts = []
    for key, (val, factor) in settings.items():
        if key == "cached":
            # objects over HTTP or a network file system are not in this
            # machine's page cache: a copy in its memory (a local cache) is
            parts.append("dataset in the page cache" if (base.get("local_share") or 0) >= 0.5
                         else "dataset kept in local memory (not fetched)")
        elif factor:
            parts.append(f"{key} x{val:g}")
        else:
            parts.append(f"{key}={val:g}")
    return ", ".join(parts)


def standard(base: dict) -> list[dict]:
    """The scenarios asked of every trace."""
    out = []
    if base["how"] != "self-loading" and base["producers"]:
        p = base["producers"]
        out.append({"workers": (p * 2, False)})
        if p >= 2:
            out.append({"workers": (max(p // 2, 1), False)})
    out += [{"read_bw": (2.0, True)}, {"read_bw": (0.5, True)}, {"cached": (True, False)},
            {"compute": (0.5, True)}, {"cores": (2.0, True)}]
    return out


REQUEST_SIZE = ("read requests of 4 MiB", "the model has no request-size term: the measured "
                "fetch time per batch is not split into per-request latency and transfer")


def analyse(verdict: dict, meta: dict, settings: Optional[dict] = None) -> dict:
    """{"baseline": {...}, "whatif": [...]}: the standard scenarios (or the one
    in settings) for the verdict's first loop. Each entry: scenario,
    predicted_au (0..1, or null with `cannot` saying why), limited_by,
    step_s; the baseline has the model's inputs and its calibration."""
    loops = verdict.get("loops") or []
    pipe = loops[0].get("pipeline") if loops else None
    if not pipe:
        why = ("no training loop was found" if not loops else
               "the loop's steps run in a framework's runtime (model.fit): its pipeline's "
               "stages are not measured per batch" if loops[0].get("step_runner") else
               "fewer than 3 data waits after the first: too little to fit the model")
        return {"baseline": None, "whatif": [], "cannot": why}
    base = fit(pipe, meta.get("machine"), pipe.get("bytes_read"))
    t0, lim0 = mean_step(base, base)
    cal = base["step_s"] / t0 if t0 > 0 else None
    measured_au = base["compute_s"] / base["step_s"] if base["step_s"] > 0 else None
    baseline = {"measured_au": round(measured_au, 4) if measured_au is not None else None,
                "model_au": round(min(base["compute_s"] / t0, 1.0), 4) if t0 > 0 else None,
                "limited_by": lim0, "calibration": round(cal, 3) if cal else None,
                "rough": cal is None or abs(cal - 1) > ROUGH,
                # the producers' starts each epoch, and what they cost the
                # window over the steady pace (the model's, as traced)
                "restarts": base["restarts"],
                "restarts_cost_s": round(_epochs_extra(base, base), 6),
                "inputs": {k: (round(v, 6) if isinstance(v, float) else v)
                           for k, v in base.items()}}
    out = []
    for sc in ([settings] if settings else standard(base)):
        changes, why = apply(base, sc)
        entry = {"scenario": label(sc, base),
                 "settings": {k: (f"{v:g}x" if f else v) for k, (v, f) in sc.items()}}
        if why:
            entry.update(predicted_au=None, limited_by=None, cannot=why)
        else:
            entry.update(predict(base, changes))
            if (sc.get("cached") or sc.get("read_bw")) and cached_already(base):
                entry["note"] = (f"{base['page_cache_share']:.0%} of the bytes read came from "
                                 "the page cache already")
            if sc.get("cached") and meta.get("machine", {}).get("mem_available_bytes"):
                size = verdict.get("dataset_bytes") or verdict.get("bytes_read")
                entry["fits_in_memory"] = bool(size and
                                               size <= meta["machine"]["mem_available_bytes"])
        out.append(entry)
    if not settings:
        out.append({"scenario": REQUEST_SIZE[0], "settings": {}, "predicted_au": None,
                    "limited_by": None, "cannot": REQUEST_SIZE[1]})
    return {"baseline": baseline, "whatif": out}
