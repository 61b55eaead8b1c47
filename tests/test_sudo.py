"""Started through sudo, the job runs as the invoking user (uid, gid,
supplementary groups, HOME) and the trace directory belongs to that user.
sudo's own contract is the SUDO_UID/SUDO_GID/SUDO_USER variables it sets;
the test sets them as sudo would, for the 'nobody' user."""
from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess

import pytest

from conftest import iotrace_cmd, needs_root, trace_run

pytestmark = needs_root()


def test_job_runs_as_invoking_user(tmp_path):
    nobody = pwd.getpwnam("nobody")
    os.chmod(tmp_path, 0o777)
    env = dict(os.environ, SUDO_UID=str(nobody.pw_uid), SUDO_GID=str(nobody.pw_gid),
               SUDO_USER="nobody")
    out = tmp_path / "trace"
    proc, trace = trace_run(out, "sh", "-c", 'id -u; id -g; id -G; echo "$HOME"; '
                            'cat /proc/self/status | grep ^CapEff', env=env)
    assert proc.returncode == 0, proc.stderr
    uid, gid, groups, home, capeff = proc.stdout.splitlines()
    assert (int(uid), int(gid)) == (nobody.pw_uid, nobody.pw_gid)
    assert set(map(int, groups.split())) == set(os.getgrouplist("nobody", nobody.pw_gid))
    assert home == nobody.pw_dir
    assert int(capeff.split()[1], 16) == 0          # no privileges left
    for path in [out, *out.rglob("*")]:
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid), path
    assert trace.meta["options"]["user"] == "nobody"


# ---- a real user with supplementary groups, a strict umask -------------------

KEPT_CAPS = {2, 5, 19, 38, 39}   # DAC_READ_SEARCH, KILL, SYS_PTRACE, PERFMON, BPF


def caps(line: str) -> set:
    v = int(line.split()[1], 16)
    return {b for b in range(64) if v >> b & 1}


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """A throw-away user in two supplementary groups, removed afterwards."""
    if shutil.which("useradd") is None or shutil.which("groupadd") is None:
        pytest.skip("useradd/groupadd not installed")
    name = f"iotr{os.getpid() % 100000}"
    groups = [f"{name}a", f"{name}b"]
    home = tmp_path_factory.mktemp("home")
    try:
        for g in groups:
            subprocess.run(["groupadd", g], check=True, capture_output=True)
        subprocess.run(["useradd", "-M", "-U", "-d", str(home), "-s", "/bin/sh",
                        "-G", ",".join(groups), name], check=True, capture_output=True)
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        for g in [name, *groups]:
            subprocess.run(["groupdel", g], capture_output=True)


def test_sudo_user_groups_env_umask_and_recorder_caps(tmp_path, user):
    """Under sudo with umask 077: the job has the user's uid, gid and every
    supplementary group, HOME/USER/LOGNAME of the user and the rest of the
    environment sudo passed, the umask, no capability; every file and directory
    of the trace (the node summary and the Perfetto file too) belongs to the
    user with mode 0600/0700; the recorder (root) holds only KEPT_CAPS while
    the job runs."""
    os.chmod(tmp_path, 0o777)
    env = dict(os.environ, SUDO_UID=str(user.pw_uid), SUDO_GID=str(user.pw_gid),
               SUDO_USER=user.pw_name, HOME="/root", USER="root", LOGNAME="root",
               IOTRACE_TEST_KEPT="yes")
    out = tmp_path / "trace"
    script = ('id -u; id -g; id -G; echo "$HOME $USER $LOGNAME $IOTRACE_TEST_KEPT"; umask; '
              'grep ^CapEff /proc/self/status; grep ^CapPrm /proc/$PPID/status; '
              'grep ^CapEff /proc/$PPID/status')
    proc = iotrace_cmd("run", "-q", "--perfetto", "-o", str(out), "--", "sh", "-c", script,
                       env=env, preexec_fn=lambda: os.umask(0o077))
    assert proc.returncode == 0, proc.stderr
    uid, gid, groups, envline, umask, job_eff, rec_prm, rec_eff = proc.stdout.splitlines()
    assert (int(uid), int(gid)) == (user.pw_uid, user.pw_gid)
    want = set(os.getgrouplist(user.pw_name, user.pw_gid))
    assert len(want) == 3 and set(map(int, groups.split())) == want
    assert envline.split() == [user.pw_dir, user.pw_name, user.pw_name, "yes"]
    assert umask.strip() == "0077"
    assert caps(job_eff) == set()
    with open("/proc/self/status") as f:
        ours = caps(next(line for line in f if line.startswith("CapPrm:")))
    assert caps(rec_prm) == caps(rec_eff) == KEPT_CAPS & ours
    pf = out.parent / (out.name + ".pftrace")
    paths = [out, *out.rglob("*"), pf]
    assert any(p.name == "summary" for p in paths) and pf.exists()
    for path in paths:
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (user.pw_uid, user.pw_gid), path
        assert stat.S_IMODE(st.st_mode) == (0o700 if path.is_dir() else 0o600), path
