/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The first bytes of HTTP messages on the job's sockets, for the requests
 * table (userspace/iotrace/requests.py parses them; nothing here parses).
 *
 * A send or receive on an IPv4/IPv6 socket whose data starts like an HTTP
 * message (a request line, a status line, or an XML body such as an S3
 * error) carries its first IOT_HTTP_CAP bytes as the record's payload
 * (IOT_EF_NET_DATA), and so does a send of a TLS ClientHello (the
 * connection's server name and ALPN). Every other socket call costs one
 * 4-byte read of the buffer (a send, 6 bytes). A connect carries the peer's sockaddr (IOT_EF_NET_ADDR).
 * tls.bpf.c uses the same test on the plaintext of TLS calls.
 */
#ifndef IOTRACE_HTTP_CAPTURE_H
#define IOTRACE_HTTP_CAPTURE_H

#define IOT_HTTP_CAP 2048   /* bytes kept of a message's start (power of 2) */
#define AF_INET_ 2
#define AF_INET6_ 10

/* Little-endian first 4 bytes of the tokens an HTTP message starts with. */
#define TOK(a, b, c, d) ((__u32)(a) | (__u32)(b) << 8 | (__u32)(c) << 16 | (__u32)(d) << 24)

static __always_inline bool http_start(__u32 w)
{
	switch (w) {
	case TOK('G', 'E', 'T', ' '): case TOK('P', 'U', 'T', ' '):
	case TOK('P', 'O', 'S', 'T'): case TOK('H', 'E', 'A', 'D'):
	case TOK('D', 'E', 'L', 'E'): case TOK('P', 'A', 'T', 'C'):
	case TOK('O', 'P', 'T', 'I'): case TOK('H', 'T', 'T', 'P'):
	case TOK('<', '?', 'x', 'm'): case TOK('<', 'E', 'r', 'r'):
		return true;
	}
	return false;
}

/* Is the user buffer's start an HTTP message's? */
static __always_inline bool http_buffer(__u64 buf, __u64 len)
{
	__u32 w = 0;

	if (!buf || len < 4 || bpf_probe_read_user(&w, sizeof(w), (void *)buf))
		return false;
	return http_start(w);
}

static __always_inline bool is_send_op(__u16 op)
{
	return op == IOT_WRITE || op == IOT_WRITEV || op == IOT_SENDTO || op == IOT_SENDMSG;
}

/*
 * A TLS ClientHello on its way out: a handshake record (0x16, version 3.x)
 * whose message is a ClientHello (type 1). Its server name (SNI) and ALPN
 * protocols name the connection even when its plaintext is not seen.
 */
static __always_inline bool tls_client_hello(__u64 buf, __u64 len)
{
	__u8 h[6] = {};

	if (!buf || len < 48 || bpf_probe_read_user(h, sizeof(h), (void *)buf))
		return false;
	return h[0] == 0x16 && h[1] == 3 && h[2] <= 4 && h[5] == 1;
}

/* The first buffer of a socket call and its length: the call's own buffer,
 * or its first iovec. */
static __always_inline __u64 sock_call_buffer(__u16 op, __u64 *a, __u64 *len)
{
	struct user_msghdr m = {};
	struct iovec iov = {};
	__u64 uiov = 0;

	switch (op) {
	case IOT_READ: case IOT_WRITE: case IOT_RECVFROM: case IOT_SENDTO:
		*len = a[2];
		return a[1];
	case IOT_READV: case IOT_WRITEV:
		if (!a[2])
			return 0;
		uiov = a[1];
		break;
	case IOT_RECVMSG: case IOT_SENDMSG:
		if (bpf_probe_read_user(&m, sizeof(m), (void *)a[1]) || !m.msg_iovlen)
			return 0;
		uiov = (__u64)m.msg_iov;
		break;
	default:
		return 0;
	}
	if (bpf_probe_read_user(&iov, sizeof(iov), (void *)uiov))
		return 0;
	*len = iov.iov_len;
	return (__u64)iov.iov_base;
}

/* Copies n (<= IOT_HTTP_CAP) bytes of user memory into the payload. */
static __always_inline __u32 capture_bytes(char *dst, __u64 src, __u64 n)
{
	if (n > IOT_HTTP_CAP)
		n = IOT_HTTP_CAP;
	n &= 2 * IOT_HTTP_CAP - 1;
	if (!n || bpf_probe_read_user(dst, n, (void *)src))
		return 0;
	return n;
}

#endif
