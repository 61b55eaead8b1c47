// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace kernel RDMA side: NFS over RDMA (rpcrdma) per RPC, and RDMA core
 * (ib_core CQs and MRs, rdma_cm connection events). A third object, loaded
 * only when those modules are there, sharing the core object's maps.
 *
 * Who an event belongs to:
 *  - rpcrdma events of an RPC: its rpc_task's owner (tk_owner), kept when
 *    that process is traced;
 *  - ib_core/rdma_cm resources: the task that created them (restrack
 *    entry), kept when traced; resources of kernel consumers (rpcrdma's own
 *    CQs, nvme-rdma...) have no task: they are recorded with pid 0 and the
 *    consumer's name, under a per-CPU rate cap so that a busy storage host's
 *    completions cannot flood the ring buffer (over the cap: counted);
 *  - rpcrdma transport events (connect, MR pool): pid 0, with the peer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iotrace.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define KERNEL_EVENTS_PER_SEC 10000   /* per CPU */
#define PAYLOAD_MAX 64

/* Module types: local CO-RE definitions with the fields read here. */
#define __pai __attribute__((preserve_access_index))
struct rpc_task___r;
struct rpc_rqst___r { struct rpc_task___r *rq_task; __u32 rq_xid; } __pai;
struct rpc_task___r { struct rpc_rqst___r *tk_rqstp; int tk_owner; } __pai;
struct rpc_xprt___r { const char *address_strings[6]; } __pai;
struct rpcrdma_xprt { struct rpc_xprt___r rx_xprt; } __pai;
struct rpcrdma_req { struct rpc_rqst___r rl_slot; } __pai;
struct rpcrdma_mr { struct rpcrdma_req *mr_req; int mr_nents; __u32 mr_handle;
		    __u32 mr_length; } __pai;
struct rpcrdma_rep;
struct rdma_restrack_entry___r { struct task_struct *task; const char *kern_name;
				 __u32 id; } __pai;
struct ib_cq___r { __s64 timestamp; struct rdma_restrack_entry___r res; } __pai;
struct ib_pd___r { struct rdma_restrack_entry___r res; } __pai;
struct ib_mr___r { __u64 length; struct rdma_restrack_entry___r res; } __pai;
struct rdma_id_private___r { struct rdma_restrack_entry___r res; } __pai;
/* struct rdma_cm_event starts with (enum event, int status) since the CM
 * exists; the enum's type cannot be CO-RE-matched to an int, so both are read
 * as plain memory. */
struct cm_event_head { int event; int status; };

#include "shared_maps.h"

struct rdma_event {
	struct iot_event ev;
	char s[PAYLOAD_MAX];
};

/* A record is built in per-CPU scratch, one per nesting level: a program
 * run from a completion interrupt (a CQ's) can interrupt another program's
 * record on that CPU, and with one buffer it overwrote it (the interrupted
 * record was lost and the interrupting one written twice). */
#define SCRATCH_LEVELS 2

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_LEVELS);
	__type(key, __u32);
	__type(value, struct rdma_event);
} rdma_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rdma_depth SEC(".maps");

struct rate { __u64 window; __u32 n; };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rate);
} kernel_rate SEC(".maps");

/* Chunk bytes registered by the current marshalling attempt of an RPC, by
 * (owner, xid). An attempt that fails (no free MR, no send context) releases
 * its chunks and the retry registers them again, so the chunk records alone
 * over-count: the marshal record carries its own attempt's bytes. */
struct attempt { __u64 read_bytes, write_bytes; };

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct attempt);
} attempts SEC(".maps");

static __always_inline __u64 attempt_key(__s32 owner, __u32 xid)
{
	return ((__u64)(__u32)owner << 32) | xid;
}

/* A zeroed record for op, owned by pid (0: the kernel), now, in this
 * nesting level's scratch; submit() hands it over and leaves the level. */
