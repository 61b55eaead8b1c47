// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A burst of short processes and threads, each making a known number of
 * reads: `storm FILE NPROCS NTHREADS READS`. Every child process and every
 * thread makes READS preadv calls (one iovec of 64 bytes) of FILE, then ends
 * (children exit with code 0). The main thread makes none. preadv, not pread:
 * the dynamic loader of other programs makes pread64 calls, never preadv. At most 32 processes and 64
 * threads run at a time. Prints "procs N threads M preads R" and exits 0, or
 * 1 if a read or a child failed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int fd, reads;

static int do_reads(void)
{
	char buf[64];
	struct iovec iov = { buf, sizeof(buf) };

	for (int i = 0; i < reads; i++)
		if (preadv(fd, &iov, 1, 0) != sizeof(buf))
			return 1;
	return 0;
}

static void *thread_main(void *arg)
{
	(void)arg;
	return (void *)(long)do_reads();
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: storm FILE NPROCS NTHREADS READS\n");
		return 2;
	}
	int nprocs = atoi(argv[2]), nthreads = atoi(argv[3]), bad = 0;
	long done = 0;

	reads = atoi(argv[4]);
	fd = open(argv[1], O_RDONLY);
	if (fd < 0)
		return 1;
	for (int i = 0; i < nprocs; i += 32) {
		int n = nprocs - i < 32 ? nprocs - i : 32;
		for (int k = 0; k < n; k++) {
			pid_t pid = fork();
			if (pid == 0)
				_exit(do_reads());
			if (pid < 0)
				bad = 1;
		}
		for (int k = 0; k < n; k++) {
			int st;
			if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
				bad = 1;
			else
				done += reads;
		}
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (int i = 0; i < nthreads; i += 64) {
		pthread_t th[64];
		int n = nthreads - i < 64 ? nthreads - i : 64;
		for (int k = 0; k < n; k++)
			if (pthread_create(&th[k], &attr, thread_main, NULL))
				return 1;
		for (int k = 0; k < n; k++) {
			void *rc;
			pthread_join(th[k], &rc);
			if (rc)
				bad = 1;
			else
				done += reads;
		}
	}
	printf("procs %d threads %d preads %ld\n", nprocs, nthreads, done);
	return bad;
}
