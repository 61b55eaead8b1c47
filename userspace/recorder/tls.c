// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * TLS plaintext probes (tls.h): one bpf/tls.bpf.c object, uprobes on each
 * OpenSSL and GnuTLS library file the job may use.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <bpf/libbpf.h>
#include "iotrace.h"
#include "probes.h"
#include "elf_sym.h"
#include "go_tls.h"
#include "prologue.h"
#include "tls.h"
#include "tls.skel.h"

#define MAX_LIBS 32
#define MAX_CHECKED 1024
#define GO_MAX_LINKS (2 * (1 + GO_TLS_MAX_RETS))
#define COOKIE_EX (1ULL << 16)
#define COOKIE_LIB(l) ((unsigned long long)(l) << 24)

struct tls_lib {
	char path[512];         /* where it is attached (through /proc/PID/root) */
	char shown[512];        /* the path the process sees */
	dev_t dev;
	ino_t ino;
	int kind;               /* IOT_TLS_LIB_* */
	struct probe probes[4];
	int nprobes;
	int multi_fds[2];
	/* Go: a link per probed instruction (entries and RETs), or two
	 * uprobe_multi links per function */
	struct bpf_link *go_links[GO_MAX_LINKS];
	int ngo_links;
	int go_fds[8];
	int ngo_fds;
	bool said;              /* announced (or probed before the job started) */
	long long late_ns;      /* found at a process's exec: how long after it (else 0) */
	unsigned long long probed_ns;   /* then: when its probes went in */
	int exec_pid;
};

static struct tls_bpf *obj;
static bool use_multi;
static struct tls_lib libs[MAX_LIBS];
static int nlibs;
static char off_reason[160];   /* why there are no TLS probes at all */
static bool scanned_initial;
static bool go_tls;            /* probe Go's crypto/tls (--no-go-tls: not) */
/* executables and libraries looked at for Go's crypto/tls and found without
 * it (or not Go): not opened again */
static struct { dev_t dev; ino_t ino; } checked[MAX_CHECKED];
static int nchecked;
/* TLS libraries and Go programs found once MAX_LIBS were probed: not
 * probed; each said once (tls_scan), as a skipped probe with the reason */
#define MAX_OVER 64
#define STR_(x) #x
#define STR(x) STR_(x)
#define OVER_WHY "not probed: iotrace probes " STR(MAX_LIBS) " TLS libraries and programs at most"
static struct { dev_t dev; ino_t ino; bool said; char shown[256]; } over[MAX_OVER];
static int nover;
static int over_unsaid;         /* found beyond MAX_OVER, not said yet */

static const char *const system_libs[] = {
	"/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/x86_64-linux-gnu/libssl.so.1.1",
	"/usr/lib/x86_64-linux-gnu/libgnutls.so.30",
	"/usr/lib/aarch64-linux-gnu/libssl.so.3", "/usr/lib/aarch64-linux-gnu/libgnutls.so.30",
	"/usr/lib64/libssl.so.3", "/usr/lib64/libssl.so.1.1", "/usr/lib64/libgnutls.so.30",
	"/lib64/libssl.so.3", "/usr/lib/libssl.so.3", "/usr/lib/libgnutls.so.30",
	NULL,
};

/* OpenSSL, GnuTLS or s2n, from the file's name (0: none). */
static int lib_kind(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (strncmp(base, "libssl.so", 9) == 0 || strncmp(base, "libssl-", 7) == 0)
		return IOT_TLS_LIB_OPENSSL;
	if (strncmp(base, "libgnutls.so", 12) == 0 || strncmp(base, "libgnutls-", 10) == 0)
		return IOT_TLS_LIB_GNUTLS;
	/* s2n-tls: its own library, or linked into the AWS CRT's Python module */
	if (strncmp(base, "libs2n.so", 9) == 0 || strncmp(base, "_awscrt.", 8) == 0)
		return IOT_TLS_LIB_S2N;
	return 0;
}

static void set_probe(struct probe *p, const char *fn, const char *path, __u64 cookie)
{
	char name[640];

	snprintf(name, sizeof(name), "TLS %s (%s)", fn, path);
	p->name = strdup(name);
	p->tp = fn;
	p->cookie = cookie;
}

