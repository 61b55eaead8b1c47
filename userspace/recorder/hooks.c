// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* fentry/fexit hooks on the system calls' kernel functions (hooks.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>
#include "iotrace.h"
#include "hooks.h"
#include "settings.h"
/* the list of hooked functions, bpf/syscall_hooks.h (-Ibpf) */
#include "../../bpf/syscall_hooks.h"

struct hook {
	const char *fn;
	struct bpf_program *enter, *exit;
	struct bpf_link *le, *lx;
	bool on;
};

#define HOOK(fn, op) { #fn },
static struct hook hooks[] = { IOT_SYSCALL_HOOKS(HOOK) };
#define NHOOKS (sizeof(hooks) / sizeof(hooks[0]))

/* entry-only hooks on calls not recorded (bpf/syscall_hooks.h); a kernel
 * without one of them has no such call to miss */
#define FLUSH(fn) { #fn },
static struct hook flushes[] = { IOT_FLUSH_HOOKS(FLUSH) };
#define NFLUSHES (sizeof(flushes) / sizeof(flushes[0]))

static char absent[1024];

int hooks_wanted(char *why, size_t len)
{
	return setting_choice("IOTRACE_HOOKS", "fentry", "tracepoint", why, len);
}

int hooks_select(struct bpf_object *obj, const struct btf *vmlinux, bool fentry)
{
	char name[128];
	size_t off = 0;
	int n = 0;

	absent[0] = 0;
	for (size_t i = 0; i < NHOOKS; i++) {
		struct hook *h = &hooks[i];

		snprintf(name, sizeof(name), "iot_fe_%s", h->fn);
		h->enter = bpf_object__find_program_by_name(obj, name);
		snprintf(name, sizeof(name), "iot_fx_%s", h->fn);
		h->exit = bpf_object__find_program_by_name(obj, name);
		snprintf(name, sizeof(name), "__x64_sys_%s", h->fn);
		h->on = fentry && h->enter && h->exit &&
			btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) > 0;
		if (fentry && !h->on && off < sizeof(absent))
			off += snprintf(absent + off, sizeof(absent) - off, "%s%s", off ? ", " : "",
					h->fn);
		if (h->enter)
			bpf_program__set_autoload(h->enter, h->on);
		if (h->exit)
			bpf_program__set_autoload(h->exit, h->on);
		n += h->on;
	}
	for (size_t i = 0; i < NFLUSHES; i++) {
		struct hook *h = &flushes[i];

		snprintf(name, sizeof(name), "iot_ff_%s", h->fn);
		h->enter = bpf_object__find_program_by_name(obj, name);
		snprintf(name, sizeof(name), "__x64_sys_%s", h->fn);
		h->on = fentry && h->enter &&
			btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) > 0;
		if (h->enter)
			bpf_program__set_autoload(h->enter, h->on);
	}
	return n;
}

int hooks_attach(void)
{
	for (size_t i = 0; i < NHOOKS; i++) {
		struct hook *h = &hooks[i];

		if (!h->on)
			continue;
		h->le = bpf_program__attach(h->enter);
		if (!h->le)
			goto fail;
		h->lx = bpf_program__attach(h->exit);
		if (!h->lx)
			goto fail;
	}
	for (size_t i = 0; i < NFLUSHES; i++) {
		if (!flushes[i].on)
			continue;
		flushes[i].le = bpf_program__attach(flushes[i].enter);
		if (!flushes[i].le)
			goto fail;
	}
	return 0;
fail:
	{
		int e = errno ? errno : EINVAL;
		hooks_detach();
		return -e;
	}
}

void hooks_detach(void)
{
	for (size_t i = 0; i < NHOOKS; i++) {
		bpf_link__destroy(hooks[i].le);
		bpf_link__destroy(hooks[i].lx);
		hooks[i].le = hooks[i].lx = NULL;
	}
	for (size_t i = 0; i < NFLUSHES; i++) {
		bpf_link__destroy(flushes[i].le);
		flushes[i].le = NULL;
	}
}

const char *hooks_absent(void)
{
	return absent;
}
