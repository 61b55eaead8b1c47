// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The BPF objects and their probes (objects.h): the core object's probe table,
 * and the optional objects (NFS, RDMA, verbs) that load only where the
 * kernel modules or the library are there.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "iotrace.h"
#include "aio.skel.h"
#include "block.skel.h"
#include "netfs.skel.h"
#include "rdma.skel.h"
#include "verbs.skel.h"
#include "objects.h"
#include "tls.h"

#define CORE(name, tp, prog, req) { name, tp, NULL, prog, req }
#define MOD(name, tp, module, prog) { name, tp, module, prog, false }
#define VERB(fn, op) { #fn, #fn, NULL, NULL, false, op }

/* bpf/iotrace.bpf.c */
struct probe core_probes[] = {
	CORE("syscalls (sys_enter)", "sys_enter", "iot_sys_enter", true),
	CORE("syscalls (sys_exit)", "sys_exit", "iot_sys_exit", true),
	CORE("process fork", "sched_process_fork", "iot_fork", true),
	CORE("process exec", "sched_process_exec", "iot_exec", true),
	CORE("process exit", "sched_process_exit", "iot_exit", true),
	CORE("thread names (task_rename)", "task_rename", "iot_rename", false),
	CORE("kernel lock contention (begin)", "contention_begin", "iot_lock_begin", false),
	CORE("kernel lock contention (end)", "contention_end", "iot_lock_end", false),
	CORE("off-CPU intervals (sched_switch)", "sched_switch", "iot_sched_switch", false),
	/* interrupt context, for the wake-ups: an interrupt's wake-up is no
	 * task's. Exits before entries and all before sched_waking: a handler
	 * running while they attach leaves no kind marked for good */
	CORE(IRQ_WAKE_PROBES " (irq_handler_exit)", "irq_handler_exit", "iot_irq_exit", false),
	CORE(IRQ_WAKE_PROBES " (softirq_exit)", "softirq_exit", "iot_softirq_exit", false),
	CORE(IRQ_WAKE_PROBES " (hrtimer_expire_exit)", "hrtimer_expire_exit",
	     "iot_hrtimer_exit", false),
	CORE(IRQ_WAKE_PROBES " (irq_handler_entry)", "irq_handler_entry", "iot_irq_enter", false),
	CORE(IRQ_WAKE_PROBES " (softirq_entry)", "softirq_entry", "iot_softirq_enter", false),
	CORE(IRQ_WAKE_PROBES " (hrtimer_expire_entry)", "hrtimer_expire_entry",
	     "iot_hrtimer_enter", false),
	CORE("wake-ups (sched_waking)", "sched_waking", "iot_sched_waking", false),
	CORE("page cache additions (mm_filemap_add_to_page_cache)", "mm_filemap_add_to_page_cache",
	     "iot_cache_add", false),
	CORE("returns to user space after a file's release (rseq_update)", "rseq_update",
	     "iot_rseq_update", false),
	CORE("page faults on file mappings (page_fault_user)", "page_fault_user",
	     "iot_page_fault", false),
};

/* bpf/block.bpf.c (vmlinux tracepoints, a separate object all the same:
 * a kernel without them still traces system calls) */
static struct probe block_probes[] = {
	CORE("block bio submission (block_bio_queue)", "block_bio_queue", "iot_bio_queue", false),
	CORE("block bio split (block_split)", "block_split", "iot_bio_split", false),
	CORE("block request issue (block_rq_issue)", "block_rq_issue", "iot_rq_issue", false),
	CORE("block request completion (block_rq_complete)", "block_rq_complete",
	     "iot_rq_complete", false),
};

/* bpf/aio.bpf.c: io_uring (vmlinux tracepoints) and libaio (bpf/libaio.h:
 * run from the core's sys_enter/sys_exit where those are the hooks, else by
 * fentry/fexit programs of aio.bpf.c). A libaio entry's tp is the system
 * call, prog its fentry/fexit program. */
