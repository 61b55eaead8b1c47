"""`iotrace exporter` scraped by a real Prometheus server (Debian's
package): the tests ask Prometheus's HTTP API, not the exporter, and hold
its rates to the workloads' own numbers (fio's JSON)."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from iotrace.tracedir import mount_table

from cgroups import new_cgroup, remove_cgroup
from conftest import needs_root

pytestmark = needs_root()
PROMETHEUS = shutil.which("prometheus")
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def wait_for(url: str, what: str, timeout: float = 60.0, proc=None,
             needs: bytes = b"") -> None:
    """Until url answers (with `needs` in its body, when given)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            out = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise AssertionError(f"{what} exited ({proc.returncode}): {out[-2000:]}")
        try:
            if needs in get(url, 2.0):
                return
            time.sleep(0.3)
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{what} did not answer at {url} in {timeout:.0f} s")


class Prometheus:
    def __init__(self, tmp: Path, target: str):
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                       "scrape_configs:\n  - job_name: iotrace\n    static_configs:\n"
                       f"      - targets: ['{target}']\n")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(f"http://127.0.0.1:{self.port}/-/ready", "prometheus", proc=self.proc)

    def query(self, expr: str, at: float) -> dict:
        """{labels of the series as a tuple of its cgroup: value} at time `at`."""
        q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
        got = json.loads(get(f"http://127.0.0.1:{self.port}/api/v1/query?{q}"))
        assert got["status"] == "success", got
        return {r["metric"].get("cgroup", ""): float(r["value"][1])
                for r in got["data"]["result"]}

    def wait_scraping(self, timeout: float = 60.0) -> None:
        """Until Prometheus has scraped its target (`up` is 1): its first
        scrape comes seconds after it is ready, and a rate() over a window
        it had not scraped yet would be extrapolated from a part of it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.query("up", time.time()).get("", 0) == 1:
                return
            time.sleep(0.3)
        raise AssertionError(f"prometheus did not scrape its target in {timeout:.0f} s")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def node(tmp_path):
    """A cgroup root with two jobs' cgroups, the exporter on it, and a
    Prometheus scraping the exporter every second."""
    if PROMETHEUS is None:
        pytest.fail("Debian's prometheus package is not installed (make test installs it)")
    root = new_cgroup(f"iotrace-exporter-{os.getpid()}")
    if root is None:
        pytest.skip("no writable cgroup hierarchy")
    for job in ("jobA", "jobB"):
        (root / job).mkdir(exist_ok=True)
    port = free_port()
    exp = subprocess.Popen([sys.executable, "-m", "iotrace", "exporter", "--listen",
                            f"127.0.0.1:{port}", "--cgroup-root", str(root),
                            "--forget-after", "3"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    prom = None
    try:
        wait_for(f"http://127.0.0.1:{port}/metrics", "iotrace exporter", proc=exp,
                 needs=b"\niotrace_tracing 1.0")
        prom = Prometheus(tmp_path, f"127.0.0.1:{port}")
        prom.wait_scraping()
        yield root, port, prom, exp
    finally:
        if prom:
            prom.stop()
        if exp.poll() is None:
            exp.send_signal(2)
            try:
                exp.wait(timeout=30)
            except subprocess.TimeoutExpired:
                exp.kill()
        for p in root.rglob("cgroup.procs"):
            for pid in p.read_text().split():
                try:
                    os.kill(int(pid), 9)
                except OSError:
                    pass
        time.sleep(0.5)
        remove_cgroup(root)


def fio_in(cgroup: Path, data: Path, out: Path, rate: str, seconds: int):
    """fio reading `data` (cached) at a fixed rate, started inside `cgroup`."""
    cmd = (f"echo $$ > {cgroup}/cgroup.procs && exec fio --name=r --filename={data} "
           f"--rw=read --bs=128k --ioengine=psync --invalidate=0 --rate={rate} --time_based "
           f"--runtime={seconds} --output-format=json --output={out}")
    return subprocess.Popen(["sh", "-c", cmd])


WINDOW = "24s"


def test_two_jobs_rates_against_fio_then_one_ends(node, tmp_path):
    """Two fio jobs in two cgroups, 40 and 10 MiB/s: Prometheus's rate() of
    iotrace_read_bytes_total per cgroup (the median of three 24 s windows) is
    each one's fio bandwidth within 5%, and the total bytes within 5% of fio's, all of them on the data
    file's mount (iotrace_mount_read_bytes_total); once a job's cgroup is
    removed its series leave /metrics (Prometheus returns nothing). The
    Grafana dashboard's queries run on the same Prometheus."""
    root, port, prom, exp = node
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20) * 64)
    data.read_bytes()
    seconds = 30
    start = time.time()
    fios = {job: fio_in(root / job, data, tmp_path / f"{job}.json", rate, seconds)
            for job, rate in (("jobA", "40m"), ("jobB", "10m"))}
    for p in fios.values():
        assert p.wait(timeout=seconds + 60) == 0
    time.sleep(4)                               # the last seconds' sums, scraped
    end = time.time()
    own = {job: json.loads((tmp_path / f"{job}.json").read_text())["jobs"][0]["read"]
           for job in fios}
    # the rate over the steady part of the run (the sums arrive 1-2 s
    # late). The counters move once a second and Prometheus scrapes once a
    # second, so a window holds one second's sums more or fewer now and
    # then: a sum published just after a scrape (8/7 of fio's rate in one 8 s
    # window), or the publications slipping a second against the scrapes
    # (6/7 in 4 of 5 8 s windows a second apart, each holding the slip).
    # Windows of 24 s keep one such second under the 5%: the median of three
    # a second apart.
    at = start + seconds - 1
    rate = prom.query(f"rate(iotrace_read_bytes_total[{WINDOW}])", at)
    shifted = [prom.query(f"rate(iotrace_read_bytes_total[{WINDOW}])", at - k) for k in range(3)]
    median = {job: statistics.median(r.get(job, 0) for r in shifted) for job in fios}
    total = prom.query("max_over_time(iotrace_read_bytes_total[2m])", end)
    st = os.stat(data)
    mount = mount_table()[(os.major(st.st_dev), os.minor(st.st_dev))][0]
    per_mount = prom.query(f'max_over_time(iotrace_mount_read_bytes_total{{mount="{mount}"}}[2m])',
                           end)
    for job in fios:
        bw = own[job]["bw_bytes"]
        print(f"{job}: fio {bw / 2**20:.2f} MiB/s, {own[job]['io_bytes'] / 2**20:.1f} MiB; "
              f"prometheus rate {median[job] / 2**20:.2f} MiB/s "
              f"({', '.join(f'{r.get(job, 0) / 2**20:.2f}' for r in shifted)}), "
              f"total {total.get(job, 0) / 2**20:.1f} MiB")
        assert median[job] == pytest.approx(bw, rel=0.05), (job, shifted, bw)
        assert total.get(job) == pytest.approx(own[job]["io_bytes"], rel=0.05), (job, total)
        # the data file's mount: its reads, fio's bytes
        assert per_mount.get(job) == pytest.approx(own[job]["io_bytes"], rel=0.05), per_mount
    # the Grafana dashboard's queries, its variables filled in, all evaluate,
    # and its read-rate panel shows both jobs at their rates
    dash = json.loads((REPO / "examples" / "grafana" / "iotrace-dashboard.json").read_text())
    for panel in dash["panels"]:
        for t in panel["targets"]:
            expr = (t["expr"].replace("$__rate_interval", WINDOW).replace("$job", ".*")
                    .replace("$target_mib_s", "1024"))
            got = prom.query(expr, at)              # asserts Prometheus's "success"
            if panel["id"] == 1 and t["refId"] == "A":
                for job in fios:
                    assert got.get(job) == pytest.approx(rate[job], rel=0.01), (expr, got)
    # no file names unless asked (--top-files)
    text = get(f"http://127.0.0.1:{port}/metrics").decode()
    assert str(data) not in text and "iotrace_top_file" not in text
    # jobB's cgroup goes: 3 s later (--forget-after) its series are gone,
    # jobA's stay
    remove_cgroup(root / "jobB")
    time.sleep(7)
    now = prom.query("iotrace_read_bytes_total", time.time())
    assert "jobA" in now and "jobB" not in now, now
    assert exp.poll() is None


