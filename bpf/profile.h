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
 * and counted; one that finds prof_rates full is counted.
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

static __always_inline void prof_val_add(struct iot_prof_val *v, __s64 ret, __u64 bytes,
					 __u64 req, __u64 dur, __u64 cache)
{
	__sync_fetch_and_add(&v->calls, 1);
	if (ret < 0)
		__sync_fetch_and_add(&v->errors, 1);
	if (bytes)
		__sync_fetch_and_add(&v->bytes, bytes);
	if (req)
		__sync_fetch_and_add(&v->req_bytes, req);
	__sync_fetch_and_add(&v->dur_ns, dur);
	if (cache)
		__sync_fetch_and_add(&v->cache_bytes, cache);
}

/*
 * Adds one call. bytes: what it moved (the read/write family's ret > 0);
 * cache: page-cache bytes it added for its file; now: its end.
 */
static __always_inline void profile_add(__u32 pid, __u16 op, __u64 ino, __u32 dev,
					__u32 magic, __u16 imode, __u64 req, __s64 ret,
					__u64 bytes, __u64 dur, __u64 cache, __u64 now)
{
	struct iot_prof_key k = {
		.ino = ino, .dev = dev, .pid = pid, .op = op,
		.size_bucket = log2_bucket(req), .lat_bucket = log2_bucket(dur),
	};
	struct iot_prof_rate_key rk = { .sec = now / 1000000000ull, .pid = pid, .op = op };
	struct iot_prof_val *v, zero = { .fs_magic = magic, .imode = imode };
	struct iot_prof_rate_val *r, rzero = {};
	__u32 idx = op;

	v = bpf_map_lookup_elem(&prof_calls, &k);
	if (!v) {
		bpf_map_update_elem(&prof_calls, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&prof_calls, &k);
	}
	if (v) {
		prof_val_add(v, ret, bytes, req, dur, cache);
	} else {
		count(IOT_CNT_PROF_OVERFLOW);
		v = bpf_map_lookup_elem(&prof_lost, &idx);
		if (v) {   /* per CPU: no other writer */
			v->calls++;
			v->errors += ret < 0;
			v->bytes += bytes;
			v->req_bytes += req;
			v->dur_ns += dur;
			v->cache_bytes += cache;
		}
	}

	r = bpf_map_lookup_elem(&prof_rates, &rk);
	if (!r) {
		bpf_map_update_elem(&prof_rates, &rk, &rzero, BPF_NOEXIST);
		r = bpf_map_lookup_elem(&prof_rates, &rk);
	}
	if (!r) {
		count(IOT_CNT_PROF_RATE_LOST);
		return;
	}
	__sync_fetch_and_add(&r->calls, 1);
	if (bytes)
		__sync_fetch_and_add(&r->bytes, bytes);
	__sync_fetch_and_add(&r->dur_ns, dur);
	if (cache)
		__sync_fetch_and_add(&r->cache_bytes, cache);
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
