"""A second kernel: boot Debian's 6.1 kernel under QEMU (virtme-ng, software
emulation) and run the NFS tests and core recorder tests there, proving the
same BPF object works on 6.1 and on this machine's kernel. Skipped, with the
reason, where QEMU, virtme-ng or the kernel are not installed."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

KERNELS = sorted(glob.glob("/boot/vmlinuz-6.1*-amd64"))
VNG = shutil.which("vng") or str(Path(sys.executable).parent / "vng")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.skipif(not KERNELS, reason="no Debian 6.1 kernel (apt-get install linux-image-amd64)")
@pytest.mark.skipif(not os.path.exists(VNG), reason="virtme-ng not installed (pip install virtme-ng)")
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86 missing")
def test_nfs_and_core_tests_on_debian_6_1():
    # The VM sees the host's files but has its own /tmp: results go under build/.
    out = ROOT / "build" / "vm-out"
    env = dict(os.environ, PATH=f"{Path(VNG).parent}:{os.environ['PATH']}")
    # --rwdir: the checkout may live under /tmp, which the guest replaces with its own
    cmd = [VNG, "--run", KERNELS[-1], "--disable-kvm", "--cpus", "2", "--memory", "2G", "--rw",
           f"--rwdir={ROOT}", "--exec", f"sh {ROOT}/tests/vm/run_in_vm.sh {ROOT} {out}"]
    # The emulated guest has stalled as a whole now and then (about one run
    # in three, in different tests, cause not found): a guest that does not
    # finish gets one more boot; its first log stays in build/vm-out.1.
    for attempt in (1, 2):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        res = subprocess.run(["timeout", "840", *cmd], env=env, capture_output=True, text=True)
        if (out / "rc").exists() or attempt == 2:
            break
        print(f"the VM did not finish (exit {res.returncode}); booting it again")
        shutil.rmtree(out.with_name("vm-out.1"), ignore_errors=True)
        out.rename(out.with_name("vm-out.1"))
    log = (out / "pytest.log").read_text() if (out / "pytest.log").exists() else ""
    setup = (out / "setup.log").read_text() if (out / "setup.log").exists() else ""
    print(setup, log, sep="\n")
    assert (out / "rc").exists(), f"the VM did not finish (exit {res.returncode}): " \
                                  f"{res.stderr[-2000:]}"
    assert (out / "rc").read_text().strip() == "0", log[-4000:]
    assert "passed" in log and "skipped" not in log.splitlines()[-1]
