/* A thread that sleeps N times (clock_nanosleep) beside a thread of its
 * process that spins, both on CPU 0: each sleep ends in a timer interrupt
 * taken while the spinner runs, so the kernel's current task at the wake-up
 * is the spinner, which did not wake the sleeper.
 *
 *   irq_wake N SLEEP_US   prints "sleeper TID spinner TID" and exits 0 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static atomic_int stop;
static atomic_int spinner_tid;

static void *spin(void *arg)
{
	(void)arg;
	atomic_store(&spinner_tid, (int)syscall(SYS_gettid));
	while (!atomic_load(&stop))
		;
	return NULL;
}

int main(int argc, char **argv)
{
	cpu_set_t one;
	pthread_t t;
	int n = argc > 1 ? atoi(argv[1]) : 200;
	long us = argc > 2 ? atol(argv[2]) : 2000;

	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(0, sizeof(one), &one)) {   /* inherited by the spinner */
		perror("sched_setaffinity");
		return 1;
	}
	pthread_create(&t, NULL, spin, NULL);
	while (!atomic_load(&spinner_tid))
		sched_yield();
	for (int i = 0; i < n; i++) {
		struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
		clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("sleeper %d spinner %d\n", (int)syscall(SYS_gettid), atomic_load(&spinner_tid));
	return 0;
}
