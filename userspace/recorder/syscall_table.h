/* syscall number -> iotrace op, from the build machine's <sys/syscall.h>.
 * A syscall this architecture lacks is left out. Included once, by recorder.c. */
#ifndef IOTRACE_SYSCALL_TABLE_H
#define IOTRACE_SYSCALL_TABLE_H

static const struct { int nr; int op; } syscall_table[] = {
#ifdef SYS_read
	{ SYS_read, IOT_READ },
#endif
#ifdef SYS_pread64
	{ SYS_pread64, IOT_PREAD64 },
#endif
#ifdef SYS_readv
	{ SYS_readv, IOT_READV },
#endif
#ifdef SYS_preadv
	{ SYS_preadv, IOT_PREADV },
#endif
#ifdef SYS_preadv2
	{ SYS_preadv2, IOT_PREADV2 },
#endif
#ifdef SYS_write
	{ SYS_write, IOT_WRITE },
#endif
#ifdef SYS_pwrite64
	{ SYS_pwrite64, IOT_PWRITE64 },
#endif
#ifdef SYS_writev
	{ SYS_writev, IOT_WRITEV },
#endif
#ifdef SYS_pwritev
	{ SYS_pwritev, IOT_PWRITEV },
#endif
#ifdef SYS_pwritev2
	{ SYS_pwritev2, IOT_PWRITEV2 },
#endif
#ifdef SYS_lseek
	{ SYS_lseek, IOT_LSEEK },
#endif
#ifdef SYS_fsync
	{ SYS_fsync, IOT_FSYNC },
#endif
#ifdef SYS_fdatasync
	{ SYS_fdatasync, IOT_FDATASYNC },
#endif
#ifdef SYS_sync_file_range
	{ SYS_sync_file_range, IOT_SYNC_FILE_RANGE },
#endif
#ifdef SYS_open
	{ SYS_open, IOT_OPEN },
#endif
#ifdef SYS_openat
	{ SYS_openat, IOT_OPENAT },
#endif
#ifdef SYS_openat2
	{ SYS_openat2, IOT_OPENAT2 },
#endif
#ifdef SYS_creat
	{ SYS_creat, IOT_CREAT },
#endif
#ifdef SYS_close
	{ SYS_close, IOT_CLOSE },
#endif
#ifdef SYS_close_range
	{ SYS_close_range, IOT_CLOSE_RANGE },
#endif
#ifdef SYS_dup
	{ SYS_dup, IOT_DUP },
#endif
#ifdef SYS_dup2
	{ SYS_dup2, IOT_DUP2 },
#endif
#ifdef SYS_dup3
	{ SYS_dup3, IOT_DUP3 },
#endif
#ifdef SYS_fcntl
	{ SYS_fcntl, IOT_FCNTL },
#endif
#ifdef SYS_chdir
	{ SYS_chdir, IOT_CHDIR },
#endif
#ifdef SYS_fchdir
	{ SYS_fchdir, IOT_FCHDIR },
#endif
#ifdef SYS_stat
	{ SYS_stat, IOT_STAT },
#endif
#ifdef SYS_lstat
	{ SYS_lstat, IOT_LSTAT },
#endif
#ifdef SYS_fstat
	{ SYS_fstat, IOT_FSTAT },
#endif
#ifdef SYS_newfstatat
	{ SYS_newfstatat, IOT_NEWFSTATAT },
#endif
#ifdef SYS_statx
	{ SYS_statx, IOT_STATX },
#endif
#ifdef SYS_getdents64
	{ SYS_getdents64, IOT_GETDENTS64 },
#endif
#ifdef SYS_unlink
	{ SYS_unlink, IOT_UNLINK },
#endif
#ifdef SYS_unlinkat
	{ SYS_unlinkat, IOT_UNLINKAT },
#endif
#ifdef SYS_rename
	{ SYS_rename, IOT_RENAME },
#endif
#ifdef SYS_renameat
	{ SYS_renameat, IOT_RENAMEAT },
#endif
#ifdef SYS_renameat2
	{ SYS_renameat2, IOT_RENAMEAT2 },
#endif
#ifdef SYS_mkdir
	{ SYS_mkdir, IOT_MKDIR },
#endif
#ifdef SYS_mkdirat
	{ SYS_mkdirat, IOT_MKDIRAT },
#endif
#ifdef SYS_rmdir
	{ SYS_rmdir, IOT_RMDIR },
#endif
#ifdef SYS_mmap
	{ SYS_mmap, IOT_MMAP },
#endif
#ifdef SYS_munmap
	{ SYS_munmap, IOT_MUNMAP },
#endif
#ifdef SYS_futex
	{ SYS_futex, IOT_FUTEX },
#endif
#ifdef SYS_sendfile
	{ SYS_sendfile, IOT_SENDFILE },
#endif
#ifdef SYS_copy_file_range
	{ SYS_copy_file_range, IOT_COPY_FILE_RANGE },
#endif
#ifdef SYS_fadvise64
	{ SYS_fadvise64, IOT_FADVISE64 },
#endif
#ifdef SYS_fallocate
	{ SYS_fallocate, IOT_FALLOCATE },
#endif
#ifdef SYS_ftruncate
	{ SYS_ftruncate, IOT_FTRUNCATE },
#endif
#ifdef SYS_poll
	{ SYS_poll, IOT_POLL },
#endif
#ifdef SYS_ppoll
	{ SYS_ppoll, IOT_PPOLL },
#endif
#ifdef SYS_select
	{ SYS_select, IOT_SELECT },
#endif
#ifdef SYS_pselect6
	{ SYS_pselect6, IOT_PSELECT6 },
#endif
#ifdef SYS_epoll_wait
	{ SYS_epoll_wait, IOT_EPOLL_WAIT },
#endif
#ifdef SYS_epoll_pwait
	{ SYS_epoll_pwait, IOT_EPOLL_PWAIT },
#endif
#ifdef SYS_epoll_pwait2
	{ SYS_epoll_pwait2, IOT_EPOLL_PWAIT2 },
#endif
#ifdef SYS_nanosleep
	{ SYS_nanosleep, IOT_NANOSLEEP },
#endif
#ifdef SYS_clock_nanosleep
	{ SYS_clock_nanosleep, IOT_CLOCK_NANOSLEEP },
#endif
#ifdef SYS_recvfrom
	{ SYS_recvfrom, IOT_RECVFROM },
#endif
#ifdef SYS_recvmsg
	{ SYS_recvmsg, IOT_RECVMSG },
#endif
#ifdef SYS_sendto
	{ SYS_sendto, IOT_SENDTO },
#endif
#ifdef SYS_sendmsg
	{ SYS_sendmsg, IOT_SENDMSG },
#endif
#ifdef SYS_connect
	{ SYS_connect, IOT_CONNECT },
#endif
#ifdef SYS_accept
	{ SYS_accept, IOT_ACCEPT },
#endif
#ifdef SYS_accept4
	{ SYS_accept4, IOT_ACCEPT4 },
#endif
#ifdef SYS_ioctl
	{ SYS_ioctl, IOT_IOCTL },
#endif
};

#endif