#define N_URING_PROBES 2
static struct probe aio_probes[] = {
	CORE("io_uring submissions (io_uring_submit_req)", "io_uring_submit_req",
	     "iot_uring_submit", false),
	CORE("io_uring completions (io_uring_complete)", "io_uring_complete",
	     "iot_uring_complete", false),
	CORE("libaio io_submit", "io_submit", "iot_aio_submit_fe", false),
	CORE("libaio io_submit exit", "io_submit", "iot_aio_submit_exit_fe", false),
	CORE("libaio io_getevents", "io_getevents", "iot_aio_getevents_fe", false),
	CORE("libaio io_getevents exit", "io_getevents", "iot_aio_getevents_exit_fe", false),
	CORE("libaio io_pgetevents", "io_pgetevents", "iot_aio_pgetevents_fe", false),
	CORE("libaio io_pgetevents exit", "io_pgetevents", "iot_aio_pgetevents_exit_fe", false),
};

/* bpf/netfs.bpf.c */
static struct probe netfs_probes[] = {
	MOD("NFS read start", "nfs_initiate_read", "nfs", "iot_nfs_init_read"),
	MOD("NFS read done", "nfs_readpage_done", "nfs", "iot_nfs_read_done"),
	MOD("NFS write start", "nfs_initiate_write", "nfs", "iot_nfs_init_write"),
	MOD("NFS write done", "nfs_writeback_done", "nfs", "iot_nfs_write_done"),
	MOD("NFS commit start", "nfs_initiate_commit", "nfs", "iot_nfs_init_commit"),
	MOD("NFS commit done", "nfs_commit_done", "nfs", "iot_nfs_commit_done"),
	MOD("NFS readahead", "nfs_aop_readahead", "nfs", "iot_nfs_readahead"),
	MOD("NFS readahead done", "nfs_aop_readahead_done", "nfs", "iot_nfs_readahead_done"),
	MOD("RPC latency (sunrpc)", "rpc_stats_latency", "sunrpc", "iot_rpc_done"),
};

/* bpf/rdma.bpf.c */
static struct probe rdma_probes[] = {
	MOD("NFS/RDMA marshal", "xprtrdma_marshal", "rpcrdma", "iot_rdma_marshal"),
	MOD("NFS/RDMA marshal failed", "xprtrdma_marshal_failed", "rpcrdma",
	    "iot_rdma_marshal_failed"),
	MOD("NFS/RDMA read chunk", "xprtrdma_chunk_read", "rpcrdma", "iot_rdma_chunk_read"),
	MOD("NFS/RDMA write chunk", "xprtrdma_chunk_write", "rpcrdma", "iot_rdma_chunk_write"),
	MOD("NFS/RDMA reply chunk", "xprtrdma_chunk_reply", "rpcrdma", "iot_rdma_chunk_reply"),
	MOD("NFS/RDMA write-pad chunk", "xprtrdma_chunk_wp", "rpcrdma", "iot_rdma_chunk_wp"),
	MOD("NFS/RDMA post send", "xprtrdma_post_send", "rpcrdma", "iot_rdma_post_send"),
	MOD("NFS/RDMA reply", "xprtrdma_reply", "rpcrdma", "iot_rdma_reply"),
	MOD("NFS/RDMA out of MRs", "xprtrdma_nomrs_err", "rpcrdma", "iot_rdma_nomrs"),
	MOD("NFS/RDMA MR map error", "xprtrdma_frwr_maperr", "rpcrdma", "iot_rdma_frwr_maperr"),
	MOD("NFS/RDMA post send error", "xprtrdma_post_send_err", "rpcrdma",
	    "iot_rdma_post_send_err"),
	MOD("NFS/RDMA connect", "xprtrdma_connect", "rpcrdma", "iot_rdma_connect"),
	MOD("NFS/RDMA disconnect", "xprtrdma_disconnect", "rpcrdma", "iot_rdma_disconnect"),
	MOD("NFS/RDMA MR allocation", "xprtrdma_frwr_alloc", "rpcrdma", "iot_rdma_frwr_alloc"),
	MOD("RDMA CQ alloc", "cq_alloc", "ib_core", "iot_cq_alloc"),
	MOD("RDMA CQ alloc error", "cq_alloc_error", "ib_core", "iot_cq_alloc_error"),
	MOD("RDMA CQ free", "cq_free", "ib_core", "iot_cq_free"),
	MOD("RDMA CQ poll", "cq_poll", "ib_core", "iot_cq_poll"),
	MOD("RDMA CQ process", "cq_process", "ib_core", "iot_cq_process"),
	MOD("RDMA CQ schedule", "cq_schedule", "ib_core", "iot_cq_schedule"),
	MOD("RDMA CQ reschedule", "cq_reschedule", "ib_core", "iot_cq_reschedule"),
	MOD("RDMA CQ drain", "cq_drain_complete", "ib_core", "iot_cq_drain"),
	MOD("RDMA MR alloc", "mr_alloc", "ib_core", "iot_mr_alloc"),
	MOD("RDMA MR dereg", "mr_dereg", "ib_core", "iot_mr_dereg"),
	MOD("RDMA CM event", "cm_event_handler", "rdma_cm", "iot_cm_event"),
	MOD("RDMA CM event done", "cm_event_done", "rdma_cm", "iot_cm_event_done"),
};

