/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef RECORDER_PROFILE_H
#define RECORDER_PROFILE_H

#include <stdbool.h>
#include <stdio.h>
#include <linux/types.h>

struct iot_prof_sums;

/*
 * Profile mode's tables, filled from the threads' sums the kernel sends
 * (struct iot_prof_sums, bpf/profile.h), moved to the spool for iotrace:
 *   profile-rates.bin  appended: (struct iot_prof_rate_key, struct
 *                      iot_prof_rate_val) pairs, one per finished second,
 *                      process, op, file type and device (a second's
 *                      late sums: another row);
 *   profile-calls.bin  replaced whole at each snapshot: (struct iot_prof_key,
 *                      struct iot_prof_val) pairs; the calls that found the
 *                      table (or the kernel's ring buffer) full follow with
 *                      pid 0 and both buckets 255.
 *   wakes-N.bin        with --loop-waits (and --rates-files): (struct
 *                      iot_prof_wake_key, struct iot_prof_wake_val) pairs,
 *                      one per finished second, woken thread and waker;
 * Memory is fixed however long the job runs: a call whose key finds the
 * table full is added to its op's keyless row (totals stay exact) and
 * counted; one whose second finds the per-second table full is counted.
 */

#define IOT_PROF_CALLS_MAX_KEYS 131072
#define IOT_PROF_RATES_MAX_KEYS 16384
/* (second, woken thread, waker thread) rows held between drains */
#define IOT_PROF_WAKES_MAX_KEYS 16384
/* (process, file) rows held between drains (--file-sums) */
#define IOT_PROF_FILES_MAX_KEYS 16384

struct prof_totals {
	__u64 calls, bytes_read, bytes_written;
};

/* calls of the two kinds of loss above (the kernel counts its own) */
struct prof_counts {
	__u64 overflow, rate_lost, wakes_lost, files_lost;
};

extern struct prof_totals prof_totals;
extern struct prof_counts prof_counts;

/* max_keys: rows of the calls table (0: IOT_PROF_CALLS_MAX_KEYS); whole_run
 * false (live use, --rates-files): the calls table is not filled. -1 when
 * out of memory. */
int prof_tables_init(long max_keys, bool whole_run);
void prof_tables_free(void);

/* One record of the kernel's: into both tables and the totals. */
void prof_add(const struct iot_prof_sums *s);

/* Moves the per-second rows of seconds before `before_sec` (all: ~0u) to
 * out. Returns the rows moved, or -1 when writing failed. */
long prof_rates_drain(FILE *out, __u32 before_sec);

/* --file-sums: a table per (process, regular file) of what its reads and
 * writes moved, emptied at each drain (files-N.bin: (struct
 * iot_prof_file_key, struct iot_prof_file_val) pairs). -1 when out of memory. */
int prof_files_init(void);
long prof_files_drain(FILE *out, __u32 before_sec);

/* The same for the wake table (--loop-waits): (struct iot_prof_wake_key,
 * struct iot_prof_wake_val) pairs. */
long prof_wakes_drain(FILE *out, __u32 before_sec);

/* Whether a regular file (dev, ino) is named for the first time: a profile
 * writes an open's record only then. The kernel filters most repeats
 * (prof_named, bpf/profile.h); this catches those its fixed-size table
 * cannot hold (a job that cycles through more files than it holds). */
bool prof_name_new(__u32 dev, __u64 ino);

/* Writes DIR/profile-calls.bin (through a .part file, renamed), with the
 * kernel's keyless sums (lost_fd: its per-CPU prof_lost). Returns the rows
 * written, or -1 with errno set. */
long prof_calls_snapshot(int lost_fd, const char *dir);

#endif
