// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* One pid, two processes: `pidreuse FILE`. A child makes 3 preads of FILE
 * and exits 3; once it is reaped, a second child is created with the same
 * pid (clone3 with set_tid, needs CAP_SYS_ADMIN), makes 5 preads and exits
 * 5. Prints "PID" (the pid both had) and exits 0; 1 if the pid could not be
 * given out again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int fd;

static void reads_then_exit(int n)
{
	char buf[16];

	for (int i = 0; i < n; i++)
		(void)!pread(fd, buf, sizeof(buf), 0);
	_exit(n);
}

int main(int argc, char **argv)
{
	int st1, st2;

	if (argc != 2)
		return 2;
	fd = open(argv[1], O_RDONLY);
	if (fd < 0)
		return 1;
	pid_t a = fork();
	if (a == 0)
		reads_then_exit(3);
	if (a < 0 || waitpid(a, &st1, 0) != a)
		return 1;

	pid_t tid[1] = { a };
	struct clone_args args;
	memset(&args, 0, sizeof(args));
	args.exit_signal = SIGCHLD;
	args.set_tid = (uint64_t)(uintptr_t)tid;
	args.set_tid_size = 1;
	long b = syscall(SYS_clone3, &args, sizeof(args));
	if (b == 0)
		reads_then_exit(5);
	if (b < 0) {
		fprintf(stderr, "clone3 set_tid %d: %s\n", a, strerror(errno));
		return 1;
	}
	if (waitpid(b, &st2, 0) != b || b != a)
		return 1;
	printf("%d\n", a);
	return !(WEXITSTATUS(st1) == 3 && WEXITSTATUS(st2) == 5);
}
