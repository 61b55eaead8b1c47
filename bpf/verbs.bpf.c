// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace userspace RDMA verbs: uprobes on libibverbs' control-path entry
 * points (device open, PD, CQ, QP, memory registration), attached by the
 * recorder to the library file for every process and filtered here to the
 * traced ones. Which verb fired comes from the attach cookie (its
 * IOT_IBV_* op). One record per call, written at its return.
 *
 * ibv_reg_mr@@IBVERBS_1.1 tail-calls ibv_reg_mr_iova2, so both probes fire
 * for one call: the outer call is recorded and the nested ones are counted
 * in its depth only. Data-path verbs (ibv_post_send, ibv_poll_cq) are inline
 * functions in verbs.h that call the provider directly: no symbol to probe.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "iotrace.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "shared_maps.h"

#define IBV_DEVICE_NAME_OFF 24   /* struct ibv_device: 2 ops pointers, 2 enums, name[64] */
#define IBV_DEVICE_NAME_MAX 64

struct verbs_call {
	__u64 ts;
	__u64 a1, a2, a3;
	__u32 op;      /* enum iot_op, IOT_IBV_* (the attach cookie) */
	__u32 depth;
};

/* Calls in flight, per thread. LRU: a call that never returns (longjmp, the
 * thread killed) is evicted, not leaked. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct verbs_call);
} verbs_inflight SEC(".maps");

struct verbs_event {
	struct iot_event ev;
	char s[IBV_DEVICE_NAME_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct verbs_event);
} verbs_scratch SEC(".maps");

SEC("uprobe")
int iot_verbs_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct verbs_call *c, call = {};

	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	c = bpf_map_lookup_elem(&verbs_inflight, &pid_tgid);
	if (c) {
		c->depth++;
		return 0;
	}
	call.ts = bpf_ktime_get_ns();
	call.op = (__u32)bpf_get_attach_cookie(ctx);
	call.a1 = PT_REGS_PARM1(ctx);
	call.a2 = PT_REGS_PARM2(ctx);
	call.a3 = PT_REGS_PARM3(ctx);
	bpf_map_update_elem(&verbs_inflight, &pid_tgid, &call, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int iot_verbs_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct verbs_call *c = bpf_map_lookup_elem(&verbs_inflight, &pid_tgid);
	struct verbs_event *b;
	__u32 zero = 0, len = 0;
	int n;

	if (!c)
		return 0;
	if (c->depth) {
		c->depth--;
		return 0;
	}
	b = bpf_map_lookup_elem(&verbs_scratch, &zero);
	if (!b) {
		bpf_map_delete_elem(&verbs_inflight, &pid_tgid);
		return 0;
	}
	__builtin_memset(&b->ev, 0, sizeof(b->ev));
	b->ev.ts_ns = c->ts;
	b->ev.dur_ns = bpf_ktime_get_ns() - c->ts;
	b->ev.pid = pid_tgid >> 32;
	b->ev.tid = (__u32)pid_tgid;
	b->ev.op = c->op;
	b->ev.fd = -1;
	b->ev.dirfd = -1;
	b->ev.offset = -1;
	b->ev.ret = PT_REGS_RC(ctx);
	b->ev.arg = c->a1;  /* the object acted on (context, PD, QP, MR...) */
	switch (c->op) {
	case IOT_IBV_REG_MR:
	case IOT_IBV_REG_MR_IOVA:
	case IOT_IBV_REG_MR_IOVA2:
		b->ev.arg = c->a2;        /* address */
		b->ev.req_bytes = c->a3;  /* length */
		break;
	case IOT_IBV_REG_DMABUF_MR:
		b->ev.arg = c->a2;        /* offset in the dma-buf */
		b->ev.req_bytes = c->a3;
		break;
	case IOT_IBV_CREATE_CQ:
		b->ev.req_bytes = c->a2;  /* cqe */
		break;
	case IOT_IBV_MODIFY_QP: {
		__u32 state = 0;          /* struct ibv_qp_attr starts with qp_state */
		bpf_probe_read_user(&state, sizeof(state), (void *)c->a2);
		b->ev.mode = state;
		b->ev.arg = c->a3;        /* attr_mask */
		break;
	}
	case IOT_IBV_GET_DEVICE_LIST: {
		int num = 0;
		if (c->a1)
			bpf_probe_read_user(&num, sizeof(num), (void *)c->a1);
		b->ev.req_bytes = num;    /* devices found */
		break;
	}
	case IOT_IBV_OPEN_DEVICE:
		n = bpf_probe_read_user_str(b->s, sizeof(b->s),
					    (void *)(c->a1 + IBV_DEVICE_NAME_OFF));
		len = n > 0 ? (__u32)n & (IBV_DEVICE_NAME_MAX - 1) : 0;
		if (n >= IBV_DEVICE_NAME_MAX)
			len = IBV_DEVICE_NAME_MAX - 1;
		break;
	}
	bpf_map_delete_elem(&verbs_inflight, &pid_tgid);
	b->ev.str_len = len;
	if (ring_output(b, sizeof(b->ev) + len, 0))
		count(IOT_CNT_DROPS);
	return 0;
}
