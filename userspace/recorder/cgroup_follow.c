/* Walks a cgroup's directory tree and reads each cgroup.procs (cgroup v1
 * and v2 name it alike). Hand-written: nftw would also stat every control
 * file; this opens only the directories and their cgroup.procs. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cgroup_follow.h"

#define MAX_DEPTH 16

static int scan(const char *dir, int depth, void (*add)(pid_t, void *), void *ctx)
{
	char path[4096];
	struct dirent *de;
	int n = 0;
	FILE *f;
	DIR *d;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "r");
	if (!f)
		return -1;
	for (long pid; fscanf(f, "%ld", &pid) == 1; n++)
		add((pid_t)pid, ctx);
	fclose(f);
	if (depth >= MAX_DEPTH || !(d = opendir(dir)))
		return n;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		int k = scan(path, depth + 1, add, ctx);
		if (k > 0)
			n += k;
	}
	closedir(d);
	return n;
}

int cgroup_scan(const char *dir, void (*add)(pid_t pid, void *ctx), void *ctx)
{
	return scan(dir, 0, add, ctx);
}
