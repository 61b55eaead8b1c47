# iotrace: `make` sets up everything on a fresh Debian/Ubuntu machine and builds;
# `make test` also runs the tests; `make demo` traces the bundled example.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BUILD := build
CLANG ?= clang
BPFTOOL ?= bpftool
ARCH := $(shell uname -m | sed 's/x86_64/x86/; s/aarch64/arm64/')
APT_PACKAGES := clang llvm libbpf-dev bpftool libelf-dev libcapstone-dev zlib1g-dev pkg-config gcc make \
	fio strace bpftrace python3-venv
# What only the tests need: headless Chromium for the HTML report; QEMU, Debian's
# 6.1 kernel, busybox and an NFS server for the second-kernel and NFS tests; Open MPI
# for DLIO (the MLPerf Storage benchmark) whose own AU the verdict is checked against;
# a Java runtime for Spark (the report on `--engine spark` is checked against DuckDB's);
# s3fs-fuse, openssl and rclone (a Go client) for the object-storage tests (a bucket mounted
# with FUSE, a local CA, Go's crypto/tls);
# a Prometheus server that scrapes `iotrace exporter` in its tests, and tmux, the
# terminal `iotrace top` is checked in.
TEST_APT_PACKAGES := chromium qemu-system-x86 linux-image-amd64 busybox-static nfs-kernel-server \
	libibverbs-dev ibverbs-providers iproute2 libopenmpi-dev openmpi-bin openjdk-17-jre-headless \
	s3fs openssl prometheus tmux rclone
PYTEST_ARGS ?=

RECORDER := $(BUILD)/iotrace-recorder
PKG_BIN := userspace/iotrace/bin/iotrace-recorder
# The Python stack sampler (Rust, py-spy as a library): rustup's cargo, which
# sudo's PATH may not hold
CARGO ?= $(shell command -v cargo 2>/dev/null || ls $(HOME)/.cargo/bin/cargo /root/.cargo/bin/cargo 2>/dev/null | head -1)
PYSAMPLER := userspace/pysampler/target/release/iotrace-pysampler
PKG_SAMPLER := userspace/iotrace/bin/iotrace-pysampler

.PHONY: all deps test-deps venv build sampler test test-vm demo bench clean

all: deps build venv

# Install the system packages that are missing (needs root, as tracing does).
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root to install:$$missing" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# The tests also trace real h5py and PyTorch (CPU) workloads: torch's wheels
# are large (~3.5 GB with their CUDA dependencies), so only `make test` installs them.
# Hugging Face `datasets` (a DataLoader over its memory-mapped Arrow files) is
# installed after the rest, with its own dependencies named: in one resolve
# with the object-storage clients, pip backtracked for minutes over fsspec's pins.
$(VENV)/.workloads: $(VENV)/.installed
	$(VENV)/bin/pip install -q -e '.[test,workloads,vm,spark,objstore]'
	$(VENV)/bin/pip install -q 'dill>=0.3,<0.4.2' 'multiprocess<0.70.20' xxhash \
		'huggingface-hub>=1.31,<3'
	$(VENV)/bin/pip install -q --no-deps 'datasets==5.2.0'
	touch $@

# DLIO with its PyTorch loader only (no TensorFlow/DALI): see tests/dlio/install.sh.
$(VENV)/.dlio: $(VENV)/.workloads tests/dlio/install.sh
	tests/dlio/install.sh $(VENV)
	touch $@

