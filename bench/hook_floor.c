/* The benches' hook floor: loads a BPF object (bench/hook_floor.bpf.c),
 * attaches the programs named after it (every one if none is) by their
 * section names, prints "attached N" and holds them until stdin closes. */
#include <bpf/libbpf.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
	struct bpf_object *obj;
	struct bpf_program *p;
	int n = 0;
	char c;

	if (argc < 2) {
		fprintf(stderr, "usage: %s OBJECT.bpf.o [PROGRAM...]\n", argv[0]);
		return 2;
	}
	setrlimit(RLIMIT_MEMLOCK, &rl);
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "%s: cannot load (run as root, on a kernel with BTF)\n", argv[1]);
		return 1;
	}
	bpf_object__for_each_program(p, obj) {
		bool wanted = argc == 2;

		for (int i = 2; i < argc; i++)
			wanted |= !strcmp(argv[i], bpf_program__name(p));
		if (!wanted)
			continue;
		if (!bpf_program__attach(p)) {
			fprintf(stderr, "%s: cannot attach %s\n", argv[1], bpf_program__name(p));
			return 1;
		}
		n++;
	}
	printf("attached %d\n", n);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
