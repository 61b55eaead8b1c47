"""The verdict where the data comes from object storage: a PyTorch training
loop whose samples are S3 objects, fetched with boto3 (by DataLoader worker
processes, or by the loop itself) from a real S3 server (moto) through a
proxy that may answer 503 SlowDown. The loop times its own next() (the
ground truth, as in test_loader_frame.py); the proxy counts what it refused.
The responses' bodies are the dataset's reads, the workers' time in their
GETs and in botocore's backoff is fetch, and the throttled finding takes its
cost from the loop's waits during those."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from iotrace.analyzers import whatif
from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report

from conftest import WORKLOADS, needs_root, trace_run

objstore = pytest.importorskip("objstore")
pytest.importorskip("moto")
pytest.importorskip("boto3")
pytest.importorskip("torch")

pytestmark = needs_root()
N, SIZE = 48, 256 << 10
AU_POINTS = 0.03


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """(moto's port, a directory): N objects of SIZE bytes in bucket 'data'."""
    d = tmp_path_factory.mktemp("s3loader")
    ds = d / "ds"
    ds.mkdir()
    for i in range(N):
        (ds / f"sample_{i:03d}.bin").write_bytes(os.urandom(SIZE))
    with objstore.moto_server(d / "moto.log") as port:
        objstore.create_bucket(port, "data")
        subprocess.run([sys.executable, str(WORKLOADS / "train_loader.py"), str(ds), "-",
                        "--loader", "s3", "--make-s3", "--endpoint", f"http://127.0.0.1:{port}"],
                       check=True)
        yield port, d


def train(tmp_path, bucket, throttle_every, *args, rate=None, au_points=AU_POINTS):
    port, d = bucket
    out = tmp_path / "truth.json"
    with objstore.proxy(port, d, throttle_every=throttle_every) as px:
        proc, trace = trace_run(tmp_path / "t", sys.executable, str(WORKLOADS / "train_loader.py"),
                                str(d / "ds"), str(out), "--loader", "s3", "--endpoint",
                                f"http://127.0.0.1:{px.port}", *args,
                                extra=("--py-stacks", str(rate)) if rate else ())
        seen = px.stop()
    assert proc.returncode == 0, proc.stderr[-2000:]
    truth = json.loads(out.read_text())
    truth["au"] = 1 - sum(truth["wait_s"]) / truth["loop_window_s"]
    report = build_report(trace, Targets())
    v = report.verdict
    print(f"{args}: own AU {truth['au']:.1%} over {truth['loop_window_s']:.1f} s, "
          f"iotrace {v['accelerator_utilization']:.1%}; proxy {seen}")
    assert v["loops"][0]["tid"] == truth["tid"], v["loops"]
    assert v["accelerator_utilization"] == pytest.approx(truth["au"], abs=au_points), v["summary"]
    return truth, report, seen


@pytest.mark.parametrize("neighbour", [False, True], ids=["alone", "beside-a-cpu-bound-job"])
def test_workers_throttled_by_the_store(tmp_path, bucket, neighbour, request):
    """2 workers, every 4th request refused: the loop waits most of the time
    (the seeds' case), for objects fetched and for botocore's backoff (it
    sleeps up to a second or two before each retry: most of the wait). Once
    more while another job keeps both CPUs busy."""
    if neighbour:
        request.getfixturevalue("cpu_neighbour")
    truth, report, seen = train(tmp_path, bucket, 4, "--workers", "2", "--compute", "0.02")
    v = report.verdict
    assert seen["throttled"] == seen["requests"] // 4 > 0
    assert v["status"] == "io-bound" and v["loops"][0]["how"] == "worker-processes"
    # beside a CPU-bound job the workers also wait for a CPU: that part is
    # cpu_starved, not fetch (0.08-0.12 of the wait here, more under a loaded
    # suite: fetch came to 0.699 once)
    starved = v["stall"]["cpu_starved"] if neighbour else 0
    assert max(v["stall"], key=v["stall"].get) == "fetch", v["stall"]
    assert v["stall"]["fetch"] + starved > 0.7, v["stall"]
    assert v["fetch_parts"]["backoff"] > 0.5, v["fetch_parts"]
    assert "fetching objects over HTTP" in v["summary"] and "backing off" in v["summary"]
    # the bodies are the dataset's reads: at most all of them, in the window
    assert 0.5 * N * SIZE <= v["bytes_read"] <= N * SIZE
    f = next(f for f in report.findings if f.id == "throttled")
    assert f.evidence["throttled"] == seen["throttled"]
    wait = v["time_budget_s"]["data_wait"]
    # its cost: the part of the loop's wait spent in refused requests and backoffs
    assert v["fetch_parts"]["backoff"] * wait * 0.9 <= f.impact_s <= wait
    assert f.severity == "high"


def test_loop_gets_its_own_objects(tmp_path, bucket):
    """num_workers=0, no throttling: the loop GETs each sample itself inside
    next() (12 epochs, about 6 s, at 200 samples a second: the share of its
    CPU there is an estimate whose noise falls with the samples); its
    GETs are fetch, its own CPU there (botocore, the first client's
    imports) loop-cpu, and nothing is called throttled. Within 5 points, not
    3: nine runs were -2.6 to +3.1 points from the loop's own clock (its CPU
    inside next() is half its wait, and only the samples see it)."""
    truth, report, seen = train(tmp_path, bucket, 0, "--workers", "0", "--compute", "0.02",
                                "--epochs", "12", rate=200, au_points=0.05)
    v = report.verdict
    assert seen["throttled"] == 0
    assert v["loops"][0]["how"] == "self-loading"
    assert v["stall"]["fetch"] > 0.3 and v["fetch_parts"]["backoff"] == 0, v["stall"]
    assert "throttled" not in {f.id for f in report.findings}


def _step_after_first(truth: dict) -> float:
    """The loop's mean step after its first, by its own clock."""
    w, c = truth["wait_s"], truth["compute_s"]
    return (sum(w[1:]) + sum(c[1:])) / (len(w) - 1)


def test_throttled_saving_against_running_unthrottled(tmp_path, bucket):
    """The throttled finding's saving is the what-if model's (its fix: no
    refused request, no backoff), checked against running the same loop
    through a proxy that refuses nothing, untraced: its step after the first,
    by its own clock, against the traced run's step shortened by the saving's
    share. botocore's backoff is random, so the prediction is of this run's
    refusals: the unthrottled run does not depend on them."""
    truth, report, seen = train(tmp_path, bucket, 4, "--workers", "2", "--compute", "0.02")
    f = next(f for f in report.findings if f.id == "throttled")
    v = report.verdict
    assert f.saving_basis == "model", (f.saving_s, f.saving_basis)
    assert "no refused requests" in f.saving_change, f.saving_change
    share = f.saving_s / v["time_budget_s"]["window"]
    port, d = bucket
    out = tmp_path / "plain.json"
    with objstore.proxy(port, d, throttle_every=0) as px:
        subprocess.run([sys.executable, str(WORKLOADS / "train_loader.py"), str(d / "ds"),
                        str(out), "--loader", "s3", "--endpoint", f"http://127.0.0.1:{px.port}",
                        "--workers", "2", "--compute", "0.02"], check=True)
        assert px.stop()["throttled"] == 0
    plain = json.loads(out.read_text())
    step, measured = _step_after_first(truth), _step_after_first(plain)
    saved = 1 - measured / step            # the share of the loop's step running it saved
    bound = f.impact_s / v["time_budget_s"]["window"]
    print(f"throttled step {step * 1e3:.1f} ms, unthrottled {measured * 1e3:.1f} ms: saved "
          f"{saved:.1%}; the model's saving {share:.1%} ({f.saving_change}), the bound "
          f"{bound:.1%}")
    # seen in four runs: 92.2-94.9% predicted, 93.2-95.9% saved, within 1.2
    # points (the bound, the loop's wait in refused requests and backoffs:
    # 66-78%); 85-91% predicted before the workers' imbalance and the slow
    # retries were modelled (70.5% in one run, limited by a model 1.33x off)
    assert share == pytest.approx(saved, abs=0.05)
    # the what-if's scenarios for objects over HTTP: a faster store does not
    # shorten botocore's sleeps before its retries, and the data cached is a
    # copy in local memory, not this machine's page cache
    base = report.whatif["baseline"]["inputs"]
    assert base["local_share"] == 0 and base["backoff_s"] > 0.5 * base["fetch_s"], base
    faster, why = whatif.apply(base, {"read_bw": (2.0, True)})
    assert not why and faster["fetch_s"] >= base["backoff_s"], (faster, base)
    names = [e["scenario"] for e in report.whatif["whatif"]]
    assert "dataset kept in local memory (not fetched)" in names, names
