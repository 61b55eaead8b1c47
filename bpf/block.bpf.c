// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace block side: every block-device request of the traced job, from the
 * submission of its first bio to its completion, with the submitter and the
 * file of its first page.
 *
 * - block_bio_queue runs in the submitter's context: a traced thread's bio is
 *   the job's (its file from the first page's mapping; for O_DIRECT, whose
 *   pages are the job's own memory, the file of the call in flight); a kernel
 *   thread's bio of a file the job read or wrote is the job's (writeback, and
 *   bios an I/O throttle held back and dispatches from a worker, O_DIRECT
 *   ones included: their file is the direct I/O's).
 * - block_split: the front part of a split bio, likewise.
 * - block_rq_issue: the request's head bio names its owner; the request is
 *   kept until block_rq_complete writes the record.
 * A separate object from iotrace.bpf.c so that a kernel without these
 * tracepoints still traces system calls; it reuses the core's maps.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iotrace.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define S_IFREG_ 0100000
#define PAGE_MAPPING_ANON_ 1UL
#define PF_KTHREAD_ 0x00200000

#include "shared_maps.h"
#include "task_state.h"

/* Who a bio or request belongs to, and the file of its first page:
 * struct iot_block_owner (iotrace.h; the recorder reads the requests left
 * at the end). LRU: an entry whose request never comes (a bio merged into
 * another's request, an error path) is evicted, not leaked. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct iot_block_owner);
} bios SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct iot_block_owner);
} requests SEC(".maps");

/* The file a page belongs to (none when anonymous or not a file's page).
 * Returns true when the page is the page cache's (a file's, or the device's
 * own buffers: file-system metadata), false for process memory (O_DIRECT). */
static __always_inline bool page_file(struct page *page, struct iot_block_owner *o)
{
	unsigned long mapping = (unsigned long)BPF_CORE_READ(page, mapping);
	struct address_space *as;
	struct inode *host;

	if (!mapping || (mapping & PAGE_MAPPING_ANON_))
		return false;
	as = (void *)mapping;
	host = BPF_CORE_READ(as, host);
	if (!host)
		return false;
	o->imode = BPF_CORE_READ(host, i_mode) & 0170000;
	if (o->imode != S_IFREG_) {
		o->imode = 0;   /* metadata (the device's own buffers), directories */
		return true;
	}
	o->ino = BPF_CORE_READ(host, i_ino);
	o->dev = BPF_CORE_READ(host, i_sb, s_dev);
	o->magic = BPF_CORE_READ(host, i_sb, s_magic);
	return true;
}

/* iomap's direct-I/O completion: its bios' bi_private is the struct
 * iomap_dio, whose kiocb names the file (0 where the kernel lacks it). */
extern const void iomap_dio_bio_end_io __ksym __weak;

static __always_inline bool dio_file(struct bio *bio, struct iot_block_owner *o)
{
	struct iomap_dio *dio;
	struct inode *host;

	if (!&iomap_dio_bio_end_io ||
	    (void *)BPF_CORE_READ(bio, bi_end_io) != (void *)&iomap_dio_bio_end_io)
		return false;
	dio = BPF_CORE_READ(bio, bi_private);
	host = BPF_CORE_READ(dio, iocb, ki_filp, f_inode);
	if (!host || (BPF_CORE_READ(host, i_mode) & 0170000) != S_IFREG_)
		return false;
	o->imode = S_IFREG_;
	o->ino = BPF_CORE_READ(host, i_ino);
	o->dev = BPF_CORE_READ(host, i_sb, s_dev);
	o->magic = BPF_CORE_READ(host, i_sb, s_magic);
	return true;
}

static __always_inline int remember_bio(struct bio *bio)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), key = (__u64)bio;
	struct iot_block_owner o = {};
	struct page *page = BPF_CORE_READ(bio, bi_io_vec, bv_page);
	bool cached = false;

	o.pid = pid_tgid >> 32;
	o.tid = (__u32)pid_tgid;
	if (page)
		cached = page_file(page, &o);
	if (traced_tgid(o.pid)) {
		/* O_DIRECT: the job's own pages; the file is the direct I/O's
		 * (iomap: ext4, xfs...; io_uring and libaio included), else the
		 * call's in flight */
		struct inflight *st = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(),
							   0, 0);
		if (!cached && page && dio_file(bio, &o))
			;
		else if (!cached && page && st && st->op && (st->imode & 0170000) == S_IFREG_) {
			o.ino = st->ino;
			o.dev = st->dev;
			o.magic = st->magic;
			o.imode = S_IFREG_;
		}
	} else {
		struct file_key k = {};
		struct task_struct *cur = bpf_get_current_task_btf();
		bool write = (BPF_CORE_READ(bio, bi_opf) & 0xff) == 1;   /* REQ_OP_WRITE */
		__u64 *job;

		/* only kernel threads: another process's reads of the job's files
		 * are that process's; and writeback only of files the job wrote */
		if (!(cur->flags & PF_KTHREAD_))
			return 0;
		/* an O_DIRECT bio (the job's own pages) that an I/O throttle held
		 * back and a worker dispatches: the file is the direct I/O's */
		if (!cached && page && !o.ino)
			dio_file(bio, &o);
		if (!o.ino)
			return 0;
		k.ino = o.ino;
		k.dev = o.dev;
		job = bpf_map_lookup_elem(&job_files, &k);
		if (!job || !(*job & (write ? IOT_JOB_WROTE : IOT_JOB_READ)))
			return 0;
		o.pid = (__u32)*job;
		o.tid = 0;
		o.eflags = IOT_EF_KTHREAD;
	}
	o.queued_ts = bpf_ktime_get_ns();
	o.bdev = BPF_CORE_READ(bio, bi_bdev, bd_dev);
	bpf_map_update_elem(&bios, &key, &o, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(iot_bio_queue, struct bio *bio)
{
	return remember_bio(bio);
}

/* A bio larger than the device takes is split, in the submitter's context:
 * the front part (a new bio, the one passed here) goes on without passing
 * block_bio_queue again. */
SEC("tp_btf/block_split")
int BPF_PROG(iot_bio_split, struct bio *split, unsigned int new_sector)
{
	/* The front part is chained to the rest (bi_private), whose owner was
	 * worked out when it was queued: a throttled O_DIRECT bio split in a
	 * worker has neither a page-cache page nor its direct I/O's end_io
	 * to name its file. (bi_private of an unchained bio is not a bio.) */
	__u64 parent = (__u64)BPF_CORE_READ(split, bi_private), key = (__u64)split;
	struct iot_block_owner *o = parent ? bpf_map_lookup_elem(&bios, &parent) : NULL;

	if (o) {
		struct iot_block_owner copy = *o;

		copy.queued_ts = bpf_ktime_get_ns();
		bpf_map_update_elem(&bios, &key, &copy, BPF_ANY);
		return 0;
	}
	return remember_bio(split);
}

/* A block_rq record of what is known of a request: its owner, where and
 * how much it was issued with. */
static __always_inline void fill_block_record(struct iot_event *e, const struct iot_block_owner *o)
{
	blank_event(e, IOT_BLOCK_RQ, o->pid, o->tid);
	e->ts_ns = o->issue_ts;
	e->arg = o->issue_ts - o->queued_ts;
	e->offset = (__s64)(o->sector << 9);
	e->req_bytes = o->bytes;
	e->flags = o->cmd_flags;
	e->mode = o->bdev;
	e->ino = o->ino;
	e->dev = o->dev;
	e->fs_magic = o->magic;
	e->imode = o->imode;
	e->eflags = o->eflags;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(iot_rq_issue, struct request *rq)
{
	__u64 bio = (__u64)BPF_CORE_READ(rq, bio), key = (__u64)rq;
	struct iot_block_owner *o, *old;
	__u32 bdev;

	if (!bio)
		return 0;
	o = bpf_map_lookup_elem(&bios, &bio);
	if (!o)
		return 0;   /* not the job's, or issued again after a requeue */
	/* A new request in a slot whose last request of the job never showed
	 * its completion: the kernel does not always run this object's
	 * completion probe (seen on 6.18 for completions run in softirq on
	 * the way out of another task's bh-disabled section, while ftrace's
	 * own event fires). Recorded without it, not lost. */
	old = bpf_map_lookup_elem(&requests, &key);
	if (old) {
		struct iot_event *e;

		/* counted before the reservation: a call between the
		 * reservation's two NULL checks made 6.1's verifier take the
		 * second for a path that keeps the reservation */
		count(IOT_CNT_BLOCK_NO_COMPLETION);
		e = reserve_event();
		if (e) {
			fill_block_record(e, old);
			e->eflags |= IOT_EF_NO_COMPLETION;
			bpf_ringbuf_submit(e, 0);
		}
	}
	o->issue_ts = bpf_ktime_get_ns();
	bdev = BPF_CORE_READ(rq, part, bd_dev);
	if (bdev)
		o->bdev = bdev;
	o->sector = BPF_CORE_READ(rq, __sector);
	o->bytes = BPF_CORE_READ(rq, __data_len);
	o->cmd_flags = BPF_CORE_READ(rq, cmd_flags);
	if (bpf_map_update_elem(&requests, &key, o, BPF_ANY))
		count(IOT_CNT_BLOCK_LOST);
	bpf_map_delete_elem(&bios, &bio);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(iot_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq, now = bpf_ktime_get_ns();
	struct iot_block_owner *o = bpf_map_lookup_elem(&requests, &key);
	struct iot_event *e;

	if (!o)
		return 0;
	e = reserve_event();
	if (!e) {
		bpf_map_delete_elem(&requests, &key);
		return 0;
	}
	fill_block_record(e, o);
	e->dur_ns = now - o->issue_ts;
	e->offset = (__s64)BPF_CORE_READ(rq, __sector) << 9;
	e->req_bytes = nr_bytes;
	e->ret = error ? -5 /* EIO */ : 0;
	e->flags = BPF_CORE_READ(rq, cmd_flags);
	bpf_ringbuf_submit(e, 0);
	/* a partial completion leaves the rest of the request in flight */
	if (nr_bytes >= BPF_CORE_READ(rq, __data_len)) {
		bpf_map_delete_elem(&requests, &key);
	} else {
		o->issue_ts = now;
		o->sector += nr_bytes >> 9;
		o->bytes -= nr_bytes;
	}
	return 0;
}
