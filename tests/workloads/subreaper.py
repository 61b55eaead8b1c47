"""Runs a command as a child subreaper and reaps every process orphaned below
it: `subreaper.py RESULT.json -- CMD ARGS...`. When a process between it and
the job dies (kill -9 of iotrace, of the recorder), the job becomes its child,
so the job's own exit status is still known. RESULT.json: {"pid": CMD's pid,
"status": {pid: wait status}} for every process it reaped."""
import ctypes
import json
import os
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit(f"prctl: {os.strerror(ctypes.get_errno())}")
result, cmd = sys.argv[1], sys.argv[3:]
child = subprocess.Popen(cmd)
status = {}
while True:
    try:
        pid, st = os.wait()
    except ChildProcessError:
        break
    status[pid] = st
with open(result, "w") as f:
    json.dump({"pid": child.pid, "status": status}, f)