/* bpf/verbs.bpf.c: libibverbs functions (ibv_post_send, ibv_poll_cq and the
 * other data-path verbs are inline in verbs.h: nothing to probe) */
static struct probe verbs_probes[] = {
	VERB(ibv_get_device_list, IOT_IBV_GET_DEVICE_LIST),
	VERB(ibv_open_device, IOT_IBV_OPEN_DEVICE),
	VERB(ibv_close_device, IOT_IBV_CLOSE_DEVICE),
	VERB(ibv_alloc_pd, IOT_IBV_ALLOC_PD),
	VERB(ibv_dealloc_pd, IOT_IBV_DEALLOC_PD),
	VERB(ibv_create_cq, IOT_IBV_CREATE_CQ),
	VERB(ibv_destroy_cq, IOT_IBV_DESTROY_CQ),
	VERB(ibv_create_qp, IOT_IBV_CREATE_QP),
	VERB(ibv_modify_qp, IOT_IBV_MODIFY_QP),
	VERB(ibv_destroy_qp, IOT_IBV_DESTROY_QP),
	VERB(ibv_reg_mr, IOT_IBV_REG_MR),
	VERB(ibv_reg_mr_iova, IOT_IBV_REG_MR_IOVA),
	VERB(ibv_reg_mr_iova2, IOT_IBV_REG_MR_IOVA2),
	VERB(ibv_reg_dmabuf_mr, IOT_IBV_REG_DMABUF_MR),
	VERB(ibv_dereg_mr, IOT_IBV_DEREG_MR),
};

#define NPROBES(a) ((int)(sizeof(a) / sizeof((a)[0])))

const int n_core_probes = NPROBES(core_probes);

static struct {
	struct probe *p;
	int n;
} probe_sets[] = {
	{ core_probes, NPROBES(core_probes) },
	{ block_probes, NPROBES(block_probes) },
	{ aio_probes, NPROBES(aio_probes) },
	{ netfs_probes, NPROBES(netfs_probes) },
	{ rdma_probes, NPROBES(rdma_probes) },
	{ verbs_probes, NPROBES(verbs_probes) },
};

void all_probes_json(char *buf, size_t len, bool attached)
{
	size_t off = (size_t)snprintf(buf, len, "[");

	for (size_t s = 0; s < sizeof(probe_sets) / sizeof(probe_sets[0]); s++)
		off = json_probes_append(buf, len, off, probe_sets[s].p, probe_sets[s].n, attached);
	off = tls_probes_append(buf, len, off, attached);
	if (off < len)
		snprintf(buf + off, len - off, "]");
}

/* The library whose verbs are probed: --verbs-lib, else the system's. */
static const char *find_verbs_library(const char *given)
{
	static const char *candidates[] = {
		"/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/usr/lib/aarch64-linux-gnu/libibverbs.so.1",
		"/usr/lib64/libibverbs.so.1", "/usr/lib/libibverbs.so.1", "/lib64/libibverbs.so.1",
	};
	if (given)
		return given;
	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++)
		if (access(candidates[i], R_OK) == 0)
			return candidates[i];
	return NULL;
}

