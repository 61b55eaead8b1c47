// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace kernel side: one record per I/O-relevant system call, lock wait and
 * process/thread life event of the traced process tree.
 *
 * - Syscalls come from the raw tracepoints sys_enter/sys_exit (tp_btf, with a
 *   raw_tp fallback chosen by the loader): one program for all syscalls, an
 *   early filter on the syscall number (a read-only table the loader fills, so
 *   untraced syscalls cost one array load) and on the traced-tgid map.
 * - Entry state (timestamp, arguments, file position) lives in task storage;
 *   the exit builds the record.
 * - Children are followed in kernel from sched_process_fork.
 * - The ring buffer is written without a wake-up per record; the recorder
 *   polls with a short timeout and a wake-up is forced when much is pending.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iotrace.h"

#ifndef __TARGET_ARCH_x86
#error "iotrace currently reads syscall arguments the x86_64 way"
#endif

#define AT_FDCWD_ -100
#define AT_EMPTY_PATH_ 0x1000
#define MAP_ANONYMOUS_ 0x20
#define MAP_FIXED_ 0x10
#define MAP_FIXED_NOREPLACE_ 0x100000
#define F_DUPFD_ 0
#define F_DUPFD_CLOEXEC_ 1030
#define FUTEX_CMD_MASK_ 0x7f
#define S_IFMT_ 0170000
#define S_IFREG_ 0100000
#define TMPFS_MAGIC_ 0x01021994
#define RAMFS_MAGIC_ 0x858458f6
#define S_IFSOCK_ 0140000
#define S_IFCHR_ 0020000
#define S_IFBLK_ 0060000
#define SIGNAL_GROUP_EXIT_ 0x00000004

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before load (rodata: the verifier prunes on them). */
const volatile __u8 sys_op[IOT_MAX_SYSCALLS] = {};
/* system calls that can change the calling thread's mappings: what they
 * make its cached mappings (struct inflight vma) forget, IOT_REMAP_* */
const volatile __u8 sys_remaps[IOT_MAX_SYSCALLS] = {};
const volatile __u64 wakeup_bytes = 1 << 20;
const volatile bool live_http = false;   /* profile mode: HTTP message starts too */

#include "shared_maps.h"
#include "direct_reads.h"
#include "task_state.h"
#include "user_iov.h"
#include "http_capture.h"
#include "profile.h"
#include "syscall_hooks.h"
#include "libaio.h"


/* Scratch space for records that carry a payload (paths, argv, names). */
struct big_event {
	struct iot_event ev;
	char s[2 * IOT_PATH_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct big_event);
} scratch SEC(".maps");

/* System-call records lost to a full ring buffer, by op (the total, with
 * the other records', is IOT_CNT_DROPS). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOT_OP_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} drops_by_op SEC(".maps");

static __always_inline void drop_op(__u16 op)
{
	__u32 k = op;
	__u64 *v = bpf_map_lookup_elem(&drops_by_op, &k);

	if (v)
		*v += 1;
}

/* Live traced processes; the recorder stops when the job and this reach 0. */
__s64 live_procs = 0;

/*
 * Filter in front of the traced map: a slot per tgid bucket holds 0 (no
 * traced tgid), the one traced tgid of the bucket, or IOT_SLOT_SHARED (two
 * traced tgids met there once: ask the map from then on). Every call of
 * every process on the machine passes here: untraced ones pay one memory
 * load, and traced ones no hash lookup unless their bucket is shared. A
 * tgid's slot is cleared when its process ends (so a reused pid is not
 * traced); a shared slot stays shared.
 */
#define IOT_BUCKETS 65536
#define IOT_SLOT_SHARED (~0ull)
/* 64-bit slots: clang 14's BPF backend has no 32-bit compare-and-swap */
__u64 traced_slot[IOT_BUCKETS] = {};

static __always_inline bool maybe(__u32 tgid)
{
	__u64 v = traced_slot[tgid & (IOT_BUCKETS - 1)];

	return v && (v == tgid || v == IOT_SLOT_SHARED);
}

static __always_inline bool is_traced(__u32 tgid)
{
	__u64 v = traced_slot[tgid & (IOT_BUCKETS - 1)];

	if (v == tgid && v)
		return true;
	return v == IOT_SLOT_SHARED && bpf_map_lookup_elem(&traced, &tgid) != NULL;
}

static __always_inline void slot_add(__u32 tgid)
{
	__u64 *slot = &traced_slot[tgid & (IOT_BUCKETS - 1)];
	__u64 old = __sync_val_compare_and_swap(slot, 0, (__u64)tgid);

	if (old && old != tgid)
		*slot = IOT_SLOT_SHARED;
}

static __always_inline void slot_remove(__u32 tgid)
{
	__sync_val_compare_and_swap(&traced_slot[tgid & (IOT_BUCKETS - 1)], (__u64)tgid, 0);
}

/* A record of any size to this CPU's ring (bpf_ringbuf_output's return, or
 * -1), waking the reader once wakeup_bytes wait to be read there. */
