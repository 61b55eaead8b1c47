// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Profile mode: the kernel's aggregate tables to spool files (profile.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "iotrace.h"
#include "profile.h"

_Static_assert(sizeof(struct iot_prof_key) == 24, "profile key ABI");
_Static_assert(sizeof(struct iot_prof_val) == 56, "profile value ABI");
_Static_assert(sizeof(struct iot_prof_rate_key) == 16, "profile rate key ABI");
_Static_assert(sizeof(struct iot_prof_rate_val) == 32, "profile rate value ABI");

long prof_rates_drain(int fd, FILE *out, __u32 before_sec, struct prof_totals *t)
{
	struct iot_prof_rate_key *keys, k;
	struct iot_prof_rate_val v;
	void *prev = NULL;
	long n = 0, moved = 0;

	/* Collect the finished seconds' keys first: deleting while walking
	 * would restart the walk. Those seconds take no more calls (a call is
	 * counted in the second it ends; the caller leaves a second's margin). */
	keys = malloc(sizeof(*keys) * IOT_PROF_RATES_MAX_KEYS);
	if (!keys)
		return -1;
	while (n < IOT_PROF_RATES_MAX_KEYS && bpf_map_get_next_key(fd, prev, &k) == 0) {
		keys[n] = k;
		prev = &keys[n];
		if (k.sec < before_sec)
			n++;
	}
	for (long i = 0; i < n; i++) {
		if (bpf_map_lookup_elem(fd, &keys[i], &v))
			continue;
		bpf_map_delete_elem(fd, &keys[i]);
		if (fwrite(&keys[i], sizeof(keys[i]), 1, out) != 1 ||
		    fwrite(&v, sizeof(v), 1, out) != 1) {
			free(keys);
			return -1;
		}
		moved++;
		t->calls += v.calls;
		if ((keys[i].op >= IOT_READ && keys[i].op <= IOT_PREADV2) ||
		    keys[i].op == IOT_SENDFILE || keys[i].op == IOT_COPY_FILE_RANGE)
			t->bytes_read += v.bytes;
		if ((keys[i].op >= IOT_WRITE && keys[i].op <= IOT_PWRITEV2) ||
		    keys[i].op == IOT_SENDFILE || keys[i].op == IOT_COPY_FILE_RANGE)
			t->bytes_written += v.bytes;
	}
	free(keys);
	if (fflush(out))
		return -1;
	return moved;
}

long prof_calls_snapshot(int calls_fd, int lost_fd, const char *dir)
{
	char part[4200], path[4096];
	struct iot_prof_key k, next;
	struct iot_prof_val v;
	void *prev = NULL;
	long rows = 0;
	int ncpu = libbpf_num_possible_cpus();
	FILE *f;

	snprintf(path, sizeof(path), "%s/profile-calls.bin", dir);
	snprintf(part, sizeof(part), "%s.part", path);
	f = fopen(part, "w");
	if (!f)
		return -1;
	setvbuf(f, NULL, _IOFBF, 1 << 20);
	while (bpf_map_get_next_key(calls_fd, prev, &next) == 0) {
		k = next;
		prev = &k;
		if (bpf_map_lookup_elem(calls_fd, &k, &v))
			continue;
		if (fwrite(&k, sizeof(k), 1, f) != 1 || fwrite(&v, sizeof(v), 1, f) != 1)
			goto fail;
		rows++;
	}
	if (ncpu > 0) {
		struct iot_prof_val *per = calloc(ncpu, sizeof(*per));
		if (!per)
			goto fail;
		for (__u32 op = 0; op < IOT_OP_COUNT; op++) {
			struct iot_prof_val sum = {};
			if (bpf_map_lookup_elem(lost_fd, &op, per))
				continue;
			for (int c = 0; c < ncpu; c++) {
				sum.calls += per[c].calls;
				sum.errors += per[c].errors;
				sum.bytes += per[c].bytes;
				sum.req_bytes += per[c].req_bytes;
				sum.dur_ns += per[c].dur_ns;
				sum.cache_bytes += per[c].cache_bytes;
			}
			if (!sum.calls)
				continue;
			memset(&k, 0, sizeof(k));
			k.op = op;
			k.size_bucket = k.lat_bucket = 255;
			if (fwrite(&k, sizeof(k), 1, f) != 1 || fwrite(&sum, sizeof(sum), 1, f) != 1) {
				free(per);
				goto fail;
			}
			rows++;
		}
		free(per);
	}
	if (fclose(f))
		return -1;
	if (rename(part, path))
		return -1;
	return rows;
fail:
	{
		int e = errno;
		fclose(f);
		errno = e;
	}
	return -1;
}