/* Block requests: all three probes or none (a request is followed from its
 * bio's submission to its completion). */
static struct block_bpf *load_block(struct bpf_object *core, struct btf *vmlinux)
{
	struct block_bpf *o;
	struct probe *p = block_probes;
	int n = NPROBES(block_probes);

	for (int i = 0; i < n; i++) {
		if (!btf_has_tracepoint(vmlinux, p[i].tp)) {
			skip_probes(p, n, "this kernel has no %s tracepoint", p[i].tp);
			return NULL;
		}
	}
	o = block_bpf__open();
	if (!o) {
		skip_probes(p, n, "cannot open the block probes: %s", strerror(errno));
		return NULL;
	}
	for (int i = 0; i < n; i++)
		p[i].bpf = bpf_object__find_program_by_name(o->obj, p[i].prog);
	if (share_core_maps(o->obj, core) || block_bpf__load(o)) {
		skip_probes(p, n, "load failed: %s", strerror(errno));
		block_bpf__destroy(o);
		return NULL;
	}
	return o;
}

/* Whether tracepoint tp's argument idx (0: the first after the hidden
 * context) is a pointer (to struct `target` when given). */
static bool tp_arg_is_ptr(const struct btf *btf, const char *tp, int idx, const char *target)
{
	char name[128];
	const struct btf_type *t;
	const struct btf_param *params;
	int id;

	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	id = btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF);
	if (id <= 0)
		return false;
	t = btf__type_by_id(btf, btf__type_by_id(btf, id)->type);   /* typedef -> pointer */
	while (t && btf_is_ptr(t))
		t = btf__type_by_id(btf, t->type);
	if (!t || !btf_is_func_proto(t) || btf_vlen(t) <= idx + 1)
		return false;
	params = btf_params(t);
	t = btf__type_by_id(btf, params[idx + 1].type);
	if (!t || !btf_is_ptr(t))
		return false;
	if (!target)
		return true;
	t = btf__type_by_id(btf, t->type);
	return t && btf_is_struct(t) && !strcmp(btf__name_by_offset(btf, t->name_off), target);
}

/* io_uring: both probes or none (a request is paired from its submission to
 * its completion); libaio: all six or none, likewise. The submission
 * tracepoint is io_uring_submit_req from 6.4, io_uring_submit_sqe(req, ...)
 * in 6.0-6.3; older kernels pass no request: no io_uring probes there. */
/* libaio: run by the core's sys_enter/sys_exit programs where those are the
 * hooks, else by fentry/fexit on the system calls' functions (bpf/aio.bpf.c). */
static void libaio_hooks(struct probe *aio, int naio, struct btf *vmlinux, bool fentry)
{
	char name[96];

	for (int i = 0; i < naio; i++) {
		struct bpf_program *fe = aio[i].bpf;   /* found by load_aio */

		if (!fentry) {
			/* attached when the core's programs are (a required probe) */
			bpf_program__set_autoload(fe, false);
			aio[i].bpf = NULL;
			aio[i].shared_hook = true;
			continue;
		}
		snprintf(name, sizeof(name), "__x64_sys_%s", aio[i].tp);
		if (btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) <= 0) {
			snprintf(aio[i].why, sizeof(aio[i].why), "this kernel has no %s (no AIO)",
				 aio[i].tp);
			bpf_program__set_autoload(fe, false);
		}
	}
}

static struct aio_bpf *load_aio(struct bpf_object *core, struct btf *vmlinux, bool fentry)
{
	struct probe *p = aio_probes, *aio = aio_probes + N_URING_PROBES;
	int n = NPROBES(aio_probes), naio = n - N_URING_PROBES;
	struct aio_bpf *o = aio_bpf__open();