static __always_inline long ring_output_batched(void *data, __u64 size)
{
	void *rb = cpu_ring();

	if (!rb)
		return -1;
	return bpf_ringbuf_output(rb, data, size,
				  bpf_ringbuf_query(rb, BPF_RB_AVAIL_DATA) >= wakeup_bytes ?
				  BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/*
 * For a reserved struct iot_event e: wake the reader when e ends past a
 * multiple of wakeup_bytes (a power of two) in the ring's memory, i.e. once
 * per wakeup_bytes of records, without a helper call (bpf_ringbuf_query:
 * 30 ns a record on a 4 KiB page-cache read). A multiple crossed inside a
 * record of another size wakes nobody: the next one does, and the reader
 * polls every 50 ms besides.
 */
__u64 rb_anchor = 0;   /* only its address counts */

static __always_inline __u64 rb_flags_at(const struct iot_event *e)
{
	/* the verifier allows no bitwise operation on a pointer, but (root)
	 * the difference of two: e's address less a constant one */
	__u64 end = (const char *)e + sizeof(*e) - (const char *)&rb_anchor;

	return (end & (wakeup_bytes - 1)) < sizeof(*e) + 8 /* its header */ ?
		BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/*
 * A user page fault on a file mapping is pending until the thread's next
 * fault, system call or exit: then its record is written with the page-cache
 * bytes the thread added for that file meanwhile (0: a minor fault, the page
 * was cached) and the time it was blocked off CPU meanwhile. Nothing else a
 * thread does between leaving the fault and its next kernel entry can add
 * pages or block, so both are the fault's own.
 */
static __always_inline void flush_fault(struct inflight *st, __u32 pid, __u32 tid)
{
	struct iot_event *e;

	if (!st->fault_ts)
		return;
	if (profile_mode) {
		profile_add(st, pid, IOT_PAGE_FAULT, st->fault_ino, st->fault_dev, st->fault_magic,
			    st->fault_imode, 0, 0, 0, st->fault_blocked, st->fault_added,
			    st->fault_ts);
		st->fault_ts = 0;
		return;
	}
	e = reserve_event();
	if (e) {
		blank_event(e, IOT_PAGE_FAULT, pid, tid);
		e->ts_ns = st->fault_ts;
		e->dur_ns = st->fault_blocked;
		e->ret = st->fault_added;
		e->offset = st->fault_off;
		e->arg = st->fault_addr;
		e->flags = st->fault_error;
		e->ino = st->fault_ino;
		e->dev = st->fault_dev;
		e->fs_magic = st->fault_magic;
		e->imode = st->fault_imode;
		bpf_ringbuf_submit(e, rb_flags_at(e));
	}
	st->fault_ts = 0;
}

/* A run of page-cache additions outside a call of the file (see task_state.h). */
static __always_inline void flush_fill(struct inflight *st, __u32 pid, __u32 tid)
{
	struct iot_event *e;

	if (!st->fill_ts)
		return;
	if (profile_mode) {
		profile_add(st, pid, IOT_CACHE_FILL, st->fill_ino, st->fill_dev, st->fill_magic,
			    S_IFREG_, 0, 0, 0, st->fill_last - st->fill_ts, st->fill_added,
			    st->fill_last);
		st->fill_ts = 0;
		return;
	}
	e = reserve_event();
	if (e) {
		blank_event(e, IOT_CACHE_FILL, pid, tid);
		e->ts_ns = st->fill_ts;
		e->dur_ns = st->fill_last - st->fill_ts;
		e->ret = st->fill_added;
		e->ino = st->fill_ino;
		e->dev = st->fill_dev;
		e->fs_magic = st->fill_magic;
		e->imode = S_IFREG_;
		bpf_ringbuf_submit(e, rb_flags_at(e));
	}
	st->fill_ts = 0;
}

/* Whether the kernel updates the task's rseq area on its way back to user
 * space (rseq_update fires there): a registered area, where this kernel
 * has the field it is kept in. */
struct task_struct___rseq {
	void *rseq;
} __attribute__((preserve_access_index));

static __always_inline bool rseq_registered(struct task_struct *task)
{
	struct task_struct___rseq *t = (void *)task;

	if (!bpf_core_field_exists(t->rseq))
		return false;
	return BPF_CORE_READ(t, rseq) != NULL;
}

/* A release still pending when the thread enters the kernel again or exits:
 * no return to user space was seen after it, and it is not timed. */
static __always_inline void release_untimed(struct inflight *st)
{
	if (st->rel_ts) {
		count(IOT_CNT_RELEASE_UNTIMED);
		st->rel_ts = 0;
	}
}

/* A call's deferred release (IOT_FILE_RELEASE), ended by the thread's return
 * to user space at `end`: sent when it took IOT_RELEASE_MIN_NS or more (a
 * plain file's last close takes a few microseconds there). */
#define IOT_RELEASE_MIN_NS 20000
static __always_inline void flush_release(struct inflight *st, __u32 pid, __u32 tid, __u64 end)
{
	struct iot_event *e;

	if (end >= st->rel_ts + IOT_RELEASE_MIN_NS) {
		e = reserve_event();
		if (e) {
			blank_event(e, IOT_FILE_RELEASE, pid, tid);
			e->ts_ns = st->rel_ts;
			e->dur_ns = end - st->rel_ts;
			e->flags = st->rel_op;
			e->fd = st->rel_fd;
			e->arg = st->rel_arg;
			e->ino = st->rel_ino;
			e->dev = st->rel_dev;
			e->fs_magic = st->rel_magic;
			e->imode = st->rel_imode;
			bpf_ringbuf_submit(e, rb_flags_at(e));
		}
	}
	st->rel_ts = 0;
}

static __always_inline struct file *fd_file(struct task_struct *task, int fd)
{
	/* task is trusted (tp_btf): walk it with direct loads. */
	struct files_struct *files = task->files;
	struct fdtable *fdt;
	struct file **fds;
	struct file *f = NULL;

	if (!files)
		return NULL;
	fdt = files->fdt;
	if (!fdt || fd < 0 || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	fds = fdt->fd;
#ifdef IOT_DIRECT_READS
	f = file_in_slot(&fds[fd]);
#else
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
#endif
	return f;
}

/*
 * Reading fields one helper call at a time is what costs most per event. The
 * fields we need of a struct file, inode and super_block sit within their
 * first SPAN bytes, so each struct is copied with one call and the fields
 * are taken at their CO-RE-relocated offsets. A kernel whose layout does not
 * fit falls back to one read per field (the verifier prunes the other path).
 */
#define SPAN 128

#define FITS(type, field) \
	(bpf_core_field_offset(type, field) + bpf_core_field_size(type, field) <= SPAN && \
	 bpf_core_type_size(type) >= SPAN)

#define AT(buf, type, field, ctype) \
	(*(ctype *)((char *)(buf) + bpf_core_field_offset(type, field)))

#ifdef IOT_DIRECT_READS
/*
 * The object built with IOT_DIRECT_READS (build/iotrace_direct.bpf.o), loaded
 * where the kernel has bpf_rdonly_cast (6.2 and later): the struct file
 * pointer becomes a BTF pointer, and its fields, its inode's and its super
 * block's are plain loads the JIT guards against faults, not helper calls
 * (fd_file reads the fd table's slot the same way). On a 4 KiB page-cache
 * pread this is 90 ns less per call (bench/README.md).
 */
static __noinline void fd_identity(struct task_struct *task, int fd,
				   struct inflight *st, bool want_pos)
{
	struct file *f = fd_file(task, fd);
	struct inode *inode;
	struct super_block *sb;

	if (!f) {
		st->eflags |= IOT_EF_NO_FILE;
		return;
	}
	f = AS_KERNEL(f, struct file);
	if (want_pos)
		st->pos = f->f_pos;
	/* read, not cached with the identity: fcntl(F_SETFL) can turn it on or off */
	if (f->f_flags & IOT_O_DIRECT)
		st->eflags |= IOT_EF_DIRECT;
	inode = f->f_inode;
	if (!inode)
		return;
	st->imode = inode->i_mode & S_IFMT_;
	st->ino = inode->i_ino;
	sb = inode->i_sb;
	if (st->imode == S_IFSOCK_) {
		struct socket *sock = f->private_data;
		if (sock)
			st->xmode = BPF_CORE_READ(sock, sk, __sk_common.skc_family);
	} else if (st->imode == S_IFCHR_ || st->imode == S_IFBLK_) {
		st->xmode = inode->i_rdev;
	}
	if (!sb)
		return;
	st->dev = sb->s_dev;
	st->magic = sb->s_magic;
}
#else
/* Fills the file identity of fd (and its position when want_pos). */
static __noinline void fd_identity(struct task_struct *task, int fd,
					struct inflight *st, bool want_pos)
{
	struct file *f = fd_file(task, fd);
	struct inode *inode;
	struct super_block *sb;
	__u64 buf[SPAN / 8];
	__u32 f_flags;

	if (!f) {
		st->eflags |= IOT_EF_NO_FILE;
		return;
	}
	if (FITS(struct file, f_inode) && FITS(struct file, f_pos) && FITS(struct file, f_flags)) {
		bpf_probe_read_kernel(buf, SPAN, f);
		inode = AT(buf, struct file, f_inode, struct inode *);
		f_flags = AT(buf, struct file, f_flags, __u32);
		if (want_pos)
			st->pos = AT(buf, struct file, f_pos, __s64);
	} else {
		inode = BPF_CORE_READ(f, f_inode);
		f_flags = BPF_CORE_READ(f, f_flags);
		if (want_pos)
			st->pos = BPF_CORE_READ(f, f_pos);
	}
	/* read, not cached with the identity: fcntl(F_SETFL) can turn it on or off */
	if (f_flags & IOT_O_DIRECT)
		st->eflags |= IOT_EF_DIRECT;
	if (!inode)
		return;
	if (FITS(struct inode, i_mode) && FITS(struct inode, i_sb) && FITS(struct inode, i_ino)) {
		bpf_probe_read_kernel(buf, SPAN, inode);
		st->imode = AT(buf, struct inode, i_mode, __u16) & S_IFMT_;
		st->ino = AT(buf, struct inode, i_ino, __u64);
		sb = AT(buf, struct inode, i_sb, struct super_block *);
	} else {
		st->imode = BPF_CORE_READ(inode, i_mode) & S_IFMT_;
		st->ino = BPF_CORE_READ(inode, i_ino);
		sb = BPF_CORE_READ(inode, i_sb);
	}
	if (st->imode == S_IFSOCK_) {
		struct socket *sock = BPF_CORE_READ(f, private_data);
		if (sock)
			st->xmode = BPF_CORE_READ(sock, sk, __sk_common.skc_family);
	} else if (st->imode == S_IFCHR_ || st->imode == S_IFBLK_) {
		st->xmode = BPF_CORE_READ(inode, i_rdev);
	}
	if (!sb)
		return;
	if (FITS(struct super_block, s_dev) && FITS(struct super_block, s_magic)) {
		bpf_probe_read_kernel(buf, SPAN, sb);
		st->dev = AT(buf, struct super_block, s_dev, __u32);
		st->magic = AT(buf, struct super_block, s_magic, __u32);
	} else {
		st->dev = BPF_CORE_READ(sb, s_dev);
		st->magic = BPF_CORE_READ(sb, s_magic);
	}
}
#endif

/* The identity of an fd a call returned (an open's new fd), worked out in
 * per-CPU scratch: a second struct inflight does not fit the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct inflight);
} ident_scratch SEC(".maps");

static __always_inline struct inflight *new_fd_identity(struct task_struct *task, int fd)
{
	__u32 zero = 0;
	struct inflight *t = bpf_map_lookup_elem(&ident_scratch, &zero);

	if (!t)
		return NULL;
	t->ino = 0;
	t->dev = 0;
	t->magic = 0;
	t->imode = 0;
	t->xmode = 0;
	t->eflags = 0;
	fd_identity(task, fd, t, false);
	return t;
}

/* Index of the lowest set bit of a non-zero word. Spelled out: clang 14's
 * BPF backend crashes, now and then, lowering __builtin_ctzll. */
static __always_inline int lowest_bit(__u64 w)
{
	int n = 0;

	if (!(w & 0xffffffffull)) { n += 32; w >>= 32; }
	if (!(w & 0xffff)) { n += 16; w >>= 16; }
	if (!(w & 0xff)) { n += 8; w >>= 8; }
	if (!(w & 0xf)) { n += 4; w >>= 4; }
	if (!(w & 0x3)) { n += 2; w >>= 2; }
	if (!(w & 0x1))
		n += 1;
	return n;
}

/* The lowest fd in a select() read set (-1: none in the first 1024). */
static __always_inline int first_fd_set(__u64 nfds, __u64 uset)
{
	__u64 word;

	if (!uset)
		return -1;
	for (int w = 0; w < 16; w++) {
		if (w * 64 >= nfds)
			break;
		if (bpf_probe_read_user(&word, sizeof(word), (void *)(uset + w * 8)))
			break;
		if (word)
			return w * 64 + lowest_bit(word);
	}
	return -1;
}

/* Requested time of a sleep (a user struct timespec), in ns. */
static __always_inline __u64 timespec_ns(__u64 uts)
{
	struct __kernel_timespec ts = {};

	if (!uts || bpf_probe_read_user(&ts, sizeof(ts), (void *)uts))
		return 0;
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* ---- syscall entry ---------------------------------------------------- */

/*
 * A file the job reads or writes: what kernel threads submit for it is the
 * job's (writeback; bios an I/O throttle held back, dispatched from a worker
 * while the read that needs them is still in flight: reads are marked at
 * entry). The thread remembers what it marked last, so a run of calls on one
 * file looks the map up once; the entry keeps the process that marked it.
 */
static __always_inline void mark_job_file(struct inflight *st, __u32 tgid, __u64 how)
{
	__u64 v = tgid | how;
	__u32 bits = how >> 32;
	struct file_key k;
	__u64 *known;

	if ((st->imode & S_IFMT_) != S_IFREG_ || !st->ino)
		return;
	if (st->jf_ino == st->ino && st->jf_dev == st->dev && (st->jf_bits & bits) == bits)
		return;
	k.ino = st->ino;
	k.dev = st->dev;
	k.pad = 0;
	known = bpf_map_lookup_elem(&job_files, &k);
	if (known && (__u32)*known == (__u32)v)
		v |= *known;
	if (!known || *known != v)
		bpf_map_update_elem(&job_files, &k, &v, BPF_ANY);
	st->jf_bits = st->jf_ino == st->ino && st->jf_dev == st->dev ? st->jf_bits | bits : bits;
	st->jf_ino = st->ino;
	st->jf_dev = st->dev;
}

/* Whether a call of op with arguments a is one iotrace records: only waits
 * are lock waits, only the dup flavours of fcntl alias fds, only file
 * mappings are mmaps of files. */
static __always_inline bool recorded_call(__u16 op, const __u64 *a)
{
	if (op == IOT_FUTEX) {
		__u32 cmd = a[1] & FUTEX_CMD_MASK_;
		return cmd == 0 || cmd == 6 || cmd == 9 || cmd == 11 || cmd == 13;
	}
	if (op == IOT_FCNTL)
		return a[1] == F_DUPFD_ || a[1] == F_DUPFD_CLOEXEC_;
	if (op == IOT_MMAP)
		return !(a[3] & MAP_ANONYMOUS_) && (__s32)a[4] >= 0;
	return true;
}

/* A system call's six arguments from its entry registers (a BTF pointer:
 * tp_btf, fentry, bpf_task_pt_regs; read directly, no helper call). */
static __always_inline void syscall_args(const struct pt_regs *regs, __u64 *a)
{
	a[0] = regs->di;
	a[1] = regs->si;
	a[2] = regs->dx;
	a[3] = regs->r10;
	a[4] = regs->r8;
	a[5] = regs->r9;
}

/* A call's entry state but its op and start: its arguments, and the file
 * identity of its fd. user: task is the current task, whose memory (a
 * pollfd, an offset pointer) can be read; the attach-time iterator's is not. */
static __always_inline void enter_call(struct task_struct *task, struct inflight *st, __u16 op,
				       const __u64 *a, __u32 tgid, bool user)
{
	st->cache_added = 0;
	st->eflags = 0;
	st->pos = -1;
	st->ino = 0;
	st->dev = 0;
	st->magic = 0;
	st->imode = 0;
	st->xmode = 0;
	st->a[0] = a[0];
	st->a[1] = a[1];
	st->a[2] = a[2];
	st->a[3] = a[3];
	st->a[4] = a[4];
	st->a[5] = a[5];

	switch (op) {
	case IOT_READ: case IOT_WRITE: case IOT_READV: case IOT_WRITEV:
	case IOT_LSEEK: case IOT_PREADV2: case IOT_PWRITEV2:
		fd_identity(task, a[0], st, true);
		break;
	case IOT_PREAD64: case IOT_PWRITE64: case IOT_PREADV: case IOT_PWRITEV:
	case IOT_FSYNC: case IOT_FDATASYNC: case IOT_SYNC_FILE_RANGE:
	case IOT_CLOSE: case IOT_DUP: case IOT_DUP2: case IOT_DUP3: case IOT_FCNTL:
	case IOT_FCHDIR: case IOT_FSTAT: case IOT_GETDENTS64:
		fd_identity(task, a[0], st, false);
		break;
	case IOT_MMAP:
		fd_identity(task, a[4], st, false);
		break;
	case IOT_NEWFSTATAT:   /* glibc's fstat: newfstatat(fd, "", AT_EMPTY_PATH) */
		if (a[3] & AT_EMPTY_PATH_)
			fd_identity(task, a[0], st, false);
		break;
	case IOT_STATX:
		if (a[2] & AT_EMPTY_PATH_)
			fd_identity(task, a[0], st, false);
		break;
	case IOT_COPY_FILE_RANGE:
		fd_identity(task, a[0], st, true);
		if (user && a[1])
			bpf_probe_read_user(&st->pos, sizeof(st->pos), (void *)a[1]);
		break;
	case IOT_SENDFILE:
		fd_identity(task, a[1], st, true);
		if (user && a[2])
			bpf_probe_read_user(&st->pos, sizeof(st->pos), (void *)a[2]);
		break;
	case IOT_FADVISE64: case IOT_FALLOCATE: case IOT_FTRUNCATE:
	case IOT_EPOLL_WAIT: case IOT_EPOLL_PWAIT: case IOT_EPOLL_PWAIT2:
	case IOT_RECVFROM: case IOT_RECVMSG: case IOT_SENDTO: case IOT_SENDMSG:
	case IOT_CONNECT: case IOT_ACCEPT: case IOT_ACCEPT4: case IOT_IOCTL:
		fd_identity(task, a[0], st, false);
		break;
	case IOT_POLL: case IOT_PPOLL: {
		int fd = -1;
		/* the first pollfd: a loader polls its one result pipe */
		if (user && a[1] && !bpf_probe_read_user(&fd, sizeof(fd), (void *)a[0]) && fd >= 0)
			fd_identity(task, fd, st, false);
		st->pos = fd;   /* carried to the exit in the unused position slot */
		break;
	}
	case IOT_SELECT: case IOT_PSELECT6:
		st->pos = user ? first_fd_set(a[0], a[1]) : -1;
		if (st->pos >= 0)
			fd_identity(task, st->pos, st, false);
		break;
	}
	if (op <= IOT_PREADV2)
		mark_job_file(st, tgid, IOT_JOB_READ);
}

/* The mappings a thread's faults looked up (struct inflight vma) that
 * overlap [lo, hi), forgotten. */
static __always_inline void forget_range(struct inflight *st, __u64 lo, __u64 hi)
{
#pragma unroll
	for (int i = 0; i < IOT_VMA_CACHE; i++)
		if (st->vma[i].start < hi && lo < st->vma[i].end)
			st->vma[i].end = 0;
}

/* At the entry of a call that can change the thread's mappings (kind:
 * IOT_REMAP_*, a: its arguments), the cached ones it may change, forgotten. */
static __always_inline void forget_mappings(struct task_struct *task, struct inflight *st,
					    __u8 kind, const __u64 *a)
{
	if (kind == IOT_REMAP_MMAP) {
		if (a[3] & (MAP_FIXED_ | MAP_FIXED_NOREPLACE_))
			forget_range(st, a[0], a[0] + a[1]);
	} else if (kind == IOT_REMAP_MUNMAP) {
		forget_range(st, a[0], a[0] + a[1]);
	} else if (kind == IOT_REMAP_BRK) {
		__u64 cur = BPF_CORE_READ(task, mm, brk);

		if (a[0])
			forget_range(st, a[0] < cur ? a[0] : cur, a[0] < cur ? cur : a[0]);
	} else {
		forget_range(st, 0, ~0ull);
	}
}

/* The cache entry a new mapping replaces (round robin). */
static __always_inline struct vma_file *next_vma_entry(struct inflight *st)
{
	__u32 i = st->vma_next;

	st->vma_next = (i + 1) % IOT_VMA_CACHE;
	if (i >= IOT_VMA_CACHE)
		return NULL;
	return &st->vma[i];
}

/* A mapping the thread just made, kept as its faults' lookup would find it
 * (struct vma_file): an allocator's fresh anonymous memory (NumPy's arrays,
 * a batch's tensor) is then never looked up (bpf_find_vma costs microseconds
 * a fault: 17,000 lookups, 0.17 s, in a 2-worker DataLoader's 6,000 np.loads).
 * A file mapping only when its entry resolved the file (a recorded mmap). */
static __always_inline void mapping_made(struct inflight *st, const struct pt_regs *regs, long ret)
{
	__u64 len = (regs->si + 4095) & ~4095ull, flags = regs->r10;
	bool anon = (flags & MAP_ANONYMOUS_) || (__s32)regs->r8 < 0;
	struct vma_file *v;

	if (ret < 0 && ret > -4096)
		return;
	/* what the cache held there is gone (another thread's munmap) */
	forget_range(st, (__u64)ret, (__u64)ret + len);
	if (!anon && (st->op != IOT_MMAP || !st->ino))
		return;
	v = next_vma_entry(st);
	if (!v)
		return;
	v->start = (__u64)ret;
	v->end = (__u64)ret + len;
	v->pgoff = anon ? 0 : regs->r9 >> 12;
	/* shared anonymous memory and tmpfs/ramfs files: no storage behind */
	v->ino = anon || st->magic == TMPFS_MAGIC_ || st->magic == RAMFS_MAGIC_ ? 0 : st->ino;
	v->dev = anon ? 0 : st->dev;
	v->magic = anon ? 0 : st->magic;
	v->imode = anon ? 0 : st->imode;
}

/* A system call's entry: op is 0 for a call iotrace does not record (the
 * syscall tracepoint sees them all) or the call's op (an fentry program's
 * constant, which lets the compiler keep only that op's code); remaps: how
 * the call may change the thread's mappings (IOT_REMAP_*, 0: it does not). */
static __always_inline int on_enter_op(struct pt_regs *regs, __u16 op, __u8 remaps)
{
	struct task_struct *task;
	struct inflight *st;
	__u32 tgid;
	__u64 a[6];

	tgid = bpf_get_current_pid_tgid() >> 32;
	if (!maybe(tgid))
		return 0;
	/* any system call ends a pending page fault */
	task = bpf_get_current_task_btf();
	st = bpf_task_storage_get(&inflight, task, 0, 0);
	if (st) {
		if (st->fault_ts)
			flush_fault(st, tgid, (__u32)bpf_get_current_pid_tgid());
		if (st->fill_ts)
			flush_fill(st, tgid, (__u32)bpf_get_current_pid_tgid());
		release_untimed(st);
		if (remaps) {
			syscall_args(regs, a);
			forget_mappings(task, st, remaps, a);
		}
	}
	if (!op || !is_traced(tgid))
		return 0;

	syscall_args(regs, a);
	if (!recorded_call(op, a))
		return 0;

	if (!st)
		st = bpf_task_storage_get(&inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		count(IOT_CNT_NO_STORAGE);
		return 0;
	}
	/* still the state of a call in progress at the attach: it returned
	 * unseen (fentry hooks: fexit misses calls entered before it) */
	if (st->op && (st->eflags & IOT_EF_BEGAN_BEFORE))
		count(IOT_CNT_RETURN_UNSEEN);
	st->op = op;
	enter_call(task, st, op, a, tgid, true);
	st->ts = bpf_ktime_get_ns();
	return 0;
}

/* ---- syscall exit ----------------------------------------------------- */

/* Which argument holds the path (and second path) of a path-taking call. */
static __always_inline int path_args(__u16 op, int *second)
{
	*second = -1;
	switch (op) {
	case IOT_OPEN: case IOT_CREAT: case IOT_CHDIR: case IOT_STAT: case IOT_LSTAT:
	case IOT_UNLINK: case IOT_MKDIR: case IOT_RMDIR:
		return 0;
	case IOT_OPENAT: case IOT_OPENAT2: case IOT_NEWFSTATAT: case IOT_STATX:
	case IOT_UNLINKAT: case IOT_MKDIRAT:
		return 1;
	case IOT_RENAME:
		*second = 1;
		return 0;
	case IOT_RENAMEAT: case IOT_RENAMEAT2:
		*second = 3;
		return 1;
	}
	return -1;
}

/* A call's record from its entry state. user: the call's own task is the
 * current one, so its user memory (iovecs, timespecs, open_how) can be read;
 * the end-of-trace iterator runs in the recorder and leaves those out. */
static __always_inline void fill_call(struct iot_event *e, struct inflight *st, __u16 op,
				      __u64 now, __u64 pid_tgid, long ret, bool user)
{
	__u64 *a = st->a;

	e->ts_ns = st->ts;
	e->dur_ns = now - st->ts;
	e->ret = ret;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->op = op;
	e->offset = -1;
	e->req_bytes = 0;
	e->arg = 0;
	e->fd = -1;
	e->dirfd = -1;
	e->flags = 0;
	e->mode = 0;
	e->ino = st->ino;
	e->dev = st->dev;
	e->fs_magic = st->magic;
	e->imode = st->imode;
	e->eflags = st->eflags;
	e->str_len = 0;

	/* reads and writes: page-cache bytes the call added for its file */
	if (op <= IOT_PWRITEV2)
		e->arg = st->cache_added;

	switch (op) {
	case IOT_READ: case IOT_WRITE:
		e->fd = a[0];
		e->req_bytes = a[2];
		e->offset = st->pos;
		e->mode = st->xmode;
		break;
	case IOT_READV: case IOT_WRITEV:
		e->fd = a[0];
		e->req_bytes = user ? iov_bytes(a[1], a[2], &e->eflags) : 0;
		e->offset = st->pos;
		e->mode = st->xmode;
		break;
	case IOT_PREAD64: case IOT_PWRITE64:
		e->fd = a[0];
		e->req_bytes = a[2];
		e->offset = a[3];
		break;
	case IOT_PREADV: case IOT_PWRITEV:
		e->fd = a[0];
		e->req_bytes = user ? iov_bytes(a[1], a[2], &e->eflags) : 0;
		e->offset = a[3];
		break;
	case IOT_PREADV2: case IOT_PWRITEV2:
		e->fd = a[0];
		e->req_bytes = user ? iov_bytes(a[1], a[2], &e->eflags) : 0;
		e->offset = (__s64)a[3] == -1 ? st->pos : (__s64)a[3];
		e->flags = a[5];
		break;
	case IOT_LSEEK:
		e->fd = a[0];
		e->offset = st->pos;
		e->arg = a[1];
		e->flags = a[2];
		break;
	case IOT_FSYNC: case IOT_FDATASYNC: case IOT_CLOSE: case IOT_DUP:
	case IOT_FCHDIR: case IOT_FSTAT:
		e->fd = a[0];
		break;
	case IOT_SYNC_FILE_RANGE:
		e->fd = a[0];
		e->offset = a[1];
		e->req_bytes = a[2];
		e->flags = a[3];
		break;
	case IOT_CLOSE_RANGE:
		e->fd = a[0];
		e->arg = a[1];
		e->flags = a[2];
		break;
	case IOT_DUP2: case IOT_DUP3:
		e->fd = a[0];
		e->arg = a[1];
		e->flags = op == IOT_DUP3 ? a[2] : 0;
		break;
	case IOT_FCNTL:
		e->fd = a[0];
		e->arg = a[2];
		e->flags = a[1];
		break;
	case IOT_GETDENTS64:
		e->fd = a[0];
		e->req_bytes = a[2];
		break;
	case IOT_MMAP:
		e->fd = a[4];
		e->offset = a[5];
		e->req_bytes = a[1];
		e->mode = a[2];
		e->flags = a[3];
		e->arg = a[0];
		break;
	case IOT_MUNMAP:
		e->arg = a[0];
		e->req_bytes = a[1];
		break;
	case IOT_COPY_FILE_RANGE:
		e->fd = a[0];
		e->offset = st->pos;
		e->arg = a[2];
		e->req_bytes = a[4];
		e->flags = a[5];
		break;
	case IOT_SENDFILE:
		e->fd = a[1];
		e->offset = st->pos;
		e->arg = a[0];
		e->req_bytes = a[3];
		break;
	case IOT_FADVISE64:
		e->fd = a[0];
		e->offset = a[1];
		e->req_bytes = a[2];
		e->flags = a[3];
		break;
	case IOT_FALLOCATE:
		e->fd = a[0];
		e->flags = a[1];
		e->offset = a[2];
		e->req_bytes = a[3];
		break;
	case IOT_FTRUNCATE:
		e->fd = a[0];
		e->arg = a[1];
		break;
	case IOT_FUTEX:
		e->arg = a[0];
		e->flags = a[1];
		break;
	/* blocking calls of the data path: mode = the fd's kind detail */
	case IOT_POLL: case IOT_PPOLL: case IOT_SELECT: case IOT_PSELECT6:
		e->fd = st->pos;
		e->req_bytes = a[op == IOT_SELECT || op == IOT_PSELECT6 ? 0 : 1];
		e->mode = st->xmode;
		break;
	case IOT_EPOLL_WAIT: case IOT_EPOLL_PWAIT: case IOT_EPOLL_PWAIT2:
		e->fd = a[0];
		e->req_bytes = a[2];
		break;
	case IOT_NANOSLEEP:
		e->arg = user ? timespec_ns(a[0]) : 0;
		break;
	case IOT_CLOCK_NANOSLEEP:
		e->mode = a[0];
		e->flags = a[1];
		e->arg = user ? timespec_ns(a[2]) : 0;
		break;
	case IOT_RECVFROM: case IOT_SENDTO:
		e->fd = a[0];
		e->req_bytes = a[2];
		e->flags = a[3];
		e->mode = st->xmode;
		break;
	case IOT_RECVMSG: case IOT_SENDMSG: {
		struct user_msghdr m = {};
		e->fd = a[0];
		if (user && !bpf_probe_read_user(&m, sizeof(m), (void *)a[1]))
			e->req_bytes = iov_bytes((__u64)m.msg_iov, m.msg_iovlen, &e->eflags);
		e->flags = a[2];
		e->mode = st->xmode;
		break;
	}
	case IOT_CONNECT: case IOT_ACCEPT: case IOT_ACCEPT4:
		e->fd = a[0];
		e->mode = st->xmode;
		break;
	case IOT_IOCTL:
		e->fd = a[0];
		e->flags = a[1];
		e->arg = a[2];
		e->mode = st->xmode;
		break;
	/* path calls */
	case IOT_OPEN:
		e->dirfd = AT_FDCWD_;
		e->flags = a[1];
		e->mode = a[2];
		break;
	case IOT_CREAT:
		e->dirfd = AT_FDCWD_;
		e->flags = 01 | 0100 | 01000; /* O_WRONLY|O_CREAT|O_TRUNC */
		e->mode = a[1];
		break;
	case IOT_OPENAT:
		e->dirfd = a[0];
		e->flags = a[2];
		e->mode = a[3];
		break;
	case IOT_OPENAT2: {
		struct open_how how = {};
		if (user)
			bpf_probe_read_user(&how, sizeof(how), (void *)a[2]);
		e->dirfd = a[0];
		e->flags = how.flags;
		e->mode = how.mode;
		break;
	}
	case IOT_CHDIR: case IOT_STAT: case IOT_LSTAT: case IOT_UNLINK: case IOT_RMDIR:
	case IOT_RENAME:
		e->dirfd = AT_FDCWD_;
		break;
	case IOT_MKDIR:
		e->dirfd = AT_FDCWD_;
		e->mode = a[1];
		break;
	case IOT_NEWFSTATAT:
		e->dirfd = a[0];
		e->flags = a[3];
		if (a[3] & AT_EMPTY_PATH_)
			e->fd = a[0];
		break;
	case IOT_STATX:
		e->dirfd = a[0];
		e->flags = a[2];
		if (a[2] & AT_EMPTY_PATH_)
			e->fd = a[0];
		break;
	case IOT_UNLINKAT:
		e->dirfd = a[0];
		e->flags = a[2];
		break;
	case IOT_MKDIRAT:
		e->dirfd = a[0];
		e->mode = a[2];
		break;
	case IOT_RENAMEAT: case IOT_RENAMEAT2:
		e->dirfd = a[0];
		e->arg = a[2]; /* new dirfd */
		e->flags = op == IOT_RENAMEAT2 ? a[4] : 0;
		break;
	}
}

static __always_inline void fill_common(struct iot_event *e, struct inflight *st, __u16 op,
					__u64 now, __u64 pid_tgid, long ret)
{
	fill_call(e, st, op, now, pid_tgid, ret, true);
}

static __always_inline int emit_plain(struct inflight *st, __u16 op, __u64 now, __u64 pid_tgid,
				      long ret)
{
	struct iot_event *e = reserve_event();

	if (!e) {
		drop_op(op);
		return 0;
	}
	fill_common(e, st, op, now, pid_tgid, ret);
	/* a file mapped executable may be a TLS library the job uses at once:
	 * the recorder probes it when it reads this record, so wake it now */
	bpf_ringbuf_submit(e, op == IOT_MMAP && (e->mode & 4 /* PROT_EXEC */) ?
			      BPF_RB_FORCE_WAKEUP : rb_flags_at(e));
	return 0;
}

static __always_inline int emit_with_paths(struct task_struct *task, struct inflight *st,
					   __u16 op, __u64 now, __u64 pid_tgid, long ret, int p1,
					   int p2)
{
	__u32 zero = 0;
	struct big_event *b = bpf_map_lookup_elem(&scratch, &zero);
	long n1, n2 = 0;
	__u32 off, total;

	if (!b)
		return 0;
	fill_common(&b->ev, st, op, now, pid_tgid, ret);

	/* A successful open: identity of the new fd's file. */
	if ((op == IOT_OPEN || op == IOT_OPENAT || op == IOT_OPENAT2 ||
	     op == IOT_CREAT) && ret >= 0) {
		struct inflight *t = new_fd_identity(task, ret);
		if (t) {
			b->ev.ino = t->ino;
			b->ev.dev = t->dev;
			b->ev.fs_magic = t->magic;
			b->ev.imode = t->imode;
		}
		b->ev.fd = ret;
	}

	n1 = bpf_probe_read_user_str(b->s, IOT_PATH_MAX - 1, (void *)st->a[p1 & 7]);
	if (n1 <= 0) {
		b->s[0] = 0;
		n1 = 1;
	} else if (n1 >= IOT_PATH_MAX - 1) {
		b->ev.eflags |= IOT_EF_PATH_TRUNC;
		count(IOT_CNT_PATH_TRUNC);
	}
	off = n1 & (IOT_PATH_MAX - 1);
	total = off;
	if (p2 >= 0) {
		n2 = bpf_probe_read_user_str(&b->s[off], IOT_PATH_MAX, (void *)st->a[p2 & 7]);
		if (n2 <= 0) {
			b->s[off] = 0;
			n2 = 1;
		} else if (n2 >= IOT_PATH_MAX) {
			b->ev.eflags |= IOT_EF_PATH_TRUNC;
			count(IOT_CNT_PATH_TRUNC);
		}
		total = off + (n2 & (IOT_PATH_MAX - 1));
		if (n2 >= IOT_PATH_MAX)
			total = off + IOT_PATH_MAX;
	}
	total &= 2 * IOT_PATH_MAX - 1;
	b->ev.str_len = total;
	if (ring_output_batched(b, sizeof(b->ev) + total)) {
		count(IOT_CNT_DROPS);
		drop_op(op);
	}
	return 0;
}

/* The inet socket calls whose data or address is captured. */
static __always_inline bool inet_capture_call(struct inflight *st, __u16 op)
{
	if ((st->imode != S_IFSOCK_) || (st->xmode != AF_INET_ && st->xmode != AF_INET6_))
		return false;
	switch (op) {
	case IOT_READ: case IOT_WRITE: case IOT_READV: case IOT_WRITEV:
	case IOT_RECVFROM: case IOT_SENDTO: case IOT_RECVMSG: case IOT_SENDMSG:
	case IOT_CONNECT:
		return true;
	}
	return false;
}

/* A socket call of the job that moved the start of an HTTP message, or a
 * connect: the record with its payload (http_capture.h). False when there is
 * nothing to capture: the plain record is written instead. */
static __always_inline bool emit_inet(struct inflight *st, __u16 op, __u64 now, __u64 pid_tgid,
				      long ret)
{
	struct big_event *b;
	__u64 buf, len = 0;
	__u32 zero = 0, n;
	__u16 flag;

	if (op == IOT_CONNECT) {
		buf = st->a[1];
		len = st->a[2] > 28 ? 28 : st->a[2];   /* sizeof(struct sockaddr_in6) */
		flag = IOT_EF_NET_ADDR;
	} else {
		if (ret <= 0)
			return false;
		buf = sock_call_buffer(op, st->a, &len);
		if (len > (__u64)ret)
			len = ret;
		if (!http_buffer(buf, len) && !(is_send_op(op) && tls_client_hello(buf, len)))
			return false;
		flag = IOT_EF_NET_DATA;
	}
	b = bpf_map_lookup_elem(&scratch, &zero);
	if (!b)
		return false;
	fill_common(&b->ev, st, op, now, pid_tgid, ret);
	n = capture_bytes(b->s, buf, len);
	if (!n)
		return false;
	b->ev.eflags |= flag;
	b->ev.str_len = n;
	if (ring_output_batched(b, sizeof(b->ev) + (n & (2 * IOT_HTTP_CAP - 1)))) {
		count(IOT_CNT_DROPS);
		drop_op(op);
	}
	return true;
}

/* /dev/fuse (char 10:229, as a kernel dev_t) */
#define FUSE_DEV_ ((10u << 20) | 229u)

/*
 * A FUSE daemon's read of /dev/fuse takes one request (struct fuse_in_header:
 * len, opcode, unique, nodeid, uid, gid, pid); its write or writev of
 * /dev/fuse replies (struct fuse_out_header: len, error, unique). The header's
 * fields go in the record (IOT_EF_FUSE), so that a job's calls on a FUSE
 * mount can be tied to the daemon's work that served them.
 */
static __always_inline void fuse_header(struct inflight *st, __u16 op, struct iot_event *e,
					long ret)
{
	struct { __u32 len, opcode; __u64 unique, nodeid; __u32 uid, gid, pid; } in;
	struct { __u32 len; __s32 error; __u64 unique; } out;
	struct iovec iov;
	__u64 buf = st->a[1];

	if (ret <= 0)
		return;
	if (op == IOT_READV || op == IOT_WRITEV) {
		if (bpf_probe_read_user(&iov, sizeof(iov), (void *)st->a[1]))
			return;
		buf = (__u64)iov.iov_base;
	}
	if (op == IOT_READ || op == IOT_READV) {
		if (ret < (long)sizeof(in) || bpf_probe_read_user(&in, sizeof(in), (void *)buf))
			return;
		e->offset = in.unique;
		e->flags = in.opcode;
		e->arg = in.pid;
		e->req_bytes = in.nodeid;
	} else {
		if (ret < (long)sizeof(out) || bpf_probe_read_user(&out, sizeof(out), (void *)buf))
			return;
		e->offset = out.unique;
		e->flags = out.error;
	}
	e->eflags |= IOT_EF_FUSE;
}

static __always_inline int emit_fuse(struct inflight *st, __u16 op, __u64 now, __u64 pid_tgid,
				     long ret)
{
	struct iot_event *e = reserve_event();

	if (!e) {
		drop_op(op);
		return 0;
	}
	fill_common(e, st, op, now, pid_tgid, ret);
	fuse_header(st, op, e, ret);
	bpf_ringbuf_submit(e, rb_flags_at(e));
	return 0;
}

static __always_inline bool is_open_op(__u16 op)
{
	return op == IOT_OPEN || op == IOT_OPENAT || op == IOT_OPENAT2 || op == IOT_CREAT;
}

static __always_inline bool is_read_op(__u16 op)
{
	return op >= IOT_READ && op <= IOT_PREADV2;
}

/*
 * Profile mode: the call is added to the aggregate tables (profile.h). Its
 * record is still written when the trace needs it to name files: an open of
 * a file not named yet or of a directory, and the calls that change what a
 * relative path or an fd means (chdir, fchdir, dup, fcntl's dup, rename).
 */
static __always_inline void on_exit_profile(struct task_struct *task, struct inflight *st,
					    __u16 op, __u64 now, __u64 pid_tgid, long ret, int p1,
					    int p2)
{
	struct iot_event e;
	__u64 bytes = 0;
	bool name = false;

	fill_common(&e, st, op, now, pid_tgid, ret);   /* req_bytes as a full trace has it */
	if (ret > 0 && (op <= IOT_PWRITEV2 || op == IOT_SENDFILE || op == IOT_COPY_FILE_RANGE))
		bytes = ret;
	if (is_open_op(op) && ret >= 0) {
		struct inflight *t = new_fd_identity(task, ret);
		if (t) {
			e.ino = t->ino;
			e.dev = t->dev;
			e.fs_magic = t->magic;
			e.imode = t->imode;
			name = prof_name_needed(t->ino, t->dev, t->imode);
		}
	}
	/* an O_DIRECT read's bytes all came from storage, none through the cache */
	profile_add(st, pid_tgid >> 32, op, e.ino, e.dev, e.fs_magic, e.imode, e.req_bytes, ret,
		    bytes, now - st->ts,
		    (st->eflags & IOT_EF_DIRECT) && is_read_op(op) ? bytes : st->cache_added, now);
	switch (op) {
	case IOT_CHDIR: case IOT_FCHDIR: case IOT_DUP: case IOT_DUP2: case IOT_DUP3:
	case IOT_FCNTL: case IOT_RENAME: case IOT_RENAMEAT: case IOT_RENAMEAT2:
		name = ret >= 0;
		break;
	}
	if (!name)
		return;
	if (p1 >= 0)
		emit_with_paths(task, st, op, now, pid_tgid, ret, p1, p2);
	else
		emit_plain(st, op, now, pid_tgid, ret);
}

/* The run mode's job (its thread id) until it execs: it waits for the
 * go-ahead in a read that began before it was traced, iotrace's own call. */
__u32 job_tid = 0;

/* A return of a traced process's call whose entry was not seen: the call
 * began before the process was traced (an attach, a process joining a
 * followed cgroup) and returned before the recorder looked for calls in
 * progress (iot_in_progress). Counted: the call is not in the trace. */
static __always_inline void entry_unseen(const struct pt_regs *regs, __u16 op)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 a[6];

	if ((__u32)pid_tgid == job_tid || !is_traced(pid_tgid >> 32))
		return;
	syscall_args(regs, a);
	if (recorded_call(op, a))
		count(IOT_CNT_ENTRY_UNSEEN);
}

static __always_inline int on_exit_op(const struct pt_regs *regs, __u16 op, long ret)
{
	struct task_struct *task;
	struct inflight *st;
	__u64 pid_tgid, now;
	int p1, p2;

	/* Only a traced thread has entry state: no need for the traced map. */
	pid_tgid = bpf_get_current_pid_tgid();
	if (!maybe(pid_tgid >> 32))
		return 0;
	task = bpf_get_current_task_btf();
	st = bpf_task_storage_get(&inflight, task, 0, 0);
	if (st && op == IOT_MMAP)
		mapping_made(st, regs, ret);
	if (!st || !st->op || st->op != op) {
		entry_unseen(regs, op);
		return 0;
	}
	now = bpf_ktime_get_ns();

	/* a file the job wrote: its writeback is the job's */
	if (op >= IOT_WRITE && op <= IOT_PWRITEV2 && ret > 0)
		mark_job_file(st, pid_tgid >> 32, IOT_JOB_WROTE);
	p1 = path_args(op, &p2);
	if (profile_mode) {
		/* live use (recorder --live-http): a profile that still sends the
		 * HTTP message starts and connects of inet sockets, one record each */
		if (live_http && inet_capture_call(st, op))
			emit_inet(st, op, now, pid_tgid, ret);
		on_exit_profile(task, st, op, now, pid_tgid, ret, p1, p2);
		st->op = 0;
		return 0;
	}
	if (inet_capture_call(st, op) && emit_inet(st, op, now, pid_tgid, ret))
		;
	else if (st->xmode == FUSE_DEV_ && st->imode == S_IFCHR_ &&
		 (op == IOT_READ || op == IOT_READV || op == IOT_WRITE ||
		  op == IOT_WRITEV))
		emit_fuse(st, op, now, pid_tgid, ret);
	else if (p1 >= 0)
		emit_with_paths(task, st, op, now, pid_tgid, ret, p1, p2);
	else
		emit_plain(st, op, now, pid_tgid, ret);
	st->op = 0;
	/* a call that dropped a file's last reference left its release (and
	 * any freeing of its pages) to the thread's return to user space:
	 * timed to the rseq update that follows the kernel's work there */
	if ((op == IOT_MUNMAP || op == IOT_CLOSE || op == IOT_CLOSE_RANGE || op == IOT_DUP2 ||
	     op == IOT_DUP3) && task->task_works) {
		if (!rseq_registered(task)) {
			count(IOT_CNT_RELEASE_UNTIMED);
			return 0;
		}
		st->rel_ts = now;       /* where the call's record ends */
		st->rel_op = op;
		st->rel_fd = op == IOT_MUNMAP ? -1 : (int)st->a[0];
		st->rel_arg = st->a[0];
		st->rel_ino = op == IOT_MUNMAP ? 0 : st->ino;
		st->rel_dev = op == IOT_MUNMAP ? 0 : st->dev;
		st->rel_magic = op == IOT_MUNMAP ? 0 : st->magic;
		st->rel_imode = op == IOT_MUNMAP ? 0 : st->imode;
	}
	return 0;
}

/*
 * Two ways in, the loader picks one (syscall_hooks.c):
 * - fentry/fexit on each traced system call's kernel function: other system
 *   calls, and every process's system calls when none is traced, pay
 *   nothing (kernels with BPF trampolines, most distribution kernels);
 * - the sys_enter/sys_exit raw tracepoints: once attached, every system
 *   call of every process takes the kernel's slow path (any kernel with BTF).
 */
SEC("tp_btf/sys_enter")
int BPF_PROG(iot_sys_enter, struct pt_regs *regs, long id)
{
	if (id < 0 || id >= IOT_MAX_SYSCALLS)
		return 0;
	if (libaio_syscall(id))
		libaio_sys_enter(regs, id);
	return on_enter_op(regs, sys_op[id], sys_remaps[id]);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(iot_sys_exit, struct pt_regs *regs, long ret)
{
	long id = regs->orig_ax;

	if (libaio_syscall(id)) {
		libaio_sys_exit(id, ret);
		return 0;
	}
	if (id < 0 || id >= IOT_MAX_SYSCALLS || !sys_op[id])
		return 0;
	return on_exit_op(regs, sys_op[id], ret);
}

#define IOT_FENTRY(fn, op)							\
SEC("fentry/__x64_sys_" #fn)							\
int BPF_PROG(iot_fe_##fn, struct pt_regs *regs)					\
{										\
	return on_enter_op(regs, op, op == IOT_MMAP ? IOT_REMAP_MMAP :		\
			   op == IOT_MUNMAP ? IOT_REMAP_MUNMAP : 0);		\
}										\
SEC("fexit/__x64_sys_" #fn)							\
int BPF_PROG(iot_fx_##fn, struct pt_regs *regs, long ret)			\
{										\
	return on_exit_op(regs, op, ret);					\
}
IOT_SYSCALL_HOOKS(IOT_FENTRY)

/* fentry on a call iotrace does not record: only what any system call does
 * (on_enter_op with op 0) */
#define IOT_FENTRY_FLUSH(fn)							\
SEC("fentry/__x64_sys_" #fn)							\
int BPF_PROG(iot_ff_##fn, struct pt_regs *regs)					\
{										\
	return on_enter_op(regs, 0, IOT_REMAP_ALL);				\
}
IOT_FLUSH_HOOKS(IOT_FENTRY_FLUSH)

/* ---- calls in progress when the trace starts or stops ----------------- */

#define ENOSYS_ 38

/* Set by the loader when the syscall tracepoints are the hooks (not
 * fentry/fexit): their exit sees the return of a call that entered before
 * they were attached. */
const volatile bool tp_hooks = false;

/* The entry registers of a task inside a system call, else NULL. The
 * registers say so: orig_ax holds the call's number and ax the -ENOSYS the
 * kernel puts there until the call returns (a page fault leaves ax as the
 * program had it; an interrupt leaves orig_ax -1). A task asleep in a call
 * is in it for sure. One running (a read copying a large buffer, on another
 * CPU) is taken only with the tracepoint hooks: fexit would not see its
 * return (unseen_return). Its call may return while these registers are
 * read: then its state outlives it until the thread's next call, whose entry
 * counts it (IOT_CNT_RETURN_UNSEEN; its exit, if it ran before the state was
 * set, counted it too: IOT_CNT_ENTRY_UNSEEN). */
static __always_inline struct pt_regs *syscall_regs(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);

	if (!regs || (long)regs->ax != -ENOSYS_ || (long)regs->orig_ax < 0)
		return NULL;
	return regs;
}

/* A task whose call's return no hook will see: running, with fentry hooks. */
static __always_inline bool unseen_return(struct task_struct *task)
{
	return task->__state == 0 /* TASK_RUNNING */ && !tp_hooks;
}

static __always_inline struct pt_regs *in_syscall(struct task_struct *task)
{
	return unseen_return(task) ? NULL : syscall_regs(task);
}

/* When the recorder stopped the trace (emptied the traced slots), set just
 * before it runs iot_unfinished. */
__u64 stop_ns = 0;

/*
 * Run once by the recorder after the trace has stopped: every thread whose
 * system call entered but had not returned by stop_ns (a read on a hung
 * mount, a wait for a batch) gets a record of it, with eflags
 * IOT_EF_UNFINISHED, dur_ns up to stop_ns and ret 0, written to the
 * iterator's output (not the ring buffer). Its arguments in user memory
 * (iovecs, timespecs) are not read: that memory is not the recorder's.
 */
SEC("iter/task")
int iot_unfinished(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct inflight *st;
	struct iot_event e = {};
	__u64 pid_tgid;

	if (!task)
		return 0;
	st = bpf_task_storage_get(&inflight, task, 0, 0);
	if (!st || !st->op || !st->ts || st->ts >= stop_ns)
		return 0;
	/* A call in progress when an attach began: fexit does not see the
	 * return of a call that entered before its trampoline existed, and one
	 * that returned while iot_in_progress set its state returned unseen: its
	 * state may outlive it. Still in progress if the thread is in that same
	 * call. */
	if (st->eflags & IOT_EF_BEGAN_BEFORE) {
		struct pt_regs *regs = in_syscall(task);

		if (!regs || regs->orig_ax != st->sysnr) {
			count(IOT_CNT_RETURN_UNSEEN);
			return 0;
		}
	}
	pid_tgid = (__u64)task->tgid << 32 | (__u32)task->pid;
	fill_call(&e, st, st->op, stop_ns, pid_tgid, 0, false);
	e.eflags |= IOT_EF_UNFINISHED;
	bpf_seq_write(ctx->meta->seq, &e, sizeof(e));
	return 0;
}

/* When tracing started, set before the recorder runs iot_in_progress; and
 * whose calls it looks for: 0, every traced process's (an attach's start),
 * else that process's only (one that joined a followed cgroup later: the
 * others' calls in progress have their state already). */
__u64 start_ns = 0;
__u32 only_tgid = 0;

/*
 * Run once by the recorder when an attach has its processes: every thread of
 * theirs that is inside a system call iotrace records (asleep: a read of a
 * hung mount, a wait for a batch; running, with the tracepoint hooks: a read
 * copying a large buffer) gets that call's entry state, as if its entry had
 * been seen when tracing started, with eflags IOT_EF_BEGAN_BEFORE. Its
 * return, during the trace, is then recorded as any call's, and a call still
 * in progress at the end is listed by iot_unfinished (in_syscall says which
 * call a thread is in).
 */
SEC("iter/task")
int iot_in_progress(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct inflight *st;
	struct pt_regs *regs;
	__u32 tgid;
	__u64 a[6];
	long nr;
	__u16 op;

	if (!task)
		return 0;
	tgid = task->tgid;
	if ((only_tgid && tgid != only_tgid) || !is_traced(tgid))
		return 0;
	regs = syscall_regs(task);
	if (!regs)
		return 0;
	nr = regs->orig_ax;   /* read again: the verifier bounds this copy */
	if (nr < 0 || nr >= IOT_MAX_SYSCALLS)
		return 0;
	op = sys_op[nr];
	if (!op)
		return 0;
	syscall_args(regs, a);
	if (!recorded_call(op, a))
		return 0;
	if (unseen_return(task)) {   /* running, with fentry hooks: lost, counted */
		count(IOT_CNT_RETURN_UNSEEN);
		return 0;
	}
	st = bpf_task_storage_get(&inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st || st->op)   /* its entry was seen: it entered after the probes */
		return 0;
	enter_call(task, st, op, a, tgid, false);
	st->eflags |= IOT_EF_BEGAN_BEFORE;
	st->sysnr = nr;
	st->ts = start_ns;
	/* last: the call's exit takes the state once op is set */
	st->op = op;
	bpf_seq_write(ctx->meta->seq, &op, sizeof(op));
	return 0;
}

/*
 * Profile mode, run once by the recorder at the end, after the probes are
 * detached and no program of theirs is still running: every thread's sums
 * not yet sent (profile.h) go to the recorder.
 */
SEC("iter/task")
int iot_prof_flush(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct inflight *st;

	if (!task || !profile_mode)
		return 0;
	st = bpf_task_storage_get(&inflight, task, 0, 0);
	if (st)
		profile_flush_thread(st);
	return 0;
}

/* ---- lock contention --------------------------------------------------- */

/* Whether LOCK is one of iotrace's own ring buffers' locks. A reserve that
 * waits for one fires the contention tracepoints inside the program that
 * reserves, and contention_end fires with the lock held: a record reserved
 * there would take the same lock again on this CPU, a deadlock before 6.15
 * (raw spinlock) and on later kernels (resilient spinlock) a wait that only
 * gives up after its timeout, a quarter of a second each, which all but
 * stopped an 8-thread pread loop on 16 CPUs. These waits are iotrace's cost,
 * not the job's: counted (IOT_CNT_OWN_LOCK_WAITS), never recorded. */
static __always_inline bool own_ring_lock(void *lock)
{
	/* the ring a reserve on this CPU takes: this CPU's */
	struct bpf_ringbuf_map *m = cpu_ring();
	struct bpf_ringbuf *pr = ((struct bpf_ringbuf_map *)&prof_ring)->rb;

	if ((__u64)lock == (__u64)&pr->spinlock)
		return true;
	return m && (__u64)lock == (__u64)&m->rb->spinlock;
}

SEC("tp_btf/contention_begin")
int BPF_PROG(iot_lock_begin, void *lock, unsigned int flags)
{
	struct inflight *st;

	if (!is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	if (own_ring_lock(lock)) {
		count(IOT_CNT_OWN_LOCK_WAITS);
		/* inside iot_lock_end's own record of another wait: the kernel
		 * skips this wait's end (iot_lock_end is running on this CPU)
		 * and counts it a miss; the recorder takes these back out */
		st = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
		if (st && st->lock_end_busy)
			count(IOT_CNT_LOCK_END_NESTED);
		return 0;
	}
	st = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		count(IOT_CNT_NO_STORAGE);
		return 0;
	}
	/* A mutex may spin, then sleep: the first begin opens the wait. */
	if (!st->lock_ts) {
		st->lock_ts = bpf_ktime_get_ns();
		st->lock_addr = (__u64)lock;
		st->lock_flags = flags;
	}
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(iot_lock_end, void *lock, int ret)
{
	struct inflight *st;
	struct iot_event *e;
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!is_traced(pid_tgid >> 32) || own_ring_lock(lock))
		return 0;
	st = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (!st || !st->lock_ts)
		return 0;
	st->lock_end_busy = 1;
	if (profile_mode) {
		__u64 now = bpf_ktime_get_ns();
		profile_add(st, pid_tgid >> 32, IOT_LOCK_CONTENTION, 0, 0, 0, 0, 0, ret, 0,
			    now - st->lock_ts, 0, now);
		st->lock_ts = 0;
		st->lock_end_busy = 0;
		return 0;
	}
	e = reserve_event();
	st->lock_end_busy = 0;
	if (!e) {
		st->lock_ts = 0;
		return 0;
	}
	blank_event(e, IOT_LOCK_CONTENTION, pid_tgid >> 32, (__u32)pid_tgid);
	e->ts_ns = st->lock_ts;
	e->dur_ns = bpf_ktime_get_ns() - st->lock_ts;
	e->ret = ret;
	e->arg = st->lock_addr;
	e->flags = st->lock_flags;
	st->lock_ts = 0;
	bpf_ringbuf_submit(e, rb_flags_at(e));
	return 0;
}

/* ---- process and thread life ------------------------------------------ */

static __always_inline struct big_event *life_event(__u16 op, __u32 pid, __u32 tid, __s64 ret)
{
	__u32 zero = 0;
	struct big_event *b = bpf_map_lookup_elem(&scratch, &zero);

	if (!b)
		return NULL;
	blank_event(&b->ev, op, pid, tid);
	b->ev.ts_ns = bpf_ktime_get_ns();
	b->ev.ret = ret;
	return b;
}

static __always_inline void life_emit(struct big_event *b, __u32 len)
{
	len &= 2 * IOT_PATH_MAX - 1;
	b->ev.str_len = len;
	if (ring_output(b, sizeof(b->ev) + len, BPF_RB_FORCE_WAKEUP))
		count(IOT_CNT_DROPS);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(iot_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	struct big_event *b;
	__u8 one = 1;

	if (!is_traced(ptgid))
		return 0;
	if (ctgid != ptgid) {
		if (bpf_map_update_elem(&traced, &ctgid, &one, BPF_ANY)) {
			count(IOT_CNT_TRACED_FULL);
			return 0;
		}
		slot_add(ctgid);
		__sync_fetch_and_add(&live_procs, 1);
		b = life_event(IOT_PROC_FORK, ptgid, parent->pid, ctgid);
	} else {
		b = life_event(IOT_THREAD_NEW, ptgid, parent->pid, child->pid);
	}
	if (!b)
		return 0;
	b->ev.arg = child->pid;
	bpf_probe_read_kernel_str(b->s, 16, child->comm);
	life_emit(b, 16);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(iot_exec, struct task_struct *p, pid_t old_pid)
{
	__u32 tgid = p->tgid;
	struct big_event *b;
	unsigned long start, end;
	__u32 len;

	if (!is_traced(tgid))
		return 0;
	{
		/* a new address space: the old one's mappings mean nothing */
		struct inflight *st = bpf_task_storage_get(&inflight, p, 0, 0);

		if (st)
			forget_range(st, 0, ~0ull);
	}
	b = life_event(IOT_PROC_EXEC, tgid, p->pid, 0);
	if (!b)
		return 0;
	b->ev.arg = old_pid;
	start = BPF_CORE_READ(p, mm, arg_start);
	end = BPF_CORE_READ(p, mm, arg_end);
	len = end - start;
	if (len >= IOT_CMDLINE_MAX) {
		len = IOT_CMDLINE_MAX - 1;
		b->ev.eflags |= IOT_EF_PATH_TRUNC;
		count(IOT_CNT_PATH_TRUNC);
	}
	len &= IOT_CMDLINE_MAX - 1;
	if (bpf_probe_read_user(b->s, len, (void *)start))
		len = 0;
	life_emit(b, len);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(iot_exit, struct task_struct *p)
{
	__u32 tgid = p->tgid;
	struct big_event *b;
	struct inflight *st;
	int code;
	bool group_dead;

	if (!is_traced(tgid)) {
		/* tracing has stopped (or never traced it): a profile's sums the
		 * thread still holds go to the tables (the recorder keeps this
		 * probe until its iterator has added the other threads') */
		if (profile_mode) {
			st = bpf_task_storage_get(&inflight, p, 0, 0);
			if (st)
				profile_flush_thread(st);
		}
		return 0;
	}
	st = bpf_task_storage_get(&inflight, p, 0, 0);
	if (st && st->fault_ts)
		flush_fault(st, tgid, p->pid);
	if (st && st->fill_ts)
		flush_fill(st, tgid, p->pid);
	if (st)
		release_untimed(st);
	if (st && profile_mode)
		profile_flush_thread(st);
	code = BPF_CORE_READ(p, exit_code);
	group_dead = BPF_CORE_READ(p, signal, live.counter) == 0;
	if (group_dead) {
		if (BPF_CORE_READ(p, signal, flags) & SIGNAL_GROUP_EXIT_)
			code = BPF_CORE_READ(p, signal, group_exit_code);
	}
	b = life_event(group_dead ? IOT_PROC_EXIT : IOT_THREAD_EXIT, tgid, p->pid, code);
	if (!b)
		return 0;
	life_emit(b, 0);
	if (group_dead) {
		slot_remove(tgid);
		/* the recorder may have removed it first (a process that was
		 * already gone when it was added): counted once */
		if (!bpf_map_delete_elem(&traced, &tgid))
			__sync_fetch_and_add(&live_procs, -1);
	}
	return 0;
}

SEC("tp_btf/task_rename")
int BPF_PROG(iot_rename, struct task_struct *task, const char *comm)
{
	__u32 tgid = task->tgid;
	struct big_event *b;

	if (!is_traced(tgid))
		return 0;
	b = life_event(IOT_TASK_RENAME, tgid, task->pid, 0);
	if (!b)
		return 0;
	bpf_probe_read_kernel_str(b->s, 16, comm);
	life_emit(b, 16);
	return 0;
}

/* ---- off-CPU intervals and who woke whom --------------------------------- */

/* Per traced thread: when it left the CPU, and the wake-up that ended it. */
struct offcpu_state {
	__u64 off_ts;     /* switch-out, 0 while on CPU */
	__u64 wake_ts;    /* first wake-up after the switch-out, 0 if none yet */
	__u64 waker;      /* the waker's pid_tgid */
	__u32 state;      /* task state at switch-out (0: preempted) */
	__u32 irq;        /* the wake-up came in an interrupt: no task woke it */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_state);
} offcpu SEC(".maps");

static __always_inline __u32 task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return 0;
}

/* Profile mode (the recorder's --loop-waits, for live use): no interval
 * records, only the blocks another thread of the job ended (a loop waiting
 * for its loader's workers, a worker for its indices), one ring record each
 * (IOT_PROF_WAKE, bpf/iotrace.h). Preempted threads, wake-ups by interrupts
 * (a timer, an I/O completion) and by processes not traced are left out. */
static __always_inline void prof_wake(struct offcpu_state *o, struct task_struct *next, __u64 now)
{
	__u32 waker_tgid = o->waker >> 32, waker_tid = (__u32)o->waker;
	struct iot_prof_sums *r;

	if (!o->state || !o->wake_ts || o->irq || !waker_tid || waker_tid == (__u32)next->pid ||
	    !maybe(waker_tgid) || !is_traced(waker_tgid))
		return;
	r = bpf_ringbuf_reserve(&prof_ring, sizeof(*r), 0);
	if (!r) {
		count(IOT_CNT_PROF_WAKE_LOST);
		return;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->k.op = IOT_PROF_WAKE;
	r->k.pid = next->tgid;
	r->k.ino = ((__u64)(__u32)next->pid << 32) | waker_tid;
	r->k.dev = waker_tgid;
	r->v.calls = 1;
	r->v.dur_ns = now - o->off_ts;
	r->sec = now / 1000000000ull;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(iot_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct offcpu_state *o;
	struct iot_event *e;
	__u32 ptgid = prev->tgid, ntgid = next->tgid;
	__u64 now;

	if (!maybe(ptgid) && !maybe(ntgid))
		return 0;
	now = bpf_ktime_get_ns();
	if (maybe(ptgid) && is_traced(ptgid)) {
		o = bpf_task_storage_get(&offcpu, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (o) {
			o->off_ts = now;
			o->wake_ts = 0;
			o->waker = 0;
			o->irq = 0;
			o->state = preempt ? 0 : task_state(prev);
		} else {
			count(IOT_CNT_NO_STORAGE);
		}
	}
	if (!maybe(ntgid))
		return 0;
	o = bpf_task_storage_get(&offcpu, next, 0, 0);
	if (!o || !o->off_ts)
		return 0;
	if (profile_mode) {
		prof_wake(o, next, now);
		o->off_ts = 0;
		return 0;
	}
	e = reserve_event();
	if (!e) {
		o->off_ts = 0;
		return 0;
	}
	blank_event(e, IOT_OFFCPU, ntgid, next->pid);
	e->ts_ns = o->off_ts;
	e->dur_ns = now - o->off_ts;
	e->flags = o->state;
	e->ret = (__u32)o->waker;
	e->arg = o->waker >> 32;
	e->offset = o->wake_ts ? (__s64)(o->wake_ts - o->off_ts) : -1;
	if (o->wake_ts && o->irq)
		e->eflags |= IOT_EF_IRQ_WAKE;
	if (o->state) {
		/* blocked (not preempted) during a page fault: the fault's stall */
		struct inflight *st = bpf_task_storage_get(&inflight, next, 0, 0);
		if (st && st->fault_ts)
			st->fault_blocked += e->dur_ns;
	}
	o->off_ts = 0;
	bpf_ringbuf_submit(e, rb_flags_at(e));
	return 0;
}

/* Interrupt context, per CPU: a bit for each kind the CPU is in (a hard
 * interrupt handler, a softirq, an hrtimer callback, which runs in a hard
 * interrupt or a softirq), set by its entry tracepoint and cleared by its
 * exit. Bits, not a depth count: a count is wrong for good once an entry is
 * seen without its exit (the exit's program attached after the entry's,
 * during a handler: every later wake-up on that CPU then passed for an
 * interrupt's), where a bit is right again at the next exit of its kind,
 * within a timer tick. Kinds do not nest in themselves, but for an hrtimer
 * of a hard interrupt inside one of a softirq: the rest of the outer one
 * then passes for task context. The preempt count would say all this
 * directly, but a per-CPU variable's address needs a kernel built with
 * CONFIG_KALLSYMS_ALL, which many are not. NMIs wake no task. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} irq_kinds SEC(".maps");

enum { IRQ_HARD = 1, IRQ_SOFT = 2, IRQ_HRTIMER = 4 };

static __always_inline int irq_mark(__u32 kind, int in)
{
	__u32 zero = 0, *k = bpf_map_lookup_elem(&irq_kinds, &zero);

	if (k)
		*k = in ? (*k | kind) : (*k & ~kind);
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(iot_irq_enter) { return irq_mark(IRQ_HARD, 1); }
SEC("tp_btf/irq_handler_exit")
int BPF_PROG(iot_irq_exit) { return irq_mark(IRQ_HARD, 0); }
SEC("tp_btf/softirq_entry")
int BPF_PROG(iot_softirq_enter) { return irq_mark(IRQ_SOFT, 1); }
SEC("tp_btf/softirq_exit")
int BPF_PROG(iot_softirq_exit) { return irq_mark(IRQ_SOFT, 0); }
SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(iot_hrtimer_enter) { return irq_mark(IRQ_HRTIMER, 1); }
SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(iot_hrtimer_exit) { return irq_mark(IRQ_HRTIMER, 0); }

static __always_inline bool in_irq_context(void)
{
	__u32 zero = 0, *k = bpf_map_lookup_elem(&irq_kinds, &zero);

	return k && *k;
}

/* sched_waking runs in the waker's context: current is the waker, except
 * in an interrupt (a timer expiring, an I/O completing), where current is
 * whatever task was running: the wake-up is then the kernel's (waker 0,
 * IOT_EF_IRQ_WAKE), never the interrupted task's. */
SEC("tp_btf/sched_waking")
int BPF_PROG(iot_sched_waking, struct task_struct *p)
{
	struct offcpu_state *o;
	__u32 tgid = p->tgid;

	if (!maybe(tgid))
		return 0;
	o = bpf_task_storage_get(&offcpu, p, 0, 0);
	if (!o || !o->off_ts || o->wake_ts)
		return 0;
	o->wake_ts = bpf_ktime_get_ns();
	if (in_irq_context()) {
		o->waker = 0;
		o->irq = 1;
	} else {
		o->waker = bpf_get_current_pid_tgid();
		o->irq = 0;
	}
	return 0;
}

/* ---- page cache and page faults ---------------------------------------- */

/* Local CO-RE flavours of struct folio: 6.1 keeps the order of a large folio
 * in _folio_order, later kernels in the low byte of _flags_1. */
struct folio___v61 { unsigned char _folio_order; } __attribute__((preserve_access_index));
struct folio___v67 { unsigned long _flags_1; } __attribute__((preserve_access_index));

static __always_inline __u64 folio_bytes(struct folio *f)
{
	unsigned long flags = 0;
	unsigned int order = 0;

	/* the page flags word is first in a folio on every kernel (an unsigned
	 * long in 6.1, a struct holding one in 6.17+: no CO-RE relocation fits both) */
	bpf_probe_read_kernel(&flags, sizeof(flags), f);
	if (flags & (1UL << bpf_core_enum_value(enum pageflags, PG_head))) {
		struct folio___v61 *o = (void *)f;
		struct folio___v67 *n = (void *)f;
		if (bpf_core_field_exists(o->_folio_order))
			order = BPF_CORE_READ(o, _folio_order);
		else if (bpf_core_field_exists(n->_flags_1))
			order = BPF_CORE_READ(n, _flags_1) & 0xff;
	}
	return 4096ULL << (order & 31);
}

/* Pages enter the page cache in the context of the thread that needs them
 * (a read's demand misses and readahead, a fault's): counted for the call or
 * fault in flight when they belong to its file; other additions by the job
 * to regular files (io_uring and libaio reads run outside a read call) in
 * cache_fill records, and all other additions in a counter. */
SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(iot_cache_add, struct folio *folio)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct inode *host;
	struct inflight *st;
	__u64 ino, bytes;
	__u32 dev;

	if (!maybe(tgid))
		return 0;
	st = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (!st) {
		/* a thread that never made a system call: an io_uring worker */
		if (!is_traced(tgid))
			return 0;
		st = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0,
					  BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!st)
			return 0;
	}
	host = BPF_CORE_READ(folio, mapping, host);
	ino = BPF_CORE_READ(host, i_ino);
	dev = BPF_CORE_READ(host, i_sb, s_dev);
	bytes = folio_bytes(folio);
	if (st->op && st->op <= IOT_PWRITEV2 && ino == st->ino && dev == st->dev)
		st->cache_added += bytes;
	else if (st->fault_ts && ino == st->fault_ino && dev == st->fault_dev)
		st->fault_added += bytes;
	else if (is_traced(tgid)) {
		__u64 now;

		count_add(IOT_CNT_CACHE_OTHER_BYTES, bytes);
		if ((BPF_CORE_READ(host, i_mode) & S_IFMT_) != S_IFREG_)
			return 0;
		now = bpf_ktime_get_ns();
		if (st->fill_ts && (st->fill_ino != ino || st->fill_dev != dev))
			flush_fill(st, tgid, (__u32)bpf_get_current_pid_tgid());
		if (!st->fill_ts) {
			st->fill_ts = now;
			st->fill_ino = ino;
			st->fill_dev = dev;
			st->fill_magic = BPF_CORE_READ(host, i_sb, s_magic);
			st->fill_added = 0;
		}
		st->fill_added += bytes;
		st->fill_last = now;
	}
	return 0;
}

/* The thread returns to user space after kernel work a signal, a preemption
 * or task work asked for (glibc registers every thread's rseq area, and the
 * kernel updates it there): the end of a pending release. */
SEC("tp_btf/rseq_update")
int BPF_PROG(iot_rseq_update, struct task_struct *t)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct inflight *st;

	if (!maybe(pid_tgid >> 32))
		return 0;
	st = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (st && st->rel_ts)
		flush_release(st, pid_tgid >> 32, (__u32)pid_tgid, bpf_ktime_get_ns());
	return 0;
}

/* bpf_find_vma's callback (its context must be on the stack): the
 * mapping's range and, for a file on storage, its identity. */

static long vma_file_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_file *f = data;
	struct file *file = vma->vm_file;
	struct inode *inode;

	f->start = vma->vm_start;
	f->end = vma->vm_end;
	f->pgoff = vma->vm_pgoff;
	if (!file)
		return 0;
	inode = BPF_CORE_READ(file, f_inode);
	f->magic = BPF_CORE_READ(inode, i_sb, s_magic);
	/* memory-backed files (shared memory between loader workers, memfd):
	 * no storage behind them, and a DataLoader faults thousands of their
	 * pages per batch */
	if (f->magic == TMPFS_MAGIC_ || f->magic == RAMFS_MAGIC_)
		return 0;
	f->ino = BPF_CORE_READ(inode, i_ino);
	f->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	f->imode = BPF_CORE_READ(inode, i_mode) & S_IFMT_;
	return 0;
}

/* A user-mode page fault of a traced thread: kept pending when the address
 * is in a mapping of a file on storage (anonymous memory, tmpfs and ramfs
 * are not I/O). */
SEC("tp_btf/page_fault_user")
int BPF_PROG(iot_page_fault, unsigned long address, struct pt_regs *regs,
	     unsigned long error_code)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct task_struct *task;
	struct inflight *st;

	if (!is_traced(pid_tgid >> 32))
		return 0;
	task = bpf_get_current_task_btf();
	st = bpf_task_storage_get(&inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		count(IOT_CNT_NO_STORAGE);
		return 0;
	}
	if (st->fault_ts)
		flush_fault(st, pid_tgid >> 32, (__u32)pid_tgid);
	/* bpf_find_vma costs microseconds (the mmap lock, released from an irq
	 * work here): only outside the two mappings the last faults were in or
	 * the thread last made */
	struct vma_file *v = NULL;
	long err;
#pragma unroll
	for (int i = 0; i < IOT_VMA_CACHE; i++)
		if (!v && address >= st->vma[i].start && address < st->vma[i].end)
			v = &st->vma[i];
	if (!v) {
		struct vma_file f = {};

		struct mm_struct *mm = task->mm;

		v = next_vma_entry(st);
		if (!v)
			return 0;
		v->end = 0;
		/* the heap (brk) is anonymous memory: no lookup */
		if (mm && address >= mm->start_brk && address < mm->brk) {
			v->start = mm->start_brk;
			v->end = mm->brk;
			v->ino = 0;
			return 0;
		}
		err = bpf_find_vma(task, address, vma_file_cb, &f, 0);
		if (err) {
			/* -ENOENT: no mapping there (the fault is a SIGSEGV);
			 * -EBUSY: the mmap lock or the unlock's irq work was
			 * busy: a fault, maybe on a file, not recorded */
			if (err != -2)
				count(IOT_CNT_FAULT_UNRESOLVED);
			return 0;
		}
		*v = f;
	}
	if (!v->ino)
		return 0;
	st->fault_addr = address;
	st->fault_off = (((address - v->start) >> 12) + v->pgoff) << 12;
	st->fault_ino = v->ino;
	st->fault_dev = v->dev;
	st->fault_magic = v->magic;
	st->fault_imode = v->imode;
	st->fault_error = error_code;
	st->fault_added = 0;
	st->fault_blocked = 0;
	st->fault_ts = bpf_ktime_get_ns();
	return 0;
}
