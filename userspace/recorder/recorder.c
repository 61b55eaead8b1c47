// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace-recorder: loads bpf/iotrace.bpf.c, follows a process tree and drains
 * the ring buffer into spool segments that the Python side turns into Parquet.
 *
 *   iotrace-recorder --spool DIR [--status-fd N] --pid PID...          (attach)
 *   iotrace-recorder --spool DIR [--uid U --gid G --groups a,b] -- CMD (run)
 *   iotrace-recorder --check                                          (doctor)
 *
 * Spool segment K is two files, written as K.ev.part / K.str.part and renamed
 * when closed (every --rotate-ms): K.ev holds fixed struct iot_event records;
 * K.str holds the payloads as (u32 record index, u32 length, bytes).
 * Status goes to --status-fd as JSON lines (ready, stats, error, end).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/membarrier.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "cgroup_follow.h"
#include "tls.h"
#include "iotrace.h"
#include "iotrace.skel.h"
#include "core_object.h"
#include "objects.h"
#include "probes.h"
#include "ops.h"
#include "profile.h"
#include "hooks.h"
#include "rings.h"
#include "syscall_table.h"

_Static_assert(sizeof(struct iot_event) == 96, "record ABI: struct iot_event is 96 bytes");

#define EXIT_USAGE 2
#define EXIT_SETUP 3

struct options {
	const char *spool;
	int status_fd;
	int go_fd;		/* run: start the job after a byte (or EOF) here */
	int rotate_ms;
	int ringbuf_mb;
	int nice;		/* the recorder's own (the job keeps its own) */
	double duration_s;
	bool check;
	bool verbose;
	bool profile;		/* aggregate in kernel (bpf/profile.h) */
	int profile_max_keys;	/* size of the aggregate table (tests force it full) */
	bool rates_files;	/* live use: each second's sums a file of its own, no
				 * whole-run table (iotrace exporter reads and deletes them) */
	bool file_sums;		/* live use: per (process, file) sums each drain */
	bool live_http;		/* live use: a profile that still records HTTP message
				 * starts (sockets, TLS plaintext) for the exporter */
	bool loop_waits;	/* live use: the wake-ups between the job's threads,
				 * summed per second (bpf/iotrace.bpf.c prof_wake) */
	const char *verbs_lib;
	const char *tls_libs[9];	/* --tls-lib, NULL-terminated */
	bool no_go_tls;
	int ntls_libs;
	pid_t pids[64];
	int npids;
	const char *follow_cgroup;	/* also trace processes that join this cgroup */
	uid_t uid;
	gid_t gid;
	bool drop_privs;
	gid_t groups[256];
	int ngroups;
	char **cmd;
};

static struct options opt = { .status_fd = -1, .go_fd = -1, .rotate_ms = 1000,
			       .ringbuf_mb = 64, .nice = -10 };
static volatile sig_atomic_t stop_requested, term_requested, parent_gone, stop_now;

/* ---- status channel ----------------------------------------------------- */

static FILE *status_out;

static void status(const char *fmt, ...)
{
	va_list ap;

	if (!status_out)
		return;
	va_start(ap, fmt);
	vfprintf(status_out, fmt, ap);
	va_end(ap);
	fputc('\n', status_out);
	fflush(status_out);
}

/* s as the inside of a JSON string: quotes, backslashes and control
 * characters escaped (a status line must stay one valid line whatever a path
 * or a user's setting holds; other bytes pass as they are, and iotrace reads
 * the line as UTF-8 with invalid bytes replaced). Truncated to fit out. */
static const char *json_escape(const char *s, char *out, size_t len)
{
	size_t k = 0;

	for (const unsigned char *c = (const unsigned char *)s; *c && k + 7 < len; c++) {
		if (*c == '"' || *c == '\\') {
			out[k++] = '\\';
			out[k++] = *c;
		} else if (*c < 0x20) {
			k += snprintf(out + k, len - k, "\\u%04x", *c);
		} else {
			out[k++] = *c;
		}
	}
	out[k] = 0;
	return out;
}

/* One line on stderr, prefixed, for people. */
static void say(const char *fmt, ...)
{
	va_list ap;

	fputs("iotrace-recorder: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Why tracing cannot start, said once: to iotrace on the status channel
 * (an error of this code with the message, which iotrace shows as its one
 * line), or on stderr when the recorder runs alone. */
static void say_start_error(const char *code, const char *fmt, ...)
{
	char msg[512], esc[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!status_out) {
		say("%s", msg);
		return;
	}
	status("{\"type\":\"error\",\"error\":\"%s\",\"message\":\"%s\"}", code,
	       json_escape(msg, esc, sizeof(esc)));
}

/* libbpf messages: all of them with --verbose, else the last few are kept
 * and shown only when loading fails (the verifier's reason). */
static char last_log[8192];

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (opt.verbose)
		return vfprintf(stderr, fmt, ap);
	if (level == LIBBPF_DEBUG)
		return 0;
	size_t used = strlen(last_log);
	if (used > sizeof(last_log) - 1024)
		used = 0;
	vsnprintf(last_log + used, sizeof(last_log) - used, fmt, ap);
	return 0;
}

/* ---- spool segments ----------------------------------------------------- */

struct spool {
	FILE *ev, *str;
	unsigned seq;
	__u32 nrec;
	bool failed;
	int err;
};

static struct spool sp;

static int spool_open(void)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%06u.ev.part", opt.spool, sp.seq);
	sp.ev = fopen(path, "w");
	snprintf(path, sizeof(path), "%s/%06u.str.part", opt.spool, sp.seq);
	sp.str = fopen(path, "w");
	if (!sp.ev || !sp.str) {
		sp.err = errno;
		return -1;
	}
	setvbuf(sp.ev, NULL, _IOFBF, 1 << 20);
	setvbuf(sp.str, NULL, _IOFBF, 1 << 18);
	sp.nrec = 0;
	return 0;
}

static int spool_close(void)
{
	char from[4096], to[4096];
	int rc = 0;

	if (!sp.ev)
		return 0;
	if (fclose(sp.ev))
		rc = -1, sp.err = errno;
	if (fclose(sp.str))
		rc = -1, sp.err = errno;
	sp.ev = sp.str = NULL;
	if (rc)
		return rc;
	snprintf(from, sizeof(from), "%s/%06u.str.part", opt.spool, sp.seq);
	snprintf(to, sizeof(to), "%s/%06u.str", opt.spool, sp.seq);
	rename(from, to);
	/* .ev last: its appearance tells the converter the segment is whole. */
	snprintf(from, sizeof(from), "%s/%06u.ev.part", opt.spool, sp.seq);
	snprintf(to, sizeof(to), "%s/%06u.ev", opt.spool, sp.seq);
	rename(from, to);
	sp.seq++;
	return 0;
}

/* One drain of finished seconds as a file of its own, PREFIX-N.bin, renamed
 * whole (a live reader takes and deletes them: nothing grows however long
 * it runs); none when there was nothing to move. */
static long drain_file(const char *prefix, unsigned seq, long (*drain)(FILE *, __u32),
		       __u32 before_sec)
{
	char from[4096], to[4096];
	long moved;
	FILE *f;

	snprintf(from, sizeof(from), "%s/%s-%06u.bin.part", opt.spool, prefix, seq);
	f = fopen(from, "w");
	if (!f)
		return -1;
	moved = drain(f, before_sec);
	if (fclose(f) || moved < 0) {
		unlink(from);
		return -1;
	}
	if (moved == 0) {
		unlink(from);
		return 0;
	}
	snprintf(to, sizeof(to), "%s/%s-%06u.bin", opt.spool, prefix, seq);
	if (rename(from, to))
		return -1;
	return moved;
}

/* Profile mode's finished seconds: appended to profile-rates.bin, or with
 * --rates-files each drain a file of its own, rates-N.bin (and, with
 * --loop-waits, the wake-ups' wakes-N.bin: the wakes first, so that a
 * reader that sees a second's rates has its wakes too). */
