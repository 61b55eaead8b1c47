// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The record rings: one BPF ring buffer per CPU (CPUs share them round-robin
 * past RINGS_MAX), so that CPUs recording at once do not queue for one ring's
 * lock, and the drain that puts their records back in one order.
 *
 * Order matters: the trace's model replays opens, dups, closes, forks, execs
 * and chdirs in record order, and a child's first open must come after the
 * fork that gave it its parent's descriptors and directory. A record is made
 * when its call ends (ts + dur), so one ring held them in end order. Here each
 * ring's records are held until every ring has been read past their end
 * time, then merged by it: a record is submitted within microseconds of its
 * end, so once a drain that began at T is done, everything that ended before
 * T - HOLD_NS has been read. Memory: the records of the last HOLD_NS and one
 * poll interval, a few MiB at millions of records a second.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include "iotrace.h"
#include "rings.h"

struct ring_plan rings_plan(int ringbuf_mb, int ncpu)
{
	struct ring_plan p = { .count = 1, .ncpu = ncpu > 0 ? ncpu : 1 };
	__u64 total = (__u64)ringbuf_mb << 20;

	/* each ring at least 256 KiB: a smaller one fills between two reads */
	while (p.count * 2 <= p.ncpu && p.count * 2 <= RINGS_MAX &&
	       total / (p.count * 2) >= 256 << 10)
		p.count *= 2;
	p.bytes = (__u32)(total / p.count);
	return p;
}

static int ring_fds[RINGS_MAX];
static int nrings;

int rings_fill(const struct ring_plan *plan, int outer_fd)
{
	rings_close();   /* a second load (another way into the kernel) */
	for (int i = 0; i < plan->count; i++) {
		ring_fds[i] = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "iot_ring", 0, 0, plan->bytes,
					     NULL);
		if (ring_fds[i] < 0)
			return -errno;
		nrings = i + 1;
	}
	for (__u32 cpu = 0; cpu < (__u32)plan->ncpu; cpu++)
		if (bpf_map_update_elem(outer_fd, &cpu, &ring_fds[cpu % plan->count], BPF_ANY))
			return -errno;
	return 0;
}

/* A ring's records read but not yet handed on: [end ns][size][record]... */
struct held {
	char *buf;
	size_t head, len, cap;
};

#define HOLD_NS 20000000ull          /* 20 ms */
#define ALIGN8(n) (((n) + 7) & ~(size_t)7)

static struct held held[RINGS_MAX];
static ring_buffer_sample_fn out_fn;
static __u64 lost;

static __u64 drain_began;   /* rings_release's last bound + HOLD_NS */

static __u64 end_ns(const void *data, size_t size)
{
	const struct iot_event *e = data;
	__u64 end;

	/* too short to be a record: handed on at once (and counted there) */
	if (size < sizeof(*e))
		return 0;
	/* an end later than the read (a damaged record) would hold its ring's
	 * records back until the trace ends: at most a second here */
	end = e->ts_ns + e->dur_ns;
	return drain_began && end > drain_began + 1000000000ull ? drain_began + 1000000000ull : end;
}

static int hold(void *ctx, void *data, size_t size)
{
	struct held *h = &held[(long)ctx];
	size_t need = 16 + ALIGN8(size);

	if (nrings == 1)        /* one ring: its own order is the order */
		return out_fn(NULL, data, size);
	if (h->len + need > h->cap) {
		size_t cap = h->cap ? h->cap : 1 << 20;
		char *b;
		if (h->head) {   /* what was handed on makes room first */
			memmove(h->buf, h->buf + h->head, h->len - h->head);
			h->len -= h->head;
			h->head = 0;
		}
		while (h->len + need > cap)
			cap *= 2;
		if (cap != h->cap) {
			b = realloc(h->buf, cap);
			if (!b) {
				lost++;
				return 0;
			}
			h->buf = b;
			h->cap = cap;
		}
	}
	*(__u64 *)(h->buf + h->len) = end_ns(data, size);
	*(__u64 *)(h->buf + h->len + 8) = size;
	memcpy(h->buf + h->len + 16, data, size);
	h->len += need;
	return 0;
}

void rings_release(__u64 before_ns)
{
	if (before_ns != ~0ull)
		drain_began = before_ns + HOLD_NS;
	for (;;) {
		int best = -1;
		__u64 best_end = before_ns;

		for (int i = 0; i < nrings; i++) {
			struct held *h = &held[i];
			if (h->head < h->len && *(__u64 *)(h->buf + h->head) < best_end) {
				best = i;
				best_end = *(__u64 *)(h->buf + h->head);
			}
		}
		if (best < 0)
			break;
		struct held *h = &held[best];
		size_t size = *(__u64 *)(h->buf + h->head + 8);
		out_fn(NULL, h->buf + h->head + 16, size);
		h->head += 16 + ALIGN8(size);
		if (h->head == h->len)
			h->head = h->len = 0;
	}
}

struct ring_buffer *rings_reader(ring_buffer_sample_fn out, int extra_fd,
				 ring_buffer_sample_fn extra_fn)
{
	struct ring_buffer *rb;

	out_fn = out;
	rb = ring_buffer__new(ring_fds[0], hold, (void *)0L, NULL);
	if (!rb)
		return NULL;
	for (long i = 1; i < nrings; i++) {
		if (ring_buffer__add(rb, ring_fds[i], hold, (void *)i)) {
			ring_buffer__free(rb);
			return NULL;
		}
	}
	if (extra_fd >= 0 && ring_buffer__add(rb, extra_fd, extra_fn, NULL)) {
		ring_buffer__free(rb);
		return NULL;
	}
	return rb;
}

__u64 rings_lost(void)
{
	return lost;
}

void rings_close(void)
{
	for (int i = 0; i < nrings; i++) {
		close(ring_fds[i]);
		free(held[i].buf);
		held[i] = (struct held){ 0 };
	}
	nrings = 0;
}

__u64 rings_hold_ns(void)
{
	return HOLD_NS;
}
