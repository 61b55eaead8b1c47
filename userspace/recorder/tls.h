/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef TLS_H
#define TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <bpf/libbpf.h>

/*
 * TLS plaintext probes (bpf/tls.bpf.c) on every OpenSSL (libssl) and GnuTLS
 * library the job uses: the system's at start, those given with --tls-lib,
 * and those the traced processes map later (a conda env's, a wheel's),
 * found by reading their /proc/PID/maps; and on Go's crypto/tls in each Go
 * executable the traced processes run. A file is probed once (by file
 * identity), for every process; the BPF side keeps the traced ones.
 */

/* Loads the object (sharing the core's maps) and probes the system's
 * libraries and the given ones. given: NULL-terminated paths, or
 * {"none", NULL} for no TLS probes. */
/* http_only: record only the calls that carry an HTTP message start (live use).
 * go: also probe Go's crypto/tls in the Go executables the job runs (the
 * command's own before it starts, the others when their process is seen). */
void tls_start(struct bpf_object *core, const char *const *given, bool multi, bool http_only,
	       bool go);

/* The command about to be started (argv[0], looked up in PATH as execvp
 * does): its Go crypto/tls probed before its first call. */
void tls_probe_command(const char *cmd);

/* A traced process mapped a file executable (an mmap record, at map_ns):
 * its maps are read now, and a TLS library found probed; how long after
 * the mapping is said at the next tls_scan. */
void tls_note_exec_map(int pid, __u64 map_ns);

/* A traced process ran a new program (an exec record, at exec_ns): its
 * executable is looked at now (a Go program's first TLS calls come soon
 * after; those before its probes are in are not seen, and said so). A
 * process gone already is looked for by argv0, for the program's next runs. */
void tls_note_exec(int pid, __u64 exec_ns, const char *argv0);

/* Reads the maps of pids, the processes attached to, on the first call and
 * probes the TLS libraries not probed yet; calls said(path, probes attached, why none,
 * ns between the program's exec or mapping and its probes or -1, its pid,
 * when its probes went in (CLOCK_MONOTONIC ns, 0 when not late)) once for
 * each file found since the job started. */
void tls_scan(const int *pids, int npids,
	      void (*said)(const char *path, int attached, const char *why, long long after_exec_ns,
			   int pid, unsigned long long probed_ns));

size_t tls_probes_append(char *buf, size_t len, size_t off, bool attached);

void tls_stop(void);

#endif