static __always_inline struct rdma_event *start(__u16 op, __s32 pid)
{
	__u32 zero = 0, level;
	__u32 *depth = bpf_map_lookup_elem(&rdma_depth, &zero);
	struct rdma_event *b;

	if (!depth)
		return NULL;
	level = *depth;
	if (level >= SCRATCH_LEVELS) {
		count(IOT_CNT_DROPS);
		return NULL;
	}
	b = bpf_map_lookup_elem(&rdma_scratch, &level);
	if (!b)
		return NULL;
	/* an interrupting program runs to its end before this goes on: it
	 * finds this level taken from here, and leaves it as it found it */
	*depth = level + 1;
	__builtin_memset(&b->ev, 0, sizeof(b->ev));
	b->ev.ts_ns = bpf_ktime_get_ns();
	b->ev.op = op;
	b->ev.pid = pid;
	b->ev.tid = -1;
	b->ev.fd = -1;
	b->ev.dirfd = -1;
	b->ev.offset = -1;
	return b;
}

static __always_inline void submit(struct rdma_event *b)
{
	__u32 zero = 0;
	__u32 *depth;

	if (ring_output(b, sizeof(b->ev) + (b->ev.str_len & (PAYLOAD_MAX - 1)), 0))
		count(IOT_CNT_DROPS);
	depth = bpf_map_lookup_elem(&rdma_depth, &zero);
	if (depth && *depth)
		*depth -= 1;
}

/* A resource owner of the job (0, the kernel, never is). */
static __always_inline bool traced_owner(__s32 tgid)
{
	return tgid > 0 && traced_tgid(tgid);
}

static __always_inline bool kernel_budget(void)
{
	__u32 zero = 0;
	struct rate *r = bpf_map_lookup_elem(&kernel_rate, &zero);
	__u64 window = bpf_ktime_get_ns() >> 30;  /* ~1.07 s */

	if (!r)
		return false;
	if (r->window != window) {
		r->window = window;
		r->n = 0;
	}
	if (r->n >= KERNEL_EVENTS_PER_SEC) {
		count(IOT_CNT_KERNEL_CAPPED);
		return false;
	}
	r->n++;
	return true;
}

/* ---- rpcrdma: events of one RPC ----------------------------------------- */

static __always_inline struct rdma_event *rpc_start(__u16 op, struct rpc_task___r *task)
{
	__s32 owner = BPF_CORE_READ(task, tk_owner);
	struct rdma_event *b;

	if (!traced_owner(owner))
		return NULL;
	b = start(op, owner);
	if (b)
		b->ev.arg = BPF_CORE_READ(task, tk_rqstp, rq_xid);
	return b;
}

static __always_inline struct rpc_task___r *req_task(struct rpcrdma_req *req)
{
	return BPF_CORE_READ(req, rl_slot.rq_task);
}

/* The peer "address\0port" of a transport, as the payload. */
static __always_inline void peer(struct rdma_event *b, struct rpcrdma_xprt *x)
{
	const char *addr = BPF_CORE_READ(x, rx_xprt.address_strings[0]);
	const char *port = BPF_CORE_READ(x, rx_xprt.address_strings[1]);
	long n1, n2;
	__u32 off;

	n1 = bpf_probe_read_kernel_str(b->s, 48, addr);
	if (n1 <= 0) {
		b->s[0] = 0;
		n1 = 1;
	}
	off = n1 & 63;
	if (off > 48)
		off = 48;
	n2 = bpf_probe_read_kernel_str(&b->s[off], 16, port);
	if (n2 <= 0) {
		b->s[off & 63] = 0;
		n2 = 1;
	}
	b->ev.str_len = (off + (n2 & 15)) & (PAYLOAD_MAX - 1);
}

SEC("tp_btf/xprtrdma_marshal")
int BPF_PROG(iot_rdma_marshal, struct rpcrdma_req *req, unsigned int rtype, unsigned int wtype)
{
	struct rdma_event *b = rpc_start(IOT_RPCRDMA_MARSHAL, req_task(req));
	struct attempt *a;
	__u64 key;

	if (!b)
		return 0;
	b->ev.flags = rtype;
	b->ev.mode = wtype;
	key = attempt_key(b->ev.pid, (__u32)b->ev.arg);
	a = bpf_map_lookup_elem(&attempts, &key);
	b->ev.offset = 0;
	if (a) {
		b->ev.req_bytes = a->read_bytes;
		b->ev.offset = a->write_bytes;
		bpf_map_delete_elem(&attempts, &key);
	}
	submit(b);
	return 0;
}

