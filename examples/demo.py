"""`make demo`: trace the bundled training-like job and show what iotrace saw.

Runs examples/train_like.py (2 data-loader workers reading .npz samples, a
checkpoint every 20 steps) under `iotrace run --perfetto`, queries the trace
with DuckDB, and prints the bottleneck report against 1 GiB/s per GPU."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("IOTRACE_DEMO_DATA", "/tmp/iotrace-demo-data"))
TRACE = Path(os.environ.get("IOTRACE_DEMO_TRACE", "demo-trace"))


def main() -> int:
    if os.geteuid() != 0:
        print("iotrace demo: tracing needs root: run `sudo make demo`", file=sys.stderr)
        return 3
    job = [sys.executable, str(HERE / "train_like.py"), "--data", str(DATA)]
    subprocess.run([*job, "--prepare-only"], check=True)   # the dataset, not traced
    print(f"$ sudo iotrace run -o {TRACE} --force --perfetto -- python examples/train_like.py "
          f"--data {DATA}", flush=True)
    rc = subprocess.run([sys.executable, "-m", "iotrace", "run", "-o", str(TRACE), "--force",
                         "--perfetto", "--", *job]).returncode
    if rc != 0:
        return rc

    import iotrace
    t = iotrace.open_trace(TRACE)
    print("\nPer process (DuckDB over the Parquet trace):")
    print(t.sql("""
        select p.pid, p.ppid, any_value(p.cmdline)[:48] as cmdline,
               count(*) filter (where e.op in ('read', 'pread64')) as reads,
               round(sum(e.ret) filter (where e.op in ('read', 'pread64') and e.ret > 0)
                     / 1048576, 1) as read_mib,
               round(sum(e.ret) filter (where e.op = 'write' and e.ret > 0) / 1048576, 1)
                     as written_mib
        from events e join processes p using (pid)
        group by p.pid, p.ppid order by p.pid"""))
    print("Read sizes on the .npz samples (np.load reads zip members in pieces):")
    print(t.sql("""
        select e.req_bytes as request_bytes, count(*) as calls
        from events e join files f using (file_id)
        where f.path like '%.npz' and e.op = 'read'
        group by 1 order by calls desc limit 5"""))
    print("Checkpoint writes and their fsync:")
    print(t.sql("""
        select e.op, count(*) as calls, round(sum(greatest(e.ret, 0)) / 1048576, 1) as mib,
               round(sum(e.dur_ns) / 1e6, 1) as ms
        from events e join files f using (file_id)
        where f.path like '%checkpoint.npy.tmp' and e.op in ('write', 'fsync')
        group by 1 order by 1"""))
    print(f"$ iotrace report {TRACE} --gpus 1 --per-gpu 1GiB/s", flush=True)
    subprocess.run([sys.executable, "-m", "iotrace", "report", str(TRACE), "--gpus", "1",
                    "--per-gpu", "1GiB/s"])
    print(f"The trace is in {TRACE}/ — open it with iotrace.open_trace('{TRACE}'); "
          f"`iotrace report {TRACE} --format html -o report.html` for plots, "
          f"`iotrace view {TRACE}` for the Perfetto timeline.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
