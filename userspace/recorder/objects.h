/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef OBJECTS_H
#define OBJECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "probes.h"

/* bpf/iotrace.bpf.c's probes; probes[i].prog names its program. */
/* The name the interrupt-context probes start with (what the wake-ups need) */
#define IRQ_WAKE_PROBES "wake-ups in interrupts"

extern struct probe core_probes[];
extern const int n_core_probes;

/* The optional objects: block requests (bpf/block.bpf.c), io_uring and libaio (bpf/aio.bpf.c), NFS (bpf/netfs.bpf.c), kernel RDMA (bpf/rdma.bpf.c)
 * and libibverbs uprobes (bpf/verbs.bpf.c). Each shares the core object's
 * maps; each probe that cannot load says why. */
struct optional_objects {
	struct block_bpf *block;
	struct aio_bpf *aio;
	struct netfs_bpf *netfs;
	struct rdma_bpf *rdma;
	struct verbs_bpf *verbs;
	bool uprobe_multi;     /* the kernel has uprobe_multi links */
};

/* Before the core's probes attach: open and load NFS and RDMA objects.
 * syscalls_fentry: the core hooks system calls with fentry (hooks.h), so
 * libaio's io_submit/io_getevents are hooked the same way (a syscall
 * tracepoint attached would put every system call on the slow path). */
void load_optional_objects(struct optional_objects *o, struct bpf_object *core,
			   struct btf *vmlinux, bool syscalls_fentry);
/* After: attach them, then load and attach the verbs uprobes (verbs_lib:
 * the libibverbs to probe, NULL for the system's, "none" for no verbs) and
 * the TLS uprobes (tls.h; tls_libs: more libraries, or {"none"}). */
void attach_optional_objects(struct optional_objects *o, struct bpf_object *core,
			     const char *verbs_lib, const char *const *tls_libs, bool tls_http_only,
			     bool go_tls);
/* The libibverbs file the verbs uprobes are on (NULL: none). */
const char *probed_verbs_library(void);
/* The JSON list of every attached probe's name, or of every skipped
 * {probe, why}. */
void all_probes_json(char *buf, size_t len, bool attached);
void detach_all_probes(void);
/* The job's block requests left in the in-flight table when the trace
 * ends (still in flight, or completed where the kernel did not run the
 * completion probe), handed to emit as block_rq records flagged
 * IOT_EF_NO_COMPLETION; returns how many. Call after the probes are
 * detached. */
unsigned long long block_unfinished(const struct optional_objects *o,
				    int (*emit)(void *ctx, void *data, size_t size));
/* Runs of the loaded programs that the kernel skipped because the same
 * program was already running on that CPU (an interrupt's completion inside
 * another's, for instance): a JSON object of program name -> count, and the
 * total. Their records are lost. Less LOCK_END_NESTED of iot_lock_end's: the
 * ends of waits for iotrace's own ring inside its own lock record, which are
 * the tracer's, not lost (IOT_CNT_LOCK_END_NESTED). */
void probe_misses_json(struct bpf_object *core, const struct optional_objects *o,
		       unsigned long long lock_end_nested, char *buf, size_t len,
		       unsigned long long *total);
void destroy_optional_objects(struct optional_objects *o);

#endif