static long rates_drain(FILE *out, __u32 before_sec)
{
	static unsigned seq;
	long moved;

	if (!opt.rates_files)
		return prof_rates_drain(out, before_sec);
	if (opt.loop_waits && drain_file("wakes", seq, prof_wakes_drain, before_sec) < 0)
		return -1;
	if (opt.file_sums && drain_file("files", seq, prof_files_drain, before_sec) < 0)
		return -1;
	moved = drain_file("rates", seq, prof_rates_drain, before_sec);
	seq++;
	return moved;
}

/* ---- ring buffer drain -------------------------------------------------- */

struct totals {
	__u64 events, bytes_read, bytes_written, unknown;
};
static struct totals tot;

static int on_record(void *ctx, void *data, size_t size)
{
	const struct iot_event *e = data;

	if (sp.failed)
		return 0;
	if (size < sizeof(*e) || e->op == IOT_OP_NONE || e->op >= IOT_OP_COUNT ||
	    sizeof(*e) + e->str_len > size) {
		tot.unknown++;  /* counted and reported, never written */
		return 0;
	}
	/* a profile names a regular file once (its open's record); the call
	 * itself is in the sums */
	if (opt.profile && is_open_op(e->op) && e->ret >= 0 && e->imode == S_IFREG && e->ino &&
	    !prof_name_new(e->dev, e->ino))
		return 0;
	if (fwrite(e, sizeof(*e), 1, sp.ev) != 1)
		goto fail;
	if (e->str_len) {
		__u32 hdr[2] = { sp.nrec, e->str_len };
		if (fwrite(hdr, sizeof(hdr), 1, sp.str) != 1 ||
		    fwrite((const char *)data + sizeof(*e), e->str_len, 1, sp.str) != 1)
			goto fail;
	}
	sp.nrec++;
	tot.events++;
	if (e->op == IOT_MMAP && (e->mode & 4 /* PROT_EXEC */) && e->ret >= 0)
		tls_note_exec_map(e->pid, e->ts_ns);  /* a library, maybe a TLS one: probe it */
	else if (e->op == IOT_PROC_EXEC) {
		char argv0[512];

		snprintf(argv0, sizeof(argv0), "%.*s", (int)e->str_len, (const char *)data + sizeof(*e));
		tls_note_exec(e->pid, e->ts_ns, argv0);   /* a new program, maybe Go: at once */
	}
	if (e->ret > 0) {
		if (is_read_op(e->op))
			tot.bytes_read += e->ret;
		if (is_write_op(e->op))
			tot.bytes_written += e->ret;
	}
	return 0;
fail:
	sp.failed = true;
	sp.err = errno;
	return 0;
}

/* Profile mode: a thread's sums for one key (bpf/profile.h), into the tables. */
static int on_prof_sums(void *ctx, void *data, size_t size)
{
	if (size < sizeof(struct iot_prof_sums)) {
		tot.unknown++;
		return 0;
	}
	prof_add(data);
	return 0;
}

/* The system-call records lost by op, as a JSON object {"op number": n}. */
static void drops_by_op_json(struct iotrace_bpf *skel, char *buf, size_t len)
{
	int ncpu = libbpf_num_possible_cpus();
	__u64 vals[ncpu > 0 ? ncpu : 1];
	size_t off = snprintf(buf, len, "{");

	for (__u32 op = 1; op < IOT_OP_COUNT && off < len; op++) {
		__u64 sum = 0;
		if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.drops_by_op), &op, vals))
			continue;
		for (int i = 0; i < ncpu; i++)
			sum += vals[i];
		if (sum)
			off += snprintf(buf + off, len - off, "%s\"%u\":%llu", off > 1 ? "," : "", op,
					(unsigned long long)sum);
	}
	if (off < len)
		snprintf(buf + off, len - off, "}");
	else
		snprintf(buf, len, "{}");
}

static __u64 counter_sum(struct iotrace_bpf *skel, __u32 idx)
{
	int ncpu = libbpf_num_possible_cpus();
	__u64 vals[ncpu > 0 ? ncpu : 1], sum = 0;

	if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.counters), &idx, vals))
		return 0;
	for (int i = 0; i < ncpu; i++)
		sum += vals[i];
	return sum;
}

/* ---- process tree ------------------------------------------------------- */

/* Whether a process has exited (a zombie counts: its exit was before it was
 * traced, so no exit event will end it). A zombie leader whose other threads
 * run still counts as alive. */
static bool proc_gone(pid_t pid)
{
	char path[64], buf[1024], *p;
	char state = 0;
	int nthreads = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return true;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %d",
		       &state, &nthreads);
	fclose(f);
	return (state == 'Z' || state == 'X') && nthreads <= 1;
}

static int add_traced(struct iotrace_bpf *skel, pid_t pid)
{
	__u32 key = pid;
	__u8 one = 1;

	__u64 *slot = &skel->bss->traced_slot[pid & (sizeof(skel->bss->traced_slot) /
						      sizeof(skel->bss->traced_slot[0]) - 1)];
	__u64 expect = 0;

	if (bpf_map_update_elem(bpf_map__fd(skel->maps.traced), &key, &one, BPF_NOEXIST))
		return errno == EEXIST ? 0 : -1;
	/* the BPF side's filter (bpf/iotrace.bpf.c traced_slot), shared memory */
	if (!__atomic_compare_exchange_n(slot, &expect, (__u64)pid, false, __ATOMIC_SEQ_CST,
					 __ATOMIC_SEQ_CST) && expect != (__u64)pid)
		__atomic_store_n(slot, ~0ull, __ATOMIC_SEQ_CST);
	__sync_fetch_and_add(&skel->bss->live_procs, 1);
	/* exited before it was in the map (a zombie, or between a caller's
	 * check and now): no exit event will come, so it is not counted live;
	 * if its exit was seen meanwhile, the kernel side removed it already */
	if (proc_gone(pid)) {
		if (!bpf_map_delete_elem(bpf_map__fd(skel->maps.traced), &key)) {
			__sync_val_compare_and_swap(slot, (__u64)pid, 0);
			__sync_fetch_and_add(&skel->bss->live_procs, -1);
		}
		return 0;
	}
	return 1;
}

static pid_t read_ppid(const char *pid)
{
	char path[300], buf[512], *p;
	FILE *f;
	int ppid = -1;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		sscanf(p + 2, "%*c %d", &ppid);
	fclose(f);
	return ppid;
}

/* Adds every existing descendant of the traced processes. Children forked
 * from now on are followed in kernel, so one pass to a fixpoint is enough. */
static void add_descendants(struct iotrace_bpf *skel)
{
	bool grew = true;

	while (grew) {
		DIR *d = opendir("/proc");
		struct dirent *de;

		grew = false;
		if (!d)
			return;
		while ((de = readdir(d))) {
			__u32 ppid;
			__u8 v;

			if (!isdigit(de->d_name[0]))
				continue;
			ppid = read_ppid(de->d_name);
			if ((int)ppid <= 0 ||
			    bpf_map_lookup_elem(bpf_map__fd(skel->maps.traced), &ppid, &v))
				continue;
			if (add_traced(skel, atoi(de->d_name)) > 0)
				grew = true;
		}
		closedir(d);
	}
}

/* ---- the job (run mode) ------------------------------------------------- */

static pid_t child_pid = -1;

/* The child waits on go[0] until tracing is on, drops to the invoking user,
 * then execs. An exec failure is reported as errno on err[1]. */
static pid_t spawn_job(int go[2], int err[2])
{
	pid_t pid;

	if (pipe2(go, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid != 0)
		return pid;

	char c;
	int e;

	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGUSR1, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, 0);
	close(go[1]);
	close(err[0]);
	if (read(go[0], &c, 1) != 1)
		_exit(126);  /* the recorder failed before starting the job */
	/* capabilities granted to a non-root recorder (ambient) are not the job's */
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (opt.drop_privs) {
		if (setgroups(opt.ngroups, opt.groups) || setgid(opt.gid) || setuid(opt.uid)) {
			e = errno;
			(void)!write(err[1], &e, sizeof(e));
			_exit(126);
		}
	}
	execvp(opt.cmd[0], opt.cmd);
	e = errno;
	(void)!write(err[1], &e, sizeof(e));
	_exit(e == ENOENT ? 127 : 126);
}

