// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Profile mode: the threads' sums from the kernel (bpf/profile.h) added up
 * in two tables of fixed size, and written to spool files (profile.h).
 *
 * The tables are open-addressing hash tables written here: libbpf keeps its
 * own hashmap private, and what they need is small (fixed-size keys, insert
 * and add, a walk, and for the per-second one a rebuild without the seconds
 * moved out).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "iotrace.h"
#include "ops.h"
#include "profile.h"

_Static_assert(sizeof(struct iot_prof_key) == 24, "profile key ABI");
_Static_assert(sizeof(struct iot_prof_val) == 56, "profile value ABI");
_Static_assert(sizeof(struct iot_prof_sums) == 88, "profile sums ABI");
_Static_assert(sizeof(struct iot_prof_rate_key) == 16, "profile rate key ABI");
_Static_assert(sizeof(struct iot_prof_rate_val) == 32, "profile rate value ABI");
_Static_assert(sizeof(struct iot_prof_wake_key) == 24, "profile wake key ABI");
_Static_assert(sizeof(struct iot_prof_wake_val) == 16, "profile wake value ABI");

struct call_row {
	struct iot_prof_key k;
	struct iot_prof_val v;   /* v.calls 0: a free slot */
};

struct rate_row {
	struct iot_prof_rate_key k;
	struct iot_prof_rate_val v;   /* v.calls 0: a free slot */
};

struct file_row {
	struct iot_prof_file_key k;
	struct iot_prof_file_val v;
	bool used;
};

struct wake_row {
	struct iot_prof_wake_key k;
	struct iot_prof_wake_val v;   /* v.wakes 0: a free slot */
};

/* Slots: a power of two, at least twice the rows allowed (short probes). */
static struct call_row *calls;
static size_t calls_mask, calls_n, calls_max;
static bool calls_whole_run;   /* false (live use): no whole-run table is kept */
static struct rate_row *rates;
static size_t rates_mask, rates_n;
static struct file_row *files;
static size_t files_mask, files_n;
static struct wake_row *wakes;
static size_t wakes_mask, wakes_n;
/* The regular files whose name is in the spool: (dev, ino) pairs, open
 * addressing, doubled at half full. It grows with the distinct files a job
 * opens (16-byte slots, up to 32 bytes a file), not with time. */
struct named_file {
	__u64 ino;
	__u64 dev;   /* dev + 1: 0 marks a free slot */
};
static struct named_file *named;
static size_t named_mask, named_n;

/* the calls that found the table full, by op, without their key */
static struct iot_prof_val lost[IOT_OP_COUNT];

struct prof_counts prof_counts;
struct prof_totals prof_totals;

static size_t slots_for(size_t rows)
{
	size_t n = 1024;

	while (n < 2 * rows)
		n <<= 1;
	return n;
}

int prof_files_init(void)
{
	files = calloc(slots_for(IOT_PROF_FILES_MAX_KEYS), sizeof(*files));
	if (!files) {
		errno = ENOMEM;
		return -1;
	}
	files_mask = slots_for(IOT_PROF_FILES_MAX_KEYS) - 1;
	return 0;
}

int prof_tables_init(long max_keys, bool whole_run)
{
	size_t nc, nr = slots_for(IOT_PROF_RATES_MAX_KEYS);

	calls_whole_run = whole_run;
	calls_max = max_keys > 0 ? (size_t)max_keys : IOT_PROF_CALLS_MAX_KEYS;
	nc = slots_for(calls_max);
	calls = calloc(nc, sizeof(*calls));
	rates = calloc(nr, sizeof(*rates));
	wakes = calloc(slots_for(IOT_PROF_WAKES_MAX_KEYS), sizeof(*wakes));
	if (!calls || !rates || !wakes) {
		prof_tables_free();
		errno = ENOMEM;
		return -1;
	}
	calls_mask = nc - 1;
	rates_mask = nr - 1;
	wakes_mask = slots_for(IOT_PROF_WAKES_MAX_KEYS) - 1;
	return 0;
}

