// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Loading, attaching and explaining probes (probes.h). */
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include "elf_sym.h"
#include "probes.h"

/* Why a module is missing, in the user's terms. */
static const char *module_hint(const char *module)
{
	static const struct { const char *module, *hint; } hints[] = {
		{ "nfs", "no NFS mount" },
		{ "sunrpc", "no NFS mount" },
		{ "rpcrdma", "no NFS-over-RDMA mount" },
		{ "ib_core", "no RDMA device" },
		{ "rdma_cm", "no RDMA connection manager" },
	};
	for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
		if (!strcmp(hints[i].module, module))
			return hints[i].hint;
	return "not in use";
}

bool btf_has_tracepoint(const struct btf *btf, const char *tp)
{
	char name[128];

	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	return btf && btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF) > 0;
}

void skip_probes(struct probe *p, int n, const char *fmt, ...)
{
	char why[sizeof(p->why)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	for (int i = 0; i < n; i++) {
		if (p[i].why[0])
			continue;
		snprintf(p[i].why, sizeof(p[i].why), "%s", why);
		if (p[i].bpf && !p[i].link)
			bpf_program__set_autoload(p[i].bpf, false);
	}
}

int share_core_maps(struct bpf_object *obj, struct bpf_object *core)
{
	static const char *shared[] = { "traced", "rings", "counters", "inflight", "job_files",
					"aio_reqs", "aio_calls" };

	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
		struct bpf_map *m = bpf_object__find_map_by_name(obj, shared[i]);
		struct bpf_map *c = bpf_object__find_map_by_name(core, shared[i]);
		if (m && c && bpf_map__reuse_fd(m, bpf_map__fd(c)))
			return -errno;
	}
	return 0;
}

int prepare_module_probes(struct bpf_object *obj, struct bpf_object *core,
			  struct btf *vmlinux, struct probe *p, int n)
{
	struct { const char *name; struct btf *btf; } mods[8] = {};
	int nmods = 0, ready = 0;

	for (int i = 0; i < n; i++) {
		struct btf *b = NULL;
		int m;

		p[i].bpf = bpf_object__find_program_by_name(obj, p[i].prog);
		for (m = 0; m < nmods && strcmp(mods[m].name, p[i].module); m++)
			;
		if (m == nmods && nmods < 8) {
			mods[nmods].name = p[i].module;
			mods[nmods++].btf = btf__load_module_btf(p[i].module, vmlinux);
		}
		if (m < nmods)
			b = mods[m].btf;
		if (!p[i].bpf)
			snprintf(p[i].why, sizeof(p[i].why), "no program %s", p[i].prog);
		else if (!b)
			snprintf(p[i].why, sizeof(p[i].why), "module %s not loaded (%s)",
				 p[i].module, module_hint(p[i].module));
		else if (!btf_has_tracepoint(b, p[i].tp))
			snprintf(p[i].why, sizeof(p[i].why), "module %s has no %s tracepoint",
				 p[i].module, p[i].tp);
		if (p[i].why[0]) {
			if (p[i].bpf)
				bpf_program__set_autoload(p[i].bpf, false);
		} else {
			ready++;
		}
	}
	for (int m = 0; m < nmods; m++)
		btf__free(mods[m].btf);
	if (ready && share_core_maps(obj, core)) {
		skip_probes(p, n, "cannot share the ring buffer: %s", strerror(errno));
		return 0;
	}
	return ready;
}

void attach_probes(struct probe *p, int n)
{
	for (int i = 0; i < n; i++) {
		if (p[i].why[0] || !p[i].bpf)
			continue;
		p[i].link = bpf_program__attach(p[i].bpf);
		if (!p[i].link)
			snprintf(p[i].why, sizeof(p[i].why), "attach failed: %s", strerror(errno));
	}
}

/* The probe's function offset in library, or -1 with the reason in why. */
static long function_offset(const char *library, struct probe *p)
{
	long off = elf_default_func_offset(library, p->tp);

	if (off < 0) {
		snprintf(p->why, sizeof(p->why), "%s: %s", library,
			 off == -ENOENT ? "does not export it" : strerror((int)-off));
		return -1;
	}
	return off;
}

void attach_uprobes(struct bpf_program *enter, struct bpf_program *ret,
		    const char *library, struct probe *p, int n)
{
	for (int i = 0; i < n; i++) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .bpf_cookie = p[i].cookie);
		long off;

		if (p[i].why[0] || (off = function_offset(library, &p[i])) < 0)
			continue;
		p[i].link = bpf_program__attach_uprobe_opts(enter, -1, library, (size_t)off, &o);
		o.retprobe = true;
		if (p[i].link)
			p[i].ret_link = bpf_program__attach_uprobe_opts(ret, -1, library,
									(size_t)off, &o);
		if (!p[i].link || !p[i].ret_link) {
			snprintf(p[i].why, sizeof(p[i].why), "uprobe attach failed: %s",
				 strerror(errno));
			bpf_link__destroy(p[i].link);
			p[i].link = NULL;
		}
	}
}

