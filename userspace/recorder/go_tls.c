// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Finds crypto/tls.(*Conn).Read and Write in a Go executable (go_tls.h).
 * By hand because no C library reads Go's function table: its layout is
 * that of Go's own debug/gosym (pclntab.go) for the three formats of Go
 * 1.16 to today; the version is read as debug/buildinfo does.
 */
#include <capstone/capstone.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "go_tls.h"

#define MAGIC_GO12  0xfffffffbu   /* Go 1.2-1.15: arguments on the stack */
#define MAGIC_GO116 0xfffffffau   /* Go 1.16-1.17 */
#define MAGIC_GO118 0xfffffff0u   /* Go 1.18-1.19 */
#define MAGIC_GO120 0xfffffff1u   /* Go 1.20 on */
#define MAX_FUNC_BYTES (64 << 10)

static const char READ_FN[] = "crypto/tls.(*Conn).Read";
static const char WRITE_FN[] = "crypto/tls.(*Conn).Write";

/* A section by name (or, with suffix, the first whose name ends so). */
static Elf_Scn *section(Elf *elf, const char *name, bool suffix, GElf_Shdr *sh)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *n;
		size_t ln, lw = strlen(name);

		if (!gelf_getshdr(scn, sh) || !(n = elf_strptr(elf, shstrndx, sh->sh_name)))
			continue;
		ln = strlen(n);
		if (suffix ? (ln >= lw && strcmp(n + ln - lw, name) == 0) : strcmp(n, name) == 0)
			return scn;
	}
	return NULL;
}

/* File offset of a virtual address, through the section that holds it. */
static long vaddr_offset(Elf *elf, uint64_t va)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_PROGBITS && sh.sh_addr &&
		    va >= sh.sh_addr && va < sh.sh_addr + sh.sh_size)
			return (long)(va - sh.sh_addr + sh.sh_offset);
	return -1;
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static bool read_at(int fd, long off, void *buf, size_t n)
{
	return off >= 0 && pread(fd, buf, n, off) == (ssize_t)n;
}

/* The Go version ("go1.19.8") from .go.buildinfo, as debug/buildinfo reads it. */
static void go_version(Elf *elf, int fd, char *out, size_t len)
{
	unsigned char h[32];
	GElf_Shdr sh;

	out[0] = 0;
	if (!section(elf, ".go.buildinfo", false, &sh) || sh.sh_size < 32 ||
	    !read_at(fd, (long)sh.sh_offset, h, sizeof(h)) || memcmp(h, "\xff Go buildinf:", 14))
		return;
	if (h[15] & 2) {          /* Go 1.18 on: the strings follow, length-prefixed */
		unsigned char s[40];
		uint64_t n = 0;
		int shift = 0, i = 0;

		if (!read_at(fd, (long)sh.sh_offset + 32, s, sizeof(s)))
			return;
		for (; i < 10 && (s[i] & 0x80); i++, shift += 7)
			n |= (uint64_t)(s[i] & 0x7f) << shift;
		n |= (uint64_t)s[i] << shift;
		i++;
		if (n < len && i + n <= sizeof(s)) {
			memcpy(out, s + i, n);
			out[n] = 0;
		}
	} else if (h[14] == 8) {  /* before: a pointer to a Go string header */
		unsigned char hdr[16];
		uint64_t n;

		if (!read_at(fd, vaddr_offset(elf, le(h + 16, 8)), hdr, 16))
			return;
		n = le(hdr + 8, 8);
		if (n < len && read_at(fd, vaddr_offset(elf, le(hdr, 8)), out, n))
			out[n] = 0;
		else
			out[0] = 0;
	}
}

/* runtime.text's address from the symbol tables (absent when stripped). */
static uint64_t runtime_text(Elf *elf)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) ||
		    !sh.sh_entsize || !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *n;

			if (gelf_getsym(d, (int)i, &sym) && (n = elf_strptr(elf, sh.sh_link, sym.st_name)) &&
			    strcmp(n, "runtime.text") == 0)
				return sym.st_value;
		}
	}
	return 0;
}

