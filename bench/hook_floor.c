/* bench/overhead.py's hook floor: loads a BPF object (bench/hook_floor.bpf.c),
 * attaches every program by its section name, prints "attached N" and
 * holds them until stdin closes. */
#include <bpf/libbpf.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
	struct bpf_object *obj;
	struct bpf_program *p;
	int n = 0;
	char c;

	if (argc != 2) {
		fprintf(stderr, "usage: %s OBJECT.bpf.o\n", argv[0]);
		return 2;
	}
	setrlimit(RLIMIT_MEMLOCK, &rl);
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "%s: cannot load (run as root, on a kernel with BTF)\n", argv[1]);
		return 1;
	}
	bpf_object__for_each_program(p, obj) {
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
