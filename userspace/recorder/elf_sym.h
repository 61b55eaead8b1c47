/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef ELF_SYM_H
#define ELF_SYM_H

#include <sys/types.h>

/*
 * File offset of the default version of a function exported by a shared
 * library: for a name exported twice (libibverbs' ibv_reg_mr@IBVERBS_1.0 and
 * ibv_reg_mr@@IBVERBS_1.1), the "@@" one that programs link against today.
 * libbpf 1.1 refuses such names as ambiguous, hence this.
 * Returns the offset (> 0), or -errno: -ENOENT when the library does not
 * export the function, -EINVAL when the file is not an ELF object.
 */
long elf_default_func_offset(const char *path, const char *func);

/* The same, and the function's size in bytes (its symbol's st_size). */
long elf_default_func(const char *path, const char *func, unsigned long *size);

#endif
