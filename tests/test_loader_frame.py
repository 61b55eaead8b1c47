"""The data wait as users, MLPerf Storage and DLIO count it: the time the
training loop spends inside its loader's next(), on CPU or blocked. Real
pipelines that time their own next() (perf_counter around it) are the
ground truth: the AU must agree within 3 points, on the right thread, with
the right top cause and the functions that cost the time named. Each loop
runs 4-8 s: at 100 samples a second the estimate's own noise is then about
a point (it falls with the square root of the samples)."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest

import iotrace
from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report

from conftest import WORKLOADS, cold_throttled_reads, needs_root, trace_run, workload_data

pytestmark = needs_root()
AU_POINTS = 0.03


def module_data(tmp_path_factory, name, script, *args, needs=None):
    """A module fixture's body: the data SCRIPT makes (workload_data), removed
    after the module's tests; skipped where the module `needs` is missing
    (found, not imported: a test before may have kept pandas out of this
    process, iotrace's CLI run in it, and torchvision may import pandas)."""
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{needs} is not installed (pip install '.[workloads]')")
    d = workload_data(tmp_path_factory, name, script, *args)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    yield from module_data(tmp_path_factory, "jpegs", "jpeg_train.py", "--make", "240",
                           needs="torchvision")


@pytest.fixture(scope="module")
def npys(tmp_path_factory):
    yield from module_data(tmp_path_factory, "npys", "own_loader.py", "--make", "8")


def run(tmp_path, script, *args, report_kw=None, rate=None):
    out = tmp_path / "truth.json"
    proc, trace = trace_run(tmp_path / "t", sys.executable, str(WORKLOADS / script),
                            *map(str, args[:1]), str(out), *map(str, args[1:]),
                            extra=("--py-stacks", str(rate)) if rate else ())
    assert proc.returncode == 0, proc.stderr[-2000:]
    truth = json.loads(out.read_text())
    report = build_report(trace, Targets(), **(report_kw or {}))
    kernel = build_report(iotrace.open_trace(tmp_path / "t"), Targets(), kernel_only=True)
    print(f"{script} {' '.join(map(str, args[1:]))}: own AU {truth['au']:.1%} over "
          f"{truth['loop_window_s']:.1f} s, iotrace {report.verdict['accelerator_utilization']:.1%}"
          f", kernel only {kernel.verdict['accelerator_utilization']:.1%}")
    report.verdict["findings"] = {f.id: f.severity for f in report.findings}   # for the tests
    return truth, report.verdict


def no_lock_contention(v):
    """TensorFlow's native pool threads wait for work on condition variables
    (FUTEX_WAIT_BITSET): not lock contention. Once a HIGH finding "on h5py's
    global lock" (98% of their time), because Keras loads h5py."""
    assert v["findings"].get("lock-contention", "info") == "info", v["findings"]


def check_au(truth, v, points=AU_POINTS):
    lp = v["loops"][0]
    assert lp["tid"] == truth["tid"], v["loops"]
    assert v["accelerator_utilization"] == pytest.approx(truth["au"], abs=points), \
        (truth["au"], v["summary"])


def test_torchvision_jpegs_num_workers_0(tmp_path, jpegs):
    """num_workers=0: the loop decodes and augments on its own CPU inside
    DataLoader.__next__; the kernel sees it on CPU (compute) and only its
    short file reads as waits. At 200 samples a second: the loop decodes a
    third of its time, and the share's own noise over 640 samples at 100 Hz
    (1.9 points) put a 3-point bound within 1.6 of its sigmas (4.2 points off
    once)."""
    truth, v = run(tmp_path, "jpeg_train.py", jpegs, "--workers", "0", "--epochs", "4",
                   rate=200)
    check_au(truth, v)
    lp = v["loops"][0]
    assert lp["loader_frame"]["source"] == "known"
    assert lp["loader_frame"]["file"] == "torch/utils/data/dataloader.py"
    # the kernel alone sees the loop's file calls, and calls its decoding compute
    kernel = build_report(iotrace.open_trace(tmp_path / "t"), Targets(), kernel_only=True).verdict
    assert kernel["accelerator_utilization"] > truth["au"] + 0.05, kernel["summary"]
    assert "Kernel-only verdict (asked for with --kernel-only)" in kernel["summary"]
    assert max(v["stall"], key=v["stall"].get) == "loop_cpu"
    # the functions: PIL's decoding and torchvision's transforms
    files = " ".join(f["file"] for f in lp["loop_cpu_top"])
    assert "PIL/" in files, lp["loop_cpu_top"]
    assert "In the loop: " in v["summary"]
    # the same samples' whole stacks, folded: each passes through the loader's
    # next(), and their leaves count what loop_cpu_top counts
    # (the 200 most frequent stacks are kept: all of them, or nearly)
    fold = lp["loop_cpu_stacks"]
    kept = sum(x["samples"] for x in fold["stacks"])
    assert 0.95 * fold["samples"] <= kept <= fold["samples"], (kept, fold["samples"])
    assert all("_BaseDataLoaderIter.__next__ (data/dataloader.py)" in x["stack"]
               for x in fold["stacks"]), fold["stacks"][:3]
    top = lp["loop_cpu_top"][0]
    leaf = f"{top['function']} ({'/'.join(top['file'].split('/')[-2:])})"
    at_leaf = sum(x["samples"] for x in fold["stacks"] if x["stack"].rsplit(";", 1)[-1] == leaf)
    assert at_leaf <= top["samples"] and (at_leaf == top["samples"] or kept < fold["samples"]), \
        (leaf, top, at_leaf)


def test_torchvision_jpegs_2_workers(tmp_path, jpegs):
    truth, v = run(tmp_path, "jpeg_train.py", jpegs, "--workers", "2", "--epochs", "3")
    check_au(truth, v)
    assert v["loops"][0]["how"] == "worker-processes"
    # the producers' samples on CPU during the waits, whole stacks: the same
    # samples prep_top counts (few: the workers keep ahead, and the waits are
    # mostly each epoch's start, the workers forking)
    fold, top = v["loops"][0]["prep_stacks"], v["loops"][0]["prep_top"]
    if fold["samples"]:
        assert fold["samples"] == pytest.approx(top[0]["samples"] / top[0]["share"], rel=0.01)


@pytest.fixture(scope="module")
def grain_files(tmp_path_factory):
    yield from module_data(tmp_path_factory, "grain", "grain_train.py", "--make", "256",
                           needs="grain")


@pytest.mark.parametrize("args", [("--workers", "2"),
                                  ("--workers", "2", "--prep", "1", "--compute", "0.05"),
                                  ("--api", "dataset", "--workers", "2", "--prep", "1",
                                   "--compute", "0.05")],
                         ids=["input-bound", "loader-ahead", "dataset-api-mp-prefetch"])
def test_grain_worker_processes(tmp_path, grain_files, args):
    """Grain's DataLoader (Google's loader for JAX): 2 worker processes put
    each batch in shared memory and threads of the loop's process read them
    ahead. One loop, the main thread, its frame the known Grain loader: the
    resource tracker the workers tell of each shared-memory batch is not a
    second loop (it was, and it waited 100%: AU 16% against 33%). The next()
    that ends the data joins the workers (about 0.5 s here), which the loop's
    own clock leaves out: the window ends where that call began, right after
    the loop's last step (it ended 0.55 s later, and counted the join as a
    wait). The dataset API (MapDataset ... to_iter_dataset().mp_prefetch()):
    its outermost iterator's next() in the wrapper Grain puts around each
    (a worker process was once a second loop, fed by its own read threads)."""
    truth, v = run(tmp_path, "grain_train.py", grain_files, *args)
    check_au(truth, v)
    assert [lp["how"] for lp in v["loops"]] == ["worker-processes"], v["loops"]
    lf = v["loops"][0]["loader_frame"]
    assert (lf["source"], lf["what"], lf["function"]) == (
        ("known", "Grain dataset iterator",
         "run_with_traceback_filter.<locals>.reraise_with_filtered_traceback")
        if "dataset" in args else
        ("known", "Grain DataLoader", "DataLoaderIterator.__next__")), lf
    w = v["training_window"]
    # (the window starts with the first wait the kernel or the samples place:
    # -17 to +83 ms from the loop's first next() in 13 runs, which starts the
    # workers and lasts 0.8 s)
    assert abs(w["start_ns"] - truth["wait_spans_ns"][0][0]) < 150e6
    # The window's end is the start of the last next(), in which the workers
    # are joined, where the kernel saw that join as the loop's wait (0-0.1 ms
    # after the loop's own end, most runs); in about 1 run in 8 of a full run
    # of this file the loop's waits then were ended by a thread two hops from
    # the workers (the reader of a worker's queue hands the batch to a
    # prefetch thread, which wakes the loop), no data wait, and the window ran
    # 0.31-0.44 s past the end (AU still within 3 points here, and the
    # kernel-only verdict 91% and 1% against 24-29%): not asserted, a known
    # limit (the join counted as a wait, as before the fix, puts the
    # loader-ahead case's AU about 8 points low: its AU bound holds the fix).
    late = (w["end_ns"] - truth["end_ns"]) / 1e6
    print(f"window end {late:+.1f} ms from the loop's own")
    assert late > -20, late


def test_grain_num_workers_0(tmp_path, grain_files):
    """worker_count=0: Grain decodes in the loop's own thread inside next()
    (its read threads fetch the records): the loop's CPU there is the wait,
    which the loop's samples estimate. At 200 samples a second over 4 epochs
    (about 1,200 samples) that estimate's own noise is about 1.4 points, and
    it ran high by 1.6 points on average (-0.4 to +3.2 in 8 runs): the
    sampler's reads of this process (17 threads, 1.4 ms a read; 28% of its
    ticks late) fell up to 10% more sparsely inside next() than outside, by
    the loop's own clock. Weighting each sample by the time around it did not
    correct that run for run, so the bound here is 4 points."""
    truth, v = run(tmp_path, "grain_train.py", grain_files, "--workers", "0", "--epochs", "4",
                   rate=200)
    check_au(truth, v, points=0.04)
    assert len(v["loops"]) == 1 and v["loops"][0]["loader_frame"]["source"] == "known"
    assert max(v["stall"], key=v["stall"].get) == "loop_cpu", v["stall"]
    # the decode Grain's MapTransform calls (the workloads' shared one)
    top = v["loops"][0]["loop_cpu_top"][0]
    assert (top["function"], top["file"]) == ("decode", "timed_loop.py"), top


@pytest.fixture(scope="module")
def torchdata_files(tmp_path_factory):
    yield from module_data(tmp_path_factory, "torchdata", "torchdata_train.py", "--make", "192",
                           needs="torchdata")


@pytest.mark.parametrize("args", [(), ("--method", "process")],
                         ids=["mapper-threads", "mapper-processes"])
def test_torchdata_nodes(tmp_path, torchdata_files, args):
    """torchdata.nodes, PyTorch's composable loader: a ParallelMapper reads
    and decodes the samples in 2 threads of the loop's process (or 2 worker
    processes), a Batcher, a Prefetcher whose own thread pulls the batches,
    a Loader; the loop computes 20 ms of numpy a step. The loop waits in
    Queue.get with 100 ms timeouts for the Prefetcher's thread, which is
    woken by the mapper's threads, not by the readers: its waits were once
    not seen (0.1 s of GIL hand-overs against 1.5 s by its own clock: AU 97%
    against 52%, and 81% against 16% with processes). The Loader's next() is
    a known frame; without stacks, with threads, the Prefetcher's thread is
    the relay that hands the loop its batches (kernel-only 55% against 52%;
    with processes the loop also waits for the GIL its process's queue
    readers hold, in 5 ms timed waits no thread ends: kernel-only 81%
    against 16%, a known limit of the kernel's view)."""
    truth, v = run(tmp_path, "torchdata_train.py", torchdata_files, "--prep", "8", *args)
    check_au(truth, v)
    lp = v["loops"][0]
    assert lp["how"] == ("worker-processes" if args else "loader-threads"), v["loops"]
    assert (lp["loader_frame"]["source"], lp["loader_frame"]["what"]) == \
        ("known", "torchdata.nodes Loader"), lp["loader_frame"]
    # 2 CPUs, 2 decoders and a loop that computes: the decoders' CPU is the cause
    assert max(v["stall"], key=v["stall"].get) in ("prep", "cpu_starved"), v["stall"]
    top = lp["prep_top"][0]
    assert (top["function"], top["file"]) == ("decode", "timed_loop.py"), lp["prep_top"]
    if not args:
        kernel = build_report(iotrace.open_trace(tmp_path / "t"), Targets(),
                              kernel_only=True).verdict
        assert kernel["loops"][0]["tid"] == truth["tid"], kernel["loops"]
        assert kernel["accelerator_utilization"] == pytest.approx(truth["au"], abs=0.08), \
            (truth["au"], kernel["summary"])


@pytest.fixture(scope="module")
def wds_shards(tmp_path_factory):
    yield from module_data(tmp_path_factory, "wds", "wds_train.py", "--make", "192",
                           needs="webdataset")


@pytest.mark.parametrize("workers", [0, 2], ids=["in-the-loop", "dataloader-workers"])
def test_webdataset_shards(tmp_path, wds_shards, workers):
    """WebDataset: tar shards of 32 samples streamed in order, each sample's
    bytes decoded (4 rounds of numpy), batched by the pipeline. With no
    workers the loop reads and decodes in the pipeline's generator (a known
    frame), on its own CPU: the kernel alone sees its reads only (AU 94%
    against 50% by its own clock). With 2 DataLoader workers (WebLoader) the
    workers iterate that same pipeline: each was once taken for a loop of its
    own (5 loops, AU 51% against 31%); they are the loop's workers."""
    # (with no workers, 4 epochs at 200 samples a second: about 800 samples
    # of a loop half in its loader, the estimate's own noise under 2 points)
    truth, v = run(tmp_path, "wds_train.py", wds_shards, "--workers", workers,
                   *(() if workers else ("--epochs", "4")), rate=None if workers else 200)
    check_au(truth, v)
    assert len(v["loops"]) == 1, v["loops"]
    lp = v["loops"][0]
    if workers:
        assert lp["how"] == "worker-processes" and lp["loader_frame"]["what"] == \
            "PyTorch DataLoader", (lp["how"], lp["loader_frame"])
    else:
        assert lp["how"] == "self-loading" and lp["loader_frame"]["what"] == \
            "webdataset pipeline", (lp["how"], lp["loader_frame"])
        assert max(v["stall"], key=v["stall"].get) == "loop_cpu", v["stall"]
        top = lp["loop_cpu_top"][0]
        assert (top["function"], top["file"]) == ("decode", "timed_loop.py"), lp["loop_cpu_top"]


@pytest.fixture(scope="module")
def ray_files(tmp_path_factory):
    yield from module_data(tmp_path_factory, "ray", "ray_train.py", "--make", "512",
                           needs="ray")


@pytest.mark.parametrize("args", [(), ("--cpus", "1"),
                                  ("--prep", "0", "--compute", "0.05", "--compute-kind", "sleep")],
                         ids=["input-bound", "one-worker-cpu", "loader-ahead"])
def test_ray_data_iter_batches(tmp_path, ray_files, args):
    """Ray Data (read_binary_files, map_batches, iter_batches): Ray's worker
    processes (children of its raylet, not of the loop) read and decode, the
    blocks come through Ray's shared-memory store, and threads of the loop's
    process hand each batch on to it. One loop, the main thread, in the
    known Ray Data frame (without it, two Ray workers were taken for loops
    that load for themselves: AU 82% against the loop's own 21%). Ray's
    next() polls its executor with 10 ms sleeps (for seconds at an epoch's
    start while its workers start): those sleeps are waits, the loop's own
    compute sleeps (loader-ahead) are not (taken together, the polls had
    been compute: AU 94% against 64%). The loop's waits are placed by its
    samples alone (no wake-up of the loop comes from another process), to a
    sampling interval each: 11 runs here read -2.2 to +3.0 points from the
    loop's own AU (+1.5 on average), so the bound is 4 points."""
    truth, v = run(tmp_path, "ray_train.py", ray_files, *args)
    check_au(truth, v, points=0.04)
    assert [lp["how"] for lp in v["loops"]] == ["worker-processes"], v["loops"]
    lf = v["loops"][0]["loader_frame"]
    assert (lf["source"], lf["what"], lf["file"]) == ("known", "Ray Data iterator",
                                                      "ray/data/iterator.py"), lf
    # the window: -173 to +94 ms from the loop's first next() in 11 runs (its
    # first wait, 3-4 s: Ray's workers starting), and its end 59-222 ms after
    # the loop's last step (its last next(), which raises StopIteration) in
    # those, but 338 ms before it once with the loader ahead (its last steps
    # do not wait: the end is placed by the loop's samples), the AU within a
    # point: the end is printed and held to half a second; its start 254 ms
    # early once (a clean clone's run, one CPU for Ray's workers), held to 0.3 s
    w = v["training_window"]
    assert abs(w["start_ns"] - truth["wait_spans_ns"][0][0]) < 300e6, w
    late = (w["end_ns"] - truth["end_ns"]) / 1e6
    print(f"window end {late:+.1f} ms from the loop's own")
    assert abs(late) < 500, late


def test_own_generator_found_from_the_data(tmp_path, npys):
    """A loader no list knows (a generator of the script's own): the frame the
    loop is in during the waits the kernel sees, entered once a step."""
    truth, v = run(tmp_path, "own_loader.py", npys, "--compute", "0.05", "--epochs", "16")
    check_au(truth, v)
    lf = v["loops"][0]["loader_frame"]
    assert (lf["source"], lf["function"]) == ("data", "batches"), lf
    assert lf["file"].endswith("own_loader.py")
    # its in-loader CPU: np.sort and np.load, by construction (which is first
    # moves with the page cache's copy speed); of np.load, its read_array
    # where it copies the data or load itself around it (48 samples: 4
    # against 3 put load second once)
    top = [f["function"] for f in v["loops"][0]["loop_cpu_top"][:2]]
    assert "sort" in top and set(top) - {"sort"} <= {"read_array", "load"}, \
        v["loops"][0]["loop_cpu_top"]


def test_loader_frame_option(tmp_path, npys):
    truth, v = run(tmp_path, "own_loader.py", npys, "--compute", "0.05", "--epochs", "16",
                   report_kw={"loader_frame": "own_loader:batches"})
    check_au(truth, v)
    assert v["loops"][0]["loader_frame"]["source"] == "option"


@pytest.mark.parametrize("pipeline", ["jpegs-2-workers", "jpegs-num-workers-0", "tf-data"])
def test_beside_a_cpu_bound_neighbour(tmp_path, jpegs, tfrecords, cpu_neighbour, pipeline):
    """The same pipelines while another job keeps both CPUs busy: the loop
    and its producers wait for CPUs (inside next() that is data wait, as the
    loop's clock counts it), and the training window must still hold the
    loop's steps, not cut them short."""
    if pipeline == "tf-data":
        truth, v = run(tmp_path, "tfdata_train.py", tfrecords, "--parallel", "2",
                       "--steps", "300", rate=200)
    else:
        truth, v = run(tmp_path, "jpeg_train.py", jpegs, "--workers",
                       "2" if pipeline == "jpegs-2-workers" else "0", "--epochs", "2", rate=200)
    check_au(truth, v)
    win = v["training_window"]
    seen = (win["end_ns"] - win["start_ns"]) / 1e9
    assert seen == pytest.approx(truth["loop_window_s"], rel=0.05), (win, truth["loop_window_s"])


def test_a_script_that_only_loads(tmp_path, npys):
    """It does nothing but np.load: all of its time is loading (AU about 0),
    where the kernel alone sees short reads and calls the rest compute."""
    truth, v = run(tmp_path, "own_loader.py", npys, "--only-load", "--epochs", "400")
    assert truth["au"] < 0.1
    check_au(truth, v)
    assert v["status"] == "io-bound"


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory):
    pytest.importorskip("tensorflow")
    d = workload_data(tmp_path_factory, "tfrecords", "tfdata_train.py", "--make", "400")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("args", [
    ("--parallel", "2", "--steps", "600"),                       # a Keras CNN step: compute
    ("--parallel", "1", "--steps", "600", "--compute", "0.005",  # prep-bound: one decoder
     "--compute-kind", "sleep")], ids=["keras-cnn", "one-decoder"])
