/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The bytes a user iovec array asks for: readv/writev-family calls
 * (iotrace.bpf.c) and vectored io_uring/libaio requests (aio.bpf.c). */
#ifndef IOTRACE_USER_IOV_H
#define IOTRACE_USER_IOV_H

/* Sum of iov_len over a user iovec array (bounded; flags when cut). */
static __always_inline __u64 iov_bytes(__u64 uiov, __u64 cnt, __u16 *eflags)
{
	__u64 total = 0;
	struct iovec iov;

	if (cnt > IOT_IOV_MAX) {
		*eflags |= IOT_EF_IOV_TRUNC;
		cnt = IOT_IOV_MAX;
	}
	for (int i = 0; i < IOT_IOV_MAX; i++) {
		if (i >= cnt)
			break;
		if (bpf_probe_read_user(&iov, sizeof(iov), (void *)(uiov + i * sizeof(iov))))
			break;
		total += iov.iov_len;
	}
	return total;
}

#endif