/* BPF_LINK_CREATE's uprobe_multi attributes (linux/bpf.h >= 6.6; the build
 * machine's headers may be older). */
struct uprobe_multi_attr {
	__u32 prog_fd, target_fd, attach_type, flags;
	__u64 path, offsets, ref_ctr_offsets, cookies;
	__u32 cnt, multi_flags, pid;
};

#define UPROBE_MULTI_RETURN 1

static int link_uprobe_multi(struct bpf_program *prog, const char *library,
			     const unsigned long *offsets, const __u64 *cookies, __u32 cnt,
			     bool ret)
{
	union { struct uprobe_multi_attr a; char bytes[128]; } attr;
	int fd;

	memset(&attr, 0, sizeof(attr));
	attr.a.prog_fd = bpf_program__fd(prog);
	attr.a.attach_type = IOT_ATTACH_UPROBE_MULTI;
	attr.a.path = (__u64)(unsigned long)library;
	attr.a.offsets = (__u64)(unsigned long)offsets;
	attr.a.cookies = (__u64)(unsigned long)cookies;
	attr.a.cnt = cnt;
	attr.a.multi_flags = ret ? UPROBE_MULTI_RETURN : 0;
	fd = (int)syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
	return fd < 0 ? -errno : fd;
}

int link_uprobe_offsets(struct bpf_program *prog, const char *path,
			const unsigned long *offsets, const __u64 *cookies, __u32 cnt)
{
	return link_uprobe_multi(prog, path, offsets, cookies, cnt, false);
}

int attach_uprobes_multi(struct bpf_program *enter, struct bpf_program *ret,
			 const char *library, struct probe *p, int n, int fds[2])
{
	unsigned long offsets[64];
	__u64 cookies[64];
	int idx[64], cnt = 0;

	for (int i = 0; i < n && cnt < 64; i++) {
		long off;

		if (p[i].why[0] || (off = function_offset(library, &p[i])) < 0)
			continue;
		offsets[cnt] = (unsigned long)off;
		cookies[cnt] = p[i].cookie;
		idx[cnt++] = i;
	}
	if (!cnt)
		return -ENOENT;
	fds[0] = link_uprobe_multi(enter, library, offsets, cookies, (__u32)cnt, false);
	if (fds[0] < 0)
		return fds[0];
	fds[1] = link_uprobe_multi(ret, library, offsets, cookies, (__u32)cnt, true);
	if (fds[1] < 0) {
		int err = fds[1];
		close(fds[0]);
		return err;
	}
	for (int k = 0; k < cnt; k++)
		p[idx[k]].in_multi = true;
	return 0;
}

void detach_probes(struct probe *p, int n)
{
	for (int i = 0; i < n; i++) {
		bpf_link__destroy(p[i].link);
		bpf_link__destroy(p[i].ret_link);
		p[i].link = p[i].ret_link = NULL;
	}
}

void json_probes(char *buf, size_t len, const struct probe *p, int n, bool attached)
{
	size_t off = 0;

	off += snprintf(buf + off, len - off, "[");
	for (int i = 0; i < n && off < len; i++) {
		if ((p[i].link || p[i].in_multi || p[i].shared_hook) != attached)
			continue;
		if (attached)
			off += snprintf(buf + off, len - off, "%s\"%s\"", off > 1 ? "," : "", p[i].name);
		else
			off += snprintf(buf + off, len - off, "%s{\"probe\":\"%s\",\"why\":\"%s\"}",
					off > 1 ? "," : "", p[i].name, p[i].why);
	}
	if (off < len)
		snprintf(buf + off, len - off, "]");
}

size_t json_probes_append(char *buf, size_t len, size_t off, const struct probe *p, int n,
			  bool attached)
{
	char part[16384];
	size_t k;

	if (off >= len)
		return off;
	json_probes(part, sizeof(part), p, n, attached);
	k = strlen(part);
	if (k <= 2)   /* "[]" */
		return off;
	part[k - 1] = 0;   /* "[a,b]" -> "a,b" after the bracket */
	off += snprintf(buf + off, len - off, "%s%s", off && buf[off - 1] != '[' ? "," : "",
			part + 1);
	return off < len ? off : len;
}