static int attach_entry_and_rets(struct tls_lib *l, struct bpf_program *enter_prog,
				 struct bpf_program *ret_prog, const struct go_tls_func *f,
				 __u64 cookie);

/* An entry uprobe and a uretprobe on each of p[0..n): two uprobe_multi links
 * (fds) where the kernel has them, else perf links in the probes. */
static void attach_entry_return(const char *path, struct probe *p, int n, int fds[2])
{
	if (!use_multi || attach_uprobes_multi(obj->progs.iot_tls_enter, obj->progs.iot_tls_return,
					       path, p, n, fds))
		attach_uprobes(obj->progs.iot_tls_enter, obj->progs.iot_tls_return, path, p, n);
}

/* s2n's two functions, each at its entry and return, or, where its first
 * instruction cannot be probed (the AWS CRT's build), past its prefixed
 * pushes and at its RETs (prologue.h). Returns the probes attached. */
static int attach_s2n(struct tls_lib *l)
{
	int attached = 0;

	for (int k = 0; k < l->nprobes; k++) {
		struct probe *p = &l->probes[k];
		struct go_tls_func f = {};
		unsigned long size = 0;
		long off = elf_default_func(l->path, p->tp, &size);
		int r;

		if (off < 0) {
			snprintf(p->why, sizeof(p->why), "%s: %s", l->shown,
				 off == -ENOENT ? "does not export it" : strerror((int)-off));
			continue;
		}
		r = prologue_probe_points(l->path, off, size, &f.entry, f.rets, GO_TLS_MAX_RETS,
					  &f.nrets);
		if (r == 0) {
			int fds[2] = { -1, -1 };

			attach_entry_return(l->path, p, 1, fds);
			for (int i = 0; i < 2; i++)
				if (fds[i] >= 0)
					l->go_fds[l->ngo_fds++] = fds[i];
		} else if (r == 1) {
			/* iot_tls_return reads RAX as at a return: a uprobe on a RET is one */
			r = attach_entry_and_rets(l, obj->progs.iot_tls_enter, obj->progs.iot_tls_return,
						  &f, p->cookie);
			if (r)
				snprintf(p->why, sizeof(p->why), "uprobe attach failed: %s", strerror(-r));
			else
				p->in_multi = true;  /* attached: its links are the lib's go_links/go_fds */
		} else {
			snprintf(p->why, sizeof(p->why), "its first instruction cannot be probed, nor "
				 "past its prologue (%s)", strerror(-r));
		}
		attached += p->link || p->in_multi;
	}
	return attached;
}

/* A file probed already (or listed as not probeable), by identity. */
static bool probed_already(const struct stat *st)
{
	for (int i = 0; i < nlibs; i++)
		if (libs[i].dev == st->st_dev && libs[i].ino == st->st_ino)
			return true;
	return false;
}

/* A file that would be probed but MAX_LIBS are: counted once; true when it
 * is so (the caller stops there). */
static bool probes_full(const struct stat *st, const char *shown)
{
	if (nlibs < MAX_LIBS)
		return false;
	for (int i = 0; i < nover; i++)
		if (over[i].dev == st->st_dev && over[i].ino == st->st_ino)
			return true;
	if (nover < MAX_OVER) {
		over[nover].dev = st->st_dev;
		over[nover].ino = st->st_ino;
		over[nover].said = false;
		snprintf(over[nover].shown, sizeof(over[nover].shown), "%s", shown);
		nover++;
	} else {
		over_unsaid++;
	}
	return true;
}

