// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Probe points past a prefixed function entry (prologue.h), found with capstone. */
#include <capstone/capstone.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>
#include "prologue.h"

#define MAX_FUNC_BYTES (64 << 10)

static bool segment_prefixed(const cs_insn *insn)
{
	return insn->detail && insn->detail->x86.prefix[1] != 0;   /* CS, SS, DS, ES, FS, GS */
}

int prologue_probe_points(const char *path, long off, unsigned long size, long *entry,
			  long *rets, int max_rets, int *nrets)
{
	int fd, err = -ENOTSUP;
	unsigned char *code;
	const uint8_t *p;
	size_t n = size;
	uint64_t addr = 0;
	bool in_prologue = true;
	cs_insn *insn;
	csh cs;

	*nrets = 0;
	if (size == 0 || size > MAX_FUNC_BYTES || !(code = malloc(size)))
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || pread(fd, code, size, off) != (ssize_t)size) {
		err = fd < 0 ? -errno : -EIO;
		if (fd >= 0)
			close(fd);
		free(code);
		return err;
	}
	close(fd);
	if (cs_open(CS_ARCH_X86, CS_MODE_64, &cs) != CS_ERR_OK) {
		free(code);
		return -EINVAL;
	}
	cs_option(cs, CS_OPT_DETAIL, CS_OPT_ON);
	insn = cs_malloc(cs);
	p = code;
	while (insn && cs_disasm_iter(cs, &p, &n, &addr, insn)) {
		if (insn->address == 0 && !segment_prefixed(insn)) {
			err = 0;                 /* the first instruction is fine as it is */
			break;
		}
		if (in_prologue) {
			if (!segment_prefixed(insn)) {
				in_prologue = false;
				*entry = off + (long)insn->address;
			} else if (insn->id != X86_INS_PUSH) {
				break;           /* not a push: the arguments may change */
			}
		}
		if (insn->id == X86_INS_RET) {
			if (segment_prefixed(insn) || *nrets >= max_rets) {
				*nrets = 0;
				break;
			}
			rets[(*nrets)++] = off + (long)insn->address;
		}
	}
	if (err && *nrets && !in_prologue)
		err = 1;
	cs_free(insn, 1);
	cs_close(&cs);
	free(code);
	return err;
}
