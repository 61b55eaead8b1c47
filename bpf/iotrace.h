/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * iotrace record ABI: shared by bpf/iotrace.bpf.c (writer) and the recorder
 * (userspace/recorder/recorder.c), and mirrored by the numpy dtype in
 * userspace/iotrace/abi.py. Change all three together and bump IOT_ABI_VERSION.
 */
#ifndef IOTRACE_H
#define IOTRACE_H

#define IOT_ABI_VERSION 1

#define IOT_MAX_SYSCALLS 512   /* size of the syscall-number -> op table */
#define IOT_PATH_MAX 4096      /* one path (bytes, with NUL) */
#define IOT_CMDLINE_MAX 4096   /* argv of an exec, NUL-separated */
#define IOT_IOV_MAX 64         /* iovecs summed for readv/writev; more are flagged */

/* Operations. The order is part of the ABI; Python names them (abi.py). */
enum iot_op {
	IOT_OP_NONE = 0,
	/* reads */
	IOT_READ, IOT_PREAD64, IOT_READV, IOT_PREADV, IOT_PREADV2,
	/* writes */
	IOT_WRITE, IOT_PWRITE64, IOT_WRITEV, IOT_PWRITEV, IOT_PWRITEV2,
	/* position and sync */
	IOT_LSEEK, IOT_FSYNC, IOT_FDATASYNC, IOT_SYNC_FILE_RANGE,
	/* open / close / fd aliases */
	IOT_OPEN, IOT_OPENAT, IOT_OPENAT2, IOT_CREAT, IOT_CLOSE, IOT_CLOSE_RANGE,
	IOT_DUP, IOT_DUP2, IOT_DUP3, IOT_FCNTL,
	/* working directory */
	IOT_CHDIR, IOT_FCHDIR,
	/* metadata */
	IOT_STAT, IOT_LSTAT, IOT_FSTAT, IOT_NEWFSTATAT, IOT_STATX, IOT_GETDENTS64,
	IOT_UNLINK, IOT_UNLINKAT, IOT_RENAME, IOT_RENAMEAT, IOT_RENAMEAT2,
	IOT_MKDIR, IOT_MKDIRAT, IOT_RMDIR,
	/* memory maps */
	IOT_MMAP, IOT_MUNMAP,
	/* in-kernel copies (read one fd, write another) and space/advice calls */
	IOT_SENDFILE, IOT_COPY_FILE_RANGE, IOT_FADVISE64, IOT_FALLOCATE, IOT_FTRUNCATE,
	/* lock waits */
	IOT_FUTEX, IOT_LOCK_CONTENTION,
	/* process and thread life (not system calls) */
	IOT_PROC_FORK,    /* new process: pid=parent tgid, tid=parent tid, ret=child tgid */
	IOT_THREAD_NEW,   /* new thread: pid=tgid, tid=creator, ret=new tid */
	IOT_PROC_EXEC,    /* exec: payload = argv, NUL-separated */
	IOT_THREAD_EXIT,  /* a thread ended: ret = its exit_code (wait status) */
	IOT_PROC_EXIT,    /* the last thread of a process ended: ret = wait status */
	IOT_TASK_RENAME,  /* thread name set: payload = new name */
	/* NFS client and RPC (bpf/netfs.bpf.c), when the kernel has them */
	IOT_NFS_READ,     /* READ RPC of a traced process: initiation to completion */
	IOT_NFS_WRITE,    /* WRITE RPC */
	IOT_NFS_COMMIT,   /* COMMIT RPC */
	IOT_RPC,          /* one RPC of a traced process (rpc_stats_latency) */
	/* NFS over RDMA (rpcrdma, bpf/rdma.bpf.c): per RPC of a traced process;
	 * arg = xid unless said otherwise */
	IOT_RPCRDMA_MARSHAL,     /* the call is encoded: flags = rtype, mode = wtype,
				    req_bytes = read-chunk bytes, offset = write/reply-chunk
				    bytes registered by this attempt */
	IOT_RPCRDMA_CHUNK_READ,  /* req_bytes = length, offset = XDR position, fd = nsegs,
				    mode = handle */
	IOT_RPCRDMA_CHUNK_WRITE, /* req_bytes = length, fd = nsegs, mode = handle */
	IOT_RPCRDMA_CHUNK_REPLY, /* same */
	IOT_RPCRDMA_CHUNK_WP,    /* same (write chunk of a write-pad) */
	IOT_RPCRDMA_POST_SEND,   /* flags = SGEs */
	IOT_RPCRDMA_REPLY,       /* req_bytes = credits granted */
	IOT_RPCRDMA_NOMRS,       /* no free MR to register a chunk; payload = peer */
	IOT_RPCRDMA_FRWR_MAPERR, /* DMA mapping of an MR failed: ret = mapped, req_bytes = nents */
	IOT_RPCRDMA_POST_SEND_ERR, /* ret = rc */
	/* rpcrdma transports (owner: the kernel, pid 0); payload = peer address, port */
	IOT_RPCRDMA_CONNECT,     /* ret = rc, arg = connection status */
	IOT_RPCRDMA_DISCONNECT,  /* ret = rc, arg = connection status */
	IOT_RPCRDMA_MR_ALLOC_ERR, /* an MR for the transport's pool could not be made: ret = rc */
	/* RDMA core (ib_core, rdma_cm): owner = the resource's task (user
	 * resources) or the kernel (pid 0, payload = consumer module); arg = id */
	IOT_RDMA_CQ_ALLOC,       /* req_bytes = CQEs, flags = poll context */
	IOT_RDMA_CQ_ALLOC_ERR,   /* ret = rc, req_bytes = CQEs */
	IOT_RDMA_CQ_FREE,
	IOT_RDMA_CQ_POLL,        /* req_bytes = asked for, ret = completions */
	IOT_RDMA_CQ_PROCESS,     /* dur_ns = wake-up latency, flags = 1 from interrupt */
	IOT_RDMA_CQ_SCHEDULE,
	IOT_RDMA_CQ_RESCHEDULE,
	IOT_RDMA_CQ_DRAIN,
	IOT_RDMA_MR_ALLOC,       /* ret = rc, flags = mr type, req_bytes = max SG entries */
	IOT_RDMA_MR_DEREG,       /* req_bytes = length */
	IOT_RDMA_CM_EVENT,       /* mode = rdma_cm event, ret = status */
	IOT_RDMA_CM_EVENT_DONE,  /* mode = rdma_cm event, ret = consumer's result */
	/* userspace verbs (libibverbs uprobes, bpf/verbs.bpf.c): one per call,
	 * entry to return; ret = the return value (pointer verbs: 0 = failed) */
	IOT_IBV_GET_DEVICE_LIST, /* req_bytes = devices found */
	IOT_IBV_OPEN_DEVICE,     /* payload = device name */
	IOT_IBV_CLOSE_DEVICE,
	IOT_IBV_ALLOC_PD,
	IOT_IBV_DEALLOC_PD,
	IOT_IBV_CREATE_CQ,       /* req_bytes = CQEs asked for */
	IOT_IBV_DESTROY_CQ,
	IOT_IBV_CREATE_QP,
	IOT_IBV_MODIFY_QP,       /* mode = new qp_state, arg = attr_mask */
	IOT_IBV_DESTROY_QP,
	IOT_IBV_REG_MR,          /* req_bytes = length, arg = address, ret = the MR */
	IOT_IBV_REG_MR_IOVA,     /* same */
	IOT_IBV_REG_MR_IOVA2,    /* same */
	IOT_IBV_REG_DMABUF_MR,   /* req_bytes = length, arg = offset */
	IOT_IBV_DEREG_MR,        /* arg = the MR (matches a registration's ret) */
	IOT_NFS_READAHEAD,       /* NFS readahead issued by a reading thread: offset = start,
				    req_bytes = bytes asked, ret = 0 or -errno */
	IOT_RPCRDMA_MARSHAL_FAILED, /* encoding failed, the RPC retries: ret = rc, arg = xid */
	/* blocking calls of the data path (what a training loop and its loader
	 * wait in); mode = the fd's kind detail (socket family, or the char
	 * device's kernel dev_t), see IOT_EF_* and struct iot_event */
	IOT_POLL, IOT_PPOLL,         /* fd = first pollfd's fd, req_bytes = nfds */
	IOT_SELECT, IOT_PSELECT6,    /* fd = lowest fd in the read set, req_bytes = nfds */
	IOT_EPOLL_WAIT, IOT_EPOLL_PWAIT, IOT_EPOLL_PWAIT2, /* fd = epoll fd, req_bytes = maxevents */
	IOT_NANOSLEEP,               /* arg = requested ns */
	IOT_CLOCK_NANOSLEEP,         /* arg = requested ns (absolute if flags & 1), mode = clock */
	IOT_RECVFROM, IOT_RECVMSG, IOT_SENDTO, IOT_SENDMSG, /* req_bytes = buffer bytes */
	IOT_CONNECT, IOT_ACCEPT, IOT_ACCEPT4,
	IOT_IOCTL,                   /* flags = request, arg = argument */
	/* scheduler (not a system call): one off-CPU interval of a traced thread,
	 * from switch-out to switch-in. flags = task state at switch-out
	 * (0: preempted, still runnable), ret = waker thread id (0: none seen, or
	 * an interrupt woke it: eflags IOT_EF_IRQ_WAKE),
	 * arg = waker's tgid, offset = ns from switch-out to the wake-up (-1: none) */
	IOT_OFFCPU,
	/* a user page fault of a traced thread on a file mapping (not a system
	 * call; ends at the thread's next fault, system call or exit): offset =
	 * file offset of the page, arg = address, flags = x86 error code (bit 1:
	 * write), ret = page-cache bytes the thread added for the file meanwhile
	 * (0: minor, the page was cached), dur_ns = time blocked off CPU meanwhile */
	IOT_PAGE_FAULT,
	/* a block-device request of the job (bpf/block.bpf.c), at its completion:
	 * ts_ns = issue to the driver, dur_ns = issue to completion, arg = ns from
	 * the first bio's submission to the issue (queueing), offset = byte offset
	 * on the device, req_bytes = bytes completed, ret = 0 or -errno, flags =
	 * the request's op and flags (REQ_OP_* in the low byte), mode = the
	 * device's kernel dev_t; ino/dev = the file of its first page, if any.
	 * pid/tid = the submitter; a kernel thread's request for a file the job
	 * read or wrote (writeback, a throttle's held bios): pid = that job
	 * process, tid = 0, eflags IOT_EF_KTHREAD */
	IOT_BLOCK_RQ,
	/* asynchronous I/O (bpf/aio.bpf.c), one record per request at its
	 * completion: ts_ns = submission, dur_ns = submission to completion
	 * (libaio: to the io_getevents that reaped it), pid/tid = the submitter
	 * (an io_uring SQPOLL thread is a thread of the job), fd = the fd (or the
	 * registered-file index, eflags IOT_EF_FIXED_FILE), offset, req_bytes,
	 * ret = the result (bytes or -errno), ino/dev = the file.
	 * io_uring: flags = IORING_OP_*, arg = user_data; openat/statx carry the
	 * path as payload and the dirfd. libaio: flags = IOCB_CMD_*, arg = the
	 * iocb's address */
	IOT_IO_URING_READ, IOT_IO_URING_WRITE, IOT_IO_URING_FSYNC, IOT_IO_URING_OPENAT, IOT_IO_URING_STATX,
	IOT_IO_URING_OTHER,
	IOT_AIO_READ, IOT_AIO_WRITE, IOT_AIO_FSYNC, IOT_AIO_OTHER,
	/* pages a traced thread added to the page cache for a regular file
	 * outside a read, write or fault of that file (io_uring and libaio
	 * buffered reads, sendfile/copy_file_range sources), one record per run of
	 * additions to one file: ts_ns = first, dur_ns = to the last, ret =
	 * bytes, ino/dev = the file */
	IOT_CACHE_FILL,
	/* TLS library calls (bpf/tls.bpf.c: OpenSSL SSL_read/SSL_write and their
	 * _ex forms, GnuTLS gnutls_record_recv/send, s2n_recv/s2n_send, Go
	 * crypto/tls.(*Conn).Read/Write), entry to return: arg = the session
	 * (SSL *, gnutls_session_t, struct s2n_connection *, Go's *tls.Conn),
	 * req_bytes = buffer bytes, ret =
	 * plaintext bytes moved (<= 0: the library's failure value), flags = the
	 * library (IOT_TLS_LIB_*), fd = -1 (tied to the socket by the system call
	 * the TLS call makes on the same thread); payload = the plaintext's first
	 * bytes when they start an HTTP message (IOT_EF_NET_DATA) */
	IOT_TLS_READ, IOT_TLS_WRITE,
	/* the kernel's work on a traced thread's way back to user space after a
	 * munmap, close, close_range, dup2 or dup3 that dropped a file's last
	 * reference (the final fput runs as task work, after the call's exit: a
	 * munmap of a deleted shared-memory file, a DataLoader's batch, frees its
	 * pages there), 20 us or longer: ts_ns = the call's return, dur_ns = to
	 * the return to user space, flags = the call's op, arg = its first
	 * argument, fd/ino/dev = its fd's file (close, dup2/3) */
	IOT_FILE_RELEASE,
	IOT_OP_COUNT
};