/* Probes one library file; false when it is not one or is probed already. */
static bool add_lib(const char *path, const char *shown, int kind)
{
	struct tls_lib *l;
	struct stat st;
	int attached = 0;

	if (!obj || stat(path, &st) || probed_already(&st) || probes_full(&st, shown))
		return false;
	l = &libs[nlibs];
	memset(l, 0, sizeof(*l));
	snprintf(l->path, sizeof(l->path), "%s", path);
	snprintf(l->shown, sizeof(l->shown), "%s", shown);
	l->dev = st.st_dev;
	l->ino = st.st_ino;
	l->kind = kind;
	l->multi_fds[0] = l->multi_fds[1] = -1;
	if (kind == IOT_TLS_LIB_OPENSSL) {
		set_probe(&l->probes[0], "SSL_read", l->shown, IOT_TLS_READ | COOKIE_LIB(kind));
		set_probe(&l->probes[1], "SSL_write", l->shown, IOT_TLS_WRITE | COOKIE_LIB(kind));
		set_probe(&l->probes[2], "SSL_read_ex", l->shown,
			  IOT_TLS_READ | COOKIE_EX | COOKIE_LIB(kind));
		set_probe(&l->probes[3], "SSL_write_ex", l->shown,
			  IOT_TLS_WRITE | COOKIE_EX | COOKIE_LIB(kind));
		l->nprobes = 4;
	} else if (kind == IOT_TLS_LIB_S2N) {
		/* ssize_t s2n_recv/s2n_send(conn, buf, size, blocked) */
		set_probe(&l->probes[0], "s2n_recv", l->shown, IOT_TLS_READ | COOKIE_LIB(kind));
		set_probe(&l->probes[1], "s2n_send", l->shown, IOT_TLS_WRITE | COOKIE_LIB(kind));
		l->nprobes = 2;
		nlibs++;
		return attach_s2n(l) > 0;
	} else {
		set_probe(&l->probes[0], "gnutls_record_recv", l->shown,
			  IOT_TLS_READ | COOKIE_LIB(kind));
		set_probe(&l->probes[1], "gnutls_record_send", l->shown,
			  IOT_TLS_WRITE | COOKIE_LIB(kind));
		l->nprobes = 2;
	}
	nlibs++;
	attach_entry_return(l->path, l->probes, l->nprobes, l->multi_fds);
	for (int i = 0; i < l->nprobes; i++)
		attached += l->probes[i].link || l->probes[i].in_multi;
	return attached > 0;
}

/* Probes one function at an entry and at each RET (f->rets), with the
 * programs given, the cookie the op: Go's functions, and C functions whose
 * first instruction cannot be probed (prologue.h). 0 when all are attached. */
static int attach_entry_and_rets(struct tls_lib *l, struct bpf_program *enter_prog,
				 struct bpf_program *ret_prog, const struct go_tls_func *f,
				 __u64 cookie)
{
	unsigned long rets[GO_TLS_MAX_RETS];
	__u64 cookies[GO_TLS_MAX_RETS];
	unsigned long entry = (unsigned long)f->entry;

	if (use_multi) {
		int fds[2] = { -1, -1 };

		for (int i = 0; i < f->nrets; i++) {
			rets[i] = (unsigned long)f->rets[i];
			cookies[i] = cookie;
		}
		fds[0] = link_uprobe_offsets(enter_prog, l->path, &entry, &cookie, 1);
		if (fds[0] < 0)
			return fds[0];
		if (f->nrets) {
			fds[1] = link_uprobe_offsets(ret_prog, l->path, rets, cookies, (__u32)f->nrets);
			if (fds[1] < 0) {
				close(fds[0]);
				return fds[1];
			}
		}
		for (int k = 0; k < 2; k++)
			if (fds[k] >= 0)
				l->go_fds[l->ngo_fds++] = fds[k];
		return 0;
	}
	for (int i = -1; i < f->nrets; i++) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .bpf_cookie = cookie);
		struct bpf_link *link;

		link = bpf_program__attach_uprobe_opts(i < 0 ? enter_prog : ret_prog, -1, l->path,
						       (size_t)(i < 0 ? f->entry : f->rets[i]), &o);
		if (!link)
			return -errno;
		l->go_links[l->ngo_links++] = link;
	}
	return 0;
}

static void detach_go(struct tls_lib *l)
{
	for (int i = 0; i < l->ngo_links; i++)
		bpf_link__destroy(l->go_links[i]);
	for (int i = 0; i < l->ngo_fds; i++)
		close(l->go_fds[i]);
	l->ngo_links = l->ngo_fds = 0;
}

