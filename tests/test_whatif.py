"""What-if predictions against running the change: one configuration is
traced, the model (analyzers/whatif.py) predicts others, and those others
are run untraced; their own AU (the loop's clock around next(), DLIO's AU)
is the ground truth, within 5 points. Predictions are of the AU after the
first step (the steady state), and are compared with that."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from iotrace.analyzers import whatif
from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report

from conftest import WORKLOADS, cold_throttled_reads, iotrace_cmd, needs_root, trace_run

pytestmark = needs_root()
POINTS = 0.05


def own_au(path) -> float:
    """The loop's own AU without its first step (train_loader.py's clock)."""
    t = json.loads(path.read_text())
    w = t["wait_s"]
    return 1 - sum(w[1:]) / (t["loop_window_s"] - w[0])


def predicted(report, meta, setting: str) -> dict:
    got = whatif.analyse(report.verdict, meta, whatif.parse_set(setting))["whatif"][0]
    assert got["predicted_au"] is not None, got
    return got


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("whatif") / "ds"
    d.mkdir()
    for i in range(48):
        (d / f"sample_{i:03d}.bin").write_bytes(bytes([i]) * (1 << 20))
    return d


def loader(data, out, workers: int, prep: str = "0.02") -> list[str]:
    # each sample costs a worker `prep` seconds of its CPU, a step 20 ms of sleep
    return [sys.executable, str(WORKLOADS / "train_loader.py"), str(data), str(out),
            "--loader", "torch", "--workers", str(workers), "--prep", prep,
            "--compute", "0.02", "--compute-kind", "sleep", "--epochs", "2"]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory, samples):
    """A trace of the loop fed by one DataLoader worker: (its directory, the
    loop's own clock)."""
    d = tmp_path_factory.mktemp("one-worker")
    proc, _ = trace_run(d / "t", *loader(samples, d / "own1.json", 1))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return d / "t", d / "own1.json"


def test_more_workers_then_the_cpus_limit(tmp_path, samples, one_worker):
    """One DataLoader worker, prep-bound (AU ~25%): 2 workers double the
    batches until the 2 CPUs are busy, and 4 add nothing: the prediction
    must see the CPU limit (4 workers on 2 cores). Then both are run, three
    times each: single runs of 4 workers on the 2 CPUs ran at 49.5-55.6% in
    one day (the model said 50.6-54.7%), so the median is the ground truth."""
    import iotrace
    trace = iotrace.open_trace(one_worker[0])
    report = build_report(trace, Targets(), rules=False)
    base = report.whatif["baseline"]
    assert base["limited_by"] == "producers" and not base["rough"], base
    assert base["measured_au"] == pytest.approx(own_au(one_worker[1]), abs=0.03)
    for n in (2, 4):
        p = predicted(report, trace.meta, f"workers={n}")
        runs = []
        for k in range(3):
            subprocess.run(loader(samples, tmp_path / f"own{n}-{k}.json", n), check=True,
                           capture_output=True)
            runs.append(own_au(tmp_path / f"own{n}-{k}.json"))
        ran = statistics.median(runs)
        print(f"{n} workers: predicted {p['predicted_au']:.1%} ({p['limited_by']}), ran "
              f"{', '.join(f'{r:.1%}' for r in runs)}")
        assert p["predicted_au"] == pytest.approx(ran, abs=POINTS), (p, ran)
        if n == 4:
            assert p["limited_by"] == "CPU", p


def side_cpu_s(path, lo: int, hi: int) -> float:
    """side_cpu.py's CPU seconds in [lo, hi), from its own clock's samples."""
    import numpy as np
    s = np.array(json.loads(path.read_text()), dtype=np.float64)
    return float(np.interp(hi, s[:, 0], s[:, 1]) - np.interp(lo, s[:, 0], s[:, 1])) / 1e9


def test_side_process_cpu_then_more_workers(tmp_path, samples):
    """A process of the job beside the pipeline works 30 ms of CPU for each
    batch the loop takes (as a runtime's executor does: Ray Data's, in the
    loop's process, used more CPU than its workers) while one DataLoader
    worker feeds the loop: the model counts its CPU, by its own clock, as
    the job's other CPU (`other_cpu_s`), and predicts 2 workers sharing the
    2 CPUs with it within 5 points of running them (without it the model
    said 2 workers as if alone, 10-15 points more)."""
    cmd = loader(samples, tmp_path / "own1.json", 1) + ["--side-cpu", "0.03"]
    proc, trace = trace_run(tmp_path / "t", *cmd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = build_report(trace, Targets(), rules=False)
    base = report.whatif["baseline"]
    pipe = report.verdict["loops"][0]["pipeline"]
    side = side_cpu_s(tmp_path / "own1.json.side.json", pipe["from_ns"], pipe["to_ns"])
    print(f"other CPU {pipe['other_cpu_s']:.3f} s, the side process's own clock {side:.3f} s "
          f"in the {pipe['span_s']:.2f} s window")
    # the side process's (its clock sampled at each batch: up to 30 ms either
    # way at an end), and the job's few other threads' (a worker's queue feeder)
    assert side - 0.03 <= pipe["other_cpu_s"] <= 1.1 * side + 0.06, (pipe["other_cpu_s"], side)
    assert not base["rough"], base
    p = predicted(report, trace.meta, "workers=2")
    cmd = loader(samples, tmp_path / "own2.json", 2) + ["--side-cpu", "0.03"]
    subprocess.run(cmd, check=True, capture_output=True)
    ran = own_au(tmp_path / "own2.json")
    print(f"2 workers: predicted {p['predicted_au']:.1%} ({p['limited_by']}), ran {ran:.1%}")
    assert p["predicted_au"] == pytest.approx(ran, abs=POINTS), (p, ran)


def test_compute_halved_and_doubled(tmp_path, samples):
    """Two workers, 20 ms of compute a step, two epochs: halving it (a
    faster accelerator) leaves the loop waiting more, doubling it makes the
    loop the limit, each within 5 points of running it. Doubled, the
    second epoch's new workers make the loop wait a whole batch's time for
    their first batches, which the steady pace alone leaves out (it was 3-9
    points high without the epochs' starts; docs/whatif.md)."""
    proc, trace = trace_run(tmp_path / "t", *loader(samples, tmp_path / "own.json", 2))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = build_report(trace, Targets(), rules=False)
    model = report.whatif["baseline"]["model_au"]
    for factor, compute in ((0.5, "0.01"), (2.0, "0.04")):
        p = predicted(report, trace.meta, f"compute={factor}x")
        cmd = loader(samples, tmp_path / "ran.json", 2)
        cmd[cmd.index("--compute") + 1] = compute
        subprocess.run(cmd, check=True, capture_output=True)
        ran = own_au(tmp_path / "ran.json")
        print(f"compute x{factor}: predicted {p['predicted_au']:.1%} ({p['limited_by']}), "
              f"ran {ran:.1%}")
        # halved from a traced run whose CPUs the workers fill, the model is
        # high by 0.6-5.1 points (eight runs; docs/whatif.md): held to 7
        tol = POINTS if factor > 1 else 0.07
        assert p["predicted_au"] == pytest.approx(ran, abs=tol), (p, ran)
        if factor > 1:
            assert p["predicted_au"] > model + 0.2, (p, model)
            assert p["limited_by"] == "the loop's compute", p


def test_cli(one_worker):
    """`iotrace whatif`: the standard scenarios as JSON, one of --set as
    text, a bad --set in one line (exit 2), and the report's JSON the same."""
    t = str(one_worker[0])
    res = iotrace_cmd("whatif", t, "--format", "json")
    assert res.returncode == 0, res.stderr
    w = json.loads(res.stdout)
    names = [e["scenario"] for e in w["whatif"]]
    assert names[0] == "workers=2" and "dataset in the page cache" in names, names
    assert all(0 <= e["predicted_au"] <= 1 for e in w["whatif"] if e["predicted_au"] is not None)
    assert any(e["predicted_au"] is None and e["cannot"] for e in w["whatif"])
    text = iotrace_cmd("whatif", t, "--set", "workers=2")
    assert text.returncode == 0 and "workers=2" in text.stdout and "limited by" in text.stdout
    bad = iotrace_cmd("whatif", t, "--set", "gpus=2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    rep = iotrace_cmd("report", t, "--format", "json")
    got = json.loads(rep.stdout)["whatif"]
    assert got["whatif"][0]["scenario"] == "workers=2"
    # the HTML and Markdown reports carry the same predictions, each scenario a row
    html = iotrace_cmd("report", t, "--format", "html").stdout
    section = html[html.index('<section id="whatif">'):]
    section = section[:section.index("</section>")]
    first = got["whatif"][0]
    assert f"<td>{first['scenario']}</td><td class=\"num\">{first['predicted_au']:.0%}</td>" \
        in section, section[:2000]
    assert section.count("<tr>") == len(got["whatif"]) + 1
    md = iotrace_cmd("report", t, "--format", "md").stdout
    assert f"| {first['scenario']} | {first['predicted_au']:.0%} (" in md


def test_storage_rate_and_cache_then_dlio(tmp_path):
    """DLIO (its PyTorch loader, 2 workers, 0.05 s compute) over cold data,
    the storage throttled to 50 MB/s: predict 100 and 25 MB/s and the data
    in the page cache; run DLIO so (untraced; cached, three times: the
    median) and hold each prediction to DLIO's own clock around next(),
    without the first step, as the model counts."""
    pytest.importorskip("dlio_benchmark")
    import test_dlio as dl
    gen = tmp_path / "gen"
    data = tmp_path / "data"
    subprocess.run(dl.dlio_args(data, gen, "++workload.workflow.generate_data=True",
                                "++workload.workflow.train=False"),
                   env=dl.ENV, check=True, capture_output=True, timeout=300)
    compute = "++workload.train.computation_time=0.05"

    def dlio_au(prefix=(), traced=False):
        out = tmp_path / "out"
        cmd = [*prefix, *dl.dlio_args(data, out, compute)]
        if traced:
            proc, trace = trace_run(tmp_path / "t", *cmd, env=dl.ENV)
            assert proc.returncode == 0, proc.stderr[-2000:]
        else:
            subprocess.run(cmd, env=dl.ENV, check=True, capture_output=True, timeout=600)
            trace = None
        # DLIO's clock around next(), without the first step: the loop's time
        # outside next() is compute, as the model counts it (DLIO's headline
        # counts only its nominal compute: 1-3 points lower)
        return dl.dlio_own_au(out), trace

    with cold_throttled_reads(data, 50_000_000) as prefix:
        measured, trace = dlio_au(prefix, traced=True)
    report = build_report(trace, Targets(), rules=False)
    base = report.whatif["baseline"]
    assert base["inputs"]["storage_bytes_per_s"], base      # the storage was the limit
    assert base["limited_by"] == "storage", base
    print(f"50 MB/s: DLIO {measured:.1%}, measured {base['measured_au']:.1%}, "
          f"model {base['model_au']:.1%}; inputs {base['inputs']}")
    for setting, bps in (("read_bw=100MB/s", 100_000_000), ("read_bw=25MB/s", 25_000_000),
                         ("cached=yes", None)):
        p = predicted(report, trace.meta, setting)
        if bps:
            with cold_throttled_reads(data, bps) as prefix:
                ran, _ = dlio_au(prefix)
        else:
            # cached, the two workers decode on the 2 CPUs the loop's own
            # unpickling needs: DLIO's own AU so varied from 88 to 97.5% run
            # to run (its waits are a few ms a step): the median of three
            for f in (data / "train").iterdir():
                f.read_bytes()
            ran = statistics.median(dlio_au()[0] for _ in range(3))
        print(f"{setting}: predicted {p['predicted_au']:.1%} ({p['limited_by']}), "
              f"DLIO {ran:.1%}")
        # a faster storage is predicted from the traced run's own rate, whose
        # noise the prediction doubles: 100 MB/s was 59.2-63.2% predicted
        # against 61.5-64.8% run in five runs (63.6-69.3% against 62.0-64.0%
        # while the model's window ran to the window's end, a compute more
        # than its steps, and steps without a wait went uncounted)
        tol = 0.07 if bps and bps > 50_000_000 else POINTS
        assert p["predicted_au"] == pytest.approx(ran, abs=tol), (p, ran)



def test_dlio_more_readers_then_the_cpus_limit(tmp_path):
    """DLIO with one reader thread, prep-bound (each batch 12 samples of 2
    MiB to decode, 10 ms compute, AU ~30%): predict 2 and 4 readers, run
    them. On this 2-core VM one run of such short steps varies by 4 points
    and more (2 readers ran at 59-75% over 2 epochs), and a prediction
    doubles the traced run's own noise: 4 epochs a run, three rounds,
    interleaved (trace one reader, predict, run 2 and 4), their medians
    compared (with 2 epochs a run one median in seven missed by 5.7
    points). 4 readers on 2 CPUs: the CPUs
    are the limit, and the prediction must say so and gain little over 2
    (it was 2-9 points high while the readers' time copying the cached
    files, on CPU, was left out of the CPUs' stage; docs/whatif.md).

    The CPUs' stage is the traced run's CPU work a batch, the tracer's own
    in the readers' threads included (4.7 K system calls and 7.3 K page
    faults a batch, about 0.16 us of BPF each here: 7% of their CPU; more on
    a slower machine): a prediction limited by the CPUs is that much low.
    Each round also runs one reader untraced, and the prediction is held to
    the run once scaled by the tracer's measured slowdown (its one-reader
    step traced over untraced, by DLIO's clock), and uncorrected, to at
    most 5 points above the run."""
    pytest.importorskip("dlio_benchmark")
    import statistics
    import test_dlio as dl
    data, gen = tmp_path / "data", tmp_path / "gen"
    ov = ["++workload.train.computation_time=0.01", "++workload.reader.batch_size=12",
          "++workload.train.epochs=4", "++workload.dataset.num_files_train=480"]
    subprocess.run(dl.dlio_args(data, gen, *ov, "++workload.workflow.generate_data=True",
                                "++workload.workflow.train=False"),
                   env=dl.ENV, check=True, capture_output=True, timeout=600)
    for f in (data / "train").iterdir():        # cached: the readers' CPU is the limit
        f.read_bytes()
    # the gigabyte just written, flushed now: its writeback took the CPUs
    # and the disk from the first rounds (their one-reader traces 20% slow)
    os.sync()

    def cmd(readers: int):
        out = tmp_path / f"out{readers}"
        return dl.dlio_args(data, out, *ov, f"++workload.reader.read_threads={readers}"), out

    pred: dict[int, list] = {2: [], 4: []}
    ran: dict[int, list] = {2: [], 4: []}
    slowdown, inputs = [], []
    for round_ in range(3):
        c, out = cmd(1)
        proc, trace = trace_run(tmp_path / f"t{round_}", *c, env=dl.ENV)
        assert proc.returncode == 0, proc.stderr[-2000:]
        traced_au = dl.dlio_own_au(out)
        subprocess.run(c, env=dl.ENV, check=True, capture_output=True, timeout=600)
        slowdown.append(dl.dlio_own_au(out) / traced_au)
        report = build_report(trace, Targets(), rules=False)
        # the verdict against DLIO's clock: the loop frees each 24 MiB batch
        # as it takes the next (file_release), which DLIO counts as loading
        # (taken for compute, it put iotrace 7-10 points above)
        own = report.verdict["after_first_step"]["accelerator_utilization"]
        assert own == pytest.approx(traced_au, abs=0.03), (own, traced_au)
        base = report.whatif["baseline"]
        inputs.append({k: base["inputs"][k] for k in ("step_s", "compute_s", "compute_cpu_s",
                                                      "loop_serial_s", "prep_cpu_s",
                                                      "fetch_cpu_s", "cpus")})
        assert base["limited_by"] == "producers" and not base["rough"], base
        # the data was read from the page cache already: caching it, or a
        # faster storage, changes nothing, and says why
        for setting in ("cached=yes", "read_bw=2x"):
            p = predicted(report, trace.meta, setting)
            assert p["predicted_au"] == base["model_au"] and "page cache" in p["note"], p
        for n in (2, 4):
            p = predicted(report, trace.meta, f"workers={n}")
            if (base["inputs"]["cpus"] or 0) <= 2:
                assert p["limited_by"] == "CPU", p
            pred[n].append(p["predicted_au"])
            c, out_n = cmd(n)
            subprocess.run(c, env=dl.ENV, check=True, capture_output=True, timeout=600)
            ran[n].append(dl.dlio_own_au(out_n))
        print(f"round {round_}: 1 reader DLIO {traced_au:.1%} traced (iotrace "
              f"{base['measured_au']:.1%}), untraced x{slowdown[-1]:.3f}; 2 readers predicted "
              f"{pred[2][-1]:.1%}, ran {ran[2][-1]:.1%}; 4 readers predicted "
              f"{pred[4][-1]:.1%}, ran {ran[4][-1]:.1%}")
    # the tracer's slowdown of the one-reader run, whose CPU work a batch the
    # CPUs' stage takes as it was traced
    rho = statistics.median(slowdown)
    med = {n: (statistics.median(pred[n]) * rho, statistics.median(ran[n])) for n in (2, 4)}
    print(f"medians (predicted x{rho:.3f} the tracer's slowdown, ran):", med)
    why = (pred, ran, slowdown, inputs)
    for n in (2, 4):
        assert statistics.median(pred[n]) <= med[n][1] + POINTS, why
    # 4 readers on 2 CPUs ran 2-6 points above 2 readers in one CI run (medians
    # 61.7% and 57.7%, predicted 56.0% for both): more threads than CPUs keep
    # them a little busier than the CPUs' stage says; held to 7 points there
    # (docs/whatif.md)
    cpu_bound = (base["inputs"]["cpus"] or 0) <= 2
    for n in (2, 4):
        tol = 0.07 if n == 4 and cpu_bound else POINTS
        assert med[n][0] == pytest.approx(med[n][1], abs=tol), why
    if cpu_bound:
        assert med[4][0] - med[2][0] < POINTS, why


def test_small_reads_saving_at_the_device_ceiling(tmp_path, samples):
    """The model's saving says when a fix buys nothing: one worker reads its
    1 MiB samples 4 KiB at a time from a device throttled to 10 MB/s, so
    the small-reads finding explains part of the loop's wait (its bound is
    half of that), but readahead already asks the device for large requests
    and the device's rate sets the pace: reading 1 MiB at a time, run (the
    loop's own clock), saves nothing, and the model, seeing the storage's
    ceiling, says next to nothing."""
    def run(read_size: int, traced: bool):
        out = tmp_path / f"own{read_size}.json"
        # one epoch: the second would read from the page cache
        cmd = [*loader(samples, out, 1, prep="0"), "--read-size", str(read_size),
               "--epochs", "1"]
        with cold_throttled_reads(samples, 10_000_000) as prefix:
            if traced:
                proc, trace = trace_run(tmp_path / "t", *prefix, *cmd)
                assert proc.returncode == 0, proc.stderr[-2000:]
            else:
                subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=300)
                trace = None
        return json.loads(out.read_text()), trace

    small, trace = run(4096, True)
    report = build_report(trace, Targets())
    v = report.verdict
    f = next((f for f in report.findings if f.id == "small-reads"), None)
    assert f is not None, [x.id for x in report.findings]
    window = v["time_budget_s"]["window"]
    big, _ = run(1 << 20, False)

    def step(t):                        # the loop's mean step after its first
        return (t["loop_window_s"] - t["wait_s"][0] - t["compute_s"][0]) / (t["steps"] - 1)
    saved = 1 - step(big) / step(small)
    print(f"4 KiB reads: step {step(small) * 1e3:.1f} ms, 1 MiB reads {step(big) * 1e3:.1f} ms: "
          f"saved {saved:.1%}; the model {f.saving_s / window:.1%} ({f.saving_basis}: "
          f"{f.saving_change}), the bound {0.5 * f.impact_s / window:.1%}")
    # seen: saved -0.4%, the model 2.8%, the bound 7.8%
    assert f.saving_basis == "model" and "storage" in f.saving_change, f.saving_change
    assert f.saving_s < 0.5 * f.impact_s
    assert f.saving_s / window == pytest.approx(saved, abs=0.05)
    # its severity is its saving's, not its calls' (17% of the window: high)
    share = f.saving_s / window
    assert f.severity == ("high" if share >= 0.10 else "warn" if share >= 0.02 else "info"), \
        (f.severity, share, f.impact_share)
