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
 * found by reading their /proc/PID/maps. A library is probed once (by file
 * identity), for every process; the BPF side keeps the traced ones.
 */

/* Loads the object (sharing the core's maps) and probes the system's
 * libraries and the given ones. given: NULL-terminated paths, or
 * {"none", NULL} for no TLS probes. */
/* http_only: record only the calls that carry an HTTP message start (live use). */
void tls_start(struct bpf_object *core, const char *const *given, bool multi, bool http_only);

/* A traced process mapped a file executable (an mmap record): its maps are
 * read at the next tls_scan. */
void tls_note_exec_map(int pid);

/* Reads the maps of the processes noted since the last scan (and of pids,
 * the processes attached to, on the first call) and probes the TLS
 * libraries not probed yet; calls said(path, nprobes) for each. */
void tls_scan(const int *pids, int npids, void (*said)(const char *path, int nprobes));

/* The TLS probes' items ("name", or {probe, why} of the skipped) appended
 * to the list all_probes_json writes (json_probes_append); the new end. */
size_t tls_probes_append(char *buf, size_t len, size_t off, bool attached);

void tls_stop(void);

#endif