/* Flags in iot_event.eflags */
#define IOT_EF_PATH_TRUNC  1  /* a path or cmdline payload was cut at its cap */
#define IOT_EF_IOV_TRUNC   2  /* more than IOT_IOV_MAX iovecs: req_bytes is a lower bound */
#define IOT_EF_NO_FILE     4  /* the fd did not resolve to an open file at entry */
#define IOT_EF_KTHREAD     8  /* block request a kernel thread submitted for the job
				 (writeback, or bios an I/O throttle held back) */
#define IOT_EF_FIXED_FILE 16  /* io_uring: fd is an index into the ring's registered files */
#define IOT_EF_NET_DATA   32  /* payload: the first bytes of an HTTP message the call moved */
#define IOT_EF_NET_ADDR   64  /* connect: payload = the peer's sockaddr */
#define IOT_EF_FUSE      128  /* a FUSE daemon's read/write of /dev/fuse: offset = the
				 request's unique id; a read (the request): flags =
				 opcode, arg = the requesting thread, req_bytes = the
				 node id; a write (the reply): flags = its error (-errno) */
#define IOT_EF_DIRECT    256  /* the call's file was open with O_DIRECT (f_flags at entry;
				 io_uring: at completion): its data bypass the page cache */

#define IOT_EF_NO_COMPLETION 512 /* block_rq: the request's completion was not seen (the
				   kernel skipped iotrace's probe, or the request was in
				   flight when the trace ended): dur_ns 0, req_bytes = the
				   bytes it was issued with */

