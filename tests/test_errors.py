"""Bad input gets one clear line on stderr, no traceback, and a meaningful
exit code; the traced command's own exit code is passed through."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import IOTRACE, ROOT, UNPRIVILEGED, WORKLOADS, iotrace_cmd, needs_root

import iotrace


def one_line(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("iotrace: ")
    return lines[0]


def test_unknown_option():
    res = iotrace_cmd("run", "--no-such-option", "--", "true")
    assert res.returncode == 2
    assert "--no-such-option" in one_line(res.stderr)


def test_unknown_command():
    res = iotrace_cmd("trace-it")
    assert res.returncode == 2
    one_line(res.stderr)


def test_run_without_command():
    res = iotrace_cmd("run")
    assert res.returncode == 2
    one_line(res.stderr)


def test_help_teaches():
    res = iotrace_cmd("run", "--help")
    assert res.returncode == 0
    assert "sudo iotrace run" in res.stdout and "exit code" in res.stdout




@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to drop to an unprivileged user")
def test_not_root(tmp_path):
    os.chmod(tmp_path, 0o777)
    res = subprocess.run([*UNPRIVILEGED, *IOTRACE, "run", "-o", str(tmp_path / "t"), "--",
                          "true"],
                         capture_output=True, text=True, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "userspace")))
    assert res.returncode == 3, res.stderr
    assert "root" in one_line(res.stderr)
    assert not (tmp_path / "t").exists()


@needs_root()
def test_kernel_without_btf(tmp_path):
    res = iotrace_cmd("run", "-o", str(tmp_path / "t"), "--", "true",
                      env=dict(os.environ, IOTRACE_SYSFS_BTF=str(tmp_path / "no-btf")))
    assert res.returncode == 3
    assert "BTF" in one_line(res.stderr)


@needs_root()
def test_pid_that_does_not_exist(tmp_path):
    res = iotrace_cmd("attach", "--pid", "999999999", "-o", str(tmp_path / "t"))
    assert res.returncode == 3
    assert "999999999" in one_line(res.stderr)


@needs_root()
@pytest.mark.parametrize("opts, code, says", [
    (("--also-pid", "999999999"), 3, "--also-pid 999999999: no such process"),
    (("--tls-lib", "/nonexistent/libssl.so.3"), 2, "no such readable file"),
    (("--no-tls", "--tls-lib", "/nonexistent/libssl.so.3"), 2, "contradict"),
    (("--verbs-lib", "/nonexistent/libibverbs.so.1"), 2, "no such readable file"),
])
def test_bad_tracing_options_leave_no_trace_directory(tmp_path, opts, code, says):
    """A wrong option is one line and its exit code, before anything is made:
    the next run with -o to the same place does not find a leftover directory."""
    out = tmp_path / "t"
    res = iotrace_cmd("run", "-o", str(out), *opts, "--", "true")
    assert res.returncode == code
    assert says in one_line(res.stderr)
    assert not out.exists()


@needs_root()
def test_command_not_found(tmp_path):
    res = iotrace_cmd("run", "-o", str(tmp_path / "t"), "--", "no-such-command-xyz")
    assert res.returncode == 127
    assert "command not found" in one_line(res.stderr)


@needs_root()
def test_command_path_not_found(tmp_path):
    res = iotrace_cmd("run", "-o", str(tmp_path / "t"), "--", str(tmp_path / "no-such-script"))
    assert res.returncode == 127
    assert "no such file" in one_line(res.stderr)
    assert not (tmp_path / "t").exists()


@needs_root()
def test_command_not_executable(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")   # not chmod +x
    res = iotrace_cmd("run", "-q", "-o", str(tmp_path / "t"), "--", str(script))
    assert res.returncode == 126
    assert "Permission denied" in one_line(res.stderr)


@needs_root()
def test_output_directory_exists(tmp_path):
    out = tmp_path / "t"
    assert iotrace_cmd("run", "-q", "-o", str(out), "--", "true").returncode == 0
    res = iotrace_cmd("run", "-q", "-o", str(out), "--", "true")
    assert res.returncode == 2
    assert "--force" in one_line(res.stderr)
    assert iotrace_cmd("run", "-q", "--force", "-o", str(out), "--", "true").returncode == 0


@needs_root()
def test_exit_code_passes_through(tmp_path):
    res = iotrace_cmd("run", "-q", "-o", str(tmp_path / "a"), "--", "sh", "-c", "exit 42")
    assert res.returncode == 42
    res = iotrace_cmd("run", "-q", "-o", str(tmp_path / "b"), "--", "sh", "-c", "kill -9 $$")
    assert res.returncode == 128 + signal.SIGKILL
    t = iotrace.open_trace(tmp_path / "b")
    assert t.meta["exit_status"] == {"code": None, "signal": signal.SIGKILL}


@needs_root()
def test_disk_full_stops_tracing_job_runs_on(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        data = tmp_path / "data.bin"
        data.write_bytes(b"x" * 4096)
        res = iotrace_cmd("run", "-q", "-o", str(mnt / "t"), "--", sys.executable,
                          str(WORKLOADS / "many_reads.py"), str(data), "300000", "7")
        assert res.stdout.strip() == "done"          # the job ran to its end
        assert res.returncode == 7                   # and its code came through
        assert "disk" in res.stderr.lower() or "space" in res.stderr.lower()
        assert "Traceback" not in res.stderr
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_newer_trace_version_refused(tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "meta.json").write_text(json.dumps({"schema_version": "2.0"}))
    res = iotrace_cmd("summary", str(tmp_path))
    assert res.returncode == 4
    assert "newer" in one_line(res.stderr)


def test_corrupt_trace(tmp_path):
    (tmp_path / "meta.json").write_text("{not json")
    res = iotrace_cmd("summary", str(tmp_path))
    assert res.returncode == 4
    assert "corrupt" in one_line(res.stderr)


def test_not_a_trace(tmp_path):
    res = iotrace_cmd("summary", str(tmp_path / "nothing"))
    assert res.returncode == 4
    one_line(res.stderr)


@needs_root()
def test_doctor_lists_every_probe():
    res = iotrace_cmd("doctor")
    assert res.returncode == 0, res.stdout + res.stderr
    for probe in ("privileges", "kernel", "BTF", "syscalls (sys_enter)", "process fork",
                  "process exit", "tracing works"):
        assert probe in res.stdout
    assert "ok   recorder priority: nice -10 (CAP_SYS_NICE)" in res.stdout   # root has it


def test_output_patterns_expand_or_fail_clearly(tmp_path):
    from iotrace.outpath import expand, host_name
    env = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "7", "RANK": "3"}
    assert expand("set/host=%h/j%j-r%r-100%%", env) == f"set/host={host_name()}/j4242-r7-100%"
    assert expand("r%r", {"RANK": "3"}) == "r3"
    for bad, word in (("x/%j", "IOTRACE_JOB_ID"), ("x/%r", "SLURM_PROCID"), ("x/%q", "%q"),
                      ("x%", "lone %")):
        with pytest.raises(iotrace.errors.IotraceError, match=word):
            expand(bad, {})
    # through the command line: exit 2, one line, nothing created
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "IOTRACE_JOB_ID")}
    res = iotrace_cmd("run", "-o", str(tmp_path / "t-%j"), "--", "true", env=env)
    assert res.returncode == 2 and "%j needs a job id" in one_line(res.stderr)
    assert not list(tmp_path.iterdir())