static bool checked_before(const struct stat *st)
{
	for (int i = 0; i < nchecked; i++)
		if (checked[i].dev == st->st_dev && checked[i].ino == st->st_ino)
			return true;
	return probed_already(st);
}

/* Probes Go's crypto/tls in one executable file (path: through
 * /proc/PID/root; shown: the process's name for it); true when probed. A Go
 * binary that cannot be probed is listed with the reason. */
static bool add_go(const char *path, const char *shown)
{
	struct go_tls_funcs f;
	struct tls_lib *l;
	struct stat st;
	char why[160];
	int err;

	if (!obj || stat(path, &st) || !S_ISREG(st.st_mode) || checked_before(&st))
		return false;
	err = go_tls_find(path, &f, why, sizeof(why));
	if (!err && probes_full(&st, shown))
		return false;
	if ((err && err != -ENOTSUP) || nlibs >= MAX_LIBS) {
		if (nchecked < MAX_CHECKED) {
			checked[nchecked].dev = st.st_dev;
			checked[nchecked++].ino = st.st_ino;
		}
		return false;
	}
	l = &libs[nlibs++];
	memset(l, 0, sizeof(*l));
	snprintf(l->path, sizeof(l->path), "%s", path);
	snprintf(l->shown, sizeof(l->shown), "%s", shown);
	l->dev = st.st_dev;
	l->ino = st.st_ino;
	l->kind = IOT_TLS_LIB_GO;
	l->multi_fds[0] = l->multi_fds[1] = -1;
	set_probe(&l->probes[0], "Go crypto/tls.(*Conn).Read", l->shown, 0);
	set_probe(&l->probes[1], "Go crypto/tls.(*Conn).Write", l->shown, 0);
	l->nprobes = 2;
	if (err) {
		skip_probes(l->probes, 2, "%s", why);
		return false;
	}
	for (int k = 0; k < 2; k++) {
		const struct go_tls_func *fn = k ? &f.write : &f.read;
		__u64 cookie = (k ? IOT_TLS_WRITE : IOT_TLS_READ) | COOKIE_LIB(IOT_TLS_LIB_GO);
		struct go_tls_func entry_only = { .entry = fn->entry };

		/* Write is recorded at its entry (tls.bpf.c): its RETs are not probed */
		err = attach_entry_and_rets(l, obj->progs.iot_gotls_enter, obj->progs.iot_gotls_return,
					    k ? &entry_only : fn, cookie);
		if (err)
			snprintf(l->probes[k].why, sizeof(l->probes[k].why),
				 "uprobe attach failed: %s", strerror(-err));
		else
			l->probes[k].in_multi = true;  /* attached: its links are go_links */
	}
	return l->probes[0].in_multi || l->probes[1].in_multi;
}

/* A program by the name it was run with (a path, or looked up in PATH as
 * execvp does); true when a Go binary was found and added. */
static bool probe_by_name(const char *cmd)
{
	char found[4096];
	const char *path = getenv("PATH");

	if (!obj || !go_tls || !cmd || !*cmd)
		return false;
	if (strchr(cmd, '/'))
		return add_go(cmd, cmd);
	/* as execvp will look for it */
	for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; p; ) {
		const char *end = strchr(p, ':');
		int n = end ? (int)(end - p) : (int)strlen(p);

		snprintf(found, sizeof(found), "%.*s/%s", n ? n : 1, n ? p : ".", cmd);
		if (access(found, X_OK) == 0)
			return add_go(found, found);
		p = end ? end + 1 : NULL;
	}
	return false;
}

void tls_probe_command(const char *cmd)
{
	if (probe_by_name(cmd))
		libs[nlibs - 1].said = true;   /* in the ready status's probes */
}

