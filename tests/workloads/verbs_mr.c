/*
 * A known sequence of libibverbs control-path calls, for the verbs uprobe
 * tests. Prints what it did as one JSON line (the ground truth).
 *
 *   verbs_mr LISTS MRS MR_KIB [FAIL_KIB]
 *
 * Calls ibv_get_device_list LISTS times. With a device (Soft-RoCE in the
 * test VM): opens it, allocates a PD, a CQ of 16 entries and an RC QP,
 * moves the QP to INIT, registers MRS buffers of MR_KIB KiB, deregisters
 * them and tears everything down. With FAIL_KIB, it then drops
 * CAP_IPC_LOCK, lowers RLIMIT_MEMLOCK to 64 KiB and tries to register
 * FAIL_KIB KiB, which the kernel refuses (pinned-memory limit): MR
 * exhaustion, as a job that registers more than it may meets it.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static void drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) == 0) {
		d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
		syscall(SYS_capset, &h, d);
	}
}

int main(int argc, char **argv)
{
	int lists, mrs, mr_kib, fail_kib, num = 0, registered = 0, failed = 0, fail_errno = 0;
	struct ibv_device **devs = NULL;

	if (argc < 4) {
		fprintf(stderr, "usage: verbs_mr LISTS MRS MR_KIB [FAIL_KIB]\n");
		return 2;
	}
	lists = atoi(argv[1]);
	mrs = atoi(argv[2]);
	mr_kib = atoi(argv[3]);
	fail_kib = argc > 4 ? atoi(argv[4]) : 0;
	for (int i = 0; i < lists; i++) {
		if (devs)
			ibv_free_device_list(devs);
		devs = ibv_get_device_list(&num);
	}
	if (!devs || num == 0) {
		printf("{\"lists\":%d,\"devices\":0}\n", lists);
		return 0;
	}
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq) {
		fprintf(stderr, "verbs_mr: cannot set up %s: %s\n", devs[0]->name, strerror(errno));
		return 1;
	}
	struct ibv_qp_init_attr qia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = { .max_send_wr = 4, .max_recv_wr = 4,
						 .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				  .qp_access_flags = IBV_ACCESS_REMOTE_READ };
	int modify = qp ? ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) : -1;
	size_t len = (size_t)mr_kib << 10;
	struct ibv_mr **mr = calloc(mrs, sizeof(*mr));
	char **buf = calloc(mrs, sizeof(*buf));

	for (int i = 0; i < mrs; i++) {
		buf[i] = aligned_alloc(4096, len);
		memset(buf[i], 1, len);
		mr[i] = ibv_reg_mr(pd, buf[i], len, IBV_ACCESS_LOCAL_WRITE);
		registered += mr[i] != NULL;
	}
	for (int i = 0; i < mrs; i++)
		if (mr[i])
			ibv_dereg_mr(mr[i]);
	if (fail_kib) {
		struct rlimit rl = { 64 << 10, 64 << 10 };
		size_t flen = (size_t)fail_kib << 10;
		char *fbuf = aligned_alloc(4096, flen);

		memset(fbuf, 1, flen);
		drop_ipc_lock();
		setrlimit(RLIMIT_MEMLOCK, &rl);
		struct ibv_mr *m = ibv_reg_mr(pd, fbuf, flen, IBV_ACCESS_LOCAL_WRITE);
		if (m) {
			ibv_dereg_mr(m);
		} else {
			failed = 1;
			fail_errno = errno;
		}
	}
	const char *name = ibv_get_device_name(devs[0]);
	if (qp)
		ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	printf("{\"lists\":%d,\"devices\":%d,\"device\":\"%s\",\"qp\":%d,\"modify\":%d,"
	       "\"registered\":%d,\"mr_bytes\":%zu,\"failed\":%d,\"fail_bytes\":%zu,"
	       "\"fail_errno\":%d}\n",
	       lists, num, name, qp != NULL, modify, registered, len, failed,
	       (size_t)fail_kib << 10, fail_errno);
	return 0;
}
