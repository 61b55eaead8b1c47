// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Which build of the core BPF object is loaded (core_object.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core_object.h"
#include "settings.h"
#include "iotrace_direct.skel.h"

int kernel_reads_wanted(char *why, size_t len)
{
	return setting_choice("IOTRACE_KERNEL_READS", "direct", "probe", why, len);
}

bool kernel_has_direct_reads(const struct btf *vmlinux, char *why, size_t len)
{
	if (btf__find_by_name_kind(vmlinux, "bpf_rdonly_cast", BTF_KIND_FUNC) > 0)
		return true;
	snprintf(why, len, "this kernel has no bpf_rdonly_cast (it came in Linux 6.2)");
	return false;
}

struct iotrace_bpf *core_object_open(bool direct)
{
	struct iotrace_bpf *obj = calloc(1, sizeof(*obj));
	int err;

	if (!obj) {
		errno = ENOMEM;
		return NULL;
	}
	/* iotrace_bpf__open() with the other object's bytes under the same skeleton */
	err = iotrace_bpf__create_skeleton(obj);
	if (!err && direct)
		obj->skeleton->data = (void *)iotrace_direct_bpf__elf_bytes(&obj->skeleton->data_sz);
	if (!err)
		err = bpf_object__open_skeleton(obj->skeleton, NULL);
	if (err) {
		iotrace_bpf__destroy(obj);
		errno = -err;
		return NULL;
	}
	return obj;
}
