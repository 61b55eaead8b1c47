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
 * traces system calls; it reuses the core's maps.
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

/* IOCB_CMD_* (uapi) */
#define CMD_PREAD 0
#define CMD_PWRITE 1
#define CMD_FSYNC 2
#define CMD_FDSYNC 3
#define CMD_PREADV 7
#define CMD_PWRITEV 8

#define AIO_MAX_BATCH 256   /* iocbs of one io_submit, events of one io_getevents */

#include "shared_maps.h"
#include "task_state.h"
#include "user_iov.h"

/* One request between submission and completion. */
struct pending {
	__u64 ts;
	__s64 off;
	__u64 len;
	__u64 ino;        /* libaio: the fd's file at submission */
	__u32 dev;
	__u32 magic;
	__u32 pid;
	__u32 tid;
	__s32 fd;
	__s32 dirfd;
	__u16 op;
	__u16 eflags;
	__u16 imode;
	__u16 code;       /* IORING_OP_* or IOCB_CMD_* */
};

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

struct aio_key {
	__u64 iocb;       /* the iocb's user address */
	__u32 pid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct aio_key);
	__type(value, struct pending);
} aio_reqs SEC(".maps");

/* A thread's io_submit or io_getevents in flight: its array argument. */
struct aio_call {
	__u64 ts;
	__u64 arr;        /* iocb ** (io_submit) or struct io_event * (io_getevents) */
	__u64 nr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);                /* tid */
	__type(value, struct aio_call);
} aio_calls SEC(".maps");

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

/* The last file whose identity this CPU read: a ring or an aio context
 * mostly works on the same few files, and reading an identity is six
 * dependent kernel reads. Keyed by the file and its inode pointer both. */
struct file_cache {
	__u64 file, inode, ino;
	__u32 dev, magic;
	__u16 imode;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct file_cache);
} last_file SEC(".maps");

/* The identity of a struct file into a record's ino/dev/fs_magic/imode. */
static __always_inline void file_identity(struct file *f, struct iot_event *e)
{
	struct file_cache *c;
	struct inode *inode;
	__u32 zero = 0;

	if (!f)
		return;
	/* read each time, not cached: fcntl(F_SETFL) can turn it on or off */
	if (BPF_CORE_READ(f, f_flags) & IOT_O_DIRECT)
		e->eflags |= IOT_EF_DIRECT;
	inode = BPF_CORE_READ(f, f_inode);
	if (!inode)
		return;
	c = bpf_map_lookup_elem(&last_file, &zero);
	if (c && c->file == (__u64)f && c->inode == (__u64)inode) {
		e->imode = c->imode;
		e->ino = c->ino;
		e->dev = c->dev;
		e->fs_magic = c->magic;
		return;
	}
	e->imode = BPF_CORE_READ(inode, i_mode) & S_IFMT_;
	e->ino = BPF_CORE_READ(inode, i_ino);
	e->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	e->fs_magic = BPF_CORE_READ(inode, i_sb, s_magic);
	if (c) {
		c->file = (__u64)f;
		c->inode = (__u64)inode;
		c->imode = e->imode;
		c->ino = e->ino;
		c->dev = e->dev;
		c->magic = e->fs_magic;
	}
}

/* A task's open file by its fd (NULL where there is none). */
static __always_inline struct file *fd_to_file(struct task_struct *task, int fd)
{
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *f = NULL;

	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

/* The last file this CPU marked in job_files, and how. */
struct marked {
	__u64 ino;
	__u32 dev;
	__u32 tgid;
	__u64 how;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct marked);
} last_marked SEC(".maps");

/*
 * A regular file a request of the job reads or writes: what kernel threads
 * submit for it is the job's (block.bpf.c): bios an I/O throttle held back
 * and dispatches from a worker while the request waits, and writeback. Reads
 * are marked at submission, before their bios exist. A ring or an aio
 * context mostly works on one file at a time: the last file marked on this
 * CPU is not looked up again.
 */
