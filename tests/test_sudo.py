"""Started through sudo, the job runs as the invoking user (uid, gid,
supplementary groups, HOME) and the trace directory belongs to that user.
sudo's own contract is the SUDO_UID/SUDO_GID/SUDO_USER variables it sets;
the test sets them as sudo would, for the 'nobody' user."""
from __future__ import annotations

import os
import pwd


from conftest import needs_root, trace_run

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