/* ---- least privilege ---------------------------------------------------- */

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

/* The recorder's own priority, set after the job was forked (so the job keeps
 * the nice value it was started with) and before the capabilities go (raising
 * it needs CAP_SYS_NICE). When the job keeps every CPU busy, a drain at the
 * job's priority gets a share of one CPU per thread of the job: 16 threads of
 * preads on 2 CPUs dropped 2-7% of 2.4 M records at nice 0, none at -10,
 * which costs the job the CPU time the drain needs and no more. Without the
 * capability it stays as it is: the ready status and meta.json say the value
 * in effect, and the summary says it where records were dropped. */
static int recorder_priority(int want)
{
	setpriority(PRIO_PROCESS, 0, want);
	return getpriority(PRIO_PROCESS, 0);
}

/* Once the probes are loaded and attached and the job is started, the
 * recorder keeps only what the rest of the run needs: CAP_BPF and
 * CAP_PERFMON (TLS uprobes attached as processes map the libraries, map
 * updates on kernels that check them), CAP_SYS_PTRACE and
 * CAP_DAC_READ_SEARCH (another user's /proc/PID/maps and the libraries
 * through /proc/PID/root), CAP_KILL (signals to a job that runs as the
 * invoking user). Everything else (CAP_SYS_ADMIN, CAP_SETUID, CAP_DAC_OVERRIDE,
 * ...) leaves the permitted set for good: the recorder never execs. Its spool
 * directory is its own (made by iotrace as the same user). */
static void drop_capabilities(void)
{
	static const int keep[] = { CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE,
				    CAP_DAC_READ_SEARCH, CAP_KILL };
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	__u64 have, want = 0;

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d))
		return;
	have = d[0].permitted | (__u64)d[1].permitted << 32;
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		want |= 1ull << keep[i];
	want &= have;
	d[0].effective = d[0].permitted = (__u32)want;
	d[1].effective = d[1].permitted = (__u32)(want >> 32);
	d[0].inheritable = d[1].inheritable = 0;
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (syscall(SYS_capset, &h, d))
		say("cannot drop capabilities: %s", strerror(errno));
}

/* ---- main loop ---------------------------------------------------------- */

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		parent_gone = 1;
	else if (sig == SIGUSR1)
		stop_now = 1;  /* stop tracing now; in run mode the job runs on */
	else if (sig == SIGTERM)
		term_requested = 1;
	stop_requested = 1;
}

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/*
 * Runs a task iterator program once and hands each rec_size record of its
 * output to emit (NULL: records are only counted). Returns how many, or -1
 * when the iterator could not run (errno says why).
 */
static long long iter_run(struct bpf_program *prog, size_t rec_size,
			  int (*emit)(void *ctx, void *data, size_t size))
{
	char buf[64 * sizeof(struct iot_event)];
	struct bpf_link *link = bpf_program__attach_iter(prog, NULL);
	int fd = link ? bpf_iter_create(bpf_link__fd(link)) : -1;
	long long n = 0;
	size_t have = 0;
	ssize_t got;

	if (fd < 0) {
		int e = errno;
		bpf_link__destroy(link);
		errno = e;
		return -1;
	}
	/* the iterator's output comes in pieces that may cut a record */
	while ((got = read(fd, buf + have, sizeof(buf) - have)) > 0) {
		size_t done = 0;

		have += (size_t)got;
		for (; have - done >= rec_size; done += rec_size, n++)
			if (emit)
				emit(NULL, buf + done, rec_size);
		memmove(buf, buf + done, have - done);
		have -= done;
	}
	if (got < 0)
		n = -1;
	close(fd);
	bpf_link__destroy(link);
	return n;
}

/* The traced system calls that had entered but not returned when the trace
 * stopped at `stop` (bpf_ktime_get_ns's clock): a record each
 * (iot_unfinished), emitted like the ring buffer's. How many, or -1. */
static long long calls_in_progress(struct iotrace_bpf *skel, __u64 stop,
				   int (*emit)(void *ctx, void *data, size_t size))
{
	long long n;

	skel->bss->stop_ns = stop;
	n = iter_run(skel->progs.iot_unfinished, sizeof(struct iot_event), emit);
	if (n < 0)
		say("cannot list the calls in progress when tracing stopped: %s "
		    "(the trace has none of them)", strerror(errno));
	return n;
}

/*
 * Profile mode, at the end: each thread's sums not yet sent (bpf/profile.h)
 * are sent by iot_prof_flush (and read from the ring after it). The traced
 * slots are empty and the probes detached by then, so no program starts a
 * new sum; membarrier's global command waits for an RCU grace period, which
 * every program run in progress (each holds the RCU read lock) ends before.
 * Then no thread writes its sums while the iterator reads them. The exit
 * probe is still attached: a thread exiting meanwhile sends its own (before
 * its state is freed), and the slots' atomic exchange lets only one of the
 * two send it.
 */
static void profile_flush_threads(struct iotrace_bpf *skel)
{
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0))
		usleep(100 * 1000);   /* nohz_full kernels refuse it: a wide margin */
	if (iter_run(skel->progs.iot_prof_flush, 1, NULL) < 0)
		say("cannot add the threads' last profile sums: %s (up to a second of "
		    "each thread's calls is missing from the profile)", strerror(errno));
}

/* The system calls the processes of an attach are in when tracing starts
 * at `start`: their state is set as if their entry had been seen then
 * (iot_in_progress), so that their return is recorded. `tgid`: only that
 * process's (one that joined a followed cgroup), 0: every traced one's.
 * Added to calls_began, the meta's calls_began_before; -1 there once a run
 * failed. */
static long long calls_began;
static bool calls_began_listed;   /* the attach's first run is done */

static void calls_at_start(struct iotrace_bpf *skel, __u64 start, pid_t tgid)
{
	long long n;

	skel->bss->start_ns = start;
	skel->bss->only_tgid = tgid;
	n = iter_run(skel->progs.iot_in_progress, sizeof(__u16), NULL);
	if (n < 0) {
		say("cannot find the calls in progress when tracing started: %s "
		    "(those calls are not in the trace)", strerror(errno));
		calls_began = -1;
	} else if (calls_began >= 0) {
		calls_began += n;
	}
	calls_began_listed = true;
}

/* Tests only: with IOTRACE_TEST_PAUSE_BEFORE_SCAN=FILE, an attach stops
 * between tracing its processes and looking for their calls in progress:
 * it creates FILE and waits (up to 60 s) until the test removes it, so that
 * a call can return in between (counters.calls_entry_unseen). */
static void test_pause_before_scan(void)
{
	const char *path = getenv("IOTRACE_TEST_PAUSE_BEFORE_SCAN");
	int fd;

	if (!path || !*path)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	close(fd);
	for (int i = 0; i < 6000 && access(path, F_OK) == 0; i++)
		usleep(10000);
}

/* A process found in the followed cgroup: traced from now on (its children
 * are followed in kernel); the first time, said on the status channel so
 * that iotrace reads its command line and open files. Moved in from
 * outside, it may be inside a call: recorded from now, as at an attach. */
