// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace network-filesystem side: NFS client reads, writes and commits, and
 * every RPC, of the traced processes. A separate object from iotrace.bpf.c
 * because these tracepoints live in modules (nfs, sunrpc) that a kernel may
 * not have or not have loaded; the recorder loads it only when they are
 * there, sharing the core object's ring buffer, traced map and counters.
 *
 * An NFS READ/WRITE/COMMIT starts in the caller's context (initiate) and
 * completes in rpciod's (done): the initiating task is kept per request
 * (keyed by the request header's address) and the record is written at
 * completion, attributed to it. RPCs carry their owner's tgid (tk_owner).
 * NFS fileids are the inode numbers the syscall records carry, so both join
 * on (dev, ino) into the same file_id.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iotrace.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define S_IFREG_ 0100000

/* Module types: local CO-RE definitions with just the fields read here;
 * libbpf relocates them against the nfs/sunrpc module BTF. */
#define __pai __attribute__((preserve_access_index))
struct nfs_pgio_args { __u64 offset; __u32 count; } __pai;
struct nfs_pgio_res { __u64 count; } __pai;
struct nfs_pgio_header { struct inode *inode; struct nfs_pgio_args args;
			 struct nfs_pgio_res res; } __pai;
struct nfs_commitargs { __u64 offset; __u32 count; } __pai;
struct nfs_commit_data { struct inode *inode; struct nfs_commitargs args; } __pai;
struct rpc_procinfo { __u32 p_proc; const char *p_name; } __pai;
struct rpc_program { const char *name; } __pai;
struct rpc_clnt { __u32 cl_prog; __u32 cl_vers; const struct rpc_program *cl_program; } __pai;
struct rpc_message { const struct rpc_procinfo *rpc_proc; } __pai;
struct rpc_rqst { __u32 rq_xid; int rq_ntrans; } __pai;
struct rpc_task { struct rpc_message tk_msg; struct rpc_clnt *tk_client;
		  struct rpc_rqst *tk_rqstp; int tk_status; int tk_owner; } __pai;

#include "shared_maps.h"

/* Requests in flight: header address -> who started it, when. LRU: a
 * request whose completion never comes is evicted, not leaked. */
struct pending {
	__u64 ts;
	__u32 pid;
	__u32 tid;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pending);
} pending SEC(".maps");

struct rpc_event {
	struct iot_event ev;
	char s[64];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rpc_event);
} scratch SEC(".maps");

static __always_inline int remember(void *req)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), key = (__u64)req;
	__u32 tgid = pid_tgid >> 32;
	struct pending p = { .ts = bpf_ktime_get_ns(), .pid = tgid, .tid = (__u32)pid_tgid };

	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	bpf_map_update_elem(&pending, &key, &p, BPF_ANY);
	return 0;
}

static __always_inline struct iot_event *start_event(struct pending *p, __u16 op,
						     struct inode *inode, struct rpc_task *task)
{
	void *rb = cpu_ring();
	struct iot_event *e = rb ? bpf_ringbuf_reserve(rb, sizeof(*e), 0) : NULL;
	__u64 now = bpf_ktime_get_ns();

	if (!e) {
		count(IOT_CNT_DROPS);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = p->ts;
	e->dur_ns = now - p->ts;
	e->pid = p->pid;
	e->tid = p->tid;
	e->op = op;
	e->fd = -1;
	e->dirfd = -1;
	e->ino = BPF_CORE_READ(inode, i_ino);
	e->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	e->fs_magic = BPF_CORE_READ(inode, i_sb, s_magic);
	e->imode = S_IFREG_;
	if (task)
		e->arg = BPF_CORE_READ(task, tk_rqstp, rq_xid);
	/* a retried request completes again: time the retry from here */
	p->ts = now;
	return e;
}

static __always_inline int pgio_done(__u16 op, struct rpc_task *task,
				     struct nfs_pgio_header *hdr)
{
	__u64 key = (__u64)hdr;
	struct pending *p = bpf_map_lookup_elem(&pending, &key);
	struct iot_event *e;
	int status;

