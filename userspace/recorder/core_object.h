/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef RECORDER_CORE_OBJECT_H
#define RECORDER_CORE_OBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <bpf/btf.h>
#include "iotrace.skel.h"

/*
 * How the core programs read kernel structures (struct file, inode, super
 * block): with direct loads, through bpf_rdonly_cast (kernels 6.2 and later;
 * the object built with IOT_DIRECT_READS), or with bpf_probe_read_kernel
 * helper calls (any kernel). IOTRACE_KERNEL_READS=direct|probe|auto (default
 * auto: direct where the kernel has the kfunc).
 */
/* in setting_choice's order (settings.h) */
enum reads_want { READS_AUTO, READS_DIRECT, READS_PROBE };

/* From IOTRACE_KERNEL_READS; -1 (and a message in why) for a bad value. */
int kernel_reads_wanted(char *why, size_t len);

/* Whether this kernel has bpf_rdonly_cast; else why not, in why. */
bool kernel_has_direct_reads(const struct btf *vmlinux, char *why, size_t len);

/* The core skeleton opened (not loaded) from the direct-reads object or the
 * probe-reads one: the two share maps, programs and variables (the build
 * checks it), so one skeleton type serves both. NULL and errno on failure. */
struct iotrace_bpf *core_object_open(bool direct);

#endif