static void cgroup_joined(pid_t pid, void *ctx)
{
	if (add_traced(ctx, pid) <= 0)
		return;
	if (calls_began_listed)
		calls_at_start(ctx, now_ns(), pid);
	status("{\"type\":\"joined\",\"pid\":%d,\"monotonic_ns\":%llu}", pid,
	       (unsigned long long)now_ns());
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: iotrace-recorder --spool DIR [options] (--pid PID... | -- CMD ARGS...)\n"
		"       iotrace-recorder --check\n"
		"This is iotrace's privileged helper; run it through `iotrace run` or\n"
		"`iotrace attach`, which turn its spool into a Parquet trace.\n"
		"  --spool DIR        write spool segments here\n"
		"  --pid PID          trace PID and its descendants (repeatable); with CMD,\n"
		"                     processes traced besides it (the trace ends with CMD)\n"
		"  --follow-cgroup DIR  also trace every process that is in, or joins, the\n"
		"                     cgroup DIR or one below it (checked every 200 ms); keep\n"
		"                     tracing when none is left, until a signal or --duration\n"
		"  --uid U --gid G    run CMD as this user/group\n"
		"  --groups G1,G2     supplementary groups of CMD\n"
		"  --status-fd N      write JSON status lines to fd N\n"
		"  --go-fd N          start CMD once a byte (or EOF) is read from fd N\n"
		"  --rotate-ms MS     close a spool segment every MS ms (default 1000)\n"
		"  --nice N           the recorder's nice value (default -10: a job that\n"
		"                     keeps every CPU busy does not starve the drain;\n"
		"                     the job keeps the nice value it was started with)\n"
		"  --ringbuf-mb MB    ring buffer size (default 64; a profile's sums\n"
		"                     have one of their own, at most 16)\n"
		"  --duration S       stop after S seconds (attach mode)\n"
		"  --verbs-lib PATH   libibverbs to probe (default: the system's, when there is\n"
		"                     an RDMA device; \"none\": no verbs probes)\n"
		"  --tls-lib PATH     also probe this OpenSSL/GnuTLS library (repeatable; the\n"
		"                     system's and those the job maps are probed anyway;\n"
		"                     \"none\": no TLS probes)\n"
		"  --no-go-tls        no probes on Go's crypto/tls (by default each Go program\n"
		"                     the job runs has its TLS reads and writes probed; the\n"
		"                     probes fire in every process that runs that binary)\n"
		"  --profile          sum calls in kernel per process, file, op, size and\n"
		"                     latency bucket, and per second (profile-*.bin in the\n"
		"                     spool); records only what names files and processes\n"
		"  --rates-files      with --profile: each second's sums a file of its own,\n"
		"                     rates-N.bin, and no whole-run table (live readers\n"
		"                     take and delete them: iotrace exporter)\n"
		"  --loop-waits       with --rates-files: also the time each thread was\n"
		"                     blocked until another of the job's threads woke it,\n"
		"                     per second (wakes-N.bin; costs the scheduler hooks)\n"
		"  --live-http        with --rates-files: also record the HTTP message starts\n"
		"                     on inet sockets and in TLS calls (object storage)\n"
		"  --file-sums        with --rates-files: also each drain's sums per process\n"
		"                     and regular file (files-N.bin)\n"
		"  --check            load and attach every probe, report, detach\n"
		"  --verbose          libbpf debug output\n");
}

/* A TLS library a traced process mapped, or a Go program it ran: probed
 * from now on, or not (why); one found at its exec or mapping ran
 * after_exec_ns unprobed, until probed_ns (the trace's clock). */
static void tls_probed(const char *path, int attached, const char *why, long long after_exec_ns,
		       int pid, unsigned long long probed_ns)
{
	char esc[1024], wesc[400];

	status("{\"type\":\"tls-library\",\"path\":\"%s\",\"probes\":%d,\"why\":\"%s\","
	       "\"after_exec_ms\":%.3f,\"pid\":%d,\"probed_ns\":%llu}",
	       json_escape(path, esc, sizeof(esc)), attached, json_escape(why, wesc, sizeof(wesc)),
	       after_exec_ns < 0 ? -1.0 : after_exec_ns / 1e6, pid, probed_ns);
}

static int parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "spool", required_argument, 0, 's' },
		{ "pid", required_argument, 0, 'p' },
		{ "follow-cgroup", required_argument, 0, 'F' },
		{ "uid", required_argument, 0, 'u' },
		{ "gid", required_argument, 0, 'g' },
		{ "groups", required_argument, 0, 'G' },
		{ "status-fd", required_argument, 0, 'S' },
		{ "go-fd", required_argument, 0, 'O' },
		{ "rotate-ms", required_argument, 0, 'r' },
		{ "ringbuf-mb", required_argument, 0, 'b' },
		{ "nice", required_argument, 0, 'n' },
		{ "duration", required_argument, 0, 'd' },
		{ "check", no_argument, 0, 'c' },
		{ "profile", no_argument, 0, 'P' },
		{ "profile-max-keys", required_argument, 0, 'K' },
		{ "rates-files", no_argument, 0, 'R' },
		{ "loop-waits", no_argument, 0, 'W' },
		{ "live-http", no_argument, 0, 'H' },
		{ "file-sums", no_argument, 0, 'f' },
		{ "verbs-lib", required_argument, 0, 'L' },
		{ "tls-lib", required_argument, 0, 'T' },
		{ "no-go-tls", no_argument, 0, 'o' },
		{ "verbose", no_argument, 0, 'v' },
		{ "help", no_argument, 0, 'h' },
		{ 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 's': opt.spool = optarg; break;
		case 'p':
			if (opt.npids == 64) {
				say("at most 64 --pid");
				return -1;
			}
			opt.pids[opt.npids++] = atoi(optarg);
			break;
		case 'u': opt.uid = atoi(optarg); opt.drop_privs = true; break;
		case 'g': opt.gid = atoi(optarg); opt.drop_privs = true; break;
		case 'G':
			for (char *t = strtok(optarg, ","); t && opt.ngroups < 256; t = strtok(NULL, ","))
				opt.groups[opt.ngroups++] = atoi(t);
			break;
		case 'S': opt.status_fd = atoi(optarg); break;
		case 'O': opt.go_fd = atoi(optarg); break;
		case 'r': opt.rotate_ms = atoi(optarg); break;
		case 'b': opt.ringbuf_mb = atoi(optarg); break;
		case 'n': opt.nice = atoi(optarg); break;
		case 'd': opt.duration_s = strtod(optarg, NULL); break;
		case 'c': opt.check = true; break;
		case 'P': opt.profile = true; break;
		case 'K': opt.profile_max_keys = atoi(optarg); break;
		case 'R': opt.rates_files = true; break;
		case 'W': opt.loop_waits = true; break;
		case 'H': opt.live_http = true; break;
		case 'f': opt.file_sums = true; break;
		case 'L': opt.verbs_lib = optarg; break;
		case 'T':
			if (opt.ntls_libs == 8) {
				say("at most 8 --tls-lib");
				return -1;
			}
			opt.tls_libs[opt.ntls_libs++] = optarg;
			break;
		case 'o': opt.no_go_tls = true; break;
		case 'v': opt.verbose = true; break;
		case 'F': opt.follow_cgroup = optarg; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (optind < argc)
		opt.cmd = argv + optind;
	if (opt.check)
		return 0;
	if (!opt.spool || (!opt.cmd && !opt.npids && !opt.follow_cgroup) ||
	    (opt.cmd && opt.follow_cgroup)) {
		usage(stderr);
		return -1;
	}
	if ((opt.rates_files && !opt.profile) ||
	    ((opt.loop_waits || opt.live_http || opt.file_sums) && !opt.rates_files)) {
		say("--rates-files needs --profile; --loop-waits, --live-http and --file-sums "
		    "need --rates-files");
		return -1;
	}
	if (opt.ringbuf_mb < 1 || (opt.ringbuf_mb & (opt.ringbuf_mb - 1))) {
		say("--ringbuf-mb must be a power of two");
		return -1;
	}
	return 0;
}

/* Profile mode: no per-event probes whose records it cannot sum (the
 * scheduler's off-CPU intervals, the TLS plaintext). */
