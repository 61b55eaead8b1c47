/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Maps both BPF objects use: iotrace.bpf.c creates them, and the recorder
 * hands the same maps to netfs.bpf.c (bpf_map__reuse_fd) before it loads.
 */
#ifndef IOTRACE_SHARED_MAPS_H
#define IOTRACE_SHARED_MAPS_H

/* Traced tgids. Value unused (1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} traced SEC(".maps");

static __always_inline bool traced_tgid(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced, &tgid) != NULL;
}

/*
 * Every record, of all objects, goes to the ring of the CPU it is made on:
 * the outer array has a slot per possible CPU, which the loader fills with a
 * ring each, or with rings that several CPUs share where there are many
 * (userspace/recorder/rings.c, which also puts the records back in one
 * order). One ring for all CPUs was one lock for all: with 8 threads of
 * preads on 16 CPUs nearly every record waited for it, and a full trace
 * topped out at 2.2 M records a second.
 */
struct ring_shard {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);   /* a template: the loader makes the rings */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);         /* set by the loader: the possible CPUs */
	__type(key, __u32);
	__array(values, struct ring_shard);
} rings SEC(".maps");

/* This CPU's ring (NULL only if the loader left its slot empty). A program
 * runs on one CPU throughout, so a record reserved here is submitted here. */
static __always_inline void *cpu_ring(void)
{
	__u32 cpu = bpf_get_smp_processor_id();

	return bpf_map_lookup_elem(&rings, &cpu);
}

/* bpf_ringbuf_output to this CPU's ring (the helper's return, or -1). */
static __always_inline long ring_output(void *data, __u64 size, __u64 flags)
{
	void *rb = cpu_ring();

	return rb ? bpf_ringbuf_output(rb, data, size, flags) : -1;
}

/* enum iot_counter, per CPU */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOT_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += n;
}

static __always_inline void count(__u32 idx)
{
	count_add(idx, 1);
}

/* A hash map's value for key, inserted as init first if absent (another
 * CPU may insert it between the two: then that one is returned). NULL when
 * the map is full. */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *init)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (!v) {
		bpf_map_update_elem(map, key, init, BPF_NOEXIST);
		v = bpf_map_lookup_elem(map, key);
	}
	return v;
}

/* A record with no file, offset or dirfd: the base of the non-syscall events. */
static __always_inline void blank_event(struct iot_event *e, __u16 op, __u32 pid, __u32 tid)
{
	__builtin_memset(e, 0, sizeof(*e));
	e->op = op;
	e->pid = pid;
	e->tid = tid;
	e->offset = -1;
	e->fd = -1;
	e->dirfd = -1;
}

/* A ring-buffer record, or NULL with the drop counted. */
static __always_inline struct iot_event *reserve_event(void)
{
	void *rb = cpu_ring();
	struct iot_event *e = rb ? bpf_ringbuf_reserve(rb, sizeof(*e), 0) : NULL;

	if (!e)
		count(IOT_CNT_DROPS);
	return e;
}

#endif
