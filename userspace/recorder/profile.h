/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef RECORDER_PROFILE_H
#define RECORDER_PROFILE_H

#include <stdio.h>
#include <linux/types.h>

/*
 * Profile mode's tables (bpf/profile.h) moved to the spool for iotrace:
 *   profile-rates.bin  appended: (struct iot_prof_rate_key, struct
 *                      iot_prof_rate_val) pairs, one per finished second,
 *                      process and op (moved out of the kernel's table);
 *   profile-calls.bin  replaced whole at each snapshot: (struct iot_prof_key,
 *                      struct iot_prof_val) pairs; the calls that found the
 *                      table full follow with pid 0 and both buckets 255.
 */

/* at least bpf/profile.h's IOT_PROF_RATES_MAX */
#define IOT_PROF_RATES_MAX_KEYS 16384

struct prof_totals {
	__u64 calls, bytes_read, bytes_written;
};

/* Moves the per-second rows of seconds before `before_sec` (all: ~0u) to
 * out, adding them to t. Returns the rows moved, or -1 when writing failed. */
long prof_rates_drain(int rates_fd, FILE *out, __u32 before_sec, struct prof_totals *t);

/* Writes DIR/profile-calls.bin (through a .part file, renamed). Returns the
 * rows written, or -1 with errno set. */
long prof_calls_snapshot(int calls_fd, int lost_fd, const char *dir);

#endif
