/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The record rings, one per CPU, and the drain that merges them (rings.c). */
#ifndef IOTRACE_RINGS_H
#define IOTRACE_RINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include <bpf/libbpf.h>

/* At most 8: a thread writes to one ring, so its bursts have an eighth of
 * --ringbuf-mb at least (8 MiB of the default 64: some 80,000 records). */
#define RINGS_MAX 8

/* How many rings of what size --ringbuf-mb MiB in all makes on ncpu CPUs. */
struct ring_plan {
	int count;          /* a power of two, at most RINGS_MAX and ncpu */
	__u32 bytes;        /* each: the total / count */
	int ncpu;           /* possible CPUs: slots of the outer array */
};

struct ring_plan rings_plan(int ringbuf_mb, int ncpu);

/* Makes the plan's rings and puts them in the loaded outer array
 * (bpf/shared_maps.h `rings`): CPU c writes to ring c % count. 0 or -errno. */
int rings_fill(const struct ring_plan *plan, int outer_fd);

/* A reader of every ring (and of `extra_fd` with `extra_fn`, when >= 0)
 * that hands each record to `out` in one order (rings.c): NULL with errno. */
struct ring_buffer *rings_reader(ring_buffer_sample_fn out, int extra_fd,
				 ring_buffer_sample_fn extra_fn);

/* Hands `out` the records read so far that ended before `before_ns`
 * (CLOCK_MONOTONIC), merged by end time; all of them with ~0ull. */
void rings_release(__u64 before_ns);

/* How long a record is held for the other rings (rings.c): a drain that
 * began at T releases what ended before T - rings_hold_ns(). */
__u64 rings_hold_ns(void);

/* Records the drain could not hold (no memory): lost, and said. */
__u64 rings_lost(void);

void rings_close(void);

#endif
