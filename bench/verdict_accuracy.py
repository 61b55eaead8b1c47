#!/usr/bin/env python3
"""The verdict against the pipelines' own clocks: each pipeline times its
own next() (perf_counter around it, DLIO's `load` per step), and iotrace,
knowing nothing of them, must agree on the accelerator utilisation (AU =
1 - the loop's time inside next() over its window) within 3 points.

Pipelines (tests/workloads/, examples/, DLIO where installed), as a new
user would run them, one traced run each:

  tf-cnn          tf.data (TFRecord shards, parallel reads and JPEG decodes,
                  prefetch) feeding a small Keras CNN in a custom loop
  tf-sleep-50ms   the same, 50 ms of sleep as the step
  tf-one-decoder  one parallel call, 5 ms steps: input-bound
  tf-cold-8MB/s   tf-cnn over shards of 1200 images once (75 steps, 36 MB),
                  cold, the storage throttled to 8 MB/s
  jpegs-w0        PyTorch, JPEGs decoded with PIL + torchvision transforms,
                  num_workers=0, a CNN
  jpegs-w2        the same, 2 worker processes
  only-np-load    a script that only np.loads cached files (AU ~0 by definition)
  demo            examples/train_like.py (`make demo`'s job)
  s3-throttled    2 DataLoader workers GET their samples with boto3 from a
                  local S3 server (moto) through a proxy answering every 4th
                  request 503 SlowDown; 20 ms compute
  grain-w2        Grain (Google's loader for JAX): a data source reading a
                  file a record, numpy decode, Batch, grain.DataLoader with 2
                  worker processes (batches in shared memory); 20 ms steps
  grain-w0        the same with worker_count=0 (all in the loop's process)
  grain-ahead     2 workers, light decode, 50 ms steps: the loader keeps ahead
  grain-dataset-api  grain-ahead in Grain's dataset API (MapDataset ...
                  to_iter_dataset().mp_prefetch(), 2 worker processes)
  grain-cold-20MB/s  2 workers, cold, the storage throttled to 20 MB/s
  torchdata-threads  torchdata.nodes (PyTorch's composable loader): a
                  ParallelMapper reading and decoding a file a sample in 2
                  threads of the loop's process, Batcher, Prefetcher, Loader;
                  20 ms steps of numpy work
  torchdata-procs the same with the ParallelMapper's 2 worker processes
  wds-w0          WebDataset: tar shards of 32 samples streamed in order, a
                  numpy decode a sample, batched; iterated by the loop itself
  wds-w2          the same through WebLoader (a DataLoader), 2 workers
  ray-data        Ray Data: read_binary_files, a numpy decode in map_batches,
                  iter_batches(8) on Ray's 2 worker CPUs; 20 ms steps
  ray-data-ahead  the same without decode work, 50 ms sleeps as the steps
  dlio-rt0        DLIO, read_threads 0 (the loop loads), 0.05 s compute
  dlio-no-compute DLIO, no compute, cached, one epoch of 512 steps (2048 files
                  of 256 KiB): its headline AU is 0 by its own definition;
                  its clock around next() is what is compared
  dlio-24MiB-batches  DLIO, 1 reader, 12 samples of 2 MiB a batch (24 MiB
                  of shared memory the loop frees as it takes the next),
                  10 ms compute, cached, 4 epochs
  dlio-cold-0.2s  DLIO, 0.2 s compute, data cold (its AU leaves step 1 out)

DLIO's figures leave each epoch's first step out, and so does iotrace's
compared figure (`after_first_step`); the others compare whole windows.
`--neighbour` runs every pipeline beside a CPU-bound job (two spinning
processes, one per CPU of a 2-CPU machine). Needs root and the test
extras (make test installs them); a pipeline whose framework is missing is
listed as skipped, with why.

Beside each, `fit`: how well the what-if model (`iotrace whatif`) explains
the same trace, the measured step over the model's (its `calibration`:
beyond 0.75-1.25 its predictions are marked rough).

The table is printed and, for a run of all pipelines, written to
bench/results/verdict-accuracy[-neighbour]-latest.txt.

Run as root:  .venv/bin/python bench/verdict_accuracy.py [--neighbour] [--only NAME,...]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))       # objstore.py: moto and the throttling proxy
WORKLOADS = ROOT / "tests" / "workloads"
PY = sys.executable
DLIO = str(Path(PY).parent / "dlio_benchmark")
DLIO_ENV = dict(os.environ, DFTRACER_ENABLE="0", OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self")
POINTS = 0.03
BATCH = 4                                       # tests/dlio/workload/iotrace_small.yaml


class Skip(Exception):
    pass


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise Skip(f"{module} is not installed")


def evict(path: Path) -> None:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)                    # a dirty page is not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@contextlib.contextmanager
def throttled(path: Path, bps: int):
    """A command prefix running the job in a cgroup v1 blkio cgroup that reads
    `path`'s device at `bps`, the data evicted from the page cache first."""
    st = os.stat(path)
    cg = Path("/sys/fs/cgroup/blkio") / f"iotrace-bench-{os.getpid()}"
    if not cg.parent.joinpath("blkio.throttle.read_bps_device").exists():
        raise Skip("no cgroup v1 blkio controller to throttle the storage")
    cg.mkdir(exist_ok=True)
    try:
        (cg / "blkio.throttle.read_bps_device").write_text(
            f"{os.major(st.st_dev)}:{os.minor(st.st_dev)} {bps}\n")
        evict(path)
        yield ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"]
    finally:
        with contextlib.suppress(OSError):
            cg.rmdir()


