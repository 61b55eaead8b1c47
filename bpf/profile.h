/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Profile mode (iotrace run --profile): a call of a traced process is summed
 * in its thread's state (struct prof_slot, task_state.h) instead of being
 * written to the ring buffer. A thread's sums for one key (process, file,
 * op, request-size and latency bucket) go to prof_ring when the key leaves
 * its slot, its second ends, or the thread exits; the recorder adds them up,
 * per key for the whole run and per second, process and op, in tables of
 * fixed size (userspace/recorder/profile.c). A loader's calls change keys
 * often (a file read once is three keys), and a ring record costs about a
 * quarter of a hash table insert in the kernel (250 ns on a 4 KiB read).
 * Sums that find prof_ring full are added to prof_lost by op (totals stay
 * exact, their key and second are lost) and counted.
 */
#ifndef IOTRACE_PROFILE_H
#define IOTRACE_PROFILE_H

const volatile bool profile_mode = false;

/* Sized by the loader; drained by the recorder at least every 50 ms
 * (records wake nobody: at most one per thread and key change). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} prof_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOT_OP_COUNT);
	__type(key, __u32);
	__type(value, struct iot_prof_val);
} prof_lost SEC(".maps");

/* Files whose name was written (profile mode writes an open's record only
 * for a file it has not named yet). Once full, every open of a file not in
 * it is named: more records, no file left unnamed. Not an LRU: its insert
 * takes a free node before it looks for the key, and most opens of a loader
 * insert (files read once). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
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

/* A slot's calls, the slot emptied (0: it was empty, or another flush took
 * it). An atomic exchange: when tracing stops, the thread's exit and the
 * recorder's iterator (iot_prof_flush) may flush the same slot at once, and
 * only the one that takes its calls sends it. */
static __always_inline __u64 take_calls(__u64 *calls)
{
	return *calls ? __sync_lock_test_and_set(calls, 0) : 0;
}

/* Sends a thread's sums for one key to the recorder (to prof_lost by op,
 * and counted, when the ring is full) and empties the slot. */
static __always_inline void prof_flush(struct prof_slot *s)
{
	__u64 calls = take_calls(&s->v.calls);
	struct iot_prof_sums *r;
	struct iot_prof_val *v;
	__u32 idx;

	if (!calls)
		return;
	r = bpf_ringbuf_reserve(&prof_ring, sizeof(*r), 0);
	if (r) {
		r->k = s->k;
		r->v = s->v;
		r->v.calls = calls;
		r->sec = s->sec;
		r->pad = 0;
		bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
		return;
	}
	count_add(IOT_CNT_PROF_OVERFLOW, calls);
	count_add(IOT_CNT_PROF_RATE_LOST, calls);
	idx = s->k.op;
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

/* A thread's sums, all of them (its exit, the end of the trace). */
static __always_inline void profile_flush_thread(struct inflight *st)
{
	st->prof_busy = 1;
	barrier();
	prof_flush(&st->prof[0]);
	prof_flush(&st->prof[1]);
	barrier();
	st->prof_busy = 0;
}

/* One call sent on its own, for a program that runs nested in one of the
 * thread's own while that one changes the slots. Built in a per-CPU scratch
 * slot: a program cannot nest in itself, and the nested ones (lock
 * contention inside the ring's reserve) do not nest in each other. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct prof_slot);
} prof_nested SEC(".maps");

static __always_inline bool prof_key_eq(const struct iot_prof_key *a, const struct iot_prof_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2];
}

/*
 * Adds one call of the current thread (st: its state). bytes: what it moved
 * (the read/write family's ret > 0); cache: page-cache bytes it added for
 * its file; now: its end. The sums go to the thread's two slots, plain
 * adds: a loop of calls on one file mostly repeats one or two keys (the
 * latency bucket flips between neighbours).
 */
static __always_inline void profile_add(struct inflight *st, __u32 pid, __u16 op, __u64 ino,
					__u32 dev, __u32 magic, __u16 imode, __u64 req, __s64 ret,
					__u64 bytes, __u64 dur, __u64 cache, __u64 now)
{
	struct iot_prof_key k = {
		.ino = ino, .dev = dev, .pid = pid, .op = op,
		.size_bucket = log2_bucket(req), .lat_bucket = log2_bucket(dur),
	};
	__u32 sec = now / 1000000000ull;
	bool nested = st->prof_busy;
	struct prof_slot *s;

	if (nested) {
		__u32 zero = 0;

		s = bpf_map_lookup_elem(&prof_nested, &zero);
		if (!s)
			return;
		s->k = k;
		s->sec = sec;
		s->v.calls = 0;
	} else {
		st->prof_busy = 1;
		barrier();
		/* a second that ended goes out now: the recorder moves each
		 * finished second to the spool (a late one comes in a second row) */
		if (st->prof[0].sec != sec)
			prof_flush(&st->prof[0]);
		if (st->prof[1].sec != sec)
			prof_flush(&st->prof[1]);
		if (st->prof[0].v.calls && prof_key_eq(&st->prof[0].k, &k)) {
			s = &st->prof[0];
		} else if (st->prof[1].v.calls && prof_key_eq(&st->prof[1].k, &k)) {
			s = &st->prof[1];
		} else {
			/* an empty slot, else the older key makes room */
			int i = !st->prof[0].v.calls ||
				(st->prof[1].v.calls && st->prof_older == 0) ? 0 : 1;

			s = &st->prof[i];
			prof_flush(s);
			st->prof_older = !i;
			s->k = k;
			s->sec = sec;
		}
	}
	if (!s->v.calls) {
		s->v.errors = 0;
		s->v.bytes = 0;
		s->v.req_bytes = 0;
		s->v.dur_ns = 0;
		s->v.cache_bytes = 0;
		s->v.fs_magic = magic;
		s->v.imode = imode;
		s->v.pad = 0;
	}
	s->v.calls++;
	s->v.errors += ret < 0;
	s->v.bytes += bytes;
	s->v.req_bytes += req;
	s->v.dur_ns += dur;
	s->v.cache_bytes += cache;
	if (nested) {
		prof_flush(s);
		return;
	}
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
	/* one hash operation: the insert fails on a file named before */
	return bpf_map_update_elem(&prof_named, &k, &one, BPF_NOEXIST) != -17 /* EEXIST */;
}

#endif