#define IOT_EF_UNFINISHED 1024 /* a system call still in progress when the trace stopped:
				  dur_ns runs to the stop, ret is 0 (not returned) */

#define IOT_EF_BEGAN_BEFORE 2048 /* a system call already in progress when an attach began
				    tracing: ts_ns is when tracing began, dur_ns a lower
				    bound */
#define IOT_EF_IRQ_WAKE 4096  /* offcpu: the wake-up came in an interrupt (a timer, an
				 I/O completion): no task woke it (ret = arg = 0) */

/* O_DIRECT in struct file's f_flags: x86_64's (asm-generic) value */
#define IOT_O_DIRECT 040000

/* A block request of the job between its issue and its completion
 * (block.bpf.c's `requests` map, keyed by the request's address; the
 * recorder reads what is left in it when the trace ends). */
struct iot_block_owner {
	__u64 queued_ts;   /* first bio submitted */
	__u64 issue_ts;
	__u64 ino;
	__u64 sector;      /* at issue */
	__u32 bytes;       /* at issue */
	__u32 dev;         /* file's superblock dev_t */
	__u32 magic;
	__u32 pid;
	__u32 tid;
	__u32 bdev;        /* the block device's dev_t */
	__u32 cmd_flags;   /* at issue */
	__u16 imode;
	__u16 eflags;
};