static __always_inline void mark_job_file(__u32 tgid, const struct iot_event *id, __u64 how)
{
	struct file_key k = {};
	struct marked *m;
	__u64 v = tgid | how, *known;
	__u32 zero = 0;

	if (id->imode != S_IFREG_ || !id->ino)
		return;
	m = bpf_map_lookup_elem(&last_marked, &zero);
	if (m && m->ino == id->ino && m->dev == id->dev && m->tgid == tgid &&
	    (m->how & how) == how)
		return;
	k.ino = id->ino;
	k.dev = id->dev;
	known = bpf_map_lookup_elem(&job_files, &k);
	if (known && (__u32)*known == tgid)
		v |= *known;
	if (!known || *known != v)
		bpf_map_update_elem(&job_files, &k, &v, BPF_ANY);
	if (!m)
		return;
	if (m->ino == id->ino && m->dev == id->dev && m->tgid == tgid) {
		m->how |= how;
	} else {
		m->ino = id->ino;
		m->dev = id->dev;
		m->tgid = tgid;
		m->how = how;
	}
}

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
			mark_job_file(p.pid, &id, IOT_JOB_READ);
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
		mark_job_file(p->pid, e, p->op == IOT_IO_URING_READ ? IOT_JOB_READ : IOT_JOB_WROTE);
	if (b) {
		len &= IOT_PATH_MAX - 1;
		e->str_len = len;
		if (bpf_ringbuf_output(&events, b, sizeof(b->ev) + len, 0))
			count(IOT_CNT_DROPS);
	} else {
		bpf_ringbuf_submit(e, 0);
	}
out:
	bpf_map_delete_elem(&uring_reqs, &key);
	return 0;
}

/* ---- libaio ------------------------------------------------------------- */

static __always_inline __u16 aio_op(__u16 cmd)
{
	switch (cmd) {
	case CMD_PREAD: case CMD_PREADV:
		return IOT_AIO_READ;
	case CMD_PWRITE: case CMD_PWRITEV:
		return IOT_AIO_WRITE;
	case CMD_FSYNC: case CMD_FDSYNC:
		return IOT_AIO_FSYNC;
	}
	return IOT_AIO_OTHER;
}

struct submit_ctx {
	struct aio_call *call;
	struct task_struct *task;
	__u32 pid, tid;
};

static long submit_one(__u32 i, void *data)
{
	struct submit_ctx *c = data;
	struct aio_key k = { .pid = c->pid };
	struct pending p = {};
	struct iot_event id = {};
	struct iocb cb;
	__u64 uptr = 0;

	if (bpf_probe_read_user(&uptr, sizeof(uptr), (void *)(c->call->arr + i * 8)) || !uptr)
		return 1;
	if (bpf_probe_read_user(&cb, sizeof(cb), (void *)uptr))
		return 1;
	k.iocb = uptr;
	p.ts = c->call->ts;
	p.pid = c->pid;
	p.tid = c->tid;
	p.fd = cb.aio_fildes;
	p.dirfd = -1;
	p.code = cb.aio_lio_opcode;
	p.op = aio_op(p.code);
	p.off = p.op == IOT_AIO_READ || p.op == IOT_AIO_WRITE ? cb.aio_offset : -1;
	if (p.code == CMD_PREADV || p.code == CMD_PWRITEV)
		p.len = iov_bytes(cb.aio_buf, cb.aio_nbytes, &p.eflags);
	else if (p.op == IOT_AIO_READ || p.op == IOT_AIO_WRITE)
		p.len = cb.aio_nbytes;
	file_identity(fd_to_file(c->task, p.fd), &id);
	p.eflags |= id.eflags & IOT_EF_DIRECT;
	p.ino = id.ino;
	p.dev = id.dev;
	p.magic = id.fs_magic;
	p.imode = id.imode;
	if (p.op == IOT_AIO_READ || p.op == IOT_AIO_WRITE)
		mark_job_file(p.pid, &id, p.op == IOT_AIO_READ ? IOT_JOB_READ : IOT_JOB_WROTE);
	if (bpf_map_update_elem(&aio_reqs, &k, &p, BPF_ANY))
		count(IOT_CNT_ASYNC_LOST);
	return 0;
}

/* io_submit(ctx, nr, iocbpp): entry. The syscall tracepoints or, where the
 * core object hooks system calls with fentry (no syscall tracepoint may be
 * attached then), fentry/fexit on the syscalls' functions call these. */
static __always_inline int submit_enter(long nr, __u64 arr)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct aio_call call = {};
	struct submit_ctx c = { .pid = pid_tgid >> 32, .tid = (__u32)pid_tgid };

	if (!traced_tgid(c.pid) || nr <= 0)
		return 0;
	call.ts = bpf_ktime_get_ns();
	call.arr = arr;
	call.nr = nr;
	if (nr > AIO_MAX_BATCH) {
		count_add(IOT_CNT_ASYNC_LOST, nr - AIO_MAX_BATCH);
		nr = AIO_MAX_BATCH;
	}
	c.call = &call;
	c.task = bpf_get_current_task_btf();
	bpf_loop(nr, submit_one, &c, 0);
	bpf_map_update_elem(&aio_calls, &c.tid, &call, BPF_ANY);
	return 0;
}

struct unsubmit_ctx {
	__u64 arr;
	__u32 pid;
};