static void prepare_profile(struct iotrace_bpf *skel, struct probe *probes, int n)
{
	skel->rodata->profile_mode = opt.profile;
	/* the sums' ring: up to 16 MiB, read every 50 ms at least (about 3.5 M
	 * key changes a second); a full trace sends none: one page */
	bpf_map__set_max_entries(skel->maps.prof_ring, !opt.profile ? (__u32)getpagesize() :
				 (__u32)(opt.ringbuf_mb < 16 ? opt.ringbuf_mb : 16) << 20);
	if (!opt.profile)
		return;
	/* the tests' smaller tables: the kernel's named files too */
	if (opt.profile_max_keys > 0)
		bpf_map__set_max_entries(skel->maps.prof_named, opt.profile_max_keys);
	for (int i = 0; i < n && !opt.loop_waits; i++) {
		if (strcmp(probes[i].prog, "iot_sched_switch") && strcmp(probes[i].prog, "iot_sched_waking")
		    && strncmp(probes[i].name, IRQ_WAKE_PROBES, sizeof(IRQ_WAKE_PROBES) - 1))
			continue;
		if (!probes[i].why[0])
			snprintf(probes[i].why, sizeof(probes[i].why),
				 "profile mode (off-CPU intervals need a full trace)");
		bpf_program__set_autoload(probes[i].bpf, false);
	}
	skel->rodata->live_http = opt.live_http;
	if (!opt.ntls_libs && !opt.live_http)
		opt.tls_libs[opt.ntls_libs++] = "none:profile mode (HTTP requests need a full trace)";
}

static void fill_syscall_table(struct iotrace_bpf *skel)
{
	/* the calls that can change the caller's mappings (bpf sys_remaps) */
	static const struct { long nr; __u8 kind; } remaps[] = {
		{ SYS_mmap, IOT_REMAP_MMAP }, { SYS_munmap, IOT_REMAP_MUNMAP },
		{ SYS_brk, IOT_REMAP_BRK }, { SYS_mremap, IOT_REMAP_ALL },
		{ SYS_shmat, IOT_REMAP_ALL }, { SYS_shmdt, IOT_REMAP_ALL },
		{ SYS_remap_file_pages, IOT_REMAP_ALL }, { SYS_execve, IOT_REMAP_ALL },
		{ SYS_execveat, IOT_REMAP_ALL },
	};

	for (size_t i = 0; i < sizeof(syscall_table) / sizeof(syscall_table[0]); i++)
		if (syscall_table[i].nr >= 0 && syscall_table[i].nr < IOT_MAX_SYSCALLS)
			skel->rodata->sys_op[syscall_table[i].nr] = syscall_table[i].op;
	for (size_t i = 0; i < sizeof(remaps) / sizeof(remaps[0]); i++)
		if (remaps[i].nr >= 0 && remaps[i].nr < IOT_MAX_SYSCALLS)
			skel->rodata->sys_remaps[remaps[i].nr] = remaps[i].kind;
}

/* The record rings: how many, of what size (rings.c). */
static struct ring_plan ring_plan;

/* The core object opened (not loaded): its syscall table and ring buffer
 * size set, each probe's program found. NULL, said, when it cannot open. */
static struct iotrace_bpf *open_core(struct probe *probes, int ncore, bool direct)
{
	struct iotrace_bpf *skel = core_object_open(direct);

	if (!skel) {
		say("cannot open the BPF object: %s", strerror(errno));
		return NULL;
	}
	fill_syscall_table(skel);
	ring_plan = rings_plan(opt.ringbuf_mb, libbpf_num_possible_cpus());
	bpf_map__set_max_entries(skel->maps.rings, (__u32)ring_plan.ncpu);
	/* wake the reader once a quarter of a small ring is filled (a 1 MiB ring
	 * never holds the default 1 MiB of records: it was read at timeouts only) */
	if (ring_plan.bytes < 4 << 20)
		skel->rodata->wakeup_bytes = ring_plan.bytes / 4;
	for (int i = 0; i < ncore; i++)
		probes[i].bpf = bpf_object__find_program_by_name(skel->obj, probes[i].prog);
	return skel;
}

/* The system calls' way in (hooks.h): with fentry, the two tracepoint
 * probes stand for the fentry and fexit programs (attached by hooks.c,
 * shown as attached through in_multi) and are not loaded. */
static int nhooked;
static char hook_names[2][96];

static void select_hooks(struct iotrace_bpf *skel, struct probe *probes, const struct btf *vmlinux,
			 bool fentry)
{
	static const char *tp_names[2];

	if (!tp_names[0]) {
		tp_names[0] = probes[0].name;
		tp_names[1] = probes[1].name;
	}
	nhooked = hooks_select(skel->obj, vmlinux, fentry);
	skel->rodata->tp_hooks = !fentry;
	for (int i = 0; i < 2; i++) {
		probes[i].required = !fentry;
		probes[i].in_multi = false;
		probes[i].name = tp_names[i];
		if (!fentry)
			continue;
		snprintf(hook_names[i], sizeof(hook_names[i]), "syscalls (%s on %d kernel functions)",
			 i ? "fexit" : "fentry", nhooked);
		probes[i].name = hook_names[i];
		bpf_program__set_autoload(probes[i].bpf, false);
		probes[i].bpf = NULL;
	}
}

int main(int argc, char **argv)
{
	struct optional_objects extra = {};
	struct probe *probes = core_probes;
	const int ncore = n_core_probes;
	struct iotrace_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct btf *vmlinux;
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
	int go[2] = { -1, -1 }, errp[2] = { -1, -1 };
	int rc = EXIT_SETUP, job_status = -1, exec_errno = 0;
	static char attached[16384], skipped[32768];
	__u64 t0, last_rotate, last_stats, last_follow, last_tls, last_profile = 0, last_snapshot = 0;
	FILE *prof_rates = NULL;
	const char *stop_reason = "done";
	__s64 extra_live = 0;

	if (parse_args(argc, argv))
		return EXIT_USAGE;
	if (opt.status_fd >= 0) {
		fcntl(opt.status_fd, F_SETFD, FD_CLOEXEC);  /* not for the job */
		status_out = fdopen(opt.status_fd, "w");
	}
	if (opt.go_fd >= 0)
		fcntl(opt.go_fd, F_SETFD, FD_CLOEXEC);
	libbpf_set_print(libbpf_print);
	setrlimit(RLIMIT_MEMLOCK, &rl);  /* libbpf 1.1 still charges memlock on some kernels */

	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGUSR1, on_signal);
	/* If iotrace (our parent) dies, even by kill -9, finish and detach. */
	prctl(PR_SET_PDEATHSIG, SIGHUP);

	if (opt.cmd && !opt.check) {
		child_pid = spawn_job(go, errp);
		if (child_pid < 0) {
			say("cannot fork: %s", strerror(errno));
			return EXIT_SETUP;
		}
		close(go[0]);
		close(errp[1]);
	}

	vmlinux = btf__load_vmlinux_btf();
	if (!vmlinux) {
		say_start_error("no-btf", "the kernel has no BTF (/sys/kernel/btf/vmlinux): iotrace "
				"needs a kernel built with CONFIG_DEBUG_INFO_BTF=y");
		goto out;
	}
	char hooks_why[256] = "", reads_why[256] = "";
	int hooks_want = hooks_wanted(hooks_why, sizeof(hooks_why));
	int reads_want = kernel_reads_wanted(reads_why, sizeof(reads_why));
	if (hooks_want < 0 || reads_want < 0) {
		say_start_error("setting", "%s", hooks_want < 0 ? hooks_why : reads_why);
		btf__free(vmlinux);
		rc = EXIT_USAGE;
		goto out;
	}
	bool fentry = hooks_want != HOOKS_TRACEPOINT;
	if (!fentry)
		snprintf(hooks_why, sizeof(hooks_why), "IOTRACE_HOOKS=tracepoint");
	bool direct = false;
	if (reads_want == READS_PROBE)
		snprintf(reads_why, sizeof(reads_why), "IOTRACE_KERNEL_READS=probe");
	else
		direct = kernel_has_direct_reads(vmlinux, reads_why, sizeof(reads_why));
	if (!direct && reads_want == READS_DIRECT) {
		say_start_error("setting", "%s: IOTRACE_KERNEL_READS=direct asks for it; unset it, "
				"or set IOTRACE_KERNEL_READS=probe", reads_why);
		btf__free(vmlinux);
		goto out;
	}
