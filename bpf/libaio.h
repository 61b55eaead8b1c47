/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * libaio: io_submit's iocbs (fd, opcode, offset, bytes) are kept by
 * (process, iocb address); the io_getevents that reaps an iocb writes its
 * record with the result. The completion time is the reap (the kernel has no
 * tracepoint at an aio completion).
 *
 * The core object (bpf/iotrace.bpf.c) calls libaio_sys_enter/libaio_sys_exit
 * from its own sys_enter/sys_exit programs when the syscall tracepoints are
 * its hooks: a per-syscall tracepoint of io_submit or io_getevents, attached
 * on its own, would put a second probe on every system call of every process
 * (about 90 ns each, bench/overhead.py). Where the core hooks system calls
 * with fentry, bpf/aio.bpf.c's fentry/fexit programs call the same functions.
 * Both objects define the maps; the recorder hands the core's to aio.bpf.c.
 */
#ifndef IOTRACE_LIBAIO_H
#define IOTRACE_LIBAIO_H

#include "request_file.h"

/* IOCB_CMD_* (uapi) */
#define CMD_PREAD 0
#define CMD_PWRITE 1
#define CMD_FSYNC 2
#define CMD_FDSYNC 3
#define CMD_PREADV 7
#define CMD_PWRITEV 8

#define AIO_MAX_BATCH 256   /* iocbs of one io_submit, events of one io_getevents */

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
		mark_request_file(p.pid, &id, p.op == IOT_AIO_READ ? IOT_JOB_READ : IOT_JOB_WROTE);
	if (bpf_map_update_elem(&aio_reqs, &k, &p, BPF_ANY))
		count(IOT_CNT_ASYNC_LOST);
	return 0;
}

/* io_submit(ctx, nr, iocbpp): entry. */
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


/* x86_64 system call numbers (the core reads arguments the x86_64 way) */
#define NR_IO_GETEVENTS_ 208
#define NR_IO_SUBMIT_ 209
#define NR_IO_PGETEVENTS_ 333

static __always_inline bool libaio_syscall(long id)
{
	return id == NR_IO_SUBMIT_ || id == NR_IO_GETEVENTS_ || id == NR_IO_PGETEVENTS_;
}

/* From the core's sys_enter: io_submit(ctx, nr, iocbpp), io_getevents and
 * io_pgetevents(ctx, min_nr, nr, events, ...). */
static __always_inline void libaio_sys_enter(const struct pt_regs *regs, long id)
{
	if (id == NR_IO_SUBMIT_)
		submit_enter(regs->si, regs->dx);
	else
		getevents_enter(regs->r10);
}

/* From the core's sys_exit. */
static __always_inline void libaio_sys_exit(long id, long ret)
{
	if (id == NR_IO_SUBMIT_)
		submit_exit(ret);
	else
		getevents_exit(ret);
}

#endif
