"""The recorder's record ABI (bpf/iotrace.h), as numpy sees it.

Keep in step with `struct iot_event` and `enum iot_op`; the recorder asserts
the record size, and tests/test_abi.py checks this file against the header.
"""
from __future__ import annotations

import numpy as np

ABI_VERSION = 1

EVENT_DTYPE = np.dtype(
    [
        ("ts_ns", "<u8"),
        ("dur_ns", "<u8"),
        ("ret", "<i8"),
        ("offset", "<i8"),
        ("req_bytes", "<u8"),
        ("arg", "<u8"),
        ("ino", "<u8"),
        ("dev", "<u4"),
        ("fs_magic", "<u4"),
        ("pid", "<i4"),
        ("tid", "<i4"),
        ("fd", "<i4"),
        ("dirfd", "<i4"),
        ("flags", "<u4"),
        ("mode", "<u4"),
        ("op", "<u2"),
        ("imode", "<u2"),
        ("str_len", "<u2"),
        ("eflags", "<u2"),
    ]
)
assert EVENT_DTYPE.itemsize == 96

# enum iot_op, in order; the name is the syscall's kernel name, or the
# event's name for events that are not system calls.
OP_NAMES = [
    "none",
    "read", "pread64", "readv", "preadv", "preadv2",
    "write", "pwrite64", "writev", "pwritev", "pwritev2",
    "lseek", "fsync", "fdatasync", "sync_file_range",
    "open", "openat", "openat2", "creat", "close", "close_range",
    "dup", "dup2", "dup3", "fcntl",
    "chdir", "fchdir",
    "stat", "lstat", "fstat", "newfstatat", "statx", "getdents64",
    "unlink", "unlinkat", "rename", "renameat", "renameat2",
    "mkdir", "mkdirat", "rmdir",
    "mmap", "munmap",
    "sendfile", "copy_file_range", "fadvise64", "fallocate", "ftruncate",
    "futex", "lock_contention",
    "proc_fork", "thread_new", "proc_exec", "thread_exit", "proc_exit", "task_rename",
    "nfs_read", "nfs_write", "nfs_commit", "rpc",
    "rpcrdma_marshal", "rpcrdma_chunk_read", "rpcrdma_chunk_write", "rpcrdma_chunk_reply",
    "rpcrdma_chunk_wp", "rpcrdma_post_send", "rpcrdma_reply", "rpcrdma_nomrs",
    "rpcrdma_frwr_maperr", "rpcrdma_post_send_err",
    "rpcrdma_connect", "rpcrdma_disconnect", "rpcrdma_mr_alloc_err",
    "rdma_cq_alloc", "rdma_cq_alloc_err", "rdma_cq_free", "rdma_cq_poll", "rdma_cq_process",
    "rdma_cq_schedule", "rdma_cq_reschedule", "rdma_cq_drain", "rdma_mr_alloc",
    "rdma_mr_dereg", "rdma_cm_event", "rdma_cm_event_done",
    "ibv_get_device_list", "ibv_open_device", "ibv_close_device", "ibv_alloc_pd",
    "ibv_dealloc_pd", "ibv_create_cq", "ibv_destroy_cq", "ibv_create_qp", "ibv_modify_qp",
    "ibv_destroy_qp", "ibv_reg_mr", "ibv_reg_mr_iova", "ibv_reg_mr_iova2",
    "ibv_reg_dmabuf_mr", "ibv_dereg_mr",
    "nfs_readahead", "rpcrdma_marshal_failed",
    "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2",
    "nanosleep", "clock_nanosleep", "recvfrom", "recvmsg", "sendto", "sendmsg",
    "connect", "accept", "accept4", "ioctl",
    "offcpu", "page_fault", "block_rq",
    "io_uring_read", "io_uring_write", "io_uring_fsync", "io_uring_openat", "io_uring_statx",
    "io_uring_other",
    "aio_read", "aio_write", "aio_fsync", "aio_other",
    "cache_fill",
    "tls_read", "tls_write",
    "file_release",
]
OP = {name: i for i, name in enumerate(OP_NAMES)}

READ_OPS = ("read", "pread64", "readv", "preadv", "preadv2")
WRITE_OPS = ("write", "pwrite64", "writev", "pwritev", "pwritev2")
COPY_OPS = ("sendfile", "copy_file_range")   # in-kernel copies: read one fd, write another
POLL_OPS = ("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2")
SLEEP_OPS = ("nanosleep", "clock_nanosleep")
RECV_OPS = ("recvfrom", "recvmsg")
SEND_OPS = ("sendto", "sendmsg")
# Asynchronous I/O: one record per request, submission to completion
URING_OPS = ("io_uring_read", "io_uring_write", "io_uring_fsync", "io_uring_openat",
             "io_uring_statx", "io_uring_other")
AIO_OPS = ("aio_read", "aio_write", "aio_fsync", "aio_other")
ASYNC_READ_OPS = ("io_uring_read", "aio_read")
ASYNC_WRITE_OPS = ("io_uring_write", "aio_write")


def sql_list(names) -> str:
    """('a', 'b') for an SQL IN list."""
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


OPEN_OPS = ("open", "openat", "openat2", "creat")
SYNC_OPS = ("fsync", "fdatasync", "sync_file_range")
META_OPS = ("stat", "lstat", "fstat", "newfstatat", "statx", "getdents64",
            "unlink", "unlinkat", "rename", "renameat", "renameat2",
            "mkdir", "mkdirat", "rmdir")
LIFE_OPS = ("proc_fork", "thread_new", "proc_exec", "thread_exit", "proc_exit", "task_rename")
NFS_OPS = ("nfs_read", "nfs_write", "nfs_commit")   # one RPC each (nfs_readahead is not)
RPCRDMA_CHUNK_OPS = ("rpcrdma_chunk_read", "rpcrdma_chunk_write", "rpcrdma_chunk_reply",
                     "rpcrdma_chunk_wp")
