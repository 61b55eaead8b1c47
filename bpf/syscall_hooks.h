/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The system calls iotrace traces, as the kernel functions fentry/fexit
 * attach to (x86_64: __x64_sys_NAME; stat, lstat, fstat are the "new"
 * flavours there). X(function name, op). Used by bpf/iotrace.bpf.c to make
 * one fentry and one fexit program per call, and by the recorder to attach
 * them; keep in step with userspace/recorder/syscall_table.h.
 */
#ifndef IOTRACE_SYSCALL_HOOKS_H
#define IOTRACE_SYSCALL_HOOKS_H

#define IOT_SYSCALL_HOOKS(X) \
	X(read, IOT_READ) \
	X(pread64, IOT_PREAD64) \
	X(readv, IOT_READV) \
	X(preadv, IOT_PREADV) \
	X(preadv2, IOT_PREADV2) \
	X(write, IOT_WRITE) \
	X(pwrite64, IOT_PWRITE64) \
	X(writev, IOT_WRITEV) \
	X(pwritev, IOT_PWRITEV) \
	X(pwritev2, IOT_PWRITEV2) \
	X(lseek, IOT_LSEEK) \
	X(fsync, IOT_FSYNC) \
	X(fdatasync, IOT_FDATASYNC) \
	X(sync_file_range, IOT_SYNC_FILE_RANGE) \
	X(open, IOT_OPEN) \
	X(openat, IOT_OPENAT) \
	X(openat2, IOT_OPENAT2) \
	X(creat, IOT_CREAT) \
	X(close, IOT_CLOSE) \
	X(close_range, IOT_CLOSE_RANGE) \
	X(dup, IOT_DUP) \
	X(dup2, IOT_DUP2) \
	X(dup3, IOT_DUP3) \
	X(fcntl, IOT_FCNTL) \
	X(chdir, IOT_CHDIR) \
	X(fchdir, IOT_FCHDIR) \
	X(newstat, IOT_STAT) \
	X(newlstat, IOT_LSTAT) \
	X(newfstat, IOT_FSTAT) \
	X(newfstatat, IOT_NEWFSTATAT) \
	X(statx, IOT_STATX) \
	X(getdents64, IOT_GETDENTS64) \
	X(unlink, IOT_UNLINK) \
	X(unlinkat, IOT_UNLINKAT) \
	X(rename, IOT_RENAME) \
	X(renameat, IOT_RENAMEAT) \
	X(renameat2, IOT_RENAMEAT2) \
	X(mkdir, IOT_MKDIR) \
	X(mkdirat, IOT_MKDIRAT) \
	X(rmdir, IOT_RMDIR) \
	X(mmap, IOT_MMAP) \
	X(munmap, IOT_MUNMAP) \
	X(futex, IOT_FUTEX) \
	X(sendfile, IOT_SENDFILE) \
	X(copy_file_range, IOT_COPY_FILE_RANGE) \
	X(fadvise64, IOT_FADVISE64) \
	X(fallocate, IOT_FALLOCATE) \
	X(ftruncate, IOT_FTRUNCATE) \
	X(poll, IOT_POLL) \
	X(ppoll, IOT_PPOLL) \
	X(select, IOT_SELECT) \
	X(pselect6, IOT_PSELECT6) \
	X(epoll_wait, IOT_EPOLL_WAIT) \
	X(epoll_pwait, IOT_EPOLL_PWAIT) \
	X(epoll_pwait2, IOT_EPOLL_PWAIT2) \
	X(nanosleep, IOT_NANOSLEEP) \
	X(clock_nanosleep, IOT_CLOCK_NANOSLEEP) \
	X(recvfrom, IOT_RECVFROM) \
	X(recvmsg, IOT_RECVMSG) \
	X(sendto, IOT_SENDTO) \
	X(sendmsg, IOT_SENDMSG) \
	X(connect, IOT_CONNECT) \
	X(accept, IOT_ACCEPT) \
	X(accept4, IOT_ACCEPT4) \
	X(ioctl, IOT_IOCTL)

/*
 * System calls iotrace does not record that end a page fault's window (a
 * fault is pending until the thread's next system call: see flush_fault) or
 * change mappings (the cached mapping of the last fault): the tracepoints
 * see every system call, fentry only these. fentry programs only.
 */
#define IOT_FLUSH_HOOKS(X) \
	X(wait4) X(waitid) X(rt_sigtimedwait) X(rt_sigsuspend) X(msgrcv) X(semtimedop) \
	X(semop) X(mremap) X(mprotect) X(brk) X(madvise)

#endif