/* iot_event.flags of IOT_TLS_* records */
#define IOT_TLS_LIB_OPENSSL 1
#define IOT_TLS_LIB_GNUTLS  2
#define IOT_TLS_LIB_GO      3  /* Go's crypto/tls, in the executable */
#define IOT_TLS_LIB_S2N     4  /* AWS's s2n-tls (the AWS CRT: awscrt's _awscrt.so) */

/*
 * One record per call or event, 96 bytes. A payload (paths, argv, name) of
 * str_len bytes follows the record in the ring buffer; it holds one or two
 * NUL-terminated strings (rename: old path, then new path).
 */
struct iot_event {
	__u64 ts_ns;      /* entry, CLOCK_MONOTONIC */
	__u64 dur_ns;     /* entry to exit */
	__s64 ret;        /* result: bytes, new fd, new offset, or -errno */
	__s64 offset;     /* file offset the I/O started at, -1 if none */
	__u64 req_bytes;  /* bytes asked for (read/write family, sync range, mmap len) */
	__u64 arg;        /* op-specific: lseek requested offset, futex/lock address,
			     mmap/munmap address, dup target fd, close_range last fd,
			     output fd of sendfile/copy_file_range, ftruncate length */
	__u64 ino;        /* inode of the fd's file (0 if none) */
	__u32 dev;        /* kernel dev_t of the file's superblock */
	__u32 fs_magic;   /* superblock magic of the file's filesystem */
	__s32 pid;        /* tgid */
	__s32 tid;
	__s32 fd;         /* fd the call acted on, -1 if none */
	__s32 dirfd;      /* dirfd of *at calls (AT_FDCWD = -100), else -1 */
	__u32 flags;      /* open flags, lseek whence, futex op, mmap flags, lock flags */
	__u32 mode;       /* open/mkdir mode, mmap prot */
	__u16 op;         /* enum iot_op */
	__u16 imode;      /* S_IFMT bits of the file's inode (0 if none) */
	__u16 str_len;    /* payload bytes following this record */
	__u16 eflags;     /* IOT_EF_* */
};