static long forget_one(__u32 i, void *data)
{
	struct unsubmit_ctx *c = data;
	struct aio_key k = { .pid = c->pid };

	if (bpf_probe_read_user(&k.iocb, sizeof(k.iocb), (void *)(c->arr + i * 8)))
		return 1;
	bpf_map_delete_elem(&aio_reqs, &k);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_io_submit")
int iot_aio_submit(struct trace_event_raw_sys_enter *ctx)
{
	return submit_enter(ctx->args[1], ctx->args[2]);
}

SEC("fentry/__x64_sys_io_submit")
int BPF_PROG(iot_aio_submit_fe, struct pt_regs *regs)
{
	return submit_enter(regs->si, regs->dx);
}

/* iocbs past io_submit's result were not submitted: forget them. */
static __always_inline int submit_exit(long done)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct aio_call *call = bpf_map_lookup_elem(&aio_calls, &tid);
	struct unsubmit_ctx c;
	long nr;

	if (!call)
		return 0;
	c.arr = call->arr;
	c.pid = pid_tgid >> 32;
	nr = call->nr > AIO_MAX_BATCH ? AIO_MAX_BATCH : call->nr;
	if (done < 0)
		done = 0;
	bpf_map_delete_elem(&aio_calls, &tid);
	if (done < nr) {
		c.arr += done * 8;   /* the first not submitted */
		bpf_loop(nr - done, forget_one, &c, 0);
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_io_submit")
int iot_aio_submit_exit(struct trace_event_raw_sys_exit *ctx)
{
	return submit_exit(ctx->ret);
}

SEC("fexit/__x64_sys_io_submit")
int BPF_PROG(iot_aio_submit_exit_fe, struct pt_regs *regs, long ret)
{
	return submit_exit(ret);
}

static __always_inline int getevents_enter(__u64 events)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct aio_call call = { .arr = events };

	if (!traced_tgid(pid_tgid >> 32))
		return 0;
	bpf_map_update_elem(&aio_calls, &tid, &call, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_io_getevents")
int iot_aio_getevents(struct trace_event_raw_sys_enter *ctx)
{
	return getevents_enter(ctx->args[3]);
}

SEC("tracepoint/syscalls/sys_enter_io_pgetevents")
int iot_aio_pgetevents(struct trace_event_raw_sys_enter *ctx)
{
	return getevents_enter(ctx->args[3]);
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

struct reap_ctx {
	__u64 arr;
	__u64 now;
	__u32 pid;
};

static long reap_one(__u32 i, void *data)
{
	struct reap_ctx *c = data;
	struct io_event ev;
	struct aio_key k = { .pid = c->pid };
	struct pending *p;
	struct iot_event *e;

	if (bpf_probe_read_user(&ev, sizeof(ev), (void *)(c->arr + i * sizeof(ev))))
		return 1;
	k.iocb = ev.obj;
	p = bpf_map_lookup_elem(&aio_reqs, &k);
	if (!p) {
		count(IOT_CNT_ASYNC_LOST);   /* submitted before the trace, or not kept */
		return 0;
	}
	e = reserve_event();
	if (e) {
		blank_event(e, p->op, p->pid, p->tid);
		e->ts_ns = p->ts;
		e->dur_ns = c->now - p->ts;
		e->ret = ev.res;
		e->arg = ev.obj;
		e->fd = p->fd;
		e->offset = p->off;
		e->req_bytes = p->len;
		e->flags = p->code;
		e->eflags = p->eflags;
		e->ino = p->ino;
		e->dev = p->dev;
		e->fs_magic = p->magic;
		e->imode = p->imode;
		bpf_ringbuf_submit(e, 0);
	}
	bpf_map_delete_elem(&aio_reqs, &k);
	return 0;
}

static __always_inline int getevents_exit(long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct aio_call *call = bpf_map_lookup_elem(&aio_calls, &tid);
	struct reap_ctx c;

	if (!call)
		return 0;
	c.arr = call->arr;
	c.now = bpf_ktime_get_ns();
	c.pid = pid_tgid >> 32;
	bpf_map_delete_elem(&aio_calls, &tid);
	if (ret <= 0)
		return 0;
	if (ret > AIO_MAX_BATCH) {
		count_add(IOT_CNT_ASYNC_LOST, ret - AIO_MAX_BATCH);
		ret = AIO_MAX_BATCH;
	}
	bpf_loop(ret, reap_one, &c, 0);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_io_getevents")
int iot_aio_getevents_exit(struct trace_event_raw_sys_exit *ctx)
{
	return getevents_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_io_pgetevents")
int iot_aio_pgetevents_exit(struct trace_event_raw_sys_exit *ctx)
{
	return getevents_exit(ctx->ret);
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
