/* Times N calls of ibv_get_device_list + ibv_free_device_list and prints
 * the mean ns per call: the workload of bench/verbs_uprobe.py. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100000, num;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++) {
		struct ibv_device **l = ibv_get_device_list(&num);
		if (l)  /* NULL where the kernel has no RDMA support at all */
			ibv_free_device_list(l);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
