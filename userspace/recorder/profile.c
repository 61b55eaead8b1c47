// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Profile mode: the threads' sums from the kernel (bpf/profile.h) added up
 * in tables of fixed size (the whole run's per key; per second; in live use
 * the wake-ups per second and the sums per file), and written to spool
 * files (profile.h).
 *
 * The tables are open-addressing hash tables written here: libbpf keeps its
 * own hashmap private, and what they need is small (fixed-size keys, insert
 * and add, a walk, and for the per-second ones a rebuild without the
 * seconds moved out).
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
_Static_assert(sizeof(struct iot_prof_file_key) == 16, "profile file key ABI");
_Static_assert(sizeof(struct iot_prof_file_val) == 40, "profile file value ABI");

struct call_row {
	struct iot_prof_key k;
	struct iot_prof_val v;   /* v.calls 0: a free slot */
};

/*
 * The per-second tables (rates, wake-ups) and the per-file one: open
 * addressing, fixed size, rows of a key and __u64 counters added up. The
 * first counter (calls, wake-ups) is never 0 in a used row. A key that
 * starts with its second (by_second) stays at a drain until its second is
 * over; the per-file table is emptied at each drain.
 */
struct sums_table {
	unsigned char *rows;
	size_t key_size, nvals, row_size, mask, n, max;
	bool by_second;
};

/* Slots: a power of two, at least twice the rows allowed (short probes). */
static struct call_row *calls;
static size_t calls_mask, calls_n, calls_max;
static bool calls_whole_run;   /* false (live use): no whole-run table is kept */
static struct sums_table rates, wakes, files;
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

static int table_init(struct sums_table *t, size_t key_size, size_t val_size, size_t max,
		      bool by_second)
{
	t->key_size = key_size;
	t->nvals = val_size / sizeof(__u64);
	t->row_size = key_size + val_size;
	t->mask = slots_for(max) - 1;
	t->n = 0;
	t->max = max;
	t->by_second = by_second;
	t->rows = calloc(t->mask + 1, t->row_size);
	return t->rows ? 0 : -1;
}

int prof_files_init(void)
{
	if (table_init(&files, sizeof(struct iot_prof_file_key), sizeof(struct iot_prof_file_val),
		       IOT_PROF_FILES_MAX_KEYS, false)) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

int prof_tables_init(long max_keys, bool whole_run)
{
	size_t nc;
	int rt, wk;

	calls_whole_run = whole_run;
	calls_max = max_keys > 0 ? (size_t)max_keys : IOT_PROF_CALLS_MAX_KEYS;
	nc = slots_for(calls_max);
	calls = calloc(nc, sizeof(*calls));
	rt = table_init(&rates, sizeof(struct iot_prof_rate_key), sizeof(struct iot_prof_rate_val),
			IOT_PROF_RATES_MAX_KEYS, true);
	wk = table_init(&wakes, sizeof(struct iot_prof_wake_key), sizeof(struct iot_prof_wake_val),
			IOT_PROF_WAKES_MAX_KEYS, true);
	if (!calls || rt || wk) {
		prof_tables_free();
		errno = ENOMEM;
		return -1;
	}
	calls_mask = nc - 1;
	return 0;
}

void prof_tables_free(void)
{
	free(calls);
	free(rates.rows);
	free(wakes.rows);
	free(files.rows);
	free(named);
	calls = NULL;
	rates.rows = wakes.rows = files.rows = NULL;
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

/* Adds vals to key's row of a table (false: it is full). */
static bool table_add(struct sums_table *t, const void *key, const __u64 *vals)
{
	size_t i = hash_words(key, t->key_size) & t->mask;

	for (;; i = (i + 1) & t->mask) {
		unsigned char *r = t->rows + i * t->row_size;
		__u64 *v = (__u64 *)(r + t->key_size);

		if (!v[0]) {
			if (t->n >= t->max)
				return false;
			memcpy(r, key, t->key_size);
			memcpy(v, vals, t->nvals * sizeof(*v));
			t->n++;
			return true;
		}
		if (!memcmp(r, key, t->key_size)) {
			for (size_t j = 0; j < t->nvals; j++)
				v[j] += vals[j];
			return true;
		}
	}
}

/* Writes the rows of seconds before before_sec (all rows of a table not by
 * second) to out and keeps the others. Returns the rows written, -1 when
 * writing failed. */
static long table_drain(struct sums_table *t, FILE *out, __u32 before_sec)
{
	struct sums_table kept = *t;
	long moved = 0;

	if (!t->rows)
		return 0;
	kept.rows = calloc(t->mask + 1, t->row_size);
	kept.n = 0;
	if (!kept.rows)
		return -1;
	for (size_t i = 0; i <= t->mask; i++) {
		unsigned char *r = t->rows + i * t->row_size;
		__u64 *v = (__u64 *)(r + t->key_size);

		if (!v[0])
			continue;
		if (t->by_second && *(__u32 *)r >= before_sec) {
			table_add(&kept, r, v);
			continue;
		}
		if (fwrite(r, t->row_size, 1, out) != 1) {
			free(kept.rows);
			return -1;
		}
		moved++;
	}
	free(t->rows);
	*t = kept;
	if (fflush(out))
		return -1;
	return moved;
}

static void wake_add(const struct iot_prof_sums *s)
{
	struct iot_prof_wake_key k = {
		.sec = s->sec, .pid = s->k.pid, .tid = s->k.ino >> 32,
		.waker_pid = s->k.dev, .waker_tid = (__u32)s->k.ino,
	};
	struct iot_prof_wake_val v = { .wakes = s->v.calls, .dur_ns = s->v.dur_ns };

	if (!table_add(&wakes, &k, (const __u64 *)&v))
		prof_counts.wakes_lost += s->v.calls;
}

/* A regular file's reads and writes, into the per-file table (--file-sums). */
static void file_add(const struct iot_prof_sums *s)
{
	struct iot_prof_file_key k = { .pid = s->k.pid, .dev = s->k.dev, .ino = s->k.ino };
	bool rd = is_read_op(s->k.op), wr = is_write_op(s->k.op);
	struct iot_prof_file_val v = {
		.calls = s->v.calls,
		.read_bytes = rd ? s->v.bytes : 0, .write_bytes = wr ? s->v.bytes : 0,
		.cache_bytes = rd ? s->v.cache_bytes : 0, .dur_ns = s->v.dur_ns,
	};

	if ((rd || wr) && !table_add(&files, &k, (const __u64 *)&v))
		prof_counts.files_lost += s->v.calls;
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
	if (files.rows && s->k.ino && (s->v.imode & 0xf000) == 0x8000)
		file_add(s);
	if (!table_add(&rates, &rk, (const __u64 *)&rv))
		prof_counts.rate_lost += s->v.calls;
	prof_totals.calls += s->v.calls;
	if (is_read_op(s->k.op))
		prof_totals.bytes_read += s->v.bytes;
	if (is_write_op(s->k.op))
		prof_totals.bytes_written += s->v.bytes;
}

long prof_rates_drain(FILE *out, __u32 before_sec)
{
	return table_drain(&rates, out, before_sec);
}

long prof_files_drain(FILE *out, __u32 before_sec)
{
	return table_drain(&files, out, before_sec);
}

long prof_wakes_drain(FILE *out, __u32 before_sec)
{
	return table_drain(&wakes, out, before_sec);
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
