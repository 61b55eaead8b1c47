// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The hook floor (bench/overhead.py): programs on iotrace's system-call hooks that do nothing.
 * What a traced or untraced call pays with these attached is the kernel's
 * cost of the hooks themselves, which no program can go below. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/sys_enter")
int BPF_PROG(floor_sys_enter, struct pt_regs *regs, long id)
{
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(floor_sys_exit, struct pt_regs *regs, long ret)
{
	return 0;
}
