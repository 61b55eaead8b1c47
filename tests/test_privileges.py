"""Tracing needs capabilities, not uid 0: a non-root user granted CAP_BPF and
CAP_PERFMON traces its own job (the trace is its own, the job gets no
capability); root without them is refused at once."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import IOTRACE, ROOT

import iotrace

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to set up the privileges")


def caps(line: str) -> set:
    v = int(line.split()[1], 16)
    return {b for b in range(64) if v >> b & 1}


def test_non_root_with_bpf_and_perfmon_traces(tmp_path):
    """uid 65534 with CAP_BPF + CAP_PERFMON (+ CAP_DAC_READ_SEARCH, only to read
    the checkout wherever it lives) as ambient capabilities."""
    os.chmod(tmp_path, 0o777)
    granted = "+bpf,+perfmon,+dac_read_search"
    res = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         f"--inh-caps=-all,{granted}", f"--ambient-caps={granted}",
         *IOTRACE, "run", "-q", "--no-node-summary", "-o", str(tmp_path / "t"), "--",
         "sh", "-c", "grep ^CapEff /proc/self/status; grep ^CapPrm /proc/$PPID/status; "
                     "cat /etc/hostname > /dev/null"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "userspace")))
    assert res.returncode == 0, res.stderr
    job_eff, rec_prm = res.stdout.splitlines()
    assert caps(job_eff) == set()                   # ambient capabilities stop at the job
    assert caps(rec_prm) == {2, 38, 39}             # what it was given, nothing gained
    t = iotrace.open_trace(tmp_path / "t")
    n = t.con.execute("select count(*) from events e join files f using (file_id) "
                      "where f.path = '/etc/hostname'").fetchone()[0]
    assert n > 0
    for p in [tmp_path / "t", *(tmp_path / "t").rglob("*")]:
        assert p.lstat().st_uid == 65534, p


def test_root_without_bpf_capabilities_is_refused(tmp_path):
    """uid 0 in a container that took CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN
    away: refused before anything is made, not half-way through loading."""
    res = subprocess.run(["setpriv", "--bounding-set=-bpf,-perfmon,-sys_admin",
                          "--inh-caps=-bpf,-perfmon,-sys_admin",
                          *IOTRACE, "run", "-o", str(tmp_path / "t"), "--", "true"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, res.stderr
    assert "CAP_BPF" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "t").exists()