	if (!o) {
		skip_probes(p, n, "cannot open the io_uring/libaio probes: %s", strerror(errno));
		return NULL;
	}
	for (int i = 0; i < n; i++)
		p[i].bpf = bpf_object__find_program_by_name(o->obj, p[i].prog);
	const char *pre64 = getenv("IOTRACE_URING_PRE_6_4");
	bool pre64_off = pre64 && !strcmp(pre64, "0");

	if (!btf_has_tracepoint(vmlinux, "io_uring_submit_req") &&
	    tp_arg_is_ptr(vmlinux, "io_uring_submit_sqe", 0, "io_kiocb") && !pre64_off) {
		/* 6.0-6.3: the submission tracepoint is io_uring_submit_sqe.
		 * IOTRACE_URING_PRE_6_4=0 turns these probes off (a guest stall
		 * once seen under emulation was later seen without them too). */
		struct bpf_program *old = bpf_object__find_program_by_name(o->obj,
									  "iot_uring_submit_sqe");
		bpf_program__set_autoload(p[0].bpf, false);
		p[0].tp = "io_uring_submit_sqe";
		p[0].name = "io_uring submissions (io_uring_submit_sqe)";
		p[0].bpf = old;
	} else {
		bpf_program__set_autoload(o->progs.iot_uring_submit_sqe, false);
	}
	if (!btf_has_tracepoint(vmlinux, p[0].tp) &&
	    tp_arg_is_ptr(vmlinux, "io_uring_submit_sqe", 0, "io_kiocb"))
		skip_probes(p, N_URING_PROBES, "turned off by IOTRACE_URING_PRE_6_4=0; "
			    "libaio is traced");
	else if (!btf_has_tracepoint(vmlinux, p[0].tp))
		skip_probes(p, N_URING_PROBES, "this kernel has no io_uring_submit_req tracepoint "
			    "(io_uring absent, or older than 6.0)");
	else if (!tp_arg_is_ptr(vmlinux, "io_uring_complete", 1, NULL))
		skip_probes(p, N_URING_PROBES, "this kernel's io_uring_complete passes no request "
			    "(older than 6.0)");
	libaio_hooks(aio, naio, vmlinux, fentry);
	if (p[0].why[0] && (aio[0].why[0] || !fentry)) {
		aio_bpf__destroy(o);
		return NULL;
	}
	if (share_core_maps(o->obj, core) || aio_bpf__load(o)) {
		/* libaio by the core's programs does not need this object */
		skip_probes(p, fentry ? n : N_URING_PROBES, "load failed: %s", strerror(errno));
		aio_bpf__destroy(o);
		return NULL;
	}
	return o;
}

/* The optional objects: each shares the core's maps and loads only the
 * probes whose module is there. */
static struct netfs_bpf *load_netfs(struct bpf_object *core, struct btf *vmlinux)
{
	struct netfs_bpf *o = netfs_bpf__open();
	struct probe *p = netfs_probes;
	int n = NPROBES(netfs_probes);

	if (!o) {
		skip_probes(p, n, "cannot open the NFS probes: %s", strerror(errno));
		return NULL;
	}
	if (!prepare_module_probes(o->obj, core, vmlinux, p, n) || netfs_bpf__load(o)) {
		skip_probes(p, n, "load failed: %s", strerror(errno));
		netfs_bpf__destroy(o);
		return NULL;
	}
	return o;
}

static struct rdma_bpf *load_rdma(struct bpf_object *core, struct btf *vmlinux)
{
	struct rdma_bpf *o = rdma_bpf__open();
	struct probe *p = rdma_probes;
	int n = NPROBES(rdma_probes);

	if (!o) {
		skip_probes(p, n, "cannot open the RDMA probes: %s", strerror(errno));
		return NULL;
	}
	if (!prepare_module_probes(o->obj, core, vmlinux, p, n) || rdma_bpf__load(o)) {
		skip_probes(p, n, "load failed: %s", strerror(errno));
		rdma_bpf__destroy(o);
		return NULL;
	}
	return o;
}

static const char *verbs_library;  /* the library the uprobes are on */
static int multi_fds[2] = { -1, -1 };  /* the uprobe_multi links, when used */

