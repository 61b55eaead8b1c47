"""The verdict against DLIO, the MLPerf Storage benchmark (dlio-benchmark 2.0.0,
PyTorch loader, 2 workers; tests/dlio/install.sh). DLIO times its own training
loop and reports its accelerator utilisation, AU = compute time / step time, and
the rate it read while training (summary.json); iotrace knows nothing of DLIO
and must agree with both, and name the cause DLIO's set-up makes (under a
cgroup throttle, the device's ceiling at the throttle's rate)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report

from conftest import cold_throttled_reads, needs_root, trace_run

pytest.importorskip("dlio_benchmark")
pytestmark = needs_root()

CONFIG = Path(__file__).resolve().parent / "dlio"
DLIO = str(Path(sys.executable).parent / "dlio_benchmark")
MiB = 1 << 20
# DLIO's tracer (pydftracer) would intercept the job's I/O: off. Open MPI refuses
# root without the two ALLOW variables, even as a singleton.
ENV = dict(os.environ, DFTRACER_ENABLE="0", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self")


def dlio_args(data: Path, out: Path, *overrides: str) -> list[str]:
    return [DLIO, f"--config-dir={CONFIG}", "workload=iotrace_small",
            f"++workload.dataset.data_folder={data}", f"++workload.output.folder={out}",
            f"hydra.run.dir={out}", *overrides]


@pytest.fixture(scope="module")
def data():
    """DLIO generates its own data set: 64 npz files of 2 MiB, on a real block
    device (the throttled case reads it through a blkio cgroup)."""
    d = Path(os.environ.get("IOTRACE_TEST_DATA", "/var/tmp")) / f"iotrace-dlio-{os.getpid()}"
    out = d.with_name(d.name + "-gen")
    subprocess.run(dlio_args(d, out, "++workload.workflow.generate_data=True",
                             "++workload.workflow.train=False"),
                   env=ENV, check=True, capture_output=True, timeout=300)
    assert len(list((d / "train").glob("*.npz"))) == 64
    yield d
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)


def dlio_loads(out: Path) -> list[float]:
    """DLIO's own timing of the loop (rank 0, one epoch): the seconds it waited
    for each batch (its `load` per step)."""
    o = json.loads((out / "0_output.json").read_text())
    return [x for epoch, d in o.items() if epoch.isdigit()
            for block in d["load"].values() for x in block]


def dlio_own_au(out: Path) -> float:
    """The AU by DLIO's own clock around next(), on DLIO's terms otherwise:
    per epoch, 1 - its `load` times after the first step over its time after
    the first step, the mean of the epochs. DLIO's headline AU is its nominal
    compute over that time instead, lower by what the loop does between its
    steps (DLIO's logging and statistics: 1.2 points a 1 s epoch here)."""
    o = json.loads((out / "0_output.json").read_text())
    aus = []
    for epoch, d in o.items():
        if not epoch.isdigit():
            continue
        for block, au in d["au"].items():
            total = sum(d["compute"][block][1:]) / (au / 100)
            aus.append(1 - sum(d["load"][block][1:]) / total)
    return float(np.mean(aus))


def run_dlio(tmp_path, data, *overrides, prefix=(), extra=()):
    """One traced DLIO run of one epoch: (DLIO's summary metrics, iotrace's
    verdict, its findings' evidence by id). The loop's data waits agree with
    DLIO's own timing of them within 5% or 5 ms a step. The first step is
    left out on both sides, as DLIO's AU leaves it out: DLIO's first `load`
    also times its lazy imports and the workers' start (under a cold cache,
    seconds of page faults)."""
    out = tmp_path / "dlio"
    proc, trace = trace_run(tmp_path / "trace", *prefix, *dlio_args(data, out, *overrides),
                            env=ENV, extra=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metric = json.loads((out / "summary.json").read_text())["metric"]
    report = build_report(trace, Targets())
    v = report.verdict
    loads = dlio_loads(out)
    # iotrace's first wait is inside DLIO's first step (it starts at the first
    # poll of the workers' pipe); a batch the workers had ready before it was
    # asked for is a wait of a millisecond or two DLIO counts and iotrace may not.
    # Waits closer than half a step's compute are one step's (the first step's
    # wait was once split by 1.2 ms at the workers' start; steps are 52 ms apart).
    # The loader joining its workers after the last step is no wait (DLIO does
    # not time it; under a loaded machine it took 85 ms, more than the tolerance)
    compute = next((float(o.split("=")[1]) for o in overrides
                    if o.startswith("++workload.train.computation_time=")), 0.0)
    eps = report.loop_states[0].waits
    if len(eps) and compute > 0:
        cut = np.flatnonzero(eps[1:, 0] - eps[:-1, 1] >= compute / 2 * 1e9) + 1
        eps = np.array([(p[0, 0], p[-1, 1]) for p in np.split(eps, cut)])
    waits = [(e - s) / 1e9 for s, e in eps]
    theirs, ours = sum(loads[1:]), sum(waits[1:])
    tol = max(0.05 * theirs, 0.005 * (len(loads) - 1))
    assert abs(ours - theirs) <= tol, (ours, theirs, tol, v["summary"])
    print(f"waits after step 1: DLIO {theirs:.3f} s, iotrace {ours:.3f} s ({len(loads)} steps); "
          f"DLIO AU {metric['train_au_mean_percentage']:.1f}% "
          f"{metric['train_io_mean_MB_per_second']:.0f} MiB/s | iotrace AU "
          f"{v['accelerator_utilization']:.1%} {v['read_bytes_per_s'] / MiB:.0f} MiB/s "
          f"{v['status']} stall {v['stall']}")
    return metric, v, {f.id: f.evidence for f in report.findings}


def warm(data: Path):
    for f in (data / "train").iterdir():
        f.read_bytes()


def test_compute_bound_dlio_passes_au(tmp_path, data):
    """0.2 s of compute a step, data in the page cache: DLIO ~97% AU."""
    warm(data)
    m, v, _ = run_dlio(tmp_path, data, "++workload.train.computation_time=0.2")
    # Held to DLIO's clock around next() (the verdict's definition): its
    # headline counts only its nominal compute and fell to 93.0% on a loaded
    # machine while its own waits (0.133 s) and iotrace's (0.139 s) agreed.
    theirs = dlio_own_au(tmp_path / "dlio")
    headline = m["train_au_mean_percentage"] / 100
    # DLIO leaves the first step out of its AU: so does the figure compared
    ours = v["after_first_step"]["accelerator_utilization"]
    assert ours == pytest.approx(theirs, abs=0.03), (theirs, headline, v["summary"])
    # the headline is lower by the loop's time between its steps, never higher
    assert ours >= headline - 0.01, (headline, v["summary"])
    assert v["status"] == ("not-io-bound" if theirs >= 0.9 else "io-bound"), v["summary"]
    assert v["loops"][0]["how"] == "worker-processes"


@pytest.mark.parametrize("neighbour", [False, True], ids=["alone", "beside-a-cpu-bound-job"])
def test_dlio_loading_in_its_loop(tmp_path, data, neighbour, request):
    """read_threads 0: DLIO's loop loads and decodes each .npz itself, inside
    the DataLoader's next(). The kernel alone sees only its reads and calls
    the decoding compute (AU 95% where DLIO says 82-87%); with the loop's
    Python stacks the time inside next() is the wait, as DLIO times it.
    The time in next() beyond the loop's file calls is estimated from the
    share of stack samples in it: over 4 epochs at 100 Hz (~400 samples, a
    23% share) its noise is 2.1 AU points (one sigma), and 1 run in 3 was
    5.6 points off; 10 epochs at 200 Hz (~2000 samples) make it 0.9. The
    ground truth is DLIO's own clock around next() (dlio_own_au). Its
    headline AU is lower by definition (its nominal compute over its time:
    its per-step bookkeeping is neither), by 1.2 to 2.9 points in these
    runs: iotrace is held to 3 points below it at most. Once more while
    another job keeps both CPUs busy (the loop's decoding then waits for a
    CPU inside next(): data wait, as DLIO's clock counts it)."""
    warm(data)
    if neighbour:
        request.getfixturevalue("cpu_neighbour")
    m, v, _ = run_dlio(tmp_path, data, "++workload.train.computation_time=0.05",
                       "++workload.reader.read_threads=0", "++workload.train.epochs=10",
                       extra=("--py-stacks", "200"))
    headline = m["train_au_mean_percentage"] / 100
    theirs = dlio_own_au(tmp_path / "dlio")
    ours = v["after_first_step"]["accelerator_utilization"]    # as DLIO counts
    print(f"AU without the first step: DLIO {theirs:.1%} by its clock around next() "
          f"({headline:.1%} its headline), iotrace {ours:.1%}")
    assert ours == pytest.approx(theirs, abs=0.03), (theirs, v["summary"])
    assert headline <= theirs + 0.005, (headline, theirs)
    assert ours >= headline - 0.03, (headline, v["summary"])
    assert v["loops"][0]["how"] == "self-loading"
    assert v["loops"][0]["loader_frame"]["what"] == "PyTorch DataLoader"
    # beside the neighbour the loop's decoding waits for a CPU about as long
    # as it runs (0.45-0.47 of the wait each in three runs): either is first
    top = max(v["stall"], key=v["stall"].get)
    assert top in (("cpu_starved", "loop_cpu") if neighbour else ("loop_cpu",)), v["stall"]
    assert v["stall"]["loop_cpu"] > 0.3, v["stall"]
    assert v["stall"]["cpu_starved"] > 0.3 or not neighbour, v["stall"]


def test_dlio_without_compute_reads_at_its_rate(tmp_path, data):
    """No compute, data cached: DLIO's AU is 0 by definition (nothing is compute);
    the loop waits on its workers, which spend the time decoding (CPU), not
    reading. The read rate while training is DLIO's, not the average over
    its start-up."""
    warm(data)
    m, v, _ = run_dlio(tmp_path, data, "++workload.train.computation_time=0")
    # 16 steps of ~15 ms: a window under 1 s is too little for a confident
    # status, though the numbers are given (for a longer run: io-bound)
    win = v["time_budget_s"]["window"]
    assert v["status"] == ("io-bound" if win >= 1 else "unknown"), v["summary"]
    if win < 1:
        assert v["summary"].startswith("Too little to judge (a training window of"), v["summary"]
    # 16 steps of ~15 ms: the share moves between 35% and 67% from run to run
    assert v["data_wait_share"] > 0.25, v["summary"]
    # the workers' CPU (decoding, waiting for a core, pickling the batch into the
    # pipe) is the cause; storage is not. How it splits between decoding and the
    # hand-over moves with the machine's load (prep + cpu-starved 48% against
    # transfer 51% once under the whole suite, mostly 60-70% alone)
    # (the loop's own unpickling of a batch, transfer before the Python stacks,
    # is the loop on CPU inside next() with them: loop_cpu, 6-12% here)
    st = v["stall"]
    assert st["fetch"] < 0.1 and \
        st["prep"] + st["cpu_starved"] + st["transfer"] + st["loop_cpu"] > 0.9, st
    assert st["prep"] + st["cpu_starved"] > 0.3, st
    theirs = m["train_io_mean_MB_per_second"] * MiB        # DLIO's MB are MiB
    # the rate while reading, not averaged over start-up (which would be several
    # times lower); DLIO's own divides by its steps' time, its bookkeeping included
    assert 0.8 * theirs <= v["read_bytes_per_s"] <= 2 * theirs, (v["read_bytes_per_s"], theirs)


def test_throttled_cold_dlio_is_fetch_bound(tmp_path, data):
    """Cold cache, storage throttled to 50 MB/s, 0.05 s of compute: DLIO's AU is
    low and its read rate is the throttle's; the cause is fetching."""
    with cold_throttled_reads(data, 50 * 1000 * 1000) as prefix:
        m, v, found = run_dlio(tmp_path, data, "++workload.train.computation_time=0.05",
                               prefix=prefix)
    theirs = m["train_au_mean_percentage"] / 100
    assert v["status"] == "io-bound", v["summary"]
    # compared without the first step, as DLIO counts; iotrace still counts
    # DLIO's own per-step work as compute: 2.8 and 3.0 points apart in two runs
    # (kernel-only, with the first step: 2.6 on one machine of this kind,
    # 1.9-5.7 on another, 4.2-5.6 alone and 7.0 under the whole suite on a
    # third: DLIO's own work grows with the load). The waits themselves agree
    # within 1%: run_dlio checks them, the ground truth here.
    ours = v["after_first_step"]["accelerator_utilization"]
    print(f"AU without the first step: DLIO {theirs:.1%}, iotrace {ours:.1%}")
    assert ours == pytest.approx(theirs, abs=0.09), (theirs, v["summary"])
    assert max(v["stall"], key=v["stall"].get) == "fetch", v["stall"]
    # what the storage delivered while the data set was read: the throttle's rate;
    # DLIO's own figure divides by its steps' time, compute included, so it is lower
    rate = m["train_io_mean_MB_per_second"] * MiB
    assert v["read_bytes_per_s"] == pytest.approx(50e6, rel=0.15), v["read_bytes_per_s"]
    assert v["read_bytes_per_s"] >= 0.9 * rate, (v["read_bytes_per_s"], rate)
    device_at_the_throttle(found, 50e6)


def device_at_the_throttle(found: dict, bps: float):
    """device-at-limit names the throttle's rate as the device's ceiling
    (50.4 and 19.97 MB/s measured under 50 and 20), and the device busy a
    small share of the span: the limit is in front of it."""
    assert "device-at-limit" in found, sorted(found)
    ev = found["device-at-limit"]
    assert ev["ceiling_bytes_per_s"] == pytest.approx(bps, rel=0.10), ev
    assert ev["device_busy_share"] < 0.5 and ev["storage_wait_share"] >= 0.8, ev


def test_dlio_starved_by_slow_storage_near_zero_au(tmp_path, data):
    """Cold cache, storage throttled to 20 MB/s, 5 ms of compute a step: each
    8 MiB batch takes ~0.4 s to read; DLIO's AU is near 0, and so is iotrace's."""
    with cold_throttled_reads(data, 20 * 1000 * 1000) as prefix:
        m, v, found = run_dlio(tmp_path, data, "++workload.train.computation_time=0.005",
                               prefix=prefix)
    theirs = m["train_au_mean_percentage"] / 100
    assert theirs < 0.05
    # near 0 on both sides; apart by what the window and DLIO's own per-step work
    # add (as in the throttled case above): 1.3% against 5.3% on one machine
    assert v["accelerator_utilization"] < 0.1, v["summary"]
    ours = v["after_first_step"]["accelerator_utilization"]     # as DLIO counts
    assert ours == pytest.approx(theirs, abs=0.05), (theirs, v["summary"])
    assert v["status"] == "io-bound" and max(v["stall"], key=v["stall"].get) == "fetch"
    device_at_the_throttle(found, 20e6)