/* Counters the BPF side keeps per CPU (index into the counters map). */
enum iot_counter {
	IOT_CNT_DROPS = 0,      /* records lost: ring buffer full */
	IOT_CNT_PATH_TRUNC,     /* payloads cut at their cap */
	IOT_CNT_NO_STORAGE,     /* entry state could not be stored (task storage full) */
	IOT_CNT_TRACED_FULL,    /* new process not followed: traced map full */
	IOT_CNT_KERNEL_CAPPED,  /* kernel-owned RDMA events over the per-CPU rate cap */
	IOT_CNT_CACHE_OTHER_BYTES, /* page-cache bytes the job added outside a read,
				      write or file fault of that file (bytes, not events) */
	IOT_CNT_BLOCK_LOST,     /* block requests of the job not recorded (table full) */
	IOT_CNT_ASYNC_LOST,     /* io_uring/libaio requests whose submission was not kept
				   (table full, past a call's cap) or whose completion was
				   not seen */
	IOT_CNT_PROF_OVERFLOW,  /* profile mode: calls whose sums found the profile's ring
				   buffer full (added to prof_lost by op, without their
				   key; the recorder adds those that found its table full) */
	IOT_CNT_PROF_RATE_LOST, /* profile mode: calls missing from the per-second table
				   (the ring buffer or, in the recorder, the table full) */
	IOT_CNT_BLOCK_NO_COMPLETION, /* block requests recorded without their completion
					(found when their request slot was reused) */
	IOT_CNT_ENTRY_UNSEEN,   /* calls of a traced process whose return was seen but not
				   their entry: begun before the process was traced, returned
				   before the recorder looked for calls in progress */
	IOT_CNT_RETURN_UNSEEN,  /* calls in progress when an attach began whose return was
				   not seen (fexit only sees calls that entered after its
				   trampoline): returned during the trace, or running at the
				   attach with fentry hooks */
	IOT_CNT_OWN_LOCK_WAITS, /* waits of the job's threads for the lock of one of
				   iotrace's own ring buffers (not recorded: the
				   tracer's cost, not the job's) */
	IOT_CNT_LOCK_END_NESTED, /* of those, waits inside iot_lock_end's own record
				    of another wait: their end is a run of iot_lock_end
				    the kernel skips (counted as its miss), not a loss */
	IOT_CNT_PROF_WAKE_LOST, /* profile mode with loop waits: wake-ups between the
				   job's threads that found the profile's ring full */
	IOT_CNT_FAULT_UNRESOLVED, /* user page faults whose mapping could not be
				     looked up (bpf_find_vma busy): not recorded,
				     whether or not on a file */
	IOT_CNT_RELEASE_UNTIMED, /* munmap/close calls that left work for the return to
				    user space (a file's last release) not timed: the
				    thread has no rseq area, or no return was seen */
	IOT_CNT_MAX
};

