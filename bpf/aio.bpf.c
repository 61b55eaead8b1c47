// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace asynchronous I/O: one record per io_uring or libaio request of the
 * traced job, from its submission to its completion.
 *
 * - io_uring: io_uring_submit_req (io_uring_submit_sqe before 6.4) runs
 *   where the request is submitted (the
 *   io_uring_enter caller, or the ring's SQPOLL thread, a thread of the job)
 *   after the request was prepared: its opcode, fd (or registered-file
 *   index), offset and length are read there, and for openat/statx the path.
 *   io_uring_complete runs wherever the completion is posted (often another
 *   context): the request's result and its file (by then assigned, fixed
 *   files included) are read there. Both tracepoints pass the request as
 *   their second-or-first argument on 6.1 and on 6.18 alike; the other
 *   arguments differ, so only the request is used.
 * - libaio: io_submit's iocbs (fd, opcode, offset, bytes) are kept by
 *   (process, iocb address); the io_getevents that reaps an iocb writes its
 *   record with the result. The completion time is the reap (the kernel has
 *   no tracepoint at an aio completion).
 * - Both mark the files they read (at submission) and write in job_files, so
 *   that block.bpf.c charges to the job what kernel threads submit for them.
 * A separate object from iotrace.bpf.c: a kernel without io_uring still
 * traces system calls; it reuses the core's maps. libaio's code is in
 * libaio.h: the core calls it from its syscall tracepoint programs, and the
 * fentry/fexit programs here call it where the core hooks system calls with
 * fentry.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iotrace.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define S_IFMT_ 0170000
#define S_IFREG_ 0100000
/* bits of io_kiocb.flags (an anonymous enum: no CO-RE relocation; the
 * same on 6.1 and 6.18) */
#define REQ_F_FIXED_FILE_ (1ULL << 0)
#define REQ_F_CQE_SKIP_ (1ULL << 6)

/* IORING_OP_* (uapi, stable) */
#define OP_READV 1
#define OP_WRITEV 2
#define OP_FSYNC 3
#define OP_READ_FIXED 4
#define OP_WRITE_FIXED 5
#define OP_OPENAT 18
#define OP_STATX 21
#define OP_READ 22
#define OP_WRITE 23
#define OP_OPENAT2 28

#include "shared_maps.h"
#include "task_state.h"
#include "user_iov.h"

#include "libaio.h"

/* LRU: a request whose completion never shows (cancelled with its ring) is
 * evicted, not leaked; requests told to skip their completion are not
 * entered. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);                /* the io_kiocb */
	__type(value, struct pending);
} uring_reqs SEC(".maps");

struct path_buf {
	char s[IOT_PATH_MAX];
};

/* The path of an io_uring openat/statx, from submission (the kernel frees
 * its copy before the completion). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, struct path_buf);
} uring_paths SEC(".maps");

/* Record plus payload, for openat/statx paths. */
struct big_event {
	struct iot_event ev;
	char s[IOT_PATH_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct big_event);
} aio_scratch SEC(".maps");

/* ---- io_uring ----------------------------------------------------------- */

static __always_inline __u16 uring_op(__u8 code)
{
	switch (code) {
	case OP_READV: case OP_READ_FIXED: case OP_READ:
		return IOT_IO_URING_READ;
	case OP_WRITEV: case OP_WRITE_FIXED: case OP_WRITE:
		return IOT_IO_URING_WRITE;
	case OP_FSYNC:
		return IOT_IO_URING_FSYNC;
	case OP_OPENAT: case OP_OPENAT2:
		return IOT_IO_URING_OPENAT;
	case OP_STATX:
		return IOT_IO_URING_STATX;
	}
	return IOT_IO_URING_OTHER;
}

