#!/bin/sh
# Slurm Epilog: stop the job's tracer on this node (see iotrace-prolog.sh) and
# wait until its trace is written (the events turned into Parquet and the
# node summary: about a second per million events).
RUN=${IOTRACE_RUN_DIR:-/run/iotrace}
job=$SLURM_JOB_ID
pidf=$RUN/$job.pid
[ -n "$job" ] && [ -f "$pidf" ] || exit 0
pid=$(cat "$pidf")
kill -INT "$pid" 2>/dev/null
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 3000 ]; do     # at most 5 minutes
    sleep 0.1; i=$((i + 1))
done
kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
rm -f "$pidf"
exit 0
