/* Following a cgroup: the processes that join it (or a cgroup below it)
 * while the recorder runs, e.g. a Slurm job's steps started after a prolog
 * attached. */
#ifndef IOTRACE_CGROUP_FOLLOW_H
#define IOTRACE_CGROUP_FOLLOW_H

#include <sys/types.h>

/* Calls add(pid, ctx) for every pid in DIR/cgroup.procs and in those of the
 * cgroups below it. Returns the number of pids seen, or -1 when DIR does not
 * exist (yet). */
int cgroup_scan(const char *dir, void (*add)(pid_t pid, void *ctx), void *ctx);

#endif