def traced(trace: Path, cmd: list, rate: int, env=None) -> dict:
    """`iotrace run` then `iotrace report --format json`: the verdict."""
    run = [PY, "-m", "iotrace", "run", "-q", "--no-node-summary", "--force", "-o", str(trace),
           "--py-stacks", str(rate), "--", *cmd]
    p = subprocess.run(run, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))[:120]}: exit {p.returncode}: "
                           f"{p.stderr[-600:]}")
    r = subprocess.run([PY, "-m", "iotrace", "report", str(trace), "--format", "json"],
                       capture_output=True, text=True, check=True)
    rep = json.loads(r.stdout)
    # the what-if model's fit: the measured step over the model's
    base = (rep.get("whatif") or {}).get("baseline") or {}
    return {**rep["verdict"], "_model_fit": base.get("calibration")}


def own_json(path: Path) -> float:
    t = json.loads(path.read_text())
    return t["au"] if "au" in t else 1 - sum(t["wait_s"]) / t["loop_window_s"]


class Bench:
    def __init__(self, work: Path, rate: int) -> None:
        self.work, self.rate = work, rate
        self.made: dict[str, Path] = {}
        self.trace = work / "trace"                 # the running pipeline's


    def data(self, name: str, cmd: list) -> Path:
        if name not in self.made:
            d = self.work / name
            subprocess.run([*cmd[:2], str(d), *cmd[2:]], check=True, capture_output=True)
            self.made[name] = d
        return self.made[name]

    def script(self, script: str, data: Path, *args, prefix=()) -> tuple[float, dict]:
        out = self.work / "own.json"
        v = traced(self.trace, [*prefix, PY, str(WORKLOADS / script), str(data),
                                         str(out), *map(str, args)], self.rate)
        return own_json(out), v

    # --- the pipelines: each returns (its own AU, iotrace's AU, iotrace's verdict)
    def tfrecords(self, n: int = 400) -> Path:
        need("tensorflow")
        return self.data(f"tfrecords-{n}", [PY, str(WORKLOADS / "tfdata_train.py"), "--make", str(n)])

    def tf(self, *args, prefix=(), data=None):
        own, v = self.script("tfdata_train.py", data or self.tfrecords(), *args, prefix=prefix)
        return own, v["accelerator_utilization"], v

    def tf_cnn(self):
        return self.tf("--parallel", "2", "--steps", "300")

    def tf_sleep_50ms(self):
        return self.tf("--parallel", "2", "--steps", "80", "--compute", "0.05",
                       "--compute-kind", "sleep")

    def tf_one_decoder(self):
        return self.tf("--parallel", "1", "--steps", "600", "--compute", "0.005",
                       "--compute-kind", "sleep")

    def tf_cold(self):
        # more than the pipeline reads ahead while the first step compiles
        d = self.tfrecords(1200)
        with throttled(d, 8_000_000) as prefix:
            return self.tf("--parallel", "2", "--steps", "75", prefix=prefix, data=d)

    def jpegs(self, workers: int, epochs: int):
        need("torchvision")
        d = self.data("jpegs", [PY, str(WORKLOADS / "jpeg_train.py"), "--make", "240"])
        own, v = self.script("jpeg_train.py", d, "--workers", workers, "--epochs", epochs)
        return own, v["accelerator_utilization"], v

    def jpegs_w0(self):
        return self.jpegs(0, 4)

    def jpegs_w2(self):
        return self.jpegs(2, 3)

    def only_np_load(self):
        d = self.data("npys", [PY, str(WORKLOADS / "own_loader.py"), "--make", "8"])
        own, v = self.script("own_loader.py", d, "--only-load", "--epochs", "400")
        return own, v["accelerator_utilization"], v

    def demo(self):
        d = self.work / "demo-data"
        job = [PY, str(ROOT / "examples" / "train_like.py"), "--data", str(d)]
        subprocess.run([*job, "--prepare-only"], check=True, capture_output=True)
        out = self.work / "own.json"
        v = traced(self.trace, [*job, "--timing", str(out)], self.rate)
        return own_json(out), v["accelerator_utilization"], v

    def s3_throttled(self):
        for m in ("moto", "boto3", "torch"):
            need(m)
        import objstore
        d = self.work / "s3"
        (d / "ds").mkdir(parents=True, exist_ok=True)
        for i in range(48):
            (d / "ds" / f"sample_{i:03d}.bin").write_bytes(os.urandom(256 << 10))
        loader = str(WORKLOADS / "train_loader.py")
        with objstore.moto_server(d / "moto.log") as port:
            objstore.create_bucket(port, "data")
            subprocess.run([PY, loader, str(d / "ds"), "-", "--loader", "s3", "--make-s3",
                            "--endpoint", f"http://127.0.0.1:{port}"], check=True,
                           capture_output=True)
            out = self.work / "own.json"
            with objstore.proxy(port, d, throttle_every=4) as px:
                v = traced(self.trace, [PY, loader, str(d / "ds"), str(out), "--loader",
                                                 "s3", "--endpoint", f"http://127.0.0.1:{px.port}",
                                                 "--workers", "2", "--compute", "0.02"], self.rate)
                px.stop()
        return own_json(out), v["accelerator_utilization"], v

    def pipeline(self, module: str, name: str, samples: int, *args, prefix=(), data=None):
        """A workload NAME_train.py of the framework `module`, over its own
        data set of `samples` samples (made once), traced: (own AU, iotrace's, verdict)."""
        need(module)
        script = f"{name}_train.py"
        d = data or self.data(name, [PY, str(WORKLOADS / script), "--make", str(samples)])
        own, v = self.script(script, d, *args, prefix=prefix)
        return own, v["accelerator_utilization"], v

    def grain(self, *args, prefix=(), data=None):
        return self.pipeline("grain", "grain", 256, *args, prefix=prefix, data=data)

    def grain_w2(self):
        return self.grain("--workers", "2")

    def grain_w0(self):
        return self.grain("--workers", "0", "--epochs", "4")

    def grain_ahead(self):
        return self.grain("--workers", "2", "--prep", "1", "--compute", "0.05")

    def grain_dataset_api(self):
        return self.grain("--api", "dataset", "--workers", "2", "--prep", "1", "--compute", "0.05")

    def grain_cold(self):
        d = self.data("grain-cold", [PY, str(WORKLOADS / "grain_train.py"), "--make", "256"])
        with throttled(d, 20_000_000) as prefix:
            return self.grain("--workers", "2", "--prep", "1", "--epochs", "1", prefix=prefix,
                              data=d)

    def torchdata(self, *args):
        return self.pipeline("torchdata", "torchdata", 192, "--prep", "8", *args)

    def torchdata_threads(self):
        return self.torchdata()

    def torchdata_procs(self):
        return self.torchdata("--method", "process")

    def wds(self, *args):
        return self.pipeline("webdataset", "wds", 192, *args)

    def wds_w0(self):
        return self.wds()

    def wds_w2(self):
        return self.wds("--workers", "2")

    def ray(self, *args):
        return self.pipeline("ray", "ray", 512, *args)

    def ray_data(self):
        return self.ray()

    def ray_ahead(self):
        return self.ray("--prep", "0", "--compute", "0.05", "--compute-kind", "sleep")

    def dlio_data(self, *shape) -> Path:
        """DLIO's data set (tests/dlio: 64 files of 2 MiB), or one of another
        shape (overrides of num_files_train and record_length)."""
        if not os.path.exists(DLIO):
            raise Skip("dlio_benchmark is not installed (tests/dlio/install.sh)")
        key = "dlio" + "".join(shape)
        if key not in self.made:
            d = self.work / f"dlio-data-{len(self.made)}"
            self.dlio(d, self.work / "dlio-gen", "++workload.workflow.generate_data=True",
                      "++workload.workflow.train=False", *shape, trace=False)
            self.made[key] = d
        return self.made[key]

    def dlio(self, data: Path, out: Path, *overrides, trace=True, prefix=(), batch=BATCH):
        cmd = [*prefix, DLIO, f"--config-dir={ROOT / 'tests' / 'dlio'}", "workload=iotrace_small",
               f"++workload.dataset.data_folder={data}", f"++workload.output.folder={out}",
               f"hydra.run.dir={out}", *overrides]
        if not trace:
            subprocess.run(cmd, env=DLIO_ENV, check=True, capture_output=True)
            return None
        shutil.rmtree(out, ignore_errors=True)
        v = traced(self.trace, cmd, self.rate, env=DLIO_ENV)
        # DLIO's clock around next(): per epoch, 1 - its `load` times over the
        # epoch's wall time, both without the first step, as its AU counts
        # (its wall time from its throughput, which is steps * batch over it:
        # its AU, compute over it, is 0 without compute)
        o = json.loads((out / "0_output.json").read_text())
        aus = [1 - sum(d["load"][b][1:]) / (len(d["load"][b]) * batch / d["throughput"][b]
                                           - d["proc"][b][0])
               for e, d in o.items() if e.isdigit() for b in d["load"]]
        return sum(aus) / len(aus), v["after_first_step"]["accelerator_utilization"], v

    def warm_dlio(self, *shape) -> Path:
        d = self.dlio_data(*shape)
        for f in (d / "train").iterdir():
            f.read_bytes()
        return d

    def dlio_rt0(self):
        return self.dlio(self.warm_dlio(), self.work / "dlio-out",
                         "++workload.train.computation_time=0.05",
                         "++workload.reader.read_threads=0", "++workload.train.epochs=10")

    def dlio_no_compute(self):
        # one long epoch: 16-step epochs of 0.07 s each are mostly DLIO's own
        # start and end of an epoch, which its clock leaves out
        shape = ("++workload.dataset.num_files_train=2048", "++workload.dataset.record_length=262144")
        return self.dlio(self.warm_dlio(*shape), self.work / "dlio-out",
                         "++workload.train.computation_time=0", *shape)

    def dlio_big_batches(self):
        # 12 samples of 2 MiB a batch through one reader's shared memory: the
        # loop frees each 24 MiB batch as it takes the next (file_release)
        shape = ("++workload.dataset.num_files_train=480",)
        return self.dlio(self.warm_dlio(*shape), self.work / "dlio-out",
                         "++workload.train.computation_time=0.01", "++workload.reader.batch_size=12",
                         "++workload.train.epochs=4", *shape, batch=12)

    def dlio_cold(self):
        d = self.dlio_data()
        evict(d)
        return self.dlio(d, self.work / "dlio-out", "++workload.train.computation_time=0.2")