void prof_tables_free(void)
{
	free(calls);
	free(rates);
	free(wakes);
	free(files);
	free(named);
	calls = NULL;
	rates = NULL;
	wakes = NULL;
	files = NULL;
	named = NULL;
}

/* A hash of a key's 64-bit words (keys are 8-byte multiples, padding zero). */
static size_t hash_words(const void *key, size_t size)
{
	const __u64 *w = key;
	__u64 h = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < size / 8; i++) {
		h ^= w[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 33;
	}
	return (size_t)h;
}

static void val_add(struct iot_prof_val *to, const struct iot_prof_val *v)
{
	to->calls += v->calls;
	to->errors += v->errors;
	to->bytes += v->bytes;
	to->req_bytes += v->req_bytes;
	to->dur_ns += v->dur_ns;
	to->cache_bytes += v->cache_bytes;
}

static void add_call(const struct iot_prof_key *k, const struct iot_prof_val *v)
{
	size_t i = hash_words(k, sizeof(*k)) & calls_mask;

	for (;; i = (i + 1) & calls_mask) {
		struct call_row *r = &calls[i];
		if (!r->v.calls) {
			if (calls_n >= calls_max)
				break;
			r->k = *k;
			r->v = *v;
			calls_n++;
			return;
		}
		if (!memcmp(&r->k, k, sizeof(*k))) {
			val_add(&r->v, v);
			return;
		}
	}
	prof_counts.overflow += v->calls;
	if (k->op < IOT_OP_COUNT)
		val_add(&lost[k->op], v);
}

/* Into the per-second table (false: it is full). */
static bool rate_insert(struct rate_row *tab, size_t mask, size_t *n,
			const struct iot_prof_rate_key *k, const struct iot_prof_rate_val *v)
{
	size_t i = hash_words(k, sizeof(*k)) & mask;

	for (;; i = (i + 1) & mask) {
		struct rate_row *r = &tab[i];
		if (!r->v.calls) {
			if (*n >= IOT_PROF_RATES_MAX_KEYS)
				return false;
			r->k = *k;
			r->v = *v;
			(*n)++;
			return true;
		}
		if (!memcmp(&r->k, k, sizeof(*k))) {
			r->v.calls += v->calls;
			r->v.bytes += v->bytes;
			r->v.dur_ns += v->dur_ns;
			r->v.cache_bytes += v->cache_bytes;
			return true;
		}
	}
}

/* Into the wake table (false: it is full). */
static bool wake_insert(struct wake_row *tab, size_t mask, size_t *n,
			const struct iot_prof_wake_key *k, const struct iot_prof_wake_val *v)
{
	size_t i = hash_words(k, sizeof(*k)) & mask;

	for (;; i = (i + 1) & mask) {
		struct wake_row *r = &tab[i];
		if (!r->v.wakes) {
			if (*n >= IOT_PROF_WAKES_MAX_KEYS)
				return false;
			r->k = *k;
			r->v = *v;
			(*n)++;
			return true;
		}
		if (!memcmp(&r->k, k, sizeof(*k))) {
			r->v.wakes += v->wakes;
			r->v.dur_ns += v->dur_ns;
			return true;
		}
	}
}

static void wake_add(const struct iot_prof_sums *s)
{
	struct iot_prof_wake_key k = {
		.sec = s->sec, .pid = s->k.pid, .tid = s->k.ino >> 32,
		.waker_pid = s->k.dev, .waker_tid = (__u32)s->k.ino,
	};
	struct iot_prof_wake_val v = { .wakes = s->v.calls, .dur_ns = s->v.dur_ns };

	if (!wake_insert(wakes, wakes_mask, &wakes_n, &k, &v))
		prof_counts.wakes_lost += s->v.calls;
}