RDMA_CORE_OPS = tuple(n for n in OP_NAMES if n.startswith("rdma_"))
VERBS_OPS = tuple(n for n in OP_NAMES if n.startswith("ibv_"))
REG_MR_OPS = ("ibv_reg_mr", "ibv_reg_mr_iova", "ibv_reg_mr_iova2", "ibv_reg_dmabuf_mr")
# Verbs that return an object (NULL on failure), and the rest (0 or an errno)
VERBS_PTR_OPS = ("ibv_get_device_list", "ibv_open_device", "ibv_alloc_pd", "ibv_create_cq",
                 "ibv_create_qp") + REG_MR_OPS
VERBS_INT_OPS = tuple(o for o in VERBS_OPS if o not in VERBS_PTR_OPS)
# SQL: the row is a failed call (-errno, or a verb's own failure value)
FAILED_SQL = (f"(ret < 0 or (op in {sql_list(VERBS_PTR_OPS)} and ret = 0)"
              f" or (op in {sql_list(VERBS_INT_OPS)} and ret != 0))")
# Events whose payload holds names (not paths): RPC program and procedure, an
# RDMA peer's address and port, a kernel RDMA consumer, a verbs device.
NAMED_PAYLOAD_OPS = ("rpc", "rpcrdma_nomrs", "rpcrdma_post_send_err", "rpcrdma_connect",
                     "rpcrdma_disconnect", "ibv_open_device") + RDMA_CORE_OPS
# Owner of kernel-wide events (rpcrdma transports, kernel RDMA consumers)
KERNEL_PID = 0

# iot_event.eflags
EF_PATH_TRUNC = 1
EF_IOV_TRUNC = 2
EF_NO_FILE = 4
EF_KTHREAD = 8   # block request a kernel thread submitted for the job
EF_FIXED_FILE = 16   # io_uring: fd is an index into the ring's registered files
EF_NET_DATA = 32     # payload: the first bytes of an HTTP message the call moved
EF_NET_ADDR = 64     # connect: payload = the peer's sockaddr
EF_FUSE = 128        # a FUSE daemon's read (request) or write (reply) of /dev/fuse
EF_DIRECT = 256      # the call's file was open with O_DIRECT (schema 1.7)
EF_NO_COMPLETION = 512   # block_rq: its completion was not seen: dur_ns 0 (schema 1.8)
EF_UNFINISHED = 1024     # a call not returned when the trace stopped: ret 0 (schema 1.9)
EF_BEGAN_BEFORE = 2048   # a call in progress when an attach began: ts_ns = then (schema 1.9)
EF_IRQ_WAKE = 4096       # offcpu: an interrupt woke it, no task (schema 1.11)

# O_DIRECT in open flags, by meta.json `arch` (asm-generic's is 0o40000)
O_DIRECT_BY_ARCH = {"x86_64": 0o40000, "i686": 0o40000, "aarch64": 0o200000,
                    "arm64": 0o200000, "armv7l": 0o200000, "ppc64le": 0o400000,
                    "ppc64": 0o400000}


def o_direct(arch: str | None) -> int:
    """O_DIRECT's value in the open flags of a trace made on `arch`."""
    return O_DIRECT_BY_ARCH.get(arch or "x86_64", 0o40000)


TLS_OPS = ("tls_read", "tls_write")
TLS_LIBS = {1: "openssl", 2: "gnutls", 3: "go-crypto/tls", 4: "s2n"}

AT_FDCWD = -100

# S_IFMT values of iot_event.imode, and superblock magics that name fd kinds.
S_IFMT = 0o170000
S_IFREG, S_IFDIR, S_IFCHR, S_IFBLK = 0o100000, 0o040000, 0o020000, 0o060000
S_IFIFO, S_IFSOCK, S_IFLNK = 0o010000, 0o140000, 0o120000
ANON_INODE_FS_MAGIC = 0x09041934

# Superblock magic -> filesystem type (linux/magic.h).
FS_MAGIC = {
    0xEF53: "ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x6969: "nfs",
    0x65735546: "fuse",
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x1CD1: "devpts",
    0x858458F6: "ramfs",
    0x794C7630: "overlay",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x2FC12FC1: "zfs",
    0x73717368: "squashfs",
    0x4D44: "vfat",
    0x5346544E: "ntfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0xCAFE4A11: "bpf",
    0x27E0EB: "cgroup",
    0x63677270: "cgroup2",
    0x50495045: "pipefs",
    0x534F434B: "sockfs",
    0x09041934: "anon_inodefs",
    0x42494E4D: "binfmt_misc",
    0x6E736673: "nsfs",
    0x19800202: "mqueue",
    0x73636673: "securityfs",
    0x958458F6: "hugetlbfs",
    0x9660: "iso9660",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x00C36400: "ceph",
    0x24051905: "ubifs",
    0xF2F52010: "f2fs",
    0x2011BAB0: "exfat",
    0x1021994: "tmpfs",
    0x5A3C69F0: "aafs",
    0x454D444D: "devmem",
    0x13661366: "balloon",
    0x6E667364: "nfsd",
    0x67596969: "rpc_pipefs",
    0x01021997: "v9fs",
    0xABBA1974: "xenfs",
    0x43415D53: "smackfs",
    0x1373: "devfs",
    0x61756673: "aufs",
    0x15013346: "btrfs_test",
    0x137F: "minix",
    0x2468: "minix2",
    0xDEAD4EAD: "erofs" ,
    0xE0F5E1E2: "erofs",
    0x5DF5: "ocfs2",
    0x7461636F: "ocfs2",
}