def test_tf_data_custom_loop(tmp_path, tfrecords, args):
    """tf.data reads, decodes and batches on its own native threads (no
    Python on them) and hands batches to the Python thread that calls
    next(): that thread is the loop, inside the tf.data iterator's __next__.
    Its time on CPU in next() outside its blocked waits (9% of the one-decoder
    loop's other time, 3.7 s) is estimated from its samples there: at 100 Hz
    that estimate's noise is 1.5 AU points (one sigma), and 1 run in 8 was 3
    points off; at 200 Hz, 1.1."""
    truth, v = run(tmp_path, "tfdata_train.py", tfrecords, *args, rate=200)
    check_au(truth, v)
    lf = v["loops"][0]["loader_frame"]
    assert (lf["source"], lf["what"]) == ("known", "tf.data iterator")
    # the window ends with the loop's last step, not a guess past it
    spans = truth["wait_spans_ns"]
    assert abs(v["training_window"]["end_ns"] - spans[-1][1]) < 0.1e9, v["training_window"]
    no_lock_contention(v)


def test_tf_data_cold_and_throttled(tmp_path, tfrecords):
    """The shards cold, read through a 1 MB/s throttle, and the loop stopping
    after 20 of the 25 batches they hold: at its exit the Python thread joins
    tf.data's threads, still reading (seconds, outside any next(), from
    module level). That join is no data wait and no part of the window: it
    took a run's window from 2.8 to 5.1 s and its AU from 62% to 35%. A
    model with next to no compute: the CNN's steps took the shards at about
    the throttle's rate, and its AU went from 8% to 63% (one wait, at the
    start: too little to judge) from run to run. The main thread reads a few
    KiB of its own: it is still the loop, fed by tf.data's reader threads."""
    with cold_throttled_reads(tfrecords, bps=1_000_000) as prefix:
        out = tmp_path / "truth.json"
        proc, trace = trace_run(tmp_path / "t", *prefix, sys.executable,
                                str(WORKLOADS / "tfdata_train.py"), str(tfrecords), str(out),
                                "--parallel", "2", "--steps", "20", "--model", "tiny",
                                extra=("--py-stacks", "200"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    truth = json.loads(out.read_text())
    v = build_report(trace, Targets()).verdict
    print(f"own AU {truth['au']:.1%} over {truth['loop_window_s']:.2f} s, iotrace "
          f"{v['accelerator_utilization']:.1%} over {v['time_budget_s']['window']:.2f} s; "
          f"stall {v['stall']}")
    check_au(truth, v)
    spans = truth["wait_spans_ns"]
    assert abs(v["training_window"]["end_ns"] - spans[-1][1]) < 0.1e9, v["training_window"]
    assert v["status"] == "io-bound" and max(v["stall"], key=v["stall"].get) == "fetch", \
        (v["reason"], v["steps"], v["stall"], v["fetch_parts"])


@pytest.mark.parametrize("args", [
    ("--parallel", "2", "--steps", "400"),                      # the CNN: compute-bound
    ("--parallel", "1", "--steps", "200", "--model", "tiny"),   # one decoder: input-bound
    # 4 steps a function call: tf.data's pool takes the next() calls on two threads
    ("--parallel", "1", "--steps", "200", "--model", "tiny", "--steps-per-execution", "4")],
    ids=["keras-cnn", "tiny-one-decoder", "4-steps-a-call"])
def test_tf_data_model_fit(tmp_path, tfrecords, args):
    """model.fit: each step (its next() on the dataset and the model's step)
    runs in one TensorFlow function on TensorFlow's threads; the Python
    thread waits for it whole. The ground truth is TensorFlow's own profiler
    in the same run: its IteratorGetNext op's time (the input time of its
    input-pipeline analysis) over the window from the first next() to the
    last step's end (a Keras callback's clock). Kernel-only, the loop was a
    tf.data thread and the AU 37% where TensorFlow says 98%."""
    truth, v = run(tmp_path, "tfdata_train.py", tfrecords, "--fit",
                   "--profile", tmp_path / "prof", *args)
    print(f"TensorFlow's profiler: input {sum(truth['get_next_s']):.3f} s of "
          f"{truth['loop_window_s']:.3f} s, AU {truth['au']:.1%} "
          f"({truth['au_steps']:.1%} over its steps' time, the first's tracing in it)")
    check_au(truth, v)
    lp = v["loops"][0]
    assert lp["how"] == "runtime-threads", lp
    assert lp["step_runner"]["what"] == "Keras model.fit (TensorFlow)", lp
    assert lp["step_runner"]["consumer_tids"], lp
    # the window ends with the last step (its end on the callback's clock)
    end = truth["step_spans_ns"][-1][1]
    assert abs(v["training_window"]["end_ns"] - end) < 0.02e9, (v["training_window"], end)
    # the input-bound one is prep-bound: one decoder thread, and no storage
    # wait (the shards are in the page cache): the decoder, which reads no
    # file and relays nothing, is prep (it was "other" 41%: tf.data's
    # threads handing work on through condition variables were taken for
    # lock contention). On 2 CPUs its decoder also waits for a CPU: runnable
    # (cpu_starved) took the lead once, 52% to prep's 47%; the two are the
    # decoder's CPU, and "other" is what must not come back
    if truth["au"] < 0.6:
        assert v["status"] == "io-bound", v["summary"]
        assert v["stall"]["fetch"] < 0.1, v["stall"]
        assert max(v["stall"], key=v["stall"].get) in ("prep", "cpu_starved"), v["stall"]
        assert v["stall"]["prep"] + v["stall"]["cpu_starved"] > 0.8, v["stall"]
        assert v["stall"]["prep"] > 0.3, v["stall"]
    else:
        assert v["status"] == "not-io-bound", v["summary"]
    no_lock_contention(v)
