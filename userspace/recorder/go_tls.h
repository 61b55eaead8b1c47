/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef GO_TLS_H
#define GO_TLS_H

/*
 * Where to probe Go's crypto/tls in a Go executable: the file offsets of
 * crypto/tls.(*Conn).Read and Write and of each of their RET instructions.
 * Found from the binary's own function table (.gopclntab, kept by strip) and
 * a disassembly of the two functions (capstone): a uretprobe rewrites the
 * return address on the goroutine's stack, which Go moves and walks, so
 * the returns are probed where they happen instead.
 */

#define GO_TLS_MAX_RETS 24

struct go_tls_func {
	long entry;                       /* file offset past its stack check: a call
					   * whose check fails runs the function
					   * again from its first instruction */
	long rets[GO_TLS_MAX_RETS];       /* file offsets of its RET instructions */
	int nrets;
};

struct go_tls_funcs {
	struct go_tls_func read, write;
	char version[32];                 /* "go1.19.8" (from .go.buildinfo), or "" */
};

/*
 * Fills out for the Go executable at path. Returns 0, or:
 *   -ENOENT  not a Go binary, or no crypto/tls in it (nothing to probe);
 *   -ENOTSUP a Go binary we cannot probe: why says why (another CPU, a Go
 *            before 1.17 with its stack calling convention, no RET found);
 *   -EINVAL  not an ELF file, or a function table we cannot read.
 */
int go_tls_find(const char *path, struct go_tls_funcs *out, char *why, unsigned long why_len);

#endif
