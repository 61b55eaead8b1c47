/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Profile mode (iotrace run --profile): a call of a traced process is added
 * to two tables instead of being written to the ring buffer:
 *   prof_calls: per process, file, op, request-size and latency bucket
 *               (the whole run; the recorder snapshots it);
 *   prof_rates: per second, process and op (the recorder moves each
 *               finished second out, so the table holds a few seconds).
 * Memory is fixed however long the job runs. A call that finds prof_calls
 * full is added to prof_lost by op (its totals stay exact, its key is lost)
 * and counted; one that finds prof_rates full is counted. Each thread sums
 * its calls in its own state first (struct prof_slot, task_state.h).
 */
#ifndef IOTRACE_PROFILE_H
#define IOTRACE_PROFILE_H

#define IOT_PROF_CALLS_MAX 131072
#define IOT_PROF_RATES_MAX 16384

const volatile bool profile_mode = false;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IOT_PROF_CALLS_MAX);
	__type(key, struct iot_prof_key);
	__type(value, struct iot_prof_val);
} prof_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IOT_PROF_RATES_MAX);
	__type(key, struct iot_prof_rate_key);
	__type(value, struct iot_prof_rate_val);
} prof_rates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOT_OP_COUNT);
	__type(key, __u32);
	__type(value, struct iot_prof_val);
} prof_lost SEC(".maps");

/* Files whose name was written (profile mode writes an open's record only
 * for a file it has not named yet). LRU: a forgotten file is named again. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct file_key);
	__type(value, __u8);
} prof_named SEC(".maps");

/* Bucket of v: 0 for 0, 1 for 1, k >= 2 for (2^(k-2), 2^(k-1)] (a power
 * of two is its bucket's top: 4096 is in (2048, 4096]); at most 63. */
static __always_inline __u8 log2_bucket(__u64 v)
{
	__u8 n = 0;

	if (v <= 1)
		return v;
	v -= 1;   /* floor(log2(v - 1)) + 2 */
	if (v >> 32) { n += 32; v >>= 32; }
	if (v >> 16) { n += 16; v >>= 16; }
	if (v >> 8) { n += 8; v >>= 8; }
	if (v >> 4) { n += 4; v >>= 4; }
	if (v >> 2) { n += 2; v >>= 2; }
	if (v >> 1) { n += 1; }
	return n + 2 > 63 ? 63 : n + 2;
}

/* A slot's sums reach the shared tables within this long of its first
 * call (at the thread's next call; an idle thread's at its exit, or at the
 * end of the trace). */
#define IOT_PROF_HOLD_NS 1000000000ll

/* A slot's calls, the slot emptied (0: it was empty, or another flush took
 * it). An atomic exchange: when tracing stops, the thread's exit and the
 * recorder's iterator (iot_prof_flush) may flush the same slot at once, and
 * only the one that takes its calls adds it. */
static __always_inline __u64 take_calls(__u64 *calls)
{
	return *calls ? __sync_lock_test_and_set(calls, 0) : 0;
}

/* Adds a thread's sums for one key to prof_calls (to prof_lost by op, and
 * counted, when the table is full) and empties the slot. */
static __always_inline void prof_calls_flush(struct prof_slot *s)
{
	struct iot_prof_val *v, zero = { .fs_magic = s->v.fs_magic, .imode = s->v.imode };
	__u32 idx = s->k.op;
	__u64 calls = take_calls(&s->v.calls);

	if (!calls)
		return;
	v = lookup_or_init(&prof_calls, &s->k, &zero);
	if (v) {
		__sync_fetch_and_add(&v->calls, calls);
		if (s->v.errors)
			__sync_fetch_and_add(&v->errors, s->v.errors);
		if (s->v.bytes)
			__sync_fetch_and_add(&v->bytes, s->v.bytes);
		if (s->v.req_bytes)
			__sync_fetch_and_add(&v->req_bytes, s->v.req_bytes);
		__sync_fetch_and_add(&v->dur_ns, s->v.dur_ns);
		if (s->v.cache_bytes)
			__sync_fetch_and_add(&v->cache_bytes, s->v.cache_bytes);
	} else {
		count_add(IOT_CNT_PROF_OVERFLOW, calls);
		v = bpf_map_lookup_elem(&prof_lost, &idx);
		if (v) {   /* per CPU: no other writer */
			v->calls += calls;
			v->errors += s->v.errors;
			v->bytes += s->v.bytes;
			v->req_bytes += s->v.req_bytes;
			v->dur_ns += s->v.dur_ns;
			v->cache_bytes += s->v.cache_bytes;
		}
	}
}

