"""A second kernel: boot Debian's 6.1 kernel under QEMU (virtme-ng, software
emulation) and run the NFS tests and core recorder tests there, proving the
same BPF object works on 6.1 and on this machine's kernel. Skipped, with the
reason, where QEMU, virtme-ng or the kernel are not installed."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT

KERNELS = sorted(glob.glob("/boot/vmlinuz-6.1*-amd64"))
VNG = shutil.which("vng") or str(Path(sys.executable).parent / "vng")
# A guest's whole run (boot, set-up, tests) is cut at LIMIT_S; before that, a
# guest whose pytest log (a line as each test starts and ends) has not grown
# for STALL_S (about three times its longest step, 84 s), or that has not
# started pytest BOOT_S after boot, has stopped:
# waiting out LIMIT_S for it cost a run 22 minutes. A guest whose watchdog
# (run_in_vm.sh: a console line every 20 s) has printed nothing for FROZEN_S
# has frozen whole (seen under software emulation: the watchdog stopped at
# 177 s of uptime and the host waited out STALL_S until 445 s).
LIMIT_S, STALL_S, BOOT_S, FROZEN_S = 1320, 240, 420, 90
WATCHDOG = b"vm-watchdog up="


def run_guest(cmd: list, env: dict, out: Path) -> str:
    """Runs the guest to its end or until it stalls; says how it ended."""
    log = out / "pytest.log"
    with open(out / "console.log", "w") as console:
        p = subprocess.Popen(cmd, env=env, stdout=console, stderr=subprocess.STDOUT,
                             start_new_session=True)
        start = seen = ticked = time.monotonic()
        size, ticks = -1, 0
        while True:
            try:
                return f"exit {p.wait(timeout=5)}"
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            grown = log.stat().st_size if log.exists() else -1
            if grown != size:
                size, seen = grown, now
            quiet = now - seen
            n = (out / "console.log").read_bytes().count(WATCHDOG)
            if n != ticks:
                ticks, ticked = n, now
            frozen = ticks > 0 and now - ticked > FROZEN_S
            if now - start > LIMIT_S or frozen or quiet > (STALL_S if size >= 0 else BOOT_S):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                why = (f"its watchdog silent for {now - ticked:.0f} s" if frozen else
                       f"its pytest log still for {quiet:.0f} s" if size >= 0 else
                       "pytest not started")
                return f"stopped after {now - start:.0f} s, {why}"


def cached_dirs() -> list[str]:
    """What every traced command reads again: Python's standard library, the
    virtualenv (pyarrow, DuckDB, numpy), iotrace's package and analyzers.
    Shared a second time, read-only: run_in_vm.sh mounts these with the
    guest's page cache on (cache=loose), which the shared root lacks, so a
    file is read through QEMU once, not by every process (a traced `true`
    took 24-33 s in the guest, 15 s so)."""
    dirs = [sysconfig.get_paths()["stdlib"]]
    if sys.prefix != sys.base_prefix:           # a virtualenv
        dirs.append(sys.prefix)
    dirs += [str(ROOT / "userspace"), str(ROOT / "analyzers")]
    return [d for d in dirs if os.path.isdir(d) and "=" not in d and "," not in d]


def boot_part(part: str) -> tuple[Path, str]:
    """Boots the guest for one part (tests/vm/run_in_vm.sh) and runs it to its
    end: (its output directory, how it ended)."""
    # The VM sees the host's files but has its own /tmp: results go under build/.
    out = ROOT / "build" / f"vm-out-{part}"
    env = dict(os.environ, PATH=f"{Path(VNG).parent}:{os.environ['PATH']}")
    # idle=halt: the emulated CPU (AMD family 15) made the guest take the AMD
    # E400 idle routine, and guests froze in it (both CPUs in softirqs from the
    # timer interrupt on the idle path, soft lockups of 22-48 s, 2 boots in 8)
    cmd = [VNG, "--run", KERNELS[-1], "--disable-kvm", "--cpus", "2", "--memory", "2G", "--rw",
           "--append", "idle=halt",
           # one host thread runs both vCPUs: with a thread each (QEMU's
           # default), a guest froze where the kernel patched code that the
           # other vCPU ran (attaching fentry programs: a soft lockup of 45 s at
           # the patched call in __x64_sys_read, then a boot frozen whole)
           "--qemu-opts=-accel tcg,thread=single",
           # --rwdir: the checkout may live under /tmp, which the guest replaces with its own
           "--verbose", f"--rwdir={ROOT}", *(f"--rodir={d}={d}" for d in cached_dirs()), "--exec",
           f"sh {ROOT}/tests/vm/run_in_vm.sh {ROOT} {out} {part}"]
    # The emulated guest has stopped now and then (in different tests, under
    # software emulation): a guest that does not finish, or whose pytest log
    # stands still too long, gets one more boot; its first logs, the
    # console's included, stay in build/vm-out-PART.1.
    for attempt in (1, 2):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        why = run_guest(cmd, env, out)
        if (out / "rc").exists() or attempt == 2:
            break
        # a warning, not a print: the summary of a passing run shows it, so a
        # retry that costs minutes is seen (and where the guest stood)
        stuck = (out / "console.log").read_text(errors="replace").splitlines()[-3:]
        warnings.warn(f"the {part} VM did not finish ({why}); booting it again. "
                      f"Its console ended: {' | '.join(stuck)}")
        first = out.with_name(out.name + ".1")
        shutil.rmtree(first, ignore_errors=True)
        out.rename(first)
    return out, why


PARTS = ("nfs", "core")


@pytest.fixture(scope="module")
def guests():
    """Both parts' guests, booted side by side: each emulates its two vCPUs
    on one host thread, so the two keep this machine's two cores busy and
    take the time of the longer one instead of both (~10.5 minutes) one
    after the other (the fentry-against-tracepoint tests are in the nfs
    part to even them). Nothing else of the suite runs meanwhile."""
    with ThreadPoolExecutor(len(PARTS)) as pool:
        return dict(zip(PARTS, pool.map(boot_part, PARTS)))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.skipif(not KERNELS, reason="no Debian 6.1 kernel (apt-get install linux-image-amd64)")
@pytest.mark.skipif(not os.path.exists(VNG), reason="virtme-ng not installed (pip install virtme-ng)")
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86 missing")
@pytest.mark.parametrize("part", PARTS)
def test_on_debian_6_1(part, guests):
    """One boot per part (tests/vm/run_in_vm.sh): NFS, NFS over RDMA and verbs
    with a Soft-RoCE device, and fentry against the tracepoints; the core,
    storage, libaio, io_uring and readahead tests on a loop-device ext4."""
    out, why = guests[part]
    log = (out / "pytest.log").read_text() if (out / "pytest.log").exists() else ""
    setup = (out / "setup.log").read_text() if (out / "setup.log").exists() else ""
    print(setup, log, sep="\n")
    tail = (out / "console.log").read_text(errors="replace")[-3000:]
    assert (out / "rc").exists(), f"the VM did not finish ({why}): {tail}"
    assert (out / "rc").read_text().strip() == "0", log[-4000:]
    assert "passed" in log and "skipped" not in log.splitlines()[-1]
