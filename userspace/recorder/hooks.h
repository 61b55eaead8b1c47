/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef RECORDER_HOOKS_H
#define RECORDER_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

/*
 * How system calls are hooked (bpf/iotrace.bpf.c): fentry/fexit programs on
 * each traced call's kernel function, or the sys_enter/sys_exit tracepoints.
 * IOTRACE_HOOKS=fentry|tracepoint|auto (default auto: fentry where the
 * kernel allows it, else the tracepoints, with the reason kept).
 */
/* in setting_choice's order (settings.h) */
enum hooks_want { HOOKS_AUTO, HOOKS_FENTRY, HOOKS_TRACEPOINT };

/* From IOTRACE_HOOKS; -1 (and a message in why) for a bad value. */
int hooks_wanted(char *why, size_t len);

/* Sets the fentry/fexit programs of obj to load (fentry) or not. With
 * fentry, a function this kernel lacks (a syscall it does not have) is left
 * out. Returns how many functions are hooked. */
int hooks_select(struct bpf_object *obj, const struct btf *vmlinux, bool fentry);

/* Attaches the selected programs; 0, or -errno with nothing left attached. */
int hooks_attach(void);

void hooks_detach(void);

/* Functions left out because this kernel lacks them, as "a, b" (may be ""). */
const char *hooks_absent(void);

#endif