/*
 * A Go function with a frame starts by checking its stack against the
 * goroutine's limit, through g in R14: CMP RSP, [R14+16], or with a large
 * frame LEA R12, [RSP-N] then CMP R12, [R14+16]. Anything else means the
 * entry found is not the function's, and a probe there could land inside
 * an instruction: not probed.
 */
static bool go_prologue(const cs_insn *insn)
{
	return (insn->id == X86_INS_CMP || insn->id == X86_INS_LEA) &&
	       (strstr(insn->op_str, "r14 + 0x10]") || strstr(insn->op_str, "[rsp - "));
}

/*
 * The stack check's jump to the function's morestack tail (JBE, or JB),
 * among its first instructions. That tail grows the stack, or yields the
 * CPU where the scheduler asked the goroutine to (its stack limit poisoned
 * to force the check to fail), then jumps back to the function's first
 * instruction: a probe there fires twice for one call (a Write recorded
 * twice, 48 us apart on two threads), one after the jump once.
 */
static bool stack_check_jump(const cs_insn *insn)
{
	return insn->id == X86_INS_JBE || insn->id == X86_INS_JB;
}

/* Where a call is probed (past the stack check) and the RET instructions
 * of a function: their file offsets. */
static int find_rets(int fd, long off, uint64_t va, uint64_t size, struct go_tls_func *f)
{
	unsigned char *code;
	const uint8_t *p;
	size_t n = size;
	uint64_t addr = va;
	csh cs;
	cs_insn *insn;

	if (size == 0 || size > MAX_FUNC_BYTES || !(code = malloc(size)))
		return -EINVAL;
	if (!read_at(fd, off, code, size) || cs_open(CS_ARCH_X86, CS_MODE_64, &cs) != CS_ERR_OK) {
		free(code);
		return -EINVAL;
	}
	insn = cs_malloc(cs);
	p = code;
	f->entry = -1;
	f->nrets = 0;
	/* Go pads between functions with INT3: stop at the first undecodable byte */
	for (int k = 0, past_check = 0; insn && cs_disasm_iter(cs, &p, &n, &addr, insn); k++) {
		if (k == 0 && !go_prologue(insn))
			break;
		if (past_check && f->entry < 0)
			f->entry = off + (long)(insn->address - va);
		if (k < 3 && stack_check_jump(insn))
			past_check = 1;
		if (insn->id == X86_INS_RET && f->nrets < GO_TLS_MAX_RETS)
			f->rets[f->nrets++] = off + (long)(insn->address - va);
	}
	cs_free(insn, 1);
	cs_close(&cs);
	free(code);
	return f->nrets && f->entry >= 0 ? 0 : -ENOTSUP;
}

struct pcln {
	const unsigned char *d;
	size_t size;
	uint32_t magic;
	int ptr;
	uint64_t nfunc, text;
	const unsigned char *names, *funcdata, *functab;
};

static bool pcln_open(struct pcln *t, const unsigned char *d, size_t size, uint64_t text)
{
	uint64_t w[8];
	int words;

	if (size < 64 || d[4] || d[5] || (d[6] != 1 && d[6] != 2 && d[6] != 4) || d[7] != 8)
		return false;
	t->d = d;
	t->size = size;
	t->magic = (uint32_t)le(d, 4);
	t->ptr = 8;
	words = t->magic == MAGIC_GO116 ? 7 : 8;
	for (int i = 0; i < words; i++)
		w[i] = le(d + 8 + 8 * i, 8);
	t->nfunc = w[0];
	if (t->magic == MAGIC_GO118 || t->magic == MAGIC_GO120) {
		/* runtime.text: in the header up to Go 1.2x (after a cgo binary's C
		 * code, not at .text's start); 0 there later, where text is it */
		t->text = w[2] ? w[2] : text;
		if (w[3] >= size || w[7] >= size)
			return false;
		t->names = d + w[3];
		t->funcdata = t->functab = d + w[7];
	} else if (t->magic == MAGIC_GO116) {
		t->text = 0;
		if (w[2] >= size || w[6] >= size)
			return false;
		t->names = d + w[2];
		t->funcdata = t->functab = d + w[6];
	} else {
		return false;
	}
	return true;
}