void tls_start(struct bpf_object *core, const char *const *given, bool multi, bool http_only,
	       bool go)
{
	/* "none" (--no-tls), or "none:why" when the recorder turns them off */
	if (given && given[0] && strncmp(given[0], "none", 4) == 0) {
		snprintf(off_reason, sizeof(off_reason), "%s",
			 given[0][4] == ':' ? given[0] + 5 : "turned off (--no-tls)");
		return;
	}
	obj = tls_bpf__open();
	if (obj)
		obj->rodata->http_only = http_only;
	if (multi && obj) {
		bpf_program__set_expected_attach_type(obj->progs.iot_tls_enter,
						      IOT_ATTACH_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(obj->progs.iot_tls_return,
						      IOT_ATTACH_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(obj->progs.iot_gotls_enter,
						      IOT_ATTACH_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(obj->progs.iot_gotls_return,
						      IOT_ATTACH_UPROBE_MULTI);
		if (share_core_maps(obj->obj, core) || tls_bpf__load(obj)) {
			tls_bpf__destroy(obj);
			obj = tls_bpf__open();
			if (obj)
				obj->rodata->http_only = http_only;
			multi = false;
		}
	}
	if (!multi && obj && (share_core_maps(obj->obj, core) || tls_bpf__load(obj))) {
		tls_bpf__destroy(obj);
		obj = NULL;
	}
	if (!obj) {
		snprintf(off_reason, sizeof(off_reason), "load failed: %s", strerror(errno));
		return;
	}
	use_multi = multi;
	go_tls = go;
	for (int i = 0; given && given[i]; i++)
		add_lib(given[i], given[i], lib_kind(given[i]) ? lib_kind(given[i]) : IOT_TLS_LIB_OPENSSL);
	for (int i = 0; system_libs[i]; i++)
		if (access(system_libs[i], R_OK) == 0)
			add_lib(system_libs[i], system_libs[i], lib_kind(system_libs[i]));
	for (int i = 0; i < nlibs; i++)
		libs[i].said = true;    /* in the ready status's probes */
	if (!nlibs)
		snprintf(off_reason, sizeof(off_reason),
			 "no OpenSSL or GnuTLS library here yet (those the job maps are probed when it maps them)");
}

static void scan_pid(int pid);

/* libs[first..nlibs) were found because pid ran or mapped them at since_ns
 * (CLOCK_MONOTONIC, bpf_ktime_get_ns's clock): how late their probes came,
 * said at the next tls_scan. */
static void mark_late(int first, int pid, __u64 since_ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (int i = first; i < nlibs; i++) {
		libs[i].probed_ns = (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
		libs[i].late_ns = (long long)libs[i].probed_ns - (long long)since_ns;
		libs[i].exec_pid = pid;
	}
}

/* Now, not at the next scan: a library is often used right after it is
 * loaded (import awscrt, then a request). What the process did with it
 * before its probes went in is not seen, and said (late_ns). */
void tls_note_exec_map(int pid, __u64 map_ns)
{
	int before = nlibs;

	if (!obj)
		return;
	scan_pid(pid);
	mark_late(before, pid, map_ns);
}

void tls_note_exec(int pid, __u64 exec_ns, const char *argv0)
{
	char exe[64], target[1024], root_path[1200];
	int before = nlibs;
	ssize_t n;

	if (!obj || !go_tls)
		return;
	snprintf(exe, sizeof(exe), "/proc/%d/exe", pid);
	n = readlink(exe, target, sizeof(target) - 1);
	if (n > 0) {
		target[n] = 0;
		/* the file itself, whatever its name (deleted, another namespace) */
		snprintf(root_path, sizeof(root_path), "/proc/%d/exe", pid);
		add_go(root_path, target);
	} else if (argv0 && *argv0) {
		/* gone already: its file, from its argv[0], for its next runs */
		probe_by_name(argv0);
	}
	mark_late(before, pid, exec_ns);   /* a Go program: probed, or said why not */
}

/* Mappings looked at already, by the device and inode their maps line
 * gives: a process that maps many libraries has its maps read at each, and
 * each line would otherwise cost a path walk and a stat. */
#define SEEN_SLOTS 8192
static struct { unsigned long long ino; unsigned dev; } seen_maps[SEEN_SLOTS];

static bool seen_mapping(unsigned maj, unsigned min, unsigned long long ino)
{
	unsigned dev = maj << 20 | min;
	unsigned h = (unsigned)((ino * 0x9E3779B97F4A7C15ull) >> 51) ^ dev;

	for (int i = 0; i < SEEN_SLOTS; i++) {
		unsigned k = (h + i) & (SEEN_SLOTS - 1);

		if (seen_maps[k].ino == ino && seen_maps[k].dev == dev)
			return true;
		if (!seen_maps[k].ino) {
			if (i < SEEN_SLOTS / 2)    /* keep it half empty: a full set looks again */
				seen_maps[k].ino = ino, seen_maps[k].dev = dev;
			return false;
		}
	}
	return false;
}

static void scan_pid(int pid)
{
	char path[64], line[1024];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *file = strchr(line, '/'), root_path[1200];
		unsigned long long ino;
		unsigned maj, min;
		int kind;

		if (!file || !strstr(line, " r-xp "))
			continue;
		if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 && ino &&
		    seen_mapping(maj, min, ino))
			continue;
		file[strcspn(file, "\n")] = 0;
		kind = lib_kind(file);
		/* the process's view of the file: its mount namespace, or deleted */
		snprintf(root_path, sizeof(root_path), "/proc/%d/root%s", pid, file);
		if (kind)
			add_lib(root_path, file, kind);
		else if (go_tls)
			add_go(root_path, file);
	}
	fclose(f);
}

void tls_scan(const int *pids, int npids,
	      void (*said)(const char *, int, const char *, long long, int, unsigned long long))
{
	if (!obj)
		return;
	if (!scanned_initial) {
		for (int i = 0; i < npids; i++)
			scan_pid(pids[i]);
		scanned_initial = true;
	}
	for (int i = 0; i < nlibs; i++) {
		struct tls_lib *l = &libs[i];
		int attached = 0;
		const char *why = "";

		for (int k = 0; k < l->nprobes; k++) {
			attached += l->probes[k].link || l->probes[k].in_multi;
			if (l->probes[k].why[0])
				why = l->probes[k].why;
		}
		/* probed, or not with the reason; and for a program found at its
		 * exec, how long it ran unprobed (its TLS calls then are not seen) */
		if (!l->said && said)
			said(l->shown, attached, why, l->exec_pid ? l->late_ns : -1, l->exec_pid,
			     l->exec_pid ? l->probed_ns : 0);
		l->said = true;
	}
	for (int i = 0; i < nover && said; i++) {
		if (!over[i].said)
			said(over[i].shown, 0, OVER_WHY, -1, 0, 0);
		over[i].said = true;
	}
	if (over_unsaid && said) {
		char what[64];

		snprintf(what, sizeof(what), "%d more TLS libraries or Go programs", over_unsaid);
		said(what, 0, OVER_WHY, -1, 0, 0);
		over_unsaid = 0;
	}
}

size_t tls_probes_append(char *buf, size_t len, size_t off, bool attached)
{
	if (!nlibs && off_reason[0] && !attached) {
		struct probe off_probe = { .name = obj ? "TLS (OpenSSL, GnuTLS)" :
					   "TLS (OpenSSL, GnuTLS, Go crypto/tls)" };
		snprintf(off_probe.why, sizeof(off_probe.why), "%s", off_reason);
		off = json_probes_append(buf, len, off, &off_probe, 1, false);
	}
	if (obj && !go_tls && !attached) {
		struct probe go_off = { .name = "TLS Go crypto/tls" };
		snprintf(go_off.why, sizeof(go_off.why), "turned off (--no-go-tls)");
		off = json_probes_append(buf, len, off, &go_off, 1, false);
	}
	for (int i = 0; i < nlibs; i++)
		off = json_probes_append(buf, len, off, libs[i].probes, libs[i].nprobes, attached);
	return off;
}

void tls_stop(void)
{
	for (int i = 0; i < nlibs; i++) {
		for (int k = 0; k < 2; k++)
			if (libs[i].multi_fds[k] >= 0)
				close(libs[i].multi_fds[k]);
		detach_probes(libs[i].probes, libs[i].nprobes);
		detach_go(&libs[i]);
		for (int k = 0; k < libs[i].nprobes; k++)
			free((char *)libs[i].probes[k].name);
	}
	nlibs = 0;
	nchecked = 0;
	nover = 0;
	over_unsaid = 0;
	memset(seen_maps, 0, sizeof(seen_maps));
	tls_bpf__destroy(obj);
	obj = NULL;
}