/* How a system call can change the caller's mappings (the recorder's
 * sys_remaps table): what its entry makes the faults' cached mappings forget. */
enum iot_remap {
	IOT_REMAP_NONE = 0,
	IOT_REMAP_ALL,      /* mremap, shmat, shmdt, remap_file_pages, execve */
	IOT_REMAP_MMAP,     /* MAP_FIXED: the range it maps over */
	IOT_REMAP_MUNMAP,   /* the range */
	IOT_REMAP_BRK,      /* between the old and the new break */
};

/*
 * Profile mode (iotrace run --profile): calls are summed in kernel instead of
 * recorded one by one. Buckets are powers of two: bucket 0 holds 0, 1 holds
 * 1, k >= 2 holds (2^(k-2), 2^(k-1)] (a power of two tops its bucket).
 */
struct iot_prof_key {
	__u64 ino;        /* the call's file (0: none, or not a file) */
	__u32 dev;
	__u32 pid;        /* tgid */
	__u16 op;
	__u8 size_bucket; /* of req_bytes */
	__u8 lat_bucket;  /* of dur_ns */
	__u32 pad;
};

struct iot_prof_val {
	__u64 calls;
	__u64 errors;      /* ret < 0 */
	__u64 bytes;       /* sum of ret > 0 of the read/write family */
	__u64 req_bytes;   /* sum of req_bytes */
	__u64 dur_ns;      /* sum of durations */
	__u64 cache_bytes; /* page-cache bytes the calls added for their file
			      (what came from storage) */
	__u32 fs_magic;
	__u16 imode;
	__u16 pad;
};

/* What profile mode's ring buffer carries: a thread's sums for one key,
 * all of calls that ended in second `sec` of CLOCK_MONOTONIC. The recorder
 * adds them up by key, and by second, process and op. */
struct iot_prof_sums {
	struct iot_prof_key k;
	struct iot_prof_val v;
	__u32 sec;
	__u32 pad;
};

/* Profile mode with loop waits (recorder --loop-waits): a traced thread
 * that was blocked until another thread of a traced process woke it is sent
 * as an iot_prof_sums with op IOT_PROF_WAKE: k.pid the woken thread's tgid,
 * k.ino its tid << 32 | the waker's tid, k.dev the waker's tgid, v.calls 1,
 * v.dur_ns the time it was off CPU (switch-out to switch-in). The recorder
 * sums them per second in a table of their own (iot_prof_wake_key/_val):
 * which thread waits for which, and how long. */
#define IOT_PROF_WAKE 0xfffe

struct iot_prof_wake_key {
	__u32 sec;
	__u32 pid;        /* the woken thread's tgid */
	__u32 tid;
	__u32 waker_pid;
	__u32 waker_tid;
	__u32 pad;
};

struct iot_prof_wake_val {
	__u64 wakes;
	__u64 dur_ns;
};

/* Live use with file sums (recorder --file-sums): per process and regular
 * file, what its reads and writes moved since the last drain. */
struct iot_prof_file_key {
	__u32 pid;
	__u32 dev;
	__u64 ino;
};

struct iot_prof_file_val {
	__u64 calls;
	__u64 read_bytes;
	__u64 write_bytes;
	__u64 cache_bytes;   /* of the reads, what came from storage */
	__u64 dur_ns;        /* the threads' time in those calls */
};

/* Per second of CLOCK_MONOTONIC (ts / 1e9), process, op, and the calls'
 * file type and device (per mount, live: iotrace exporter). */
struct iot_prof_rate_key {
	__u32 sec;
	__u32 pid;
	__u16 op;
	__u16 ftype;      /* the file's S_IFMT >> 12 (8: regular), 0: none */
	__u32 dev;        /* the file's device (kernel dev_t), 0: none */
};

struct iot_prof_rate_val {
	__u64 calls;
	__u64 bytes;
	__u64 dur_ns;
	__u64 cache_bytes;
};

#endif /* IOTRACE_H */