static __always_inline int uring_submit(struct io_kiocb *req)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), key = (__u64)req;
	struct pending p = {};
	__u64 flags = 0;
	__u8 code;

	p.pid = pid_tgid >> 32;
	if (!traced_tgid(p.pid))
		return 0;
	p.tid = (__u32)pid_tgid;
	p.ts = bpf_ktime_get_ns();
	code = BPF_CORE_READ(req, opcode);
	p.code = code;
	p.op = uring_op(code);
	p.fd = BPF_CORE_READ(req, cqe.fd);
	p.dirfd = -1;
	p.off = -1;
	/* io_req_flags_t is 32 bits on 6.1, 64 on 6.18: read its own size */
	bpf_probe_read_kernel(&flags, bpf_core_field_size(req->flags), &req->flags);
	if (flags & REQ_F_FIXED_FILE_)
		p.eflags |= IOT_EF_FIXED_FILE;
	if (flags & REQ_F_CQE_SKIP_) {
		count(IOT_CNT_ASYNC_LOST);   /* no completion will show */
		return 0;
	}
	if (p.op == IOT_IO_URING_READ || p.op == IOT_IO_URING_WRITE) {
		struct io_rw *rw = (void *)&req->cmd;
		__u64 addr = BPF_CORE_READ(rw, addr);
		__u32 len = BPF_CORE_READ(rw, len);

		p.off = BPF_CORE_READ(rw, kiocb.ki_pos);
		if (code == OP_READV || code == OP_WRITEV)
			p.len = iov_bytes(addr, len, &p.eflags);
		else
			p.len = len;
		/* the file is assigned at issue, after this tracepoint: looked
		 * up by its fd (a registered file's read is marked at its
		 * completion); the SQPOLL thread shares the job's fd table */
		if (p.op == IOT_IO_URING_READ && !(flags & REQ_F_FIXED_FILE_)) {
			struct iot_event id = {};

			file_identity(fd_to_file(bpf_get_current_task_btf(), p.fd), &id);
			mark_request_file(p.pid, &id, IOT_JOB_READ);
		}
	} else if (p.op == IOT_IO_URING_FSYNC) {
		struct io_sync *sy = (void *)&req->cmd;

		p.off = BPF_CORE_READ(sy, off);
		p.len = BPF_CORE_READ(sy, len);
	} else if (p.op == IOT_IO_URING_OPENAT || p.op == IOT_IO_URING_STATX) {
		struct filename *fn;
		__u32 zero = 0;
		struct big_event *b = bpf_map_lookup_elem(&aio_scratch, &zero);

		if (p.op == IOT_IO_URING_OPENAT) {
			struct io_open *o = (void *)&req->cmd;
			p.dirfd = BPF_CORE_READ(o, dfd);
			fn = BPF_CORE_READ(o, filename);
		} else {
			struct io_statx *sx = (void *)&req->cmd;
			p.dirfd = BPF_CORE_READ(sx, dfd);
			fn = BPF_CORE_READ(sx, filename);
		}
		p.fd = -1;
		if (b && fn) {
			const char *name = BPF_CORE_READ(fn, name);
			if (bpf_probe_read_kernel_str(b->s, sizeof(b->s), name) > 0)
				bpf_map_update_elem(&uring_paths, &key, b->s, BPF_ANY);
		}
	}
	if (bpf_map_update_elem(&uring_reqs, &key, &p, BPF_ANY))
		count(IOT_CNT_ASYNC_LOST);
	return 0;
}

/* 6.4 and later */
SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(iot_uring_submit, struct io_kiocb *req)
{
	return uring_submit(req);
}

/* 6.0 to 6.3: the same tracepoint under its old name, (req, force_nonblock)
 * (the loader checks that its first argument is the request) */
SEC("tp_btf/io_uring_submit_sqe")
int BPF_PROG(iot_uring_submit_sqe, struct io_kiocb *req)
{
	return uring_submit(req);
}

/* 6.1: (ctx, req, user_data, res, cflags, extra1, extra2); 6.18: (ctx, req,
 * cqe). The request has the posted result and user_data in both. */