PIPELINES = {"tf-cnn": Bench.tf_cnn, "tf-sleep-50ms": Bench.tf_sleep_50ms,
             "tf-one-decoder": Bench.tf_one_decoder, "tf-cold-8MB/s": Bench.tf_cold,
             "jpegs-w0": Bench.jpegs_w0, "jpegs-w2": Bench.jpegs_w2,
             "only-np-load": Bench.only_np_load, "demo": Bench.demo,
             "s3-throttled": Bench.s3_throttled, "grain-w2": Bench.grain_w2,
             "grain-w0": Bench.grain_w0, "grain-ahead": Bench.grain_ahead,
             "grain-dataset-api": Bench.grain_dataset_api,
             "grain-cold-20MB/s": Bench.grain_cold, "torchdata-threads": Bench.torchdata_threads,
             "torchdata-procs": Bench.torchdata_procs, "wds-w0": Bench.wds_w0,
             "wds-w2": Bench.wds_w2, "ray-data": Bench.ray_data,
             "ray-data-ahead": Bench.ray_ahead, "dlio-rt0": Bench.dlio_rt0,
             "dlio-no-compute": Bench.dlio_no_compute, "dlio-24MiB-batches": Bench.dlio_big_batches,
             "dlio-cold-0.2s": Bench.dlio_cold}