const char *probed_verbs_library(void)
{
	return verbs_library;
}

/* libibverbs finds devices in /sys/class/infiniband_verbs: without one,
 * a job's verbs calls can do nothing but find no device. */
static bool have_uverbs_device(void)
{
	DIR *d = opendir("/sys/class/infiniband_verbs");
	struct dirent *de;
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d)))
		found = strncmp(de->d_name, "uverbs", 6) == 0;
	closedir(d);
	return found;
}

static struct verbs_bpf *load_verbs(struct bpf_object *core, const char *given, bool multi)
{
	const char *lib = find_verbs_library(given && strcmp(given, "none") ? given : NULL);
	struct probe *p = verbs_probes;
	int n = NPROBES(verbs_probes);
	struct verbs_bpf *o;

	if (given && strcmp(given, "none") == 0) {
		skip_probes(p, n, "turned off (--no-verbs)");
		return NULL;
	}
	if (!lib || access(lib, R_OK)) {
		if (given)
			skip_probes(p, n, "cannot read %s: %s", given, strerror(errno));
		else
			skip_probes(p, n, "libibverbs not installed (or give its path: --verbs-lib)");
		return NULL;
	}
	/* Each uprobe costs ~0.1 s to remove at the end (an RCU grace period,
	 * serialised by the kernel): only where there is something to trace. */
	if (!given && !have_uverbs_device()) {
		skip_probes(p, n, "no RDMA device (/sys/class/infiniband_verbs is empty; "
			    "--verbs-lib forces the probes)");
		return NULL;
	}
	/* uprobe_multi where the kernel has it */
	o = multi ? verbs_bpf__open() : NULL;
	if (o) {
		bpf_program__set_expected_attach_type(o->progs.iot_verbs_enter,
						      IOT_ATTACH_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(o->progs.iot_verbs_return,
						      IOT_ATTACH_UPROBE_MULTI);
		if (!share_core_maps(o->obj, core) && !verbs_bpf__load(o) &&
		    !attach_uprobes_multi(o->progs.iot_verbs_enter, o->progs.iot_verbs_return,
					  lib, p, n, multi_fds)) {
			verbs_library = lib;
			return o;
		}
		verbs_bpf__destroy(o);
	}
	/* else one perf uprobe per function and direction */
	o = verbs_bpf__open();
	if (!o || share_core_maps(o->obj, core) || verbs_bpf__load(o)) {
		skip_probes(p, n, "load failed: %s", strerror(errno));
		verbs_bpf__destroy(o);
		return NULL;
	}
	attach_uprobes(o->progs.iot_verbs_enter, o->progs.iot_verbs_return, lib, p, n);
	verbs_library = lib;
	return o;
}

void load_optional_objects(struct optional_objects *o, struct bpf_object *core,
			   struct btf *vmlinux, bool syscalls_fentry)
{
	o->block = load_block(core, vmlinux);
	o->aio = load_aio(core, vmlinux, syscalls_fentry);
	o->netfs = load_netfs(core, vmlinux);
	/* uprobe_multi links: kernels 6.6 and later */
	o->uprobe_multi = btf__find_by_name_kind(vmlinux, "bpf_uprobe_multi_link",
						 BTF_KIND_STRUCT) > 0;
	o->rdma = load_rdma(core, vmlinux);
}

void attach_optional_objects(struct optional_objects *o, struct bpf_object *core,
			     const char *verbs_lib, const char *const *tls_libs, bool tls_http_only,
			     bool go_tls)
{
	attach_probes(block_probes, NPROBES(block_probes));
	attach_probes(aio_probes, NPROBES(aio_probes));
	attach_probes(netfs_probes, NPROBES(netfs_probes));
	attach_probes(rdma_probes, NPROBES(rdma_probes));
	o->verbs = load_verbs(core, verbs_lib, o->uprobe_multi);
	tls_start(core, tls_libs, o->uprobe_multi, tls_http_only, go_tls);
}

void detach_all_probes(void)
{
	tls_stop();
	for (int k = 0; k < 2; k++) {
		if (multi_fds[k] >= 0)
			close(multi_fds[k]);
		multi_fds[k] = -1;
	}
	for (int i = 0; i < NPROBES(verbs_probes); i++)
		verbs_probes[i].in_multi = false;
	for (size_t s = 0; s < sizeof(probe_sets) / sizeof(probe_sets[0]); s++)
		detach_probes(probe_sets[s].p, probe_sets[s].n);
}

unsigned long long block_unfinished(const struct optional_objects *o,
				    int (*emit)(void *ctx, void *data, size_t size))
{
	struct iot_block_owner own;
	__u64 key, *prev = NULL;
	unsigned long long n = 0;
	int fd;

	if (!o->block)
		return 0;
	fd = bpf_map__fd(o->block->maps.requests);
	while (!bpf_map_get_next_key(fd, prev, &key)) {
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &own))
			continue;
		/* block.bpf.c's fill_block_record, with no completion */
		struct iot_event e = {
			.ts_ns = own.issue_ts, .arg = own.issue_ts - own.queued_ts,
			.offset = (__s64)(own.sector << 9), .req_bytes = own.bytes,
			.ino = own.ino, .dev = own.dev, .fs_magic = own.magic,
			.pid = (__s32)own.pid, .tid = (__s32)own.tid, .fd = -1, .dirfd = -1,
			.flags = own.cmd_flags, .mode = own.bdev, .op = IOT_BLOCK_RQ,
			.imode = own.imode, .eflags = own.eflags | IOT_EF_NO_COMPLETION,
		};
		emit(NULL, &e, sizeof(e));
		n++;
	}
	return n;
}

