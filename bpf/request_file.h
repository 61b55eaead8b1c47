/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What asynchronous requests (io_uring in bpf/aio.bpf.c, libaio in
 * bpf/libaio.h) keep between submission and completion, and the identity and
 * job-file mark of the file a request works on. Each object that includes it
 * gets its own per-CPU caches.
 */
#ifndef IOTRACE_REQUEST_FILE_H
#define IOTRACE_REQUEST_FILE_H

#include "direct_reads.h"

#ifndef S_IFMT_
#define S_IFMT_ 0170000
#endif
#ifndef S_IFREG_
#define S_IFREG_ 0100000
#endif

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

#ifdef IOT_DIRECT_READS
/* The identity of a struct file into a record's ino/dev/fs_magic/imode:
 * direct loads (direct_reads.h), cheaper than the cache below. */
static __always_inline void file_identity(struct file *f, struct iot_event *e)
{
	struct inode *inode;
	struct super_block *sb;

	if (!f)
		return;
	f = AS_KERNEL(f, struct file);
	if (f->f_flags & IOT_O_DIRECT)
		e->eflags |= IOT_EF_DIRECT;
	inode = f->f_inode;
	if (!inode)
		return;
	e->imode = inode->i_mode & S_IFMT_;
	e->ino = inode->i_ino;
	sb = inode->i_sb;
	if (!sb)
		return;
	e->dev = sb->s_dev;
	e->fs_magic = sb->s_magic;
}

/* A task's open file by its fd (NULL where there is none). */
static __always_inline struct file *fd_to_file(struct task_struct *task, int fd)
{
	struct files_struct *files = AS_KERNEL(task, struct task_struct)->files;
	struct fdtable *fdt;

	if (!files)
		return NULL;
	fdt = files->fdt;
	if (!fdt || fd < 0 || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	return file_in_slot(&fdt->fd[fd]);
}
#else
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
#endif

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
static __always_inline void mark_request_file(__u32 tgid, const struct iot_event *id, __u64 how)
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

#endif
