/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef RECORDER_SETTINGS_H
#define RECORDER_SETTINGS_H

#include <stddef.h>

/*
 * An environment setting of the recorder that picks one of two ways or
 * leaves the choice to it: unset, empty or "auto" -> 0, `first` -> 1,
 * `second` -> 2; anything else -> -1, with the one-line message for the
 * user in why ("NAME=value: give first, second or auto").
 */
int setting_choice(const char *name, const char *first, const char *second, char *why,
		   size_t len);

#endif