test-deps:
	@missing=""; for p in $(TEST_APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed $(PKG_BIN)

build: $(RECORDER) $(PKG_BIN) sampler

# Without cargo iotrace still traces; the verdict is then the kernel's alone
# (no Python stacks), and `iotrace doctor` says so.
sampler:
	@if [ -z "$(CARGO)" ]; then \
		echo "make: no cargo (Rust): building without the Python stack sampler; install Rust (rustup) and run make again" >&2; \
	else $(MAKE) --no-print-directory $(PKG_SAMPLER); fi

$(PYSAMPLER): userspace/pysampler/Cargo.toml userspace/pysampler/Cargo.lock userspace/pysampler/src/*.rs
	cd userspace/pysampler && $(CARGO) build --release --locked --quiet

$(PKG_SAMPLER): $(PYSAMPLER)
	@mkdir -p $(dir $@)
	cp $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/vmlinux.h:
	@mkdir -p $(BUILD)
	$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv -f $@.tmp $@

BPF_OBJS := iotrace block aio netfs rdma verbs tls
# the objects are kept (not removed as intermediates): the VM tests and bpftool use them
.SECONDARY: $(BPF_OBJS:%=$(BUILD)/%.bpf.o) $(BUILD)/iotrace_direct.bpf.o
RECORDER_SRC := $(addprefix userspace/recorder/,recorder.c objects.c probes.c elf_sym.c cgroup_follow.c tls.c go_tls.c prologue.c profile.c hooks.c core_object.c settings.c rings.c)

BPF_HEADERS := bpf/iotrace.h bpf/shared_maps.h bpf/task_state.h bpf/user_iov.h bpf/http_capture.h bpf/profile.h bpf/syscall_hooks.h bpf/request_file.h bpf/libaio.h bpf/direct_reads.h
BPF_CFLAGS := -g -O2 -Wall -target bpf -D__TARGET_ARCH_$(ARCH) -I$(BUILD) -Ibpf

$(BUILD)/%.bpf.o: bpf/%.bpf.c $(BPF_HEADERS) $(BUILD)/vmlinux.h
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

# The core object again with direct kernel reads (bpf_rdonly_cast, kernels
# 6.2+): the recorder loads it in the core object's place where the kernel
# has that kfunc, so both must have the same maps, programs and variables;
# the skeletons' declarations are compared to make sure.
$(BUILD)/iotrace_direct.bpf.o: bpf/iotrace.bpf.c $(BPF_HEADERS) $(BUILD)/vmlinux.h
	$(CLANG) $(BPF_CFLAGS) -DIOT_DIRECT_READS -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(BPFTOOL) gen skeleton $< name $*_bpf > $@

$(BUILD)/iotrace_direct.skel.h: $(BUILD)/iotrace_direct.bpf.o $(BUILD)/iotrace.skel.h
	$(BPFTOOL) gen skeleton $< name iotrace_bpf | sed '/__elf_bytes(size_t \*sz);$$/q' > $@.decl
	sed '/__elf_bytes(size_t \*sz);$$/q' $(BUILD)/iotrace.skel.h | cmp -s - $@.decl || \
		{ echo "iotrace_direct.bpf.o differs from iotrace.bpf.o in more than code"; exit 1; }
	rm -f $@.decl
	$(BPFTOOL) gen skeleton $< name iotrace_direct_bpf > $@

$(RECORDER): $(RECORDER_SRC) userspace/recorder/*.h bpf/iotrace.h $(BPF_OBJS:%=$(BUILD)/%.skel.h) $(BUILD)/iotrace_direct.skel.h
	$(CC) -O2 -g -Wall -I$(BUILD) -Ibpf -Iuserspace/recorder $(RECORDER_SRC) -lbpf -lelf -lz -lcapstone -o $@

# Copied by rename: a recorder that is running keeps its old binary.
$(PKG_BIN): $(RECORDER)
	@mkdir -p $(dir $@)
	cp $< $@.tmp && mv -f $@.tmp $@

# A Go S3 client on minio-go (tests/workloads/go_s3): Go's crypto/tls is probed
# in it over HTTPS. Modules come from the Go module proxy; without Go the tests
# that need it say so and skip.
GO ?= $(shell command -v go 2>/dev/null || ls /usr/local/go/bin/go 2>/dev/null)
GO_S3 := $(BUILD)/go-s3-client
$(GO_S3): tests/workloads/go_s3/main.go tests/workloads/go_s3/go.mod tests/workloads/go_s3/go.sum
	@mkdir -p $(BUILD)
	@if [ -z "$(GO)" ]; then echo "make: no Go toolchain: the Go TLS tests will skip"; \
	elif cd tests/workloads/go_s3 && $(GO) build -buildvcs=false -o $(CURDIR)/$@.tmp .; then \
		mv -f $(CURDIR)/$@.tmp $(CURDIR)/$@; \
	else echo "make: WARNING: building $@ failed (Go module proxy?): its tests will skip" >&2; fi

# and a Go TLS ping-pong (bench/go_tls_loop, the standard library only): its
# calls counted exactly, on both kernels
GO_TLS_LOOP := $(BUILD)/go-tls-loop
$(GO_TLS_LOOP): bench/go_tls_loop/main.go bench/go_tls_loop/go.mod
	@mkdir -p $(BUILD)
	@if [ -z "$(GO)" ]; then echo "make: no Go toolchain: the Go TLS tests will skip"; \
	elif cd bench/go_tls_loop && $(GO) build -buildvcs=false -o $(CURDIR)/$@.tmp .; then \
		mv -f $(CURDIR)/$@.tmp $(CURDIR)/$@; \
	else echo "make: WARNING: building $@ failed: its tests will skip" >&2; fi

test: all test-deps $(VENV)/.workloads $(VENV)/.dlio $(GO_S3) $(GO_TLS_LOOP)
	@test -x $(PKG_SAMPLER) || { echo "make test: the Python stack sampler is not built (cargo missing?)" >&2; exit 1; }
	@mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
	$(PY) -m pytest -ra --durations=30 $(PYTEST_ARGS) tests

# Only the second-kernel tests: Debian's 6.1 kernel under QEMU with an NFS server
# on loopback (about 3 minutes under software emulation; also part of `make test`).
test-vm: all test-deps $(VENV)/.workloads $(GO_TLS_LOOP)
	$(PY) -m pytest -ra -s tests/test_vm.py

demo: all
	$(PY) examples/demo.py

bench: all
	$(PY) bench/overhead.py
	$(PY) bench/report_speed.py
	$(PY) bench/export_speed.py
	$(PY) bench/verbs_uprobe.py
	$(PY) bench/pystacks_cost.py

clean:
	rm -rf $(BUILD) $(PKG_BIN) $(PKG_SAMPLER) userspace/pysampler/target $(VENV) *.egg-info
