/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * State iotrace.bpf.c keeps and block.bpf.c reads (the recorder hands the
 * core object's maps to the block object, as with shared_maps.h): each traced
 * thread's call in flight, and the files the job read or wrote (so that the
 * requests kernel threads submit for them, writeback and bios an I/O
 * throttle held back, are charged to the job).
 */
#ifndef IOTRACE_TASK_STATE_H
#define IOTRACE_TASK_STATE_H

/* Profile mode (profile.h): a thread's running sums for one key, sent to
 * the recorder when the key changes, the second ends or the thread exits;
 * v.calls 0: empty. */
struct prof_slot {
	struct iot_prof_key k;
	struct iot_prof_val v;
	__u32 sec;        /* the second its calls ended in */
	__u32 pad;
};

/* Per-thread state between entry and exit of a call, of a lock wait, and of
 * a page fault on a file mapping. */
/* A mapping's range and, for a file on storage, its identity (ino 0:
 * anonymous memory, tmpfs, ramfs; end 0: no entry). */
struct vma_file {
	__u64 start, end, pgoff, ino;
	__u32 dev, magic;
	__u16 imode;
	__u16 pad[3];
};

#define IOT_VMA_CACHE 16

struct inflight {
	__u64 ts;
	__u64 a[6];
	__s64 pos;
	__u64 ino;
	__u32 dev;
	__u32 magic;
	__u16 imode;
	__u16 op;         /* the call in flight (0: none) */
	__u16 eflags;
	__u16 sysnr;      /* eflags BEGAN_BEFORE: the call's system call number */
	__u32 xmode;      /* the fd's kind detail: socket family or char/block dev_t */
	__u32 pad2;
	__u64 lock_ts;
	__u64 lock_addr;
	__u32 lock_flags;
	__u32 lock_end_busy;	/* iot_lock_end is writing a wait of this thread */
	/* bytes this thread added to the page cache for the call's file during
	 * the call: what a read had to fetch from storage (demand and readahead) */
	__u64 cache_added;
	/* a user page fault on a file mapping, until the thread's next fault,
	 * system call or exit (the fault tracepoint has no exit) */
	__u64 fault_ts;
	__u64 fault_addr;
	__s64 fault_off;      /* file offset of the faulting page */
	__u64 fault_ino;
	__u32 fault_dev;
	__u32 fault_magic;
	__u64 fault_added;    /* page-cache bytes added for the file meanwhile */
	__u64 fault_blocked;  /* ns blocked off CPU meanwhile (not preemption) */
	__u32 fault_error;    /* the fault's x86 error code (bit 1: write) */
	__u16 fault_imode;
	__u16 pad4;
	/* mappings the thread's faults looked up or the thread made, so that a
	 * run of faults in a few mappings (a loop filling an array, a copy from
	 * one to another: a DataLoader's batch built from its workers' shared
	 * memory) looks each up once. The thread's own munmap, mmap MAP_FIXED
	 * and brk forget the entries they overlap; mremap, shmat, shmdt and
	 * exec all (another thread's changes are not seen: a fault in a range
	 * another thread remapped meanwhile keeps the old identity) */
	struct vma_file vma[IOT_VMA_CACHE];
	__u32 vma_next;       /* the entry the next lookup replaces */
	__u32 pad3;
	/* page-cache additions of one file outside a read, write or fault of it
	 * (io_uring and libaio reads, in-kernel copies), summed until the thread
	 * adds for another file, makes a system call or exits */
	__u64 fill_ts;        /* first addition (0: none pending) */
	__u64 fill_last;
	__u64 fill_ino;
	__u64 fill_added;
	__u32 fill_dev;
	__u32 fill_magic;
	/* a call that left the kernel work to do on the way back to user space
	 * (its last fput of a file): its return, until the thread is back there */
	__u64 rel_ts;         /* the call's return (0: none pending) */
	__u64 rel_arg;        /* its first argument */
	__u64 rel_ino;        /* its file (close, dup2/3) */
	__u32 rel_dev;
	__u32 rel_magic;
	__s32 rel_fd;
	__u16 rel_op;
	__u16 rel_imode;
	/* the file this thread last marked in job_files, and how (IOT_JOB_*
	 * bits >> 32): a run of reads of one file updates the map once */
	__u64 jf_ino;
	__u32 jf_dev;
	__u32 jf_bits;
	/* profile mode: two keys, summed here without atomics (only the
	 * thread writes them while it is traced) */
	struct prof_slot prof[2];
	/* set while the thread's own program changes the slots: a program that
	 * runs nested in it on the same thread (a kernel lock contended inside
	 * the ring buffer's reserve) sends its call on its own */
	__u32 prof_busy;
	__u32 prof_older;   /* which slot took its key first (the one to reuse) */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct file_key {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

#define IOT_JOB_READ  (1ULL << 32)
#define IOT_JOB_WROTE (1ULL << 33)

/* Regular files the job read or wrote -> the last such tgid (low 32 bits)
 * | IOT_JOB_READ | IOT_JOB_WROTE. LRU: the oldest go
 * first when a job writes more files than this. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct file_key);
	__type(value, __u64);
} job_files SEC(".maps");

#endif