/* Entry address of function i and its end (the next one's entry). */
static bool pcln_func(const struct pcln *t, uint64_t i, uint64_t *entry, uint64_t *end,
		      const char **name)
{
	int sz = t->magic == MAGIC_GO116 ? 8 : 4;
	const unsigned char *e = t->functab + 2 * i * sz;
	uint64_t foff;
	const unsigned char *fd;
	uint32_t nameoff;

	if (e + 3 * sz > t->d + t->size)
		return false;
	*entry = le(e, sz) + (sz == 4 ? t->text : 0);
	*end = le(e + 2 * sz, sz) + (sz == 4 ? t->text : 0);
	foff = le(e + sz, sz);
	fd = t->funcdata + foff;
	if (fd + sz + 4 > t->d + t->size)
		return false;
	nameoff = (uint32_t)le(fd + sz, 4);
	if (t->names + nameoff >= t->d + t->size)
		return false;
	*name = (const char *)t->names + nameoff;
	return true;
}

int go_tls_find(const char *path, struct go_tls_funcs *out, char *why, unsigned long why_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = -ENOENT, found = 0;
	GElf_Shdr pc_sh, text_sh, bi_sh;
	GElf_Ehdr eh;
	Elf_Scn *pc_scn;
	Elf_Data *data;
	Elf *elf;
	struct pcln t;

	memset(out, 0, sizeof(*out));
	why[0] = 0;
	if (fd < 0)
		return -errno;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || !gelf_getehdr(elf, &eh)) {
		err = -EINVAL;
		goto out;
	}
	pc_scn = section(elf, "gopclntab", true, &pc_sh);
	if (!pc_scn && !section(elf, ".go.buildinfo", false, &bi_sh))
		goto out;                       /* not Go */
	go_version(elf, fd, out->version, sizeof(out->version));
	if (eh.e_machine != EM_X86_64) {
		snprintf(why, why_len, "a Go binary for another CPU (ELF machine %d)", eh.e_machine);
		err = -ENOTSUP;
		goto out;
	}
	if (!pc_scn || !(data = elf_rawdata(pc_scn, NULL)) ||
	    !pcln_open(&t, data->d_buf, data->d_size, runtime_text(elf) ?: (
		       section(elf, ".text", false, &text_sh) ? text_sh.sh_addr : 0))) {
		uint32_t m = pc_scn && (data = elf_rawdata(pc_scn, NULL)) && data->d_size >= 4 ?
			     (uint32_t)le(data->d_buf, 4) : 0;
		if (m == MAGIC_GO12) {
			snprintf(why, why_len, "Go before 1.16 (arguments on the stack)");
			err = -ENOTSUP;
		} else {
			err = -EINVAL;
		}
		goto out;
	}
	if (t.magic == MAGIC_GO116 && strncmp(out->version, "go1.17", 6) != 0) {
		snprintf(why, why_len, "%s passes arguments on the stack (Go 1.17 on is probed)",
			 out->version[0] ? out->version : "a Go before 1.17");
		err = -ENOTSUP;
		goto out;
	}
	for (uint64_t i = 0; i < t.nfunc && found < 2; i++) {
		uint64_t entry, end;
		const char *name;
		struct go_tls_func *f;
		long off;

		if (!pcln_func(&t, i, &entry, &end, &name))
			break;
		if (name[0] != 'c' || strncmp(name, "crypto/tls.(*Conn).", 19))
			continue;
		f = strcmp(name, READ_FN) == 0 ? &out->read :
		    strcmp(name, WRITE_FN) == 0 ? &out->write : NULL;
		if (!f)
			continue;
		if ((off = vaddr_offset(elf, entry)) < 0 || end <= entry) {
			err = -EINVAL;
			goto out;
		}
		if (find_rets(fd, off, entry, end - entry, f)) {
			snprintf(why, why_len, "%s does not start as a Go function does (a stack "
				 "check), or has no RET (not probed: the probe could break the program)", name);
			err = -ENOTSUP;
			goto out;
		}
		found++;
	}
	err = found == 2 ? 0 : -ENOENT;       /* a Go program without crypto/tls */
out:
	if (elf)
		elf_end(elf);
	close(fd);
	return err;
}
