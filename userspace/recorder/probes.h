/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef PROBES_H
#define PROBES_H

#include <stdbool.h>
#include <stddef.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

/*
 * One probe: a tp_btf program on a kernel or module tracepoint, or a uprobe
 * pair on a library function. Every probe that is not attached says why,
 * in words, in the recorder's "ready" status and in the trace's meta.json.
 */
struct probe {
	const char *name;      /* what the user reads */
	const char *tp;        /* tracepoint (btf_trace_<tp>), or the library function */
	const char *module;    /* tracepoint's module (NULL: vmlinux) */
	const char *prog;      /* BPF program's name */
	bool required;
	unsigned long long cookie;  /* uprobes: the op the record gets */
	struct bpf_program *bpf;
	struct bpf_link *link, *ret_link;
	bool in_multi;         /* attached through a uprobe_multi link (see below) */
	bool shared_hook;      /* run by another probe's program (libaio in the core's
				* sys_enter/sys_exit): attached with it */
	char why[160];
};

bool btf_has_tracepoint(const struct btf *btf, const char *tp);

/*
 * Prepares the module probes of an opened (not loaded) object: each whose
 * module is not loaded or lacks the tracepoint is skipped with the reason,
 * and the object's shared maps (traced, events, counters) are pointed at
 * the core object's. Returns how many probes can load.
 */
int prepare_module_probes(struct bpf_object *obj, struct bpf_object *core,
			  struct btf *vmlinux, struct probe *p, int n);

/* Points obj's shared maps (traced, events, counters) at the core object's. */
int share_core_maps(struct bpf_object *obj, struct bpf_object *core);

/* Marks every not yet skipped probe of p[0..n) skipped with this reason. */
void skip_probes(struct probe *p, int n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Attaches the loaded tracepoint probes of p[0..n) that are not skipped. */
void attach_probes(struct probe *p, int n);

/*
 * Attaches an entry uprobe and a return uprobe to each library function of
 * p[0..n), system-wide (the BPF side keeps only traced processes), at the
 * function's default symbol version. The op goes in the attach cookie.
 */
void attach_uprobes(struct bpf_program *enter, struct bpf_program *ret,
		    const char *library, struct probe *p, int n);

/*
 * Kernels >= 6.6: the same, as two uprobe_multi links (entry, return) for
 * all functions. The programs must have been loaded with the uprobe_multi
 * attach type. Removing a uprobe waits for an RCU grace period: per uprobe
 * with perf uprobes (30 of them: ~3 s at the end of a trace), per link here.
 * Returns 0 with fds[0..1] set, or -errno (nothing attached).
 */
int attach_uprobes_multi(struct bpf_program *enter, struct bpf_program *ret,
			 const char *library, struct probe *p, int n, int fds[2]);

/* Entry uprobes at file offsets of path, one uprobe_multi link (the
 * program loaded with that attach type): its fd, or -errno. */
int link_uprobe_offsets(struct bpf_program *prog, const char *path,
			const unsigned long *offsets, const __u64 *cookies, __u32 cnt);

/* The uprobe_multi attach type (BPF_TRACE_UPROBE_MULTI), for program loading. */
#define IOT_ATTACH_UPROBE_MULTI 48

void detach_probes(struct probe *p, int n);

/* JSON list of the attached probe names, or of {probe, why} of the skipped. */
void json_probes(char *buf, size_t len, const struct probe *p, int n, bool attached);

/* The same items appended to a list being written in buf (a comma first
 * unless buf[off - 1] opens it); returns the new end (len when cut). */
size_t json_probes_append(char *buf, size_t len, size_t off, const struct probe *p, int n,
			  bool attached);

#endif