/* One object's programs that the kernel skipped at least once. */
static size_t misses_append(struct bpf_object *obj, char *buf, size_t len, size_t off,
			    unsigned long long *total, unsigned long long lock_end_nested)
{
	struct bpf_program *prog;

	if (!obj)
		return off;
	bpf_object__for_each_program(prog, obj) {
		struct bpf_prog_info info = {};
		__u32 ilen = sizeof(info);
		int fd = bpf_program__fd(prog);

		if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &ilen))
			continue;
		if (!strcmp(bpf_program__name(prog), "iot_lock_end"))
			info.recursion_misses -= lock_end_nested < info.recursion_misses ?
						 lock_end_nested : info.recursion_misses;
		if (!info.recursion_misses)
			continue;
		*total += info.recursion_misses;
		if (off < len)
			off += (size_t)snprintf(buf + off, len - off, "%s\"%s\":%llu",
						off > 1 ? "," : "", bpf_program__name(prog),
						(unsigned long long)info.recursion_misses);
	}
	return off;
}

void probe_misses_json(struct bpf_object *core, const struct optional_objects *o,
		       unsigned long long lock_end_nested, char *buf, size_t len,
		       unsigned long long *total)
{
	size_t off = (size_t)snprintf(buf, len, "{");

	*total = 0;
	off = misses_append(core, buf, len, off, total, lock_end_nested);
	off = misses_append(o->block ? o->block->obj : NULL, buf, len, off, total, 0);
	off = misses_append(o->aio ? o->aio->obj : NULL, buf, len, off, total, 0);
	off = misses_append(o->netfs ? o->netfs->obj : NULL, buf, len, off, total, 0);
	off = misses_append(o->rdma ? o->rdma->obj : NULL, buf, len, off, total, 0);
	off = misses_append(o->verbs ? o->verbs->obj : NULL, buf, len, off, total, 0);
	if (off < len)
		snprintf(buf + off, len - off, "}");
	else
		snprintf(buf, len, "{}");   /* cut: the total still counts them all */
}

void destroy_optional_objects(struct optional_objects *o)
{
	verbs_bpf__destroy(o->verbs);
	rdma_bpf__destroy(o->rdma);
	netfs_bpf__destroy(o->netfs);
	block_bpf__destroy(o->block);
	aio_bpf__destroy(o->aio);
	o->block = NULL;
	o->aio = NULL;
	o->verbs = NULL;
	o->rdma = NULL;
	o->netfs = NULL;
}
