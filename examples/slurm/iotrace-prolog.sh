#!/bin/sh
# Slurm Prolog: trace a job's processes on this node from its first step on.
#
#   slurm.conf:  Prolog=/etc/slurm/iotrace-prolog.sh
#                Epilog=/etc/slurm/iotrace-epilog.sh
#   a job asks for it:  sbatch --comment=iotrace job.sh
#
# Runs as root on every node of the job before it starts. Starts
# `iotrace attach --cgroup JOB --follow` in the background (the job's cgroup
# may not exist yet: the tracer waits for its processes), waits until the
# tracer is ready, and returns. The epilog stops it; each node's trace lands
# in $IOTRACE_TRACES/JOBID/host=NODE, one trace set per job:
#   iotrace report $IOTRACE_TRACES/JOBID
IOTRACE=${IOTRACE:-/opt/iotrace/.venv/bin/iotrace}
TRACES=${IOTRACE_TRACES:-/shared/iotrace}
RUN=${IOTRACE_RUN_DIR:-/run/iotrace}

job=$SLURM_JOB_ID
[ -n "$job" ] || exit 0
scontrol show job "$job" 2>/dev/null | grep -q 'Comment=[^ ]*iotrace' || exit 0

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then          # cgroup v2
    cg=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_$job
else                                                       # cgroup v1 (freezer is always there)
    cg=/sys/fs/cgroup/freezer/slurm/uid_$SLURM_JOB_UID/job_$job
fi
out=$TRACES/$job/host=$(hostname -s)
mkdir -p "$RUN" "$TRACES/$job"
setsid "$IOTRACE" attach -q --cgroup "$cg" --follow -o "$out" \
    </dev/null >>"$RUN/$job.log" 2>&1 &
echo $! >"$RUN/$job.pid"
# ready when the trace directory has its meta.json: the job's first step
# must not start before (a prolog's time counts against the job's start)
i=0
while [ ! -f "$out/meta.json" ] && [ $i -lt 300 ]; do
    kill -0 "$(cat "$RUN/$job.pid")" 2>/dev/null || { cat "$RUN/$job.log" >&2; exit 0; }
    sleep 0.1; i=$((i + 1))
done
exit 0      # never fail the job for its trace