def dlio_share(out: Path) -> tuple[float, float]:
    """DLIO's own clock (rank 0): the seconds its loop waited for batches
    (its `load` per step, every step) and the seconds of its epochs' steps
    (its compute over its AU, which leaves each epoch's first step out, plus
    that first step's load and compute)."""
    o = json.loads((out / "0_output.json").read_text())
    waited = total = 0.0
    for epoch, d in o.items():
        if not epoch.isdigit():
            continue
        for block, au in d["au"].items():
            load, compute = d["load"][block], d["compute"][block]
            waited += sum(load)
            total += sum(compute[1:]) / (au / 100) + load[0] + compute[0]
    return waited, total


def test_loop_data_wait_against_dlio(node, tmp_path):
    """Two DLIO runs at once in two cgroups (PyTorch loader, 2 worker
    processes, data cached, 3 epochs of 48 steps): jobA's readers take 20 ms
    a sample (4 a batch) for 20 ms of compute a step (the loop waits about
    half the time), jobB's 2 ms for 50 ms (it waits mostly at the epochs'
    starts). The exporter's iotrace_loop_data_wait_seconds_total,
    as Prometheus holds it, over DLIO's own time of its epochs is DLIO's own
    share of waiting (its clock around next(), every step) within 5 points,
    for each job, labelled apart. jobB also checkpoints after each epoch
    (DLIO's torch.save): iotrace_mount_write_bytes_total on the checkpoints'
    mount is the files' sizes, its write and sync seconds within the time
    DLIO's log gives the checkpoints."""
    pytest.importorskip("dlio_benchmark")
    import test_dlio as dl
    root, port, prom, exp = node
    data, gen = tmp_path / "data", tmp_path / "gen"
    ov = ("++workload.dataset.num_files_train=192", "++workload.dataset.record_length=262144",
          "++workload.train.epochs=3")
    subprocess.run(dl.dlio_args(data, gen, *ov, "++workload.workflow.generate_data=True",
                                "++workload.workflow.train=False"),
                   env=dl.ENV, check=True, capture_output=True, timeout=300)
    for f in (data / "train").iterdir():
        f.read_bytes()
    ckpt = tmp_path / "checkpoints"
    runs, logs = {}, {}
    for job, prep, more in (("jobA", 0.02, ("++workload.train.computation_time=0.02",)),
                            ("jobB", 0.002, ("++workload.train.computation_time=0.05",
                                             "++workload.workflow.checkpoint=True",
                                             f"++workload.checkpoint.checkpoint_folder={ckpt}",
                                             "++workload.checkpoint.model_size=8388608"))):
        out = tmp_path / f"dlio-{job}"
        cmd = ["sh", "-c", f'echo $$ > {root / job}/cgroup.procs && exec "$@"', "sh",
               *dl.dlio_args(data, out, *ov, f"++workload.reader.preprocess_time={prep}", *more)]
        runs[job] = (subprocess.Popen(cmd, env=dl.ENV, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True), out)
    for job, (p, out) in runs.items():
        _, logs[job] = p.communicate(timeout=300)
        assert p.returncode == 0, logs[job][-3000:]
    time.sleep(4)                               # the last seconds' sums, scraped
    got = prom.query("max_over_time(iotrace_loop_data_wait_seconds_total[5m])", time.time())
    loops = prom.query("max_over_time(iotrace_loops[5m])", time.time())
    for job, (_, out) in runs.items():
        waited, total = dl_share = dlio_share(out)
        ours = got.get(job)
        print(f"{job}: DLIO waited {waited:.3f} s of {total:.2f} s ({waited / total:.1%}); "
              f"iotrace {ours} s ({(ours or 0) / total:.1%})")
        assert loops.get(job) == 1, loops
        assert ours is not None, (got, dl_share)
        assert ours / total == pytest.approx(waited / total, abs=0.05), (job, ours, dl_share)
    assert got["jobA"] / dlio_share(runs["jobA"][1])[1] > 0.3, got   # the case is data-bound
    # jobB's checkpoints (DLIO's torch.save after each epoch): the bytes written
    # on their mount are the files' sizes (DLIO's own small outputs there too:
    # within 5%), and the threads' time writing and syncing them is within
    # the checkpoints' own time by DLIO's log (its "Starting/Ending checkpoint")
    st = os.stat(ckpt)
    mount = mount_table()[(os.major(st.st_dev), os.minor(st.st_dev))][0]
    files = sum(f.stat().st_size for f in ckpt.iterdir())
    wrote = prom.query(f'max_over_time(iotrace_mount_write_bytes_total{{mount="{mount}"}}[5m])',
                       time.time())
    secs = prom.query(f'sum by (cgroup) (max_over_time(iotrace_mount_io_seconds_total'
                      f'{{mount="{mount}",op=~"write|sync"}}[5m]))', time.time())
    stamps = [datetime.fromisoformat(m.group(2)) for m in re.finditer(
        r"\[INFO\] (\S+ )?(\d{4}-\d\d-\d\dT[\d:.]+) (Starting|Ending) checkpoint",
        logs["jobB"])]
    took = sum((b - a).total_seconds() for a, b in zip(stamps[::2], stamps[1::2]))
    print(f"jobB checkpoints: {files / 2**20:.1f} MiB in {len(stamps) // 2} files sets, "
          f"{took:.3f} s by DLIO's log; iotrace {wrote.get('jobB', 0) / 2**20:.1f} MiB written, "
          f"{secs.get('jobB', 0):.3f} s writing and syncing")
    assert len(stamps) == 6 and files > 3 * 8 << 20, (stamps, files)
    assert wrote.get("jobB") == pytest.approx(files, rel=0.05), (wrote, files)
    assert 0 < secs.get("jobB", 0) <= took, (secs, took)