SEC("tp_btf/xprtrdma_marshal_failed")
int BPF_PROG(iot_rdma_marshal_failed, struct rpc_rqst___r *rqst, int rc)
{
	struct rdma_event *b = rpc_start(IOT_RPCRDMA_MARSHAL_FAILED, BPF_CORE_READ(rqst, rq_task));
	__u64 key;

	if (!b)
		return 0;
	key = attempt_key(b->ev.pid, (__u32)b->ev.arg);
	bpf_map_delete_elem(&attempts, &key);
	b->ev.ret = rc;
	submit(b);
	return 0;
}

static __always_inline int chunk(__u16 op, struct rpc_task___r *task, struct rpcrdma_mr *mr,
				 int nsegs, __s64 pos)
{
	struct rdma_event *b = rpc_start(op, task);
	struct attempt *a, zero = {};
	__u64 key;

	if (!b)
		return 0;
	b->ev.req_bytes = BPF_CORE_READ(mr, mr_length);
	key = attempt_key(b->ev.pid, (__u32)b->ev.arg);
	a = lookup_or_init(&attempts, &key, &zero);
	if (a) {
		if (op == IOT_RPCRDMA_CHUNK_READ)
			a->read_bytes += b->ev.req_bytes;
		else
			a->write_bytes += b->ev.req_bytes;
	}
	b->ev.mode = BPF_CORE_READ(mr, mr_handle);
	b->ev.fd = nsegs;
	b->ev.offset = pos;
	submit(b);
	return 0;
}

SEC("tp_btf/xprtrdma_chunk_read")
int BPF_PROG(iot_rdma_chunk_read, struct rpc_task___r *task, unsigned int pos,
	     struct rpcrdma_mr *mr, int nsegs)
{
	return chunk(IOT_RPCRDMA_CHUNK_READ, task, mr, nsegs, pos);
}

SEC("tp_btf/xprtrdma_chunk_write")
int BPF_PROG(iot_rdma_chunk_write, struct rpc_task___r *task, struct rpcrdma_mr *mr, int nsegs)
{
	return chunk(IOT_RPCRDMA_CHUNK_WRITE, task, mr, nsegs, -1);
}

SEC("tp_btf/xprtrdma_chunk_reply")
int BPF_PROG(iot_rdma_chunk_reply, struct rpc_task___r *task, struct rpcrdma_mr *mr, int nsegs)
{
	return chunk(IOT_RPCRDMA_CHUNK_REPLY, task, mr, nsegs, -1);
}

SEC("tp_btf/xprtrdma_chunk_wp")
int BPF_PROG(iot_rdma_chunk_wp, struct rpc_task___r *task, struct rpcrdma_mr *mr, int nsegs)
{
	return chunk(IOT_RPCRDMA_CHUNK_WP, task, mr, nsegs, -1);
}

SEC("tp_btf/xprtrdma_post_send")
int BPF_PROG(iot_rdma_post_send, struct rpcrdma_req *req)
{
	struct rdma_event *b = rpc_start(IOT_RPCRDMA_POST_SEND, req_task(req));

	if (b)
		submit(b);
	return 0;
}

SEC("tp_btf/xprtrdma_reply")
int BPF_PROG(iot_rdma_reply, struct rpc_task___r *task, struct rpcrdma_rep *rep,
	     unsigned int credits)
{
	struct rdma_event *b = rpc_start(IOT_RPCRDMA_REPLY, task);

	if (!b)
		return 0;
	b->ev.req_bytes = credits;
	submit(b);
	return 0;
}

SEC("tp_btf/xprtrdma_nomrs_err")
int BPF_PROG(iot_rdma_nomrs, struct rpcrdma_xprt *x, struct rpcrdma_req *req)
{
	struct rdma_event *b = rpc_start(IOT_RPCRDMA_NOMRS, req_task(req));

	if (!b)
		return 0;
	peer(b, x);
	submit(b);
	return 0;
}

