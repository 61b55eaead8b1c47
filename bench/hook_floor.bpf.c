// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The hook floor (bench/overhead.py, bench/exporter_cost.py): programs on iotrace's hooks that
 * do nothing (the loader attaches those it is given: overhead.py the system calls').
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

SEC("tp_btf/page_fault_user")
int BPF_PROG(floor_page_fault, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(floor_sched_waking, struct task_struct *p)
{
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(floor_cache_add, struct folio *folio)
{
	return 0;
}