	if (!p)
		return 0;
	e = start_event(p, op, BPF_CORE_READ(hdr, inode), task);
	if (!e)
		return 0;
	status = BPF_CORE_READ(task, tk_status);
	e->offset = BPF_CORE_READ(hdr, args.offset);
	e->req_bytes = BPF_CORE_READ(hdr, args.count);
	e->ret = status < 0 ? status : (__s64)BPF_CORE_READ(hdr, res.count);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/nfs_initiate_read")
int BPF_PROG(iot_nfs_init_read, struct nfs_pgio_header *hdr)
{
	return remember(hdr);
}

SEC("tp_btf/nfs_readpage_done")
int BPF_PROG(iot_nfs_read_done, struct rpc_task *task, struct nfs_pgio_header *hdr)
{
	return pgio_done(IOT_NFS_READ, task, hdr);
}

SEC("tp_btf/nfs_initiate_write")
int BPF_PROG(iot_nfs_init_write, struct nfs_pgio_header *hdr)
{
	return remember(hdr);
}

SEC("tp_btf/nfs_writeback_done")
int BPF_PROG(iot_nfs_write_done, struct rpc_task *task, struct nfs_pgio_header *hdr)
{
	return pgio_done(IOT_NFS_WRITE, task, hdr);
}

SEC("tp_btf/nfs_initiate_commit")
int BPF_PROG(iot_nfs_init_commit, struct nfs_commit_data *data)
{
	return remember(data);
}

SEC("tp_btf/nfs_commit_done")
int BPF_PROG(iot_nfs_commit_done, struct rpc_task *task, struct nfs_commit_data *data)
{
	__u64 key = (__u64)data;
	struct pending *p = bpf_map_lookup_elem(&pending, &key);
	struct iot_event *e;

	if (!p)
		return 0;
	e = start_event(p, IOT_NFS_COMMIT, BPF_CORE_READ(data, inode), task);
	if (!e)
		return 0;
	e->offset = BPF_CORE_READ(data, args.offset);
	e->req_bytes = BPF_CORE_READ(data, args.count);
	e->ret = BPF_CORE_READ(task, tk_status);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/*
 * NFS readahead: issued by the reading thread (nfs_aop_readahead), done when
 * the READs for it are sent (nfs_aop_readahead_done, same thread). The READ
 * RPCs it starts are nfs_read records of that thread, initiated inside it.
 */
#define RA_PAGE_SIZE 4096   /* x86_64, like the rest of iotrace */

struct readahead {
	__u64 ts;
	__s64 pos;
	__u32 pages;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct readahead);
} readahead_inflight SEC(".maps");

SEC("tp_btf/nfs_aop_readahead")
int BPF_PROG(iot_nfs_readahead, struct inode *inode, __s64 pos, unsigned int nr_pages)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct readahead ra = { .ts = bpf_ktime_get_ns(), .pos = pos, .pages = nr_pages };

	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	bpf_map_update_elem(&readahead_inflight, &pid_tgid, &ra, BPF_ANY);
	return 0;
}

SEC("tp_btf/nfs_aop_readahead_done")
int BPF_PROG(iot_nfs_readahead_done, struct inode *inode, unsigned int nr_pages, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct readahead *ra = bpf_map_lookup_elem(&readahead_inflight, &pid_tgid);
	struct pending p;
	struct iot_event *e;

	if (!ra)
		return 0;
	p.ts = ra->ts;
	p.pid = pid_tgid >> 32;
	p.tid = (__u32)pid_tgid;
	e = start_event(&p, IOT_NFS_READAHEAD, inode, NULL);
	if (e) {
		e->offset = ra->pos;
		e->req_bytes = (__u64)ra->pages * RA_PAGE_SIZE;
		e->ret = ret;
		e->arg = 0;
		bpf_ringbuf_submit(e, 0);
	}
	bpf_map_delete_elem(&readahead_inflight, &pid_tgid);
	return 0;
}

/*
 * One record per RPC of a traced process, at its completion:
 * dur_ns = execute (queued to done), req_bytes = backlog (waiting for a
 * transport slot), offset = rtt (sent to reply: network + server),
 * arg = xid, flags = procedure number, mode = RPC program number,
 * fd = transmissions, ret = status; payload = program name, procedure name.
 */
SEC("tp_btf/rpc_stats_latency")
int BPF_PROG(iot_rpc_done, struct rpc_task *task, ktime_t backlog, ktime_t rtt,
	     ktime_t execute)
{
	__u32 owner = BPF_CORE_READ(task, tk_owner), zero = 0;
	struct rpc_event *b;
	long n1, n2;
	__u32 off, len;

	if (!bpf_map_lookup_elem(&traced, &owner))
		return 0;
	b = bpf_map_lookup_elem(&scratch, &zero);
	if (!b)
		return 0;
	__builtin_memset(&b->ev, 0, sizeof(b->ev));
	b->ev.ts_ns = bpf_ktime_get_ns() - execute;
	b->ev.dur_ns = execute;
	b->ev.req_bytes = backlog;
	b->ev.offset = rtt;
	b->ev.pid = owner;
	b->ev.tid = -1;
	b->ev.fd = BPF_CORE_READ(task, tk_rqstp, rq_ntrans);
	b->ev.dirfd = -1;
	b->ev.op = IOT_RPC;
	b->ev.arg = BPF_CORE_READ(task, tk_rqstp, rq_xid);
	b->ev.flags = BPF_CORE_READ(task, tk_msg.rpc_proc, p_proc);
	b->ev.mode = BPF_CORE_READ(task, tk_client, cl_prog);
	b->ev.ret = BPF_CORE_READ(task, tk_status);
	n1 = bpf_probe_read_kernel_str(b->s, 24,
				       BPF_CORE_READ(task, tk_client, cl_program, name));
	if (n1 <= 0) {
		b->s[0] = 0;
		n1 = 1;
	}
	off = n1 & 31;
	n2 = bpf_probe_read_kernel_str(&b->s[off], 32, BPF_CORE_READ(task, tk_msg.rpc_proc, p_name));
	if (n2 <= 0) {
		b->s[off] = 0;
		n2 = 1;
	}
	len = (off + (n2 & 31)) & 63;
	b->ev.str_len = len;
	if (ring_output(b, sizeof(b->ev) + len, 0))
		count(IOT_CNT_DROPS);
	return 0;
}
