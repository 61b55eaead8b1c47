// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iotrace TLS plaintext: uprobes on the record calls of the TLS libraries
 * the job maps (OpenSSL's SSL_read/SSL_write and their _ex forms, GnuTLS's
 * gnutls_record_recv/send), attached by the recorder to each library file
 * for every process and filtered here to the traced ones. One record per
 * call, at its return, with the first bytes of the plaintext when they start
 * an HTTP message (the requests table is built from them, as from the
 * socket calls of plain HTTP). Which call fired comes from the attach
 * cookie: the op, whether the byte count is returned through a pointer (the
 * _ex forms), and the library.
 *
 * The socket is not read from the library's structures (their layout
 * changes between versions): userspace ties a session to its socket by the
 * read/write system calls made inside its TLS calls on the same thread.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "iotrace.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "shared_maps.h"

#include "http_capture.h"

/* The attach cookie: op | TLS_COOKIE_EX | library << TLS_COOKIE_LIB_SHIFT */
/* Live use (a profile, recorder --live-http): only the calls that carry an
 * HTTP message's start are recorded (the profile sums no TLS bytes). */
const volatile bool http_only = false;

#define TLS_COOKIE_EX (1ULL << 16)
#define TLS_COOKIE_LIB_SHIFT 24

struct tls_call {
	__u64 ts;
	__u64 session;
	__u64 buf;
	__u64 len;
	__u64 nbytes_ptr;   /* _ex: where the library writes the bytes moved */
	__u64 cookie;
	__u32 depth;
};

/* Calls in flight, per thread. LRU: a call that never returns (a longjmp,
 * the thread killed) is evicted, not leaked. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct tls_call);
} tls_inflight SEC(".maps");

struct tls_event {
	struct iot_event ev;
	char s[2 * IOT_HTTP_CAP];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tls_event);
} tls_scratch SEC(".maps");

SEC("uprobe")
int iot_tls_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct tls_call *c, call = {};

	if (!traced_tgid(tgid))
		return 0;
	c = bpf_map_lookup_elem(&tls_inflight, &pid_tgid);
	if (c) {             /* a TLS call made inside another (a wrapper) */
		c->depth++;
		return 0;
	}
	call.ts = bpf_ktime_get_ns();
	call.cookie = bpf_get_attach_cookie(ctx);
	call.session = PT_REGS_PARM1(ctx);
	call.buf = PT_REGS_PARM2(ctx);
	call.len = PT_REGS_PARM3(ctx);
	if (call.cookie & TLS_COOKIE_EX)
		call.nbytes_ptr = PT_REGS_PARM4(ctx);
	bpf_map_update_elem(&tls_inflight, &pid_tgid, &call, BPF_ANY);
	return 0;
}

/* The call's record, at its return: ret is the bytes moved (or < 0). */
static __always_inline int emit_tls(struct tls_call *c, __u64 pid_tgid, __s64 ret)
{
	struct tls_event *b;
	__u32 zero = 0, n = 0;

	b = bpf_map_lookup_elem(&tls_scratch, &zero);
	if (!b)
		return 0;
	__builtin_memset(&b->ev, 0, sizeof(b->ev));
	b->ev.ts_ns = c->ts;
	b->ev.dur_ns = bpf_ktime_get_ns() - c->ts;
	b->ev.pid = pid_tgid >> 32;
	b->ev.tid = (__u32)pid_tgid;
	b->ev.op = (__u16)c->cookie;
	b->ev.fd = -1;
	b->ev.dirfd = -1;
	b->ev.offset = -1;
	b->ev.ret = ret;
	b->ev.arg = c->session;
	b->ev.req_bytes = c->len;
	b->ev.flags = c->cookie >> TLS_COOKIE_LIB_SHIFT;
	if (ret > 0 && http_buffer(c->buf, ret)) {
		n = capture_bytes(b->s, c->buf, ret);
		if (n)
			b->ev.eflags = IOT_EF_NET_DATA;
	}
	if (http_only && !n)
		return 0;
	b->ev.str_len = n;
	if (ring_output(b, sizeof(b->ev) + (n & (2 * IOT_HTTP_CAP - 1)), 0))
		count(IOT_CNT_DROPS);
	return 0;
}

SEC("uretprobe")
int iot_tls_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tls_call *c = bpf_map_lookup_elem(&tls_inflight, &pid_tgid), call;
	__s64 ret = PT_REGS_RC(ctx);
	__u64 moved;

	if (!c)
		return 0;
	if (c->depth) {
		c->depth--;
		return 0;
	}
	if (c->cookie & TLS_COOKIE_EX) {
		/* SSL_read_ex/SSL_write_ex: 1 on success, bytes through the pointer */
		moved = 0;
		if ((int)ret == 1 && c->nbytes_ptr)
			bpf_probe_read_user(&moved, sizeof(moved), (void *)c->nbytes_ptr);
		ret = (int)ret == 1 ? (__s64)moved : (__s64)(int)ret;
	} else if ((c->cookie >> TLS_COOKIE_LIB_SHIFT) == IOT_TLS_LIB_OPENSSL) {
		ret = (int)ret;  /* SSL_read/SSL_write return an int */
	}
	call = *c;
	bpf_map_delete_elem(&tls_inflight, &pid_tgid);
	return emit_tls(&call, pid_tgid, ret);
}

/*
 * Go's crypto/tls.(*Conn).Read and Write (Go 1.17 on, amd64 register ABI:
 * receiver in RAX, the slice's pointer and length in RBX and RCX; n in RAX
 * and the error's type word in RBX at the return). A goroutine that blocks
 * in Read may come back on another thread, so a call is keyed by the
 * goroutine (its g, in R14), not the thread. The recorder probes each RET
 * instruction of Read with iot_gotls_return (go_tls.h).
 */
struct go_key {
	__u64 g;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_key);
	__type(value, struct tls_call);
} gotls_inflight SEC(".maps");

SEC("uprobe")
int iot_gotls_enter(struct pt_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct go_key k = { .tgid = pid_tgid >> 32 };
	struct tls_call call = {};

	if (!traced_tgid(k.tgid))
		return 0;
	k.g = ctx->r14;
	call.ts = bpf_ktime_get_ns();
	call.cookie = bpf_get_attach_cookie(ctx);
	call.session = ctx->ax;
	call.buf = ctx->bx;
	call.len = ctx->cx;
	/* Write is recorded here, with the bytes asked for: it writes them all
	 * or fails (a failure breaks the connection), and a probe at its
	 * returns would double its cost. Its record has no duration. */
	if ((__u16)call.cookie == IOT_TLS_WRITE)
		return emit_tls(&call, pid_tgid, (__s64)call.len);
	/* probed past the stack check (go_tls.c): a call that grows its stack,
	 * or yields there, runs the function again from its start, not this */
	bpf_map_update_elem(&gotls_inflight, &k, &call, BPF_ANY);
#endif
	return 0;
}

SEC("uprobe")
int iot_gotls_return(struct pt_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct go_key k = { .tgid = pid_tgid >> 32, .g = ctx->r14 };
	struct tls_call *c = bpf_map_lookup_elem(&gotls_inflight, &k), call;
	__s64 n = (__s64)ctx->ax;

	if (!c || (__u16)c->cookie != (__u16)bpf_get_attach_cookie(ctx))
		return 0;
	call = *c;
	bpf_map_delete_elem(&gotls_inflight, &k);
	/* no bytes and an error (io.EOF at a close, a timeout): an I/O error */
	return emit_tls(&call, pid_tgid, n > 0 ? n : (ctx->bx ? -5 /* EIO */ : 0));
#else
	return 0;
#endif
}
