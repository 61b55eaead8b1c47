/* Threads contending on one pthread mutex while reading a file.
 * Usage: lockwait FILE NTHREADS ITERS
 * Each thread times its own pthread_mutex_lock calls (CLOCK_MONOTONIC) and
 * holds the lock for a pread + 1 ms. Prints "mutex 0x..." then one line per
 * thread: "tid waited_ns". The futex word is the mutex's first int. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int fd, iters;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct result { pid_t tid; long long waited; };

static void *work(void *arg)
{
	struct result *r = arg;
	char buf[4096];

	r->tid = gettid();
	for (int i = 0; i < iters; i++) {
		long long t0 = now();
		pthread_mutex_lock(&mu);
		r->waited += now() - t0;
		if (pread(fd, buf, sizeof(buf), (i % 16) * 4096) < 0)
			perror("pread");
		usleep(1000);
		pthread_mutex_unlock(&mu);
		usleep(100);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = atoi(argv[2]);
	pthread_t th[64];
	struct result res[64] = {0};

	iters = atoi(argv[3]);
	fd = open(argv[1], O_RDONLY);
	if (fd < 0 || n > 64)
		return 2;
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, work, &res[i]);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	printf("mutex %p\n", (void *)&mu);
	for (int i = 0; i < n; i++)
		printf("%d %lld\n", res[i].tid, res[i].waited);
	return 0;
}