SEC("tp_btf/xprtrdma_frwr_maperr")
int BPF_PROG(iot_rdma_frwr_maperr, struct rpcrdma_mr *mr, int sg_nents)
{
	struct rdma_event *b = rpc_start(IOT_RPCRDMA_FRWR_MAPERR,
					 req_task(BPF_CORE_READ(mr, mr_req)));

	if (!b)
		return 0;
	b->ev.ret = BPF_CORE_READ(mr, mr_nents);
	b->ev.req_bytes = sg_nents;
	submit(b);
	return 0;
}

SEC("tp_btf/xprtrdma_post_send_err")
int BPF_PROG(iot_rdma_post_send_err, struct rpcrdma_xprt *x, struct rpcrdma_req *req, int rc)
{
	struct rdma_event *b = rpc_start(IOT_RPCRDMA_POST_SEND_ERR, req_task(req));

	if (!b)
		return 0;
	b->ev.ret = rc;
	peer(b, x);
	submit(b);
	return 0;
}

/* ---- rpcrdma transports ------------------------------------------------- */

static __always_inline int transport(__u16 op, struct rpcrdma_xprt *x, int rc)
{
	struct rdma_event *b;

	if (!kernel_budget() || !(b = start(op, 0)))
		return 0;
	b->ev.ret = rc;
	peer(b, x);
	submit(b);
	return 0;
}

SEC("tp_btf/xprtrdma_connect")
int BPF_PROG(iot_rdma_connect, struct rpcrdma_xprt *x, int rc)
{
	return transport(IOT_RPCRDMA_CONNECT, x, rc);
}

SEC("tp_btf/xprtrdma_disconnect")
int BPF_PROG(iot_rdma_disconnect, struct rpcrdma_xprt *x, int rc)
{
	return transport(IOT_RPCRDMA_DISCONNECT, x, rc);
}

SEC("tp_btf/xprtrdma_frwr_alloc")
int BPF_PROG(iot_rdma_frwr_alloc, struct rpcrdma_mr *mr, int rc)
{
	struct rdma_event *b;

	if (rc == 0 || !kernel_budget() || !(b = start(IOT_RPCRDMA_MR_ALLOC_ERR, 0)))
		return 0;   /* only failures: a pool is filled by the dozen */
	b->ev.ret = rc;
	submit(b);
	return 0;
}

/* ---- RDMA core: resources of a traced task, or of the kernel ------------ */

/* A record for a resource's event: owned by its traced task, or by the
 * kernel (pid 0, payload = consumer module) within the rate cap. */
static __always_inline struct rdma_event *res_start(__u16 op,
						    struct rdma_restrack_entry___r *res)
{
	struct task_struct *task = BPF_CORE_READ(res, task);
	struct rdma_event *b;
	long n;

	if (task) {
		__s32 tgid = BPF_CORE_READ(task, tgid);
		if (!traced_owner(tgid) || !(b = start(op, tgid)))
			return NULL;
	} else {
		if (!kernel_budget() || !(b = start(op, 0)))
			return NULL;
		n = bpf_probe_read_kernel_str(b->s, 32, BPF_CORE_READ(res, kern_name));
		b->ev.str_len = n > 0 ? n & 31 : 0;
	}
	b->ev.arg = BPF_CORE_READ(res, id);
	return b;
}

static __always_inline int cq_event(__u16 op, struct ib_cq___r *cq, __u64 req, __s64 ret)
{
	struct rdma_event *b = res_start(op, &cq->res);

	if (!b)
		return 0;
	b->ev.req_bytes = req;
	b->ev.ret = ret;
	submit(b);
	return 0;
}

SEC("tp_btf/cq_alloc")
int BPF_PROG(iot_cq_alloc, struct ib_cq___r *cq, int nr_cqe, int comp_vector, int poll_ctx)
{
	struct rdma_event *b = res_start(IOT_RDMA_CQ_ALLOC, &cq->res);

	if (!b)
		return 0;
	b->ev.req_bytes = nr_cqe;
	b->ev.flags = poll_ctx;
	submit(b);
	return 0;
}