def test_exporter_runs_with_capabilities_not_as_root(tmp_path):
    """The exporter needs no root shell: as uid 65534 with CAP_BPF and
    CAP_PERFMON (and CAP_DAC_READ_SEARCH, only to read the checkout wherever
    it lives) it follows a job of root's, fio at 20 MiB/s, and counts its
    bytes within 5% of fio's; its process holds those capabilities and no
    other, and it answers on 127.0.0.1 only (its default)."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    root = new_cgroup(f"iotrace-exporter-caps-{os.getpid()}")
    if root is None:
        pytest.skip("no writable cgroup hierarchy")
    (root / "job").mkdir()
    port = free_port()
    granted = "+bpf,+perfmon,+dac_read_search"
    exp = subprocess.Popen(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         f"--inh-caps=-all,{granted}", f"--ambient-caps={granted}",
         sys.executable, "-m", "iotrace", "exporter", "--cgroup-root", str(root),
         "--listen", f"127.0.0.1:{port}", "--forget-after", "3"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO / "userspace")))
    try:
        wait_for(f"http://127.0.0.1:{port}/metrics", "iotrace exporter", proc=exp,
                 needs=b"\niotrace_tracing 1.0")
        eff = next(line for line in Path(f"/proc/{exp.pid}/status").read_text().splitlines()
                   if line.startswith("CapEff:"))
        assert int(eff.split()[1], 16) == (1 << 38) | (1 << 39) | (1 << 2), eff
        data = tmp_path / "data.bin"
        data.write_bytes(os.urandom(1 << 20) * 32)
        data.read_bytes()
        out = tmp_path / "fio.json"
        assert fio_in(root / "job", data, out, "20m", 6).wait(timeout=60) == 0
        time.sleep(3.5)
        text = get(f"http://127.0.0.1:{port}/metrics").decode()
        got = float(re.search(r'^iotrace_read_bytes_total\{cgroup="job"\} (\S+)', text,
                              re.M).group(1))
        fio_bytes = json.loads(out.read_text())["jobs"][0]["read"]["io_bytes"]
        print(f"as uid 65534 with {granted}: {got / 2**20:.1f} MiB counted, fio read "
              f"{fio_bytes / 2**20:.1f} MiB")
        assert got == pytest.approx(fio_bytes, rel=0.05)
        assert 'iotrace_loops{cgroup="job"} 0.0' in text      # fio has no loop: unknown
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect(("10.255.255.255", 1))    # no packet: the address a route would use
            ip = u.getsockname()[0]
        if not ip.startswith("127."):
            with pytest.raises(OSError):
                socket.create_connection((ip, port), timeout=2).close()
    finally:
        exp.send_signal(2)
        try:
            exp.wait(timeout=30)
        except subprocess.TimeoutExpired:
            exp.kill()
        time.sleep(0.5)
        remove_cgroup(root)
    assert exp.returncode == 0, exp.stderr.read().decode()[-2000:]


def test_object_storage_requests_against_the_proxy(node, tmp_path):
    """boto3 PUTs, GETs, ranged GETs and a LIST against a local S3 server
    (moto) through a proxy that answers 503 SlowDown to every 4th request:
    jobA over plain HTTP, jobB over TLS (OpenSSL, a local CA), at once. Per
    job, Prometheus's iotrace_http_requests_total is the proxy's count of
    requests, its 5xx and iotrace_http_throttled_total the proxy's throttled
    answers, and iotrace_http_retries_total botocore's own count of retries;
    the endpoint label is the client's Host."""
    objstore = pytest.importorskip("objstore")
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    root, port, prom, exp = node
    d = tmp_path / "s3"
    d.mkdir()
    ca, cert, key = objstore.make_ca(d / "ca")
    with objstore.moto_server(d / "moto.log") as s3port:
        objstore.create_bucket(s3port, "data")
        with objstore.proxy(s3port, d, throttle_every=4) as plain, \
                objstore.proxy(s3port, d, throttle_every=4, tls=(cert, key)) as tls:
            clients = {}
            for job, url in (("jobA", f"http://127.0.0.1:{plain.port}"),
                             ("jobB", f"https://localhost:{tls.port}")):
                out = tmp_path / f"{job}.json"
                cmd = ["sh", "-c", f'echo $$ > {root / job}/cgroup.procs && exec "$@"', "sh",
                       sys.executable, str(REPO / "tests" / "workloads" / "s3_client.py"),
                       "--endpoint", url, "--bucket", "data", "--out", str(out),
                       "--objects", "20", "--size", "10000", "--ranges", "5",
                       "--ca", str(ca)]
                clients[job] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.PIPE, text=True), out)
            for job, (p, _) in clients.items():
                _, err = p.communicate(timeout=120)
                assert p.returncode == 0, err[-2000:]
            seen = {"jobA": plain.stop(), "jobB": tls.stop()}
    time.sleep(4)
    t = time.time()
    reqs = prom.query("sum by (cgroup) (max_over_time(iotrace_http_requests_total[2m]))", t)
    refused = prom.query('sum by (cgroup) (max_over_time(iotrace_http_requests_total'
                         '{status="5xx"}[2m]))', t)
    thr = prom.query("sum by (cgroup) (max_over_time(iotrace_http_throttled_total[2m]))", t)
    rty = prom.query("sum by (cgroup) (max_over_time(iotrace_http_retries_total[2m]))", t)
    hosts = json.loads(get(f"http://127.0.0.1:{prom.port}/api/v1/label/endpoint/values"))
    for job, (_, out) in clients.items():
        did = json.loads(out.read_text())
        print(f"{job}: proxy {seen[job]['requests']} requests, {seen[job]['throttled']} "
              f"throttled, botocore {did['retries']} retries | iotrace {reqs.get(job)} "
              f"requests, {thr.get(job)} throttled, {rty.get(job)} retries")
        assert seen[job]["throttled"] > 0
        assert reqs.get(job) == seen[job]["requests"], (job, reqs, seen[job])
        # refused: the proxy's 503s, and the server's own 5xx answers if any
        upstream_5xx = sum(n for st, n in seen[job]["upstream_status"].items() if int(st) >= 500)
        assert thr.get(job) == seen[job]["throttled"], (job, thr, seen[job])
        assert refused.get(job) == seen[job]["throttled"] + upstream_5xx, (job, refused, seen[job])
        assert rty.get(job) == did["retries"], (job, rty, did["retries"])
    assert f"127.0.0.1:{plain.port}" in hosts["data"] and f"localhost:{tls.port}" in \
        hosts["data"], hosts