/* The same for a thread's sums of one second, process and op. */
static __always_inline void prof_rate_flush(struct prof_rate_slot *s)
{
	struct iot_prof_rate_val *r, zero = {};
	__u64 calls = take_calls(&s->v.calls);

	if (!calls)
		return;
	r = lookup_or_init(&prof_rates, &s->k, &zero);
	if (r) {
		__sync_fetch_and_add(&r->calls, calls);
		if (s->v.bytes)
			__sync_fetch_and_add(&r->bytes, s->v.bytes);
		__sync_fetch_and_add(&r->dur_ns, s->v.dur_ns);
		if (s->v.cache_bytes)
			__sync_fetch_and_add(&r->cache_bytes, s->v.cache_bytes);
	} else {
		count_add(IOT_CNT_PROF_RATE_LOST, calls);
	}
}

/* A thread's sums, all of them (its exit, the end of the trace). */
static __always_inline void profile_flush_thread(struct inflight *st)
{
	st->prof_busy = 1;
	barrier();
	prof_calls_flush(&st->prof[0]);
	prof_calls_flush(&st->prof[1]);
	prof_rate_flush(&st->prof_rate[0]);
	prof_rate_flush(&st->prof_rate[1]);
	barrier();
	st->prof_busy = 0;
}

/* One call straight into the shared tables, for a program that runs nested
 * in one of the thread's own while that one changes the slots. Built in a
 * per-CPU scratch slot (the stack has no room): a program cannot nest in
 * itself, and the nested ones (lock contention inside a hash update) do not
 * nest in each other. */
struct prof_nested {
	struct prof_slot s;
	struct prof_rate_slot r;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct prof_nested);
} prof_nested SEC(".maps");

static __always_inline void profile_add_shared(const struct iot_prof_key *k, __u32 magic,
					       __u16 imode, __s64 ret, __u64 bytes, __u64 req,
					       __u64 dur, __u64 cache, __u32 sec)
{
	__u32 zero = 0;
	struct prof_nested *n = bpf_map_lookup_elem(&prof_nested, &zero);

	if (!n)
		return;
	n->s.k = *k;
	n->s.v.calls = 1;
	n->s.v.errors = ret < 0;
	n->s.v.bytes = bytes;
	n->s.v.req_bytes = req;
	n->s.v.dur_ns = dur;
	n->s.v.cache_bytes = cache;
	n->s.v.fs_magic = magic;
	n->s.v.imode = imode;
	prof_calls_flush(&n->s);
	n->r.k.sec = sec;
	n->r.k.pid = k->pid;
	n->r.k.op = k->op;
	n->r.k.pad = 0;
	n->r.k.pad2 = 0;
	n->r.v.calls = 1;
	n->r.v.bytes = bytes;
	n->r.v.dur_ns = dur;
	n->r.v.cache_bytes = cache;
	prof_rate_flush(&n->r);
}

static __always_inline bool prof_key_eq(const struct iot_prof_key *a, const struct iot_prof_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2];
}

static __always_inline bool prof_rate_key_eq(const struct iot_prof_rate_key *a,
					     const struct iot_prof_rate_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1];
}

/*
 * Adds one call of the current thread (st: its state). bytes: what it moved
 * (the read/write family's ret > 0); cache: page-cache bytes it added for
 * its file; now: its end. The sums go to the thread's two slots of each
 * table first, plain adds: a loop of calls on one file mostly repeats one or
 * two keys (the latency bucket flips between neighbours), and a hash lookup
 * and six atomic adds per call cost a 4 KiB page-cache read 100 ns.
 */
