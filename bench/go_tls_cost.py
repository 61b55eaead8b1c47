"""What the Go crypto/tls probes cost: per request/reply time of a Go program
over TLS, traced and untraced, medians of interleaved repetitions, as a table.

    sudo .venv/bin/python bench/go_tls_cost.py [--reps 5] [--pairs 20000]

The workload (bench/go_tls_loop, built here with Go) sends 200-byte requests
and gets 200-byte replies over crypto/tls on loopback, its server in the same
process: each pair is four TLS calls (the client's Write and Read, the
server's), eight probe hits (an entry and a RET each) when probed.
Configurations:
  untraced                 the program alone
  iotrace                  iotrace run -- program (everything traced: its socket
                           calls, scheduler, futexes, and the Go TLS probes)
  iotrace --no-go-tls      the same without the Go TLS probes
  bystander                the program untraced while iotrace traces another
                           process running the same binary (`go_tls_loop sleep`):
                           the probes are on the file, so they fire in every
                           process that runs it, and keep only the traced ones
  bystander --no-go-tls    the same with the probes off
A second table, when build/go-s3-client (make test builds it) and moto are
there: a real client, minio-go putting then getting 40 objects of 256 KB over
HTTPS from moto behind the TLS proxy (tests/objstore.py), its whole run's
wall time untraced, traced, and traced with --no-go-tls.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "bench" / "go_tls_loop"
sys.path.insert(0, str(ROOT / "bench"))
from objstore_overhead import timed  # noqa: E402  (wall and CPU per call, traced or not)


def build(work: Path) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        sys.exit("go_tls_cost: no Go toolchain (go in PATH or /usr/local/go/bin/go)")
    exe = work / "go_tls_loop"
    subprocess.run([go, "build", "-o", str(exe), "."], cwd=SRC, check=True)
    return exe


def iotrace(*args: str) -> list[str]:
    return [sys.executable, "-m", "iotrace", "run", "-q", "--no-node-summary", "--force", *args]


def bystander(exe: Path, cmd: list[str], flags: list[str], out: Path) -> tuple[float, float]:
    bg = subprocess.Popen(iotrace("-o", str(out), *flags, "--", str(exe), "sleep", "600"),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)     # attached, the binary probed
        return timed(cmd, None, out)
    finally:
        bg.terminate()
        bg.wait()


def minio_rows(reps: int, work: Path) -> None:
    exe = ROOT / "build" / "go-s3-client"
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import objstore
        import moto  # noqa: F401
    except ImportError:
        print("moto not installed: no minio-go table")
        return
    if not exe.exists():
        print("build/go-s3-client missing (make test builds it): no minio-go table")
        return
    work.mkdir(parents=True, exist_ok=True)
    ca, cert, key = objstore.make_ca(work / "ca")
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env["SSL_CERT_FILE"] = str(ca)
    configs = [("untraced", None), ("iotrace", []), ("iotrace --no-go-tls", ["--no-go-tls"])]
    res: dict[str, list] = {c: [] for c, _ in configs}
    with objstore.moto_server(work / "moto.log") as port:
        objstore.create_bucket(port, "data")
        with objstore.proxy(port, work, tls=(cert, key)) as px:
            cmd = [str(exe), "--endpoint", f"https://localhost:{px.port}", "--objects", "40",
                   "--size", str(256 << 10), "--ranges", "0"]
            for rep in range(reps):
                for name, how in configs:
                    full = cmd if how is None else iotrace("-o", str(work / "t"), *how, "--", *cmd)
                    t0 = time.perf_counter()
                    subprocess.run(full, check=True, capture_output=True, env=env)
                    res[name].append(time.perf_counter() - t0)
                print(f"minio-go rep {rep + 1}/{reps} done", file=sys.stderr)
    print(f"\nminio-go, 40 PutObject + 1 ListObjects + 40 GetObject of 256 KiB over HTTPS "
          f"(moto behind the TLS proxy): the program's whole run, median of {reps}")
    print(f"{'config':<22} {'wall s':>8} {'min-max':>13} {'x':>6}")
    base = statistics.median(res["untraced"])
    for name, _ in configs:
        m = statistics.median(res[name])
        print(f"{name:<22} {m:8.2f} {f'{min(res[name]):.2f}-{max(res[name]):.2f}':>13} "
              f"{m / base:6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=20000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-bench-gotls-"))
    exe = build(work)
    cmd = [str(exe), "loop", str(args.pairs)]
    configs = [("untraced", None), ("iotrace", []), ("iotrace --no-go-tls", ["--no-go-tls"]),
               ("bystander", ("by", [])), ("bystander --no-go-tls", ("by", ["--no-go-tls"]))]
    res: dict[str, list] = {c: [] for c, _ in configs}
    out = work / "trace"
    try:
        measure(args, exe, cmd, configs, res, out, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(args, exe: Path, cmd: list[str], configs: list, res: dict, out: Path,
            work: Path) -> None:
    for rep in range(args.reps):
        for name, how in configs:      # interleaved: each rep runs every config
            if isinstance(how, tuple):
                res[name].append(bystander(exe, cmd, how[1], out))
            else:
                res[name].append(timed(cmd, how, out))
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    go_ver = subprocess.run([shutil.which("go") or "/usr/local/go/bin/go", "version"],
                            capture_output=True, text=True).stdout.split()[2]
    print(f"\nGo crypto/tls probes: per request/reply pair (4 TLS calls), median of "
          f"{args.reps} interleaved reps (min-max); {os.cpu_count()} CPUs, kernel "
          f"{os.uname().release}, {go_ver}")
    print("wall: elapsed per pair; cpu: the program's own CPU time per pair (user+system, "
          "probes included)")
    print(f"{'config':<22} {'wall us':>9} {'min-max':>17} {'x':>6} {'cpu us':>8} "
          f"{'min-max':>17} {'x':>6}")
    base_w = statistics.median(w for w, _ in res["untraced"])
    base_c = statistics.median(c for _, c in res["untraced"])
    for name, _ in configs:
        ws = [w * 1e6 for w, _ in res[name]]
        cs = [c * 1e6 for _, c in res[name]]
        mw, mc = statistics.median(ws), statistics.median(cs)
        print(f"{name:<22} {mw:9.1f} {f'{min(ws):.1f}-{max(ws):.1f}':>17} "
              f"{mw / base_w / 1e6:6.2f} {mc:8.1f} {f'{min(cs):.1f}-{max(cs):.1f}':>17} "
              f"{mc / base_c / 1e6:6.2f}")
    minio_rows(args.reps, work / "minio")


if __name__ == "__main__":
    main()