open_core:
	for (int i = 0; i < ncore; i++)
		probes[i].why[0] = 0;
	skel = open_core(probes, ncore, direct);
	if (!skel) {
		btf__free(vmlinux);
		goto out;
	}
	for (int i = 0; i < ncore; i++) {
		if (!btf_has_tracepoint(vmlinux, probes[i].tp) && !(fentry && i < 2)) {
			snprintf(probes[i].why, sizeof(probes[i].why),
				 "this kernel has no %s tracepoint", probes[i].tp);
			bpf_program__set_autoload(probes[i].bpf, false);
		}
	}
	select_hooks(skel, probes, vmlinux, fentry);
	prepare_profile(skel, probes, ncore);
	for (int i = 0; i < ncore; i++) {
		if (probes[i].required && probes[i].why[0]) {
			say("cannot trace: %s", probes[i].why);
			btf__free(vmlinux);
			goto out;
		}
	}

	int load_err = iotrace_bpf__load(skel) ? errno : 0;
	if (load_err && fentry && hooks_want == HOOKS_AUTO) {
		/* no BPF trampolines here (or one the verifier refuses): the
		 * tracepoints, with the reason kept for doctor and meta.json */
		snprintf(hooks_why, sizeof(hooks_why), "the kernel refused fentry programs (%s)",
			 strerror(load_err));
		iotrace_bpf__destroy(skel);
		skel = NULL;
		fentry = false;
		goto open_core;
	}
	if (load_err && direct && reads_want == READS_AUTO && load_err != EPERM) {
		/* the kfunc is there but the verifier refuses the direct loads:
		 * the helper reads, with the reason kept for doctor and meta.json */
		snprintf(reads_why, sizeof(reads_why),
			 "the kernel refused the programs with direct reads (%s)", strerror(load_err));
		iotrace_bpf__destroy(skel);
		skel = NULL;
		direct = false;
		goto open_core;
	}
	if (load_err && load_err != EPERM) {
		/* An optional probe this kernel's verifier refuses must not cost the
		 * system calls: load again without the optional ones, each skipped
		 * with the reason. */
		char why[160];
		snprintf(why, sizeof(why), "the kernel refused this probe's program (%s); %s",
			 strerror(load_err), "`iotrace doctor` shows the verifier's log");
		iotrace_bpf__destroy(skel);
		skel = open_core(probes, ncore, direct);
		if (!skel) {
			btf__free(vmlinux);
			goto out;
		}
		select_hooks(skel, probes, vmlinux, fentry);
		prepare_profile(skel, probes, ncore);
		for (int i = 0; i < ncore; i++) {
			if (probes[i].required || (fentry && i < 2))
				continue;
			if (!probes[i].why[0])
				snprintf(probes[i].why, sizeof(probes[i].why), "%s", why);
			bpf_program__set_autoload(probes[i].bpf, false);
		}
		load_err = iotrace_bpf__load(skel) ? errno : 0;
	}
	if (load_err && fentry) {
		say_start_error("setting", "the kernel refused the fentry programs (%s): "
				"IOTRACE_HOOKS=fentry asks for them; unset it, or set "
				"IOTRACE_HOOKS=tracepoint", strerror(load_err));
		btf__free(vmlinux);
		goto out;
	}
	if (load_err) {
		int e = load_err;
		say("cannot load the BPF programs: %s%s", strerror(e),
		    e == EPERM ? " (run as root, or grant CAP_BPF and CAP_PERFMON)" : "");
		if (last_log[0] && e != EPERM)
			fprintf(stderr, "%s", last_log);
		status("{\"type\":\"error\",\"error\":\"load\",\"errno\":%d}", e);
		btf__free(vmlinux);
		goto out;
	}
	int ring_err = rings_fill(&ring_plan, bpf_map__fd(skel->maps.rings));
	if (ring_err) {
		say("cannot make the ring buffers (%d of %u bytes): %s; a smaller "
		    "--ringbuf-mb needs less locked memory", ring_plan.count, ring_plan.bytes,
		    strerror(-ring_err));
		status("{\"type\":\"error\",\"error\":\"load\",\"errno\":%d}", -ring_err);
		btf__free(vmlinux);
		goto out;
	}
	if (fentry) {
		/* attached now, before the optional objects share the maps: a
		 * kernel that loads fentry programs but will not attach them
		 * falls back to the tracepoints like one that refuses to load them */
		int e = hooks_attach();
		if (e && hooks_want == HOOKS_AUTO) {
			snprintf(hooks_why, sizeof(hooks_why), "fentry programs would not attach (%s)",
				 strerror(-e));
			iotrace_bpf__destroy(skel);
			skel = NULL;
			fentry = false;
			goto open_core;
		}
		if (e) {
			say_start_error("setting", "cannot attach the fentry hooks (%s): "
					"IOTRACE_HOOKS=fentry asks for them; unset it, or set "
					"IOTRACE_HOOKS=tracepoint", strerror(-e));
			btf__free(vmlinux);
			goto out;
		}
		probes[0].in_multi = probes[1].in_multi = true;
	}
	load_optional_objects(&extra, skel->obj, vmlinux, fentry);
	btf__free(vmlinux);
	attach_probes(core_probes, ncore);
	for (int i = 0; i < ncore; i++) {
		if (probes[i].required && !probes[i].link) {
			say("cannot attach %s: %s", probes[i].name, probes[i].why);
			goto out;
		}
	}
	attach_optional_objects(&extra, skel->obj, opt.verbs_lib, opt.tls_libs, opt.live_http,
				!opt.no_go_tls);
	if (opt.cmd)
		tls_probe_command(opt.cmd[0]);  /* a Go program: probed before it starts */
	all_probes_json(attached, sizeof(attached), true);
	all_probes_json(skipped, sizeof(skipped), false);
	/* how system calls are hooked, for doctor and meta.json */
	static char hooks_json[1536];
	snprintf(hooks_json, sizeof(hooks_json),
		 "\"syscall_hooks\":\"%s\",\"syscall_hooks_why\":\"%s\","
		 "\"syscall_functions_absent\":\"%s\","
		 "\"kernel_reads\":\"%s\",\"kernel_reads_why\":\"%s\","
		 "\"rings\":%d,\"ring_bytes\":%u",
		 fentry ? "fentry" : "tracepoint", fentry ? "" : hooks_why,
		 fentry ? hooks_absent() : "", direct ? "direct" : "probe", direct ? "" : reads_why,
		 ring_plan.count, ring_plan.bytes);

	if (opt.check) {
		status("{\"type\":\"check\",\"attached\":%s,\"skipped\":%s,%s}", attached, skipped,
		       hooks_json);
		if (!status_out)
			printf("{\"attached\":%s,\"skipped\":%s,%s}\n", attached, skipped, hooks_json);
		rc = 0;
		goto out;
	}

	rb = rings_reader(on_record, opt.profile ? bpf_map__fd(skel->maps.prof_ring) : -1,
			  on_prof_sums);
	if (!rb) {
		say("cannot create the ring buffer reader: %s", strerror(errno));
		goto out;
	}
	if (spool_open()) {
		say("cannot write to %s: %s", opt.spool, strerror(sp.err));
		goto out;
	}
	if (opt.profile) {
		char path[4096];
		if (prof_tables_init(opt.profile_max_keys, !opt.rates_files) ||
		    (opt.file_sums && prof_files_init())) {
			say("cannot allocate the profile's tables: %s", strerror(errno));
			goto out;
		}
		snprintf(path, sizeof(path), "%s/profile-rates.bin", opt.spool);
		prof_rates = opt.rates_files ? NULL : fopen(path, "w");
		if (!prof_rates && !opt.rates_files) {
			say("cannot write to %s: %s", opt.spool, strerror(errno));
			goto out;
		}
	}

	if (opt.cmd) {
		/* its wait for the go-ahead is not a lost call (BPF entry_unseen) */
		skel->bss->job_tid = child_pid;
		add_traced(skel, child_pid);
	}
	/* with a command, --pid adds processes that serve it (a FUSE daemon) */
	if (!opt.cmd || opt.npids) {
		for (int i = 0; i < opt.npids; i++) {
			if (kill(opt.pids[i], 0) && errno == ESRCH) {
				if (!status_out)  /* under iotrace, iotrace says it */
					say("no process with pid %d", opt.pids[i]);
				status("{\"type\":\"error\",\"error\":\"no-such-pid\",\"pid\":%d}", opt.pids[i]);
				goto out;
			}
			if (!add_traced(skel, opt.pids[i]) && !opt.cmd && !opt.follow_cgroup &&
			    opt.npids == 1) {
				/* the one process to attach to exited while tracing started */
				if (!status_out)  /* under iotrace, iotrace says it */
					say("process %d exited before tracing started", opt.pids[i]);
				status("{\"type\":\"error\",\"error\":\"exited\",\"pid\":%d}",
				       opt.pids[i]);
				goto out;
			}
		}
		if (opt.follow_cgroup)
			cgroup_scan(opt.follow_cgroup, cgroup_joined, skel);
		add_descendants(skel);
		test_pause_before_scan();
		calls_at_start(skel, now_ns(), 0);
	}
	/* Processes traced besides the command (its own tree counts 1 now). */
	extra_live = opt.cmd ? skel->bss->live_procs - 1 : 0;
	/* The two clocks read back to back: wall time of any ts_ns is
	 * realtime_ns + (ts_ns - monotonic_ns). */
	struct timespec rt;
	int nice_now = recorder_priority(opt.nice);
	t0 = now_ns();
	clock_gettime(CLOCK_REALTIME, &rt);
	status("{\"type\":\"ready\",\"pid\":%d,\"monotonic_ns\":%llu,\"realtime_ns\":%llu,"
	       "\"attached\":%s,\"skipped\":%s,\"verbs_library\":\"%s\",\"recorder_nice\":%d,%s}",
	       opt.cmd ? child_pid : opt.npids ? opt.pids[0] : 0, (unsigned long long)t0,
	       (unsigned long long)rt.tv_sec * 1000000000ull + rt.tv_nsec, attached, skipped,
	       probed_verbs_library() ? probed_verbs_library() : "", nice_now, hooks_json);

	drop_capabilities();	/* before the job runs: it never sees more */
	if (opt.cmd) {
		/* Tracing is on: let the job go (once iotrace has the trace's
		 * meta.json written, with --go-fd: a byte, or EOF if it died),
		 * then learn whether exec worked. */
		if (opt.go_fd >= 0) {
			char c;
			while (read(opt.go_fd, &c, 1) < 0 && errno == EINTR)
				;
			close(opt.go_fd);
		}
		(void)!write(go[1], "g", 1);
		close(go[1]);
		if (read(errp[0], &exec_errno, sizeof(exec_errno)) != sizeof(exec_errno))
			exec_errno = 0;
		close(errp[0]);
		if (exec_errno)
			status("{\"type\":\"exec-error\",\"errno\":%d}", exec_errno);
	}

	last_rotate = last_stats = last_follow = last_tls = t0;
	rc = 0;
	for (;;) {
		__u64 began = now_ns();
		int n = ring_buffer__poll(rb, 50);
		__u64 now = now_ns();

		/* Most records are submitted without a wake-up (one per
		 * wakeup_bytes written wakes this loop): read what is there at each
		 * timeout, so that records do not sit in the ring (and new ones drop
		 * when it is full) after a burst, and a segment holds its second.
		 * The profile's sums wake nobody: read at every turn. */
		if (n == 0 || opt.profile || ring_plan.count > 1) {
			/* poll reads only the rings that woke it: read the others too */
			int m = ring_buffer__consume(rb);
			if (m < 0 || n < 0)
				n = m;   /* the consume's error, or none: the poll's own is moot */
		}
		/* every ring read since `began`: what ended well before is all here */
		if (began > rings_hold_ns())
			rings_release(began - rings_hold_ns());

		if (n < 0 && n != -EINTR) {
			say("ring buffer poll failed: %s", strerror(-n));
			stop_reason = "error";
			break;
		}
		if (opt.cmd && job_status < 0) {
			int st;
			if (waitpid(child_pid, &st, WNOHANG) == child_pid)
				job_status = st;
		}
		if (sp.failed) {
			stop_reason = sp.err == ENOSPC ? "disk-full" : "write-error";
			break;
		}
		if (now - last_rotate >= (__u64)opt.rotate_ms * 1000000ull) {
			if (spool_close() || spool_open()) {
				sp.failed = true;
				stop_reason = sp.err == ENOSPC ? "disk-full" : "write-error";
				break;
			}
			last_rotate = now;
		}
		/* profile mode: finished seconds to the spool (a second's margin
		 * for calls ending on another CPU), and the whole-run table every 5 s
		 * so that a killed trace keeps it */
		if (opt.profile && now - last_profile >= 1000000000ull) {
			if (rates_drain(prof_rates, now / 1000000000ull - 1) < 0 ||
			    (now - last_snapshot >= 5000000000ull && !opt.rates_files &&
			     prof_calls_snapshot(bpf_map__fd(skel->maps.prof_lost),
						 opt.spool) < 0)) {
				sp.failed = true;
				sp.err = errno;
			}
			if (now - last_snapshot >= 5000000000ull)
				last_snapshot = now;
			last_profile = now;
		}
		if (now - last_stats >= 500000000ull) {
			status("{\"type\":\"stats\",\"elapsed_ns\":%llu,\"events\":%llu,"
			       "\"bytes_read\":%llu,\"bytes_written\":%llu,\"drops\":%llu,"
			       "\"live\":%lld,\"profile_calls\":%llu,\"wakes_lost\":%llu,"
			       "\"file_sums_lost\":%llu,\"faults_unresolved\":%llu}",
			       (unsigned long long)(now - t0), (unsigned long long)tot.events,
			       (unsigned long long)(tot.bytes_read + prof_totals.bytes_read),
			       (unsigned long long)(tot.bytes_written + prof_totals.bytes_written),
			       (unsigned long long)(counter_sum(skel, IOT_CNT_DROPS) + rings_lost()),
			       (long long)skel->bss->live_procs, (unsigned long long)prof_totals.calls,
			       (unsigned long long)(counter_sum(skel, IOT_CNT_PROF_WAKE_LOST) +
						    prof_counts.wakes_lost),
			       (unsigned long long)prof_counts.files_lost,
			       (unsigned long long)counter_sum(skel, IOT_CNT_FAULT_UNRESOLVED));
			last_stats = now;
		}
		/* the command's processes are gone: those traced besides it (--pid
		 * with a command: a FUSE daemon) are back to their count at start */
		if (opt.cmd && job_status >= 0 && skel->bss->live_procs <= extra_live) {
			stop_reason = "exited";
			break;
		}
		if (now - last_tls >= 200000000ull) {
			tls_scan(opt.pids, opt.npids, tls_probed);
			last_tls = now;
		}
		if (opt.follow_cgroup && now - last_follow >= 200000000ull) {
			cgroup_scan(opt.follow_cgroup, cgroup_joined, skel);
			last_follow = now;
		}
		if (!opt.cmd && !opt.follow_cgroup && skel->bss->live_procs <= 0) {
			stop_reason = "exited";
			break;
		}
		if (opt.duration_s > 0 && now - t0 >= (__u64)(opt.duration_s * 1e9)) {
			stop_reason = "duration";
			break;
		}
		if (stop_now) {
			stop_reason = "stopped";
			break;
		}
		if (stop_requested) {
			if (opt.cmd && term_requested && !parent_gone && job_status < 0) {
				/* `iotrace run` asked to stop: pass it on to the job and keep
				 * tracing until it is gone. */
				kill(child_pid, SIGTERM);
				stop_requested = term_requested = 0;
				continue;
			}
			if (opt.cmd && !parent_gone && !term_requested && job_status < 0) {
				/* Ctrl-C reached the job too; keep tracing its shutdown. */
				stop_requested = 0;
				continue;
			}
			stop_reason = parent_gone ? "iotrace-died" : "signal";
			break;
		}
	}

	/* TLS libraries and programs found since the last scan: said before the end */
	tls_scan(opt.pids, opt.npids, tls_probed);

	/* Stop first, then drain what is left, then close the last segment.
	 * The fentry hooks are detached only after the end status: each link
	 * waits for an RCU-tasks grace period on the way out (a fraction of a
	 * second each, over a hundred links); emptying the traced slots stops
	 * their records now. */
	__u64 stop = now_ns();
	memset(skel->bss->traced_slot, 0, sizeof(skel->bss->traced_slot));
	/* a profile: the exit probe adds the sums of threads that exit until
	 * the iterator has added the others' (profile_flush_threads) */
	struct bpf_link *exit_link = NULL;
	for (int i = 0; opt.profile && i < ncore; i++) {
		if (!strcmp(probes[i].prog, "iot_exit")) {
			exit_link = probes[i].link;
			probes[i].link = NULL;
		}
	}
	detach_all_probes();
	unsigned long long unfinished = 0;
	long long calls_open = 0;
	if (!sp.failed) {
		ring_buffer__consume(rb);
		rings_release(~0ull);
		unfinished = block_unfinished(&extra, on_record);
		/* a profile has no per-call records to add them to */
		if (!opt.profile)
			calls_open = calls_in_progress(skel, stop, on_record);
	}
	if (opt.profile && !sp.failed)
		profile_flush_threads(skel);
	bpf_link__destroy(exit_link);
	if (opt.profile && !sp.failed) {
		ring_buffer__consume(rb);   /* the threads' last sums */
		rings_release(~0ull);
	}
	if (opt.profile && !sp.failed &&
	    (rates_drain(prof_rates, ~0u) < 0 ||
	     (!opt.rates_files &&
	      prof_calls_snapshot(bpf_map__fd(skel->maps.prof_lost), opt.spool) < 0))) {
		sp.failed = true;
		sp.err = errno;
	}
	if (prof_rates && fclose(prof_rates) && !sp.failed) {
		sp.failed = true;
		sp.err = errno;
	}
	prof_rates = NULL;
	if (!sp.failed && spool_close())
		sp.failed = true;
	if (sp.failed) {
		stop_reason = sp.err == ENOSPC ? "disk-full" : "write-error";
		if (!status_out)  /* under iotrace, iotrace says it */
			say("stopped tracing: cannot write the spool in %s: %s (the job runs on)",
			    opt.spool, strerror(sp.err));
		status("{\"type\":\"error\",\"error\":\"%s\",\"errno\":%d}", stop_reason, sp.err);
	}

	/* The job outlives a stopped trace: wait for it so its code is ours. */
	if (opt.cmd && job_status < 0 && !parent_gone) {
		int st;
		while (waitpid(child_pid, &st, 0) < 0 && errno == EINTR)
			;
		job_status = st;
	}
	struct rusage ru;
	static char drops_json[8192];
	getrusage(RUSAGE_SELF, &ru);
	drops_by_op_json(skel, drops_json, sizeof(drops_json));
	static char misses_json[4096];
	unsigned long long misses;
	probe_misses_json(skel->obj, &extra, counter_sum(skel, IOT_CNT_LOCK_END_NESTED),
			  misses_json, sizeof(misses_json), &misses);
	status("{\"type\":\"end\",\"reason\":\"%s\",\"elapsed_ns\":%llu,\"events\":%llu,"
	       "\"cpu_s\":%.3f,"
	       "\"bytes_read\":%llu,\"bytes_written\":%llu,\"drops\":%llu,"
	       "\"path_truncated\":%llu,\"no_storage\":%llu,\"traced_full\":%llu,"
	       "\"kernel_capped\":%llu,\"cache_other_bytes\":%llu,\"block_lost\":%llu,"
	       "\"async_lost\":%llu,\"profile_calls\":%llu,\"profile_overflow\":%llu,"
	       "\"profile_rate_lost\":%llu,\"drops_by_op\":%s,"
	       "\"probe_misses\":%llu,\"probe_misses_by_prog\":%s,\"block_no_completion\":%llu,"
	       "\"calls_entry_unseen\":%llu,\"calls_return_unseen\":%llu,"
	       "\"calls_unfinished\":%lld,\"calls_began_before\":%lld,"
	       "\"own_lock_waits\":%llu,\"faults_unresolved\":%llu,\"releases_untimed\":%llu,\"unknown_records\":%llu,\"segments\":%u,\"job_status\":%d,\"exec_errno\":%d,"
	       "\"end_monotonic_ns\":%llu}",
	       stop_reason, (unsigned long long)(now_ns() - t0),
	       (unsigned long long)tot.events,
	       ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6, (unsigned long long)tot.bytes_read,
	       (unsigned long long)tot.bytes_written,
	       (unsigned long long)(counter_sum(skel, IOT_CNT_DROPS) + rings_lost()),
	       (unsigned long long)counter_sum(skel, IOT_CNT_PATH_TRUNC),
	       (unsigned long long)counter_sum(skel, IOT_CNT_NO_STORAGE),
	       (unsigned long long)counter_sum(skel, IOT_CNT_TRACED_FULL),
	       (unsigned long long)counter_sum(skel, IOT_CNT_KERNEL_CAPPED),
	       (unsigned long long)counter_sum(skel, IOT_CNT_CACHE_OTHER_BYTES),
	       (unsigned long long)counter_sum(skel, IOT_CNT_BLOCK_LOST),
	       (unsigned long long)counter_sum(skel, IOT_CNT_ASYNC_LOST),
	       (unsigned long long)prof_totals.calls,
	       (unsigned long long)(counter_sum(skel, IOT_CNT_PROF_OVERFLOW) + prof_counts.overflow),
	       (unsigned long long)(counter_sum(skel, IOT_CNT_PROF_RATE_LOST) + prof_counts.rate_lost),
	       drops_json,
	       misses, misses_json,
	       (unsigned long long)counter_sum(skel, IOT_CNT_BLOCK_NO_COMPLETION) + unfinished,
	       (unsigned long long)counter_sum(skel, IOT_CNT_ENTRY_UNSEEN),
	       (unsigned long long)counter_sum(skel, IOT_CNT_RETURN_UNSEEN),
	       calls_open, calls_began,
	       (unsigned long long)counter_sum(skel, IOT_CNT_OWN_LOCK_WAITS),
	       (unsigned long long)counter_sum(skel, IOT_CNT_FAULT_UNRESOLVED),
	       (unsigned long long)counter_sum(skel, IOT_CNT_RELEASE_UNTIMED),
	       (unsigned long long)tot.unknown, sp.seq, job_status, exec_errno,
	       (unsigned long long)now_ns());
	if (opt.cmd && job_status >= 0)
		rc = WIFEXITED(job_status) ? WEXITSTATUS(job_status) : 128 + WTERMSIG(job_status);
out:
	if (prof_rates)
		fclose(prof_rates);
	prof_tables_free();
	if (rc == EXIT_SETUP && child_pid > 0) {
		/* Never started: the child exits 126 when go closes unread. */
		close(go[1]);
		waitpid(child_pid, NULL, 0);
	}
	ring_buffer__free(rb);
	rings_close();
	hooks_detach();
	detach_all_probes();
	destroy_optional_objects(&extra);
	iotrace_bpf__destroy(skel);
	return rc;
}