def test_top_files_only_when_asked(tmp_path):
    """--top-files 2: fio reading two files at 20 and 5 MiB/s in one job;
    iotrace_top_file_read_bytes names both by their paths, with about 10 s
    of each one's rate (within 15%: the window is the last drains'), the
    faster first. (Without the option no file name is in /metrics:
    test_two_jobs_rates_against_fio_then_one_ends.)"""
    root = new_cgroup(f"iotrace-exporter-files-{os.getpid()}")
    if root is None:
        pytest.skip("no writable cgroup hierarchy")
    (root / "job").mkdir()
    files = {"a": (tmp_path / "fast.bin", "20m", 20), "b": (tmp_path / "slow.bin", "5m", 5)}
    for path, _, _ in files.values():
        path.write_bytes(os.urandom(1 << 20) * 16)
        path.read_bytes()
    port = free_port()
    exp = subprocess.Popen([sys.executable, "-m", "iotrace", "exporter", "--listen",
                            f"127.0.0.1:{port}", "--cgroup-root", str(root), "--top-files", "2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{port}/metrics", "iotrace exporter", proc=exp,
                 needs=b"\niotrace_tracing 1.0")
        fio = ["fio"]
        for name, (path, rate, _) in files.items():
            fio += [f"--name={name}", f"--filename={path}", "--rw=read", "--bs=64k",
                    "--ioengine=psync", "--invalidate=0", f"--rate={rate}", "--time_based",
                    "--runtime=14"]
        p = subprocess.Popen(["sh", "-c", f'echo $$ > {root / "job"}/cgroup.procs && exec "$@"',
                              "sh", *fio], stdout=subprocess.DEVNULL)
        time.sleep(13)
        text = get(f"http://127.0.0.1:{port}/metrics").decode()
        assert p.wait(timeout=30) == 0
    finally:
        exp.send_signal(2)
        exp.wait(timeout=30)
        time.sleep(0.5)
        remove_cgroup(root)
    got = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^iotrace_top_file_read_bytes\{cgroup="job",file="([^"]+)"\} (\S+)', text, re.M)}
    print({k: f"{v / 2**20:.1f} MiB" for k, v in got.items()})
    assert sorted(got, key=got.get, reverse=True) == [str(files["a"][0]), str(files["b"][0])], got
    for path, _, mib_s in files.values():
        assert got[str(path)] == pytest.approx(mib_s * 10 * 2**20, rel=0.15), got