static __always_inline void profile_add(struct inflight *st, __u32 pid, __u16 op, __u64 ino,
					__u32 dev, __u32 magic, __u16 imode, __u64 req, __s64 ret,
					__u64 bytes, __u64 dur, __u64 cache, __u64 now)
{
	struct iot_prof_key k = {
		.ino = ino, .dev = dev, .pid = pid, .op = op,
		.size_bucket = log2_bucket(req), .lat_bucket = log2_bucket(dur),
	};
	struct iot_prof_rate_key rk = { .sec = now / 1000000000ull, .pid = pid, .op = op };
	struct prof_slot *s;
	struct prof_rate_slot *r;

	if (st->prof_busy) {
		profile_add_shared(&k, magic, imode, ret, bytes, req, dur, cache, rk.sec);
		return;
	}
	st->prof_busy = 1;
	barrier();
	if (st->prof[0].v.calls && prof_key_eq(&st->prof[0].k, &k)) {
		s = &st->prof[0];
	} else if (st->prof[1].v.calls && prof_key_eq(&st->prof[1].k, &k)) {
		s = &st->prof[1];
	} else {
		/* an empty slot, else the one summing longer, makes room */
		if (!st->prof[0].v.calls ||
		    (st->prof[1].v.calls && st->prof[0].since <= st->prof[1].since))
			s = &st->prof[0];
		else
			s = &st->prof[1];
		prof_calls_flush(s);
		s->k = k;
		s->v.errors = 0;
		s->v.bytes = 0;
		s->v.req_bytes = 0;
		s->v.dur_ns = 0;
		s->v.cache_bytes = 0;
		s->v.fs_magic = magic;
		s->v.imode = imode;
		s->since = now;
	}
	s->v.calls++;
	s->v.errors += ret < 0;
	s->v.bytes += bytes;
	s->v.req_bytes += req;
	s->v.dur_ns += dur;
	s->v.cache_bytes += cache;
	if ((__s64)(now - st->prof[0].since) > IOT_PROF_HOLD_NS)
		prof_calls_flush(&st->prof[0]);
	if ((__s64)(now - st->prof[1].since) > IOT_PROF_HOLD_NS)
		prof_calls_flush(&st->prof[1]);

	/* a second that ended goes to the table now: the recorder moves each
	 * finished second out (a late one comes in a second row) */
	if (st->prof_rate[0].k.sec != rk.sec)
		prof_rate_flush(&st->prof_rate[0]);
	if (st->prof_rate[1].k.sec != rk.sec)
		prof_rate_flush(&st->prof_rate[1]);
	if (st->prof_rate[0].v.calls && prof_rate_key_eq(&st->prof_rate[0].k, &rk)) {
		r = &st->prof_rate[0];
	} else if (st->prof_rate[1].v.calls && prof_rate_key_eq(&st->prof_rate[1].k, &rk)) {
		r = &st->prof_rate[1];
	} else {
		r = !st->prof_rate[0].v.calls ? &st->prof_rate[0] : &st->prof_rate[1];
		prof_rate_flush(r);
		r->k = rk;
		r->v.bytes = 0;
		r->v.dur_ns = 0;
		r->v.cache_bytes = 0;
	}
	r->v.calls++;
	r->v.bytes += bytes;
	r->v.dur_ns += dur;
	r->v.cache_bytes += cache;
	barrier();
	st->prof_busy = 0;
}

/* Profile mode: an open's record is written (for its path) when it names a
 * file not named yet, or a directory (later *at calls resolve against it). */
static __always_inline bool prof_name_needed(__u64 ino, __u32 dev, __u16 imode)
{
	struct file_key k = { .ino = ino, .dev = dev };
	__u8 one = 1;

	if (imode == 0040000 /* S_IFDIR */)
		return true;
	if (bpf_map_lookup_elem(&prof_named, &k))
		return false;
	bpf_map_update_elem(&prof_named, &k, &one, BPF_ANY);
	return true;
}

#endif
