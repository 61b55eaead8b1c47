// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Resolve a function's default symbol version in a shared library (elf_sym.h). */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>
#include <unistd.h>
#include "elf_sym.h"

#define VERSYM_HIDDEN 0x8000  /* "@" (not default) versions of a symbol */

static Elf_Scn *find_section(Elf *elf, Elf64_Word type)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == type)
			return scn;
	return NULL;
}

static long lookup(Elf *elf, const char *func, unsigned long *size)
{
	Elf_Scn *dynsym = find_section(elf, SHT_DYNSYM), *versym = find_section(elf, SHT_GNU_versym);
	Elf_Data *syms, *vers = NULL;
	GElf_Shdr sh, text;
	long found = -ENOENT;

	if (!dynsym || !gelf_getshdr(dynsym, &sh) || !(syms = elf_getdata(dynsym, NULL)))
		return -EINVAL;
	if (versym)
		vers = elf_getdata(versym, NULL);
	for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
		GElf_Sym sym;
		GElf_Versym v = 0;
		const char *name;

		if (!gelf_getsym(syms, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
		    sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
			continue;
		name = elf_strptr(elf, sh.sh_link, sym.st_name);
		if (!name || strcmp(name, func))
			continue;
		if (vers && gelf_getversym(vers, (int)i, &v) && (v & VERSYM_HIDDEN))
			continue;  /* an old "@" copy kept for binaries linked long ago */
		/* virtual address -> file offset, through the symbol's section */
		if (!gelf_getshdr(elf_getscn(elf, sym.st_shndx), &text))
			return -EINVAL;
		found = (long)(sym.st_value - text.sh_addr + text.sh_offset);
		if (size)
			*size = sym.st_size;
		break;
	}
	return found;
}

long elf_default_func(const char *path, const char *func, unsigned long *size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *elf;
	long off;

	if (fd < 0)
		return -errno;
	if (elf_version(EV_CURRENT) == EV_NONE) {
		close(fd);
		return -EINVAL;
	}
	elf = elf_begin(fd, ELF_C_READ, NULL);
	off = elf && elf_kind(elf) == ELF_K_ELF ? lookup(elf, func, size) : -EINVAL;
	if (elf)
		elf_end(elf);
	close(fd);
	return off;
}

long elf_default_func_offset(const char *path, const char *func)
{
	return elf_default_func(path, func, NULL);
}
