"""A long run: a steady loader traced for an hour, in full and as a profile.

What must hold however long iotrace runs:
  - the recorder's and the converter's (the iotrace process's) memory stay
    flat in full capture, and bounded in profile mode;
  - the trace grows linearly with time (bytes per second the same in the
    first and the second half);
  - no event is dropped at a steady rate the machine sustains: the preads in
    the trace (full) or in the profile's sums equal the loader's own count.

The loader (bench/long_run_loader.py) makes RATE 64 KiB preads a second of
page-cached files. Both modes run at the same time, each its own job and its
own iotrace (so the hour is spent once); every EVERY seconds the resident
memory of each iotrace and recorder process and the size of each trace are
sampled. Prints a table of the samples at a few moments, then the verdicts.

    sudo .venv/bin/python bench/long_run.py [--seconds 3600] [--rate 10000] [--every 10]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "userspace"))
import iotrace  # noqa: E402
from peers import dir_bytes as tree_bytes  # noqa: E402  (bench/ is the script's directory)

MODES = ("full", "profile")


def make_data(d: Path, files: int = 8, size: int = 64 << 20) -> None:
    d.mkdir(parents=True, exist_ok=True)
    block = os.urandom(1 << 20)
    for i in range(files):
        with open(d / f"shard-{i:02d}.bin", "wb") as f:
            for _ in range(size >> 20):
                f.write(block)
    for p in d.iterdir():     # into the page cache: the rate is the loader's, not the disk's
        p.read_bytes()


def rss_mib(proc: psutil.Process) -> tuple[float, float]:
    """(iotrace's own RSS, its recorder's RSS) in MiB."""
    try:
        own = proc.memory_info().rss
        rec = sum(c.memory_info().rss for c in proc.children(recursive=True)
                  if c.name().startswith("iotrace-record"))
    except psutil.Error:
        return float("nan"), float("nan")
    return own / 2**20, rec / 2**20


def pread_count(trace_dir: Path, mode: str) -> tuple[int, int]:
    """(preads of the data files in the trace, drops)."""
    t = iotrace.open_trace(trace_dir)
    if mode == "full":
        n = t.con.execute("""select count(*) from events e join files f using (file_id)
                             where e.op = 'pread64' and f.path like '%/shard-%'""").fetchone()[0]
    else:
        n = t.con.execute("""select coalesce(sum(c.calls), 0) from profile_calls c
                             join files f using (file_id)
                             where c.op = 'pread64' and f.path like '%/shard-%'""").fetchone()[0]
    return int(n), int(t.meta.get("drops") or 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--rate", type=int, default=10000, help="preads a second per loader")
    ap.add_argument("--every", type=float, default=10, help="seconds between samples")
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-longrun-"))
    data = work / "data"
    make_data(data)
    exe = str(Path(sys.executable).parent / "iotrace")
    runs = {}
    for mode in MODES:
        out = work / f"trace-{mode}"
        cmd = [exe, "run", "-q", "--no-node-summary", "-o", str(out),
               *(["--profile"] if mode == "profile" else []), "--",
               sys.executable, str(HERE / "long_run_loader.py"), str(data), str(args.rate),
               str(args.seconds)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        runs[mode] = {"proc": p, "ps": psutil.Process(p.pid), "out": out, "samples": []}
    start = time.monotonic()
    while any(r["proc"].poll() is None for r in runs.values()):
        time.sleep(args.every)
        t = time.monotonic() - start
        for r in runs.values():
            if r["proc"].poll() is None:
                own, rec = rss_mib(r["ps"])
                # the Parquet parts: the spool in between comes and goes
                r["samples"].append((t, own, rec, tree_bytes(r["out"] / "events") / 2**20))
    lines = [f"# long run: {platform.node()}, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs, kernel {platform.release()}",
             f"# loader: {args.rate} preads/s of 64 KiB (page cache), {args.seconds:.0f} s; "
             f"full and profile at the same time, sampled every {args.every:.0f} s", ""]
    verdicts = []
    for mode, r in runs.items():
        stdout = r["proc"].stdout.read().split()
        issued = int(stdout[-2])
        got, drops = pread_count(r["out"], mode)
        s = r["samples"]
        lines.append(f"## {mode}")
        lines.append(f"{'t (s)':>8} {'iotrace MiB':>12} {'recorder MiB':>13} {'events MiB':>10}")
        picks = sorted({int(len(s) * q) for q in (0.02, 0.1, 0.25, 0.5, 0.75)} | {len(s) - 1})
        for i in picks:
            t, own, rec, size = s[i]
            lines.append(f"{t:8.0f} {own:12.1f} {rec:13.1f} {size:10.1f}")
        # memory: the peak of the last half against the peak of the first quarter
        # (start-up is over by then; a leak shows as growth after it)
        q1 = s[: max(1, len(s) // 4)]
        h2 = s[len(s) // 2:]
        grow_own = max(x[1] for x in h2) - max(x[1] for x in q1)
        grow_rec = max(x[2] for x in h2) - max(x[2] for x in q1)
        half = len(s) // 2
        rate1 = (s[half][3] - s[0][3]) / (s[half][0] - s[0][0])
        rate2 = (s[-1][3] - s[half][3]) / (s[-1][0] - s[half][0])
        final = tree_bytes(r["out"]) / 2**20
        lines.append(f"final trace {final:.1f} MiB; its events grew {rate1 * 3600:.0f} MiB/h (first half) "
                     f"vs {rate2 * 3600:.0f} MiB/h (second half)")
        lines.append(f"memory after the first quarter: iotrace {grow_own:+.1f} MiB, "
                     f"recorder {grow_rec:+.1f} MiB")
        lines.append(f"preads: loader {issued}, trace {got}, drops {drops}, "
                     f"exit {r['proc'].returncode}")
        lines.append("")
        verdicts.append(f"{mode}: memory flat {'yes' if max(grow_own, grow_rec) < 16 else 'NO'}; "
                        f"complete {'yes' if got == issued and drops == 0 else 'NO'}"
                        + ("" if mode == "profile" else
                           f"; linear {'yes' if abs(rate2 - rate1) <= 0.1 * rate1 else 'NO'}"))
    lines += verdicts
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    subprocess.run(["rm", "-rf", str(work)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