/* A regular file's reads and writes, into the per-file table (--file-sums). */
static void file_add(const struct iot_prof_sums *s)
{
	struct iot_prof_file_key k = { .pid = s->k.pid, .dev = s->k.dev, .ino = s->k.ino };
	bool rd = is_read_op(s->k.op), wr = is_write_op(s->k.op);
	size_t i;

	if (!rd && !wr)
		return;
	for (i = hash_words(&k, sizeof(k)) & files_mask;; i = (i + 1) & files_mask) {
		struct file_row *r = &files[i];
		if (!r->used) {
			if (files_n >= IOT_PROF_FILES_MAX_KEYS) {
				prof_counts.files_lost += s->v.calls;
				return;
			}
			r->used = true;
			r->k = k;
			files_n++;
			break;
		}
		if (!memcmp(&r->k, &k, sizeof(k)))
			break;
	}
	files[i].v.read_bytes += rd ? s->v.bytes : 0;
	files[i].v.write_bytes += wr ? s->v.bytes : 0;
	files[i].v.cache_bytes += rd ? s->v.cache_bytes : 0;
	files[i].v.dur_ns += s->v.dur_ns;
}

void prof_add(const struct iot_prof_sums *s)
{
	struct iot_prof_rate_key rk = {
		.sec = s->sec, .pid = s->k.pid, .op = s->k.op,
		.ftype = (s->v.imode >> 12) & 0xf, .dev = s->k.dev,
	};
	struct iot_prof_rate_val rv = {
		.calls = s->v.calls, .bytes = s->v.bytes, .dur_ns = s->v.dur_ns,
		.cache_bytes = s->v.cache_bytes,
	};

	if (!s->v.calls)
		return;
	if (s->k.op == IOT_PROF_WAKE) {
		wake_add(s);
		return;
	}
	if (calls_whole_run)
		add_call(&s->k, &s->v);
	if (files && s->k.ino && (s->v.imode & 0xf000) == 0x8000)
		file_add(s);
	if (!rate_insert(rates, rates_mask, &rates_n, &rk, &rv))
		prof_counts.rate_lost += s->v.calls;
	prof_totals.calls += s->v.calls;
	if (is_read_op(s->k.op))
		prof_totals.bytes_read += s->v.bytes;
	if (is_write_op(s->k.op))
		prof_totals.bytes_written += s->v.bytes;
}

long prof_rates_drain(FILE *out, __u32 before_sec)
{
	struct rate_row *kept = calloc(rates_mask + 1, sizeof(*kept));
	size_t n = 0;
	long moved = 0;

	if (!kept)
		return -1;
	for (size_t i = 0; i <= rates_mask; i++) {
		struct rate_row *r = &rates[i];
		if (!r->v.calls)
			continue;
		if (r->k.sec >= before_sec) {
			rate_insert(kept, rates_mask, &n, &r->k, &r->v);
			continue;
		}
		if (fwrite(&r->k, sizeof(r->k), 1, out) != 1 ||
		    fwrite(&r->v, sizeof(r->v), 1, out) != 1) {
			free(kept);
			return -1;
		}
		moved++;
	}
	free(rates);
	rates = kept;
	rates_n = n;
	if (fflush(out))
		return -1;
	return moved;
}

long prof_files_drain(FILE *out, __u32 before_sec)
{
	long moved = 0;

	(void)before_sec;   /* all of them: a file's sums have no second */
	for (size_t i = 0; files && i <= files_mask; i++) {
		struct file_row *r = &files[i];
		if (!r->used)
			continue;
		if (fwrite(&r->k, sizeof(r->k), 1, out) != 1 ||
		    fwrite(&r->v, sizeof(r->v), 1, out) != 1)
			return -1;
		moved++;
	}
	if (files)
		memset(files, 0, (files_mask + 1) * sizeof(*files));
	files_n = 0;
	if (fflush(out))
		return -1;
	return moved;
}

