/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef RECORDER_OPS_H
#define RECORDER_OPS_H

#include <stdbool.h>
#include <linux/types.h>
#include "iotrace.h"

/* Which ops of bpf/iotrace.h move bytes which way, and which open a file:
 * the recorder's totals and a profile's named files. */

static inline bool is_copy_op(__u16 op)
{
	return op == IOT_SENDFILE || op == IOT_COPY_FILE_RANGE;
}

static inline bool is_read_op(__u16 op)
{
	return (op >= IOT_READ && op <= IOT_PREADV2) || is_copy_op(op);
}

static inline bool is_write_op(__u16 op)
{
	return (op >= IOT_WRITE && op <= IOT_PWRITEV2) || is_copy_op(op);
}

static inline bool is_open_op(__u16 op)
{
	return op == IOT_OPEN || op == IOT_OPENAT || op == IOT_OPENAT2 || op == IOT_CREAT;
}

#endif