SEC("tp_btf/cq_alloc_error")
int BPF_PROG(iot_cq_alloc_error, int nr_cqe, int comp_vector, int poll_ctx, int rc)
{
	struct rdma_event *b;

	if (!kernel_budget() || !(b = start(IOT_RDMA_CQ_ALLOC_ERR, 0)))
		return 0;
	b->ev.req_bytes = nr_cqe;
	b->ev.ret = rc;
	submit(b);
	return 0;
}

SEC("tp_btf/cq_free")
int BPF_PROG(iot_cq_free, struct ib_cq___r *cq)
{
	return cq_event(IOT_RDMA_CQ_FREE, cq, 0, 0);
}

SEC("tp_btf/cq_poll")
int BPF_PROG(iot_cq_poll, struct ib_cq___r *cq, int requested, int rc)
{
	return cq_event(IOT_RDMA_CQ_POLL, cq, requested, rc);
}

SEC("tp_btf/cq_process")
int BPF_PROG(iot_cq_process, struct ib_cq___r *cq)
{
	struct rdma_event *b = res_start(IOT_RDMA_CQ_PROCESS, &cq->res);
	__s64 since = BPF_CORE_READ(cq, timestamp);

	if (!b)
		return 0;
	/* the completion woke the CQ at timestamp; it is processed now */
	if (since > 0 && since < (__s64)b->ev.ts_ns) {
		b->ev.dur_ns = b->ev.ts_ns - since;
		b->ev.ts_ns = since;
	}
	submit(b);
	return 0;
}

SEC("tp_btf/cq_schedule")
int BPF_PROG(iot_cq_schedule, struct ib_cq___r *cq)
{
	return cq_event(IOT_RDMA_CQ_SCHEDULE, cq, 0, 0);
}

SEC("tp_btf/cq_reschedule")
int BPF_PROG(iot_cq_reschedule, struct ib_cq___r *cq)
{
	return cq_event(IOT_RDMA_CQ_RESCHEDULE, cq, 0, 0);
}

SEC("tp_btf/cq_drain_complete")
int BPF_PROG(iot_cq_drain, struct ib_cq___r *cq)
{
	return cq_event(IOT_RDMA_CQ_DRAIN, cq, 0, 0);
}

SEC("tp_btf/mr_alloc")
int BPF_PROG(iot_mr_alloc, struct ib_pd___r *pd, int mr_type, __u32 max_num_sg,
	     struct ib_mr___r *mr)
{
	struct rdma_event *b = res_start(IOT_RDMA_MR_ALLOC, &pd->res);
	long v = (long)mr;

	if (!b)
		return 0;
	b->ev.flags = mr_type;
	b->ev.req_bytes = max_num_sg;
	if (v < 0 && v >= -4095) {
		b->ev.ret = v;  /* ERR_PTR */
	} else {
		b->ev.ret = 0;
		b->ev.arg = BPF_CORE_READ(mr, res.id);
	}
	submit(b);
	return 0;
}

SEC("tp_btf/mr_dereg")
int BPF_PROG(iot_mr_dereg, struct ib_mr___r *mr)
{
	struct rdma_event *b = res_start(IOT_RDMA_MR_DEREG, &mr->res);

	if (!b)
		return 0;
	b->ev.req_bytes = BPF_CORE_READ(mr, length);
	submit(b);
	return 0;
}

SEC("tp_btf/cm_event_handler")
int BPF_PROG(iot_cm_event, struct rdma_id_private___r *id, void *ev)
{
	struct rdma_event *b = res_start(IOT_RDMA_CM_EVENT, &id->res);
	struct cm_event_head h = {};

	if (!b)
		return 0;
	bpf_probe_read_kernel(&h, sizeof(h), ev);
	b->ev.mode = h.event;
	b->ev.ret = h.status;
	submit(b);
	return 0;
}

SEC("tp_btf/cm_event_done")
int BPF_PROG(iot_cm_event_done, struct rdma_id_private___r *id, void *ev, int result)
{
	struct rdma_event *b = res_start(IOT_RDMA_CM_EVENT_DONE, &id->res);
	struct cm_event_head h = {};

	if (!b)
		return 0;
	bpf_probe_read_kernel(&h, sizeof(h), ev);
	b->ev.mode = h.event;
	b->ev.ret = result;
	submit(b);
	return 0;
}