long prof_wakes_drain(FILE *out, __u32 before_sec)
{
	struct wake_row *kept = calloc(wakes_mask + 1, sizeof(*kept));
	size_t n = 0;
	long moved = 0;

	if (!kept)
		return -1;
	for (size_t i = 0; i <= wakes_mask; i++) {
		struct wake_row *r = &wakes[i];
		if (!r->v.wakes)
			continue;
		if (r->k.sec >= before_sec) {
			wake_insert(kept, wakes_mask, &n, &r->k, &r->v);
			continue;
		}
		if (fwrite(&r->k, sizeof(r->k), 1, out) != 1 ||
		    fwrite(&r->v, sizeof(r->v), 1, out) != 1) {
			free(kept);
			return -1;
		}
		moved++;
	}
	free(wakes);
	wakes = kept;
	wakes_n = n;
	if (fflush(out))
		return -1;
	return moved;
}

/* One row of calls without their key: pid 0, both buckets 255. */
static int write_lost(FILE *f, __u16 op, const struct iot_prof_val *v)
{
	struct iot_prof_key k = { .op = op, .size_bucket = 255, .lat_bucket = 255 };

	return fwrite(&k, sizeof(k), 1, f) == 1 && fwrite(v, sizeof(*v), 1, f) == 1 ? 0 : -1;
}

static bool named_put(struct named_file *tab, size_t mask, __u64 ino, __u64 dev)
{
	struct named_file k = { .ino = ino, .dev = dev };
	size_t i = hash_words(&k, sizeof(k)) & mask;

	for (;; i = (i + 1) & mask) {
		if (!tab[i].dev) {
			tab[i] = k;
			return true;
		}
		if (tab[i].ino == ino && tab[i].dev == dev)
			return false;
	}
}

bool prof_name_new(__u32 dev, __u64 ino)
{
	if (named_n + 1 > (named_mask + 1) / 2) {
		size_t n = named ? 2 * (named_mask + 1) : 4096;
		struct named_file *t = calloc(n, sizeof(*t));

		if (!t)
			return true;   /* out of memory: write the record */
		for (size_t i = 0; named && i <= named_mask; i++)
			if (named[i].dev)
				named_put(t, n - 1, named[i].ino, named[i].dev);
		free(named);
		named = t;
		named_mask = n - 1;
	}
	if (!named_put(named, named_mask, ino, (__u64)dev + 1))
		return false;
	named_n++;
	return true;
}

long prof_calls_snapshot(int lost_fd, const char *dir)
{
	char part[4200], path[4096];
	long rows = 0;
	int ncpu = libbpf_num_possible_cpus();
	struct iot_prof_val *per = NULL;
	FILE *f;

	snprintf(path, sizeof(path), "%s/profile-calls.bin", dir);
	snprintf(part, sizeof(part), "%s.part", path);
	f = fopen(part, "w");
	if (!f)
		return -1;
	setvbuf(f, NULL, _IOFBF, 1 << 20);
	for (size_t i = 0; i <= calls_mask; i++) {
		if (!calls[i].v.calls)
			continue;
		if (fwrite(&calls[i], sizeof(calls[i]), 1, f) != 1)
			goto fail;
		rows++;
	}
	/* the keyless rows: this table's, and the kernel's (sums that found
	 * the ring buffer full), per CPU */
	per = ncpu > 0 ? calloc(ncpu, sizeof(*per)) : NULL;
	for (__u32 op = 0; op < IOT_OP_COUNT; op++) {
		struct iot_prof_val sum = lost[op];
		if (per && !bpf_map_lookup_elem(lost_fd, &op, per))
			for (int c = 0; c < ncpu; c++)
				val_add(&sum, &per[c]);
		if (!sum.calls)
			continue;
		if (write_lost(f, op, &sum))
			goto fail;
		rows++;
	}
	free(per);
	per = NULL;
	if (fclose(f))
		return -1;
	if (rename(part, path))
		return -1;
	return rows;
fail:
	{
		int e = errno;
		free(per);
		fclose(f);
		errno = e;
	}
	return -1;
}