SEC("tp_btf/io_uring_complete")
int BPF_PROG(iot_uring_complete, void *ctx_, void *req_)
{
	struct io_kiocb *req = req_;
	__u64 key = (__u64)req_;
	struct pending *p;
	struct iot_event *e;
	struct big_event *b = NULL;
	__u32 len = 0, zero = 0;

	if (!req_)
		return 0;   /* a CQE of the ring itself (no request) */
	p = bpf_map_lookup_elem(&uring_reqs, &key);
	if (!p)
		return 0;
	if (p->op == IOT_IO_URING_OPENAT || p->op == IOT_IO_URING_STATX) {
		struct path_buf *path = bpf_map_lookup_elem(&uring_paths, &key);

		b = bpf_map_lookup_elem(&aio_scratch, &zero);
		if (!b)
			goto out;
		e = &b->ev;
		if (path) {
			long n = bpf_probe_read_kernel_str(b->s, sizeof(b->s), path->s);
			if (n > 0)
				len = n;
			bpf_map_delete_elem(&uring_paths, &key);
		}
	} else {
		e = reserve_event();
		if (!e)
			goto out;
	}
	blank_event(e, p->op, p->pid, p->tid);
	e->ts_ns = p->ts;
	e->dur_ns = bpf_ktime_get_ns() - p->ts;
	e->ret = BPF_CORE_READ(req, cqe.res);
	e->arg = BPF_CORE_READ(req, cqe.user_data);
	e->fd = p->fd;
	e->dirfd = p->dirfd;
	e->offset = p->off;
	e->req_bytes = p->len;
	e->flags = p->code;
	e->eflags = p->eflags;
	if (p->op != IOT_IO_URING_OPENAT && p->op != IOT_IO_URING_STATX && p->op != IOT_IO_URING_OTHER)
		file_identity(BPF_CORE_READ(req, file), e);
	/* a write's writeback comes after it */
	if (p->op == IOT_IO_URING_READ || p->op == IOT_IO_URING_WRITE)
		mark_request_file(p->pid, e, p->op == IOT_IO_URING_READ ? IOT_JOB_READ : IOT_JOB_WROTE);
	if (b) {
		len &= IOT_PATH_MAX - 1;
		e->str_len = len;
		if (ring_output(b, sizeof(b->ev) + len, 0))
			count(IOT_CNT_DROPS);
	} else {
		bpf_ringbuf_submit(e, 0);
	}
out:
	bpf_map_delete_elem(&uring_reqs, &key);
	return 0;
}

/* ---- libaio through fentry/fexit (the core's hooks are fentry) ------------ */

SEC("fentry/__x64_sys_io_submit")
int BPF_PROG(iot_aio_submit_fe, struct pt_regs *regs)
{
	return submit_enter(regs->si, regs->dx);
}

SEC("fexit/__x64_sys_io_submit")
int BPF_PROG(iot_aio_submit_exit_fe, struct pt_regs *regs, long ret)
{
	return submit_exit(ret);
}

/* the fourth argument of a system call is in r10 */
SEC("fentry/__x64_sys_io_getevents")
int BPF_PROG(iot_aio_getevents_fe, struct pt_regs *regs)
{
	return getevents_enter(regs->r10);
}

SEC("fentry/__x64_sys_io_pgetevents")
int BPF_PROG(iot_aio_pgetevents_fe, struct pt_regs *regs)
{
	return getevents_enter(regs->r10);
}

SEC("fexit/__x64_sys_io_getevents")
int BPF_PROG(iot_aio_getevents_exit_fe, struct pt_regs *regs, long ret)
{
	return getevents_exit(ret);
}

SEC("fexit/__x64_sys_io_pgetevents")
int BPF_PROG(iot_aio_pgetevents_exit_fe, struct pt_regs *regs, long ret)
{
	return getevents_exit(ret);
}
