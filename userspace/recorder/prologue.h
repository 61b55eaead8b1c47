/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef PROLOGUE_H
#define PROLOGUE_H

/*
 * Where to probe a C function whose first instruction the kernel's x86
 * uprobes refuse: some builds pad instructions with redundant segment
 * prefixes for branch alignment (s2n_recv in the AWS CRT's _awscrt.so starts
 * with "cs cs cs cs push %r12"), and a uprobe there fails (EINVAL, or it
 * "attaches" and never fires). The function's leading pushes leave the
 * argument registers as they were, so the first instruction after them
 * without such a prefix serves as its entry; a uretprobe needs the true
 * entry, so the function's RET instructions are probed instead.
 */

/* For the function at file offset off, size bytes long, in path: 0 when its
 * first instruction can be probed as it is; 1 with *entry (the file offset
 * past its prefixed pushes) and rets[0..*nrets) (its RETs' file offsets);
 * -ENOTSUP when neither works (a prefixed instruction that is not a push, a
 * prefixed RET, no RET), -errno when the file cannot be read. */
int prologue_probe_points(const char *path, long off, unsigned long size, long *entry,
			  long *rets, int max_rets, int *nrets);

#endif
