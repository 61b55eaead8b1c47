/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Direct reads of kernel structures (the core object built with
 * IOT_DIRECT_READS, loaded where the kernel has bpf_rdonly_cast: Linux 6.2
 * and later). The kfunc turns an address into a BTF pointer of the given
 * type, whose fields are then plain loads that the JIT guards against faults
 * (a bad address reads as 0), not bpf_probe_read_kernel helper calls. The
 * verifier turns the call itself into a register move.
 */
#ifndef IOTRACE_DIRECT_READS_H
#define IOTRACE_DIRECT_READS_H

#ifdef IOT_DIRECT_READS
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

#define AS_KERNEL(ptr, type) \
	((type *)bpf_rdonly_cast((ptr), bpf_core_type_id_kernel(type)))

/*
 * The struct file pointer in an fd table's slot: the verifier cannot index
 * an array of pointers, so the slot is read as the first member of a struct
 * that starts with a struct file pointer (a kiocb's ki_filp).
 */
static __always_inline struct file *file_in_slot(struct file **slot)
{
	return AS_KERNEL(slot, struct kiocb)->ki_filp;
}
#endif

#endif
