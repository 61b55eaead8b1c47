// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A C loop of system calls iotrace records, in THREADS threads: the highest
 * event rate a job can offer (bench/capture_rate.py).
 *   syscall_loop FILE THREADS CALLS_PER_THREAD [BYTES]
 * Each thread preads BYTES (default 1) at offset 0 of FILE, CALLS times, and
 * the program prints the calls made and the seconds they took. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int fd;
static long calls, nbytes;

static void *loop(void *arg)
{
	char buf[4096];

	(void)arg;
	for (long i = 0; i < calls; i++)
		if (pread(fd, buf, nbytes, 0) < 0)
			abort();
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec a, b;
	pthread_t t[64];
	int n;

	if (argc < 4) {
		fprintf(stderr, "usage: syscall_loop FILE THREADS CALLS_PER_THREAD [BYTES]\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY);
	n = atoi(argv[2]);
	calls = atol(argv[3]);
	nbytes = argc > 4 ? atol(argv[4]) : 1;
	if (fd < 0 || n < 1 || n > 64 || nbytes > 4096)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, loop, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%ld %.6f\n", calls * n, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
	return 0;
}