@contextlib.contextmanager
def neighbour(on: bool):
    procs = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(2 if on else 0)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="pipelines: " + ", ".join(PIPELINES))
    ap.add_argument("--neighbour", action="store_true",
                    help="run each pipeline beside two processes spinning on the CPUs")
    ap.add_argument("--only", help="comma-separated pipeline names (default: all)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (the data, each pipeline's last trace)")
    ap.add_argument("--rate", type=int, default=100,
                    help="Python stack samples a second (iotrace's default: 100)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("verdict_accuracy: tracing needs root: run it with sudo", file=sys.stderr)
        return 3
    names = args.only.split(",") if args.only else list(PIPELINES)
    unknown = [n for n in names if n not in PIPELINES]
    if unknown:
        print(f"verdict_accuracy: no pipeline {', '.join(unknown)} (see --help)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="iotrace-accuracy-", dir="/var/tmp"))
    bench = Bench(work, args.rate)
    rows, off = [], 0
    try:
        for n in names:
            print(f"{n} ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            bench.trace = work / ("trace-" + n.replace("/", "_"))
            try:
                with neighbour(args.neighbour):
                    own, ours, v = PIPELINES[n](bench)
            except Skip as e:
                rows.append((n, None, None, f"skipped: {e}", ""))
                continue
            loop = (v.get("loops") or [{}])[0]
            top = max(v["stall"], key=v["stall"].get) if v.get("stall") else "-"
            ok = abs(ours - own) <= POINTS
            off += not ok
            fit = v.get("_model_fit")
            rows.append((n, own, ours, f"{v['status']}, {top}, {loop.get('how', '-')}, "
                         f"{time.monotonic() - t0:.0f} s{'' if ok else '  OFF'}",
                         f"{fit:.2f}" if fit else "-"))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text()
                .splitlines() if ln.startswith("model name")), "unknown CPU")
    out = [f"iotrace verdict accuracy  {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
           f"kernel {platform.release()}, {cpu}, {os.cpu_count()} CPUs", "",
           f"{'pipeline':<18} {'own AU':>7} {'iotrace':>8} {'points':>7} {'fit':>5}  status, "
           "top stall, loop, run time"]
    for n, own, ours, note, fit in rows:
        if own is None:
            out.append(f"{n:<18} {'':>7} {'':>8} {'':>7} {'':>5}  {note}")
        else:
            out.append(f"{n:<18} {own:>7.1%} {ours:>8.1%} {100 * (ours - own):>+7.1f} "
                       f"{fit:>5}  {note}")
    out.append(f"({'beside a CPU-bound neighbour, ' if args.neighbour else ''}{args.rate} Hz "
               f"stacks; one run each; OFF: more than {POINTS * 100:.0f} points from the "
               "pipeline's own clock; fit: the what-if model's, the measured step over the "
               "model's, rough beyond 0.75-1.25)")
    print("\n".join(out))
    if not args.only:
        f = ROOT / "bench" / "results" / \
            f"verdict-accuracy{'-neighbour' if args.neighbour else ''}-latest.txt"
        f.write_text("\n".join(out) + "\n")
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
