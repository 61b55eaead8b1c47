// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The recorder's environment settings (settings.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "settings.h"

int setting_choice(const char *name, const char *first, const char *second, char *why,
		   size_t len)
{
	const char *v = getenv(name);

	if (!v || !*v || !strcmp(v, "auto"))
		return 0;
	if (!strcmp(v, first))
		return 1;
	if (!strcmp(v, second))
		return 2;
	snprintf(why, len, "%s=%s: give %s, %s or auto", name, v, first, second);
	return -1;
}
