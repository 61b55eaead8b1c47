// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * TLS plaintext probes (tls.h): one bpf/tls.bpf.c object, uprobes on each
 * OpenSSL and GnuTLS library file the job may use.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <bpf/libbpf.h>
#include "iotrace.h"
#include "probes.h"
#include "tls.h"
#include "tls.skel.h"

#define MAX_LIBS 16
#define MAX_NOTED 256
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
};

static struct tls_bpf *obj;
static bool use_multi;
static struct tls_lib libs[MAX_LIBS];
static int nlibs;
static char off_reason[160];   /* why there are no TLS probes at all */
static int noted[MAX_NOTED];
static int nnoted;
static bool scanned_initial;

static const char *const system_libs[] = {
	"/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/x86_64-linux-gnu/libssl.so.1.1",
	"/usr/lib/x86_64-linux-gnu/libgnutls.so.30",
	"/usr/lib/aarch64-linux-gnu/libssl.so.3", "/usr/lib/aarch64-linux-gnu/libgnutls.so.30",
	"/usr/lib64/libssl.so.3", "/usr/lib64/libssl.so.1.1", "/usr/lib64/libgnutls.so.30",
	"/lib64/libssl.so.3", "/usr/lib/libssl.so.3", "/usr/lib/libgnutls.so.30",
	NULL,
};

/* OpenSSL or GnuTLS, from the file's name (0: neither). */
static int lib_kind(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (strncmp(base, "libssl.so", 9) == 0 || strncmp(base, "libssl-", 7) == 0)
		return IOT_TLS_LIB_OPENSSL;
	if (strncmp(base, "libgnutls.so", 12) == 0 || strncmp(base, "libgnutls-", 10) == 0)
		return IOT_TLS_LIB_GNUTLS;
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

/* Probes one library file; false when it is not one or is probed already. */
static bool add_lib(const char *path, const char *shown, int kind)
{
	struct tls_lib *l;
	struct stat st;
	int attached = 0;

	if (!obj || nlibs >= MAX_LIBS || stat(path, &st))
		return false;
	for (int i = 0; i < nlibs; i++)
		if (libs[i].dev == st.st_dev && libs[i].ino == st.st_ino)
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
	} else {
		set_probe(&l->probes[0], "gnutls_record_recv", l->shown,
			  IOT_TLS_READ | COOKIE_LIB(kind));
		set_probe(&l->probes[1], "gnutls_record_send", l->shown,
			  IOT_TLS_WRITE | COOKIE_LIB(kind));
		l->nprobes = 2;
	}
	nlibs++;
	if (!use_multi || attach_uprobes_multi(obj->progs.iot_tls_enter, obj->progs.iot_tls_return,
					       l->path, l->probes, l->nprobes, l->multi_fds))
		attach_uprobes(obj->progs.iot_tls_enter, obj->progs.iot_tls_return, l->path,
			       l->probes, l->nprobes);
	for (int i = 0; i < l->nprobes; i++)
		attached += l->probes[i].link || l->probes[i].in_multi;
	return attached > 0;
}

void tls_start(struct bpf_object *core, const char *const *given, bool multi, bool http_only)
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
	for (int i = 0; given && given[i]; i++)
		add_lib(given[i], given[i], lib_kind(given[i]) ? lib_kind(given[i]) : IOT_TLS_LIB_OPENSSL);
	for (int i = 0; system_libs[i]; i++)
		if (access(system_libs[i], R_OK) == 0)
			add_lib(system_libs[i], system_libs[i], lib_kind(system_libs[i]));
	if (!nlibs)
		snprintf(off_reason, sizeof(off_reason),
			 "no OpenSSL or GnuTLS library here yet (those the job maps are probed when it maps them)");
}

void tls_note_exec_map(int pid)
{
	if (!obj)
		return;
	for (int i = 0; i < nnoted; i++)
		if (noted[i] == pid)
			return;
	if (nnoted < MAX_NOTED)
		noted[nnoted++] = pid;
}

static void scan_pid(int pid, void (*said)(const char *, int))
{
	char path[64], line[1024];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *file = strchr(line, '/');
		int kind;

		if (!file || !strstr(line, " r-xp "))
			continue;
		file[strcspn(file, "\n")] = 0;
		kind = lib_kind(file);
		/* the process's view of the file: its mount namespace, or deleted */
		if (kind) {
			char root_path[1200];
			snprintf(root_path, sizeof(root_path), "/proc/%d/root%s", pid, file);
			if (add_lib(root_path, file, kind) && said)
				said(file, libs[nlibs - 1].nprobes);
		}
	}
	fclose(f);
}

void tls_scan(const int *pids, int npids, void (*said)(const char *, int))
{
	if (!obj)
		return;
	if (!scanned_initial) {
		for (int i = 0; i < npids; i++)
			scan_pid(pids[i], said);
		scanned_initial = true;
	}
	for (int i = 0; i < nnoted; i++)
		scan_pid(noted[i], said);
	nnoted = 0;
}

size_t tls_probes_append(char *buf, size_t len, size_t off, bool attached)
{
	if (!nlibs && off_reason[0] && !attached) {
		struct probe off_probe = { .name = "TLS (OpenSSL, GnuTLS)" };
		snprintf(off_probe.why, sizeof(off_probe.why), "%s", off_reason);
		return json_probes_append(buf, len, off, &off_probe, 1, false);
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
		for (int k = 0; k < libs[i].nprobes; k++)
			free((char *)libs[i].probes[k].name);
	}
	nlibs = 0;
	tls_bpf__destroy(obj);
	obj = NULL;
}
