#!/bin/sh
# Runs inside the Debian 6.1 VM (tests/test_vm.py boots it with virtme-ng),
# one part per boot:
#   nfs   an NFS server and client on loopback (v3 and v4.2 over TCP), NFS v3
#         over RDMA on Soft-RoCE (rdma_rxe on a dummy interface), then fentry
#         against the tracepoints on the same calls, and the NFS, RDMA and
#         verbs tests that need a device;
#   core  the recorder's core tests, the page-cache, mmap, block, libaio and
#         io_uring tests on an ext4 on a loop device.
# The two boot side by side (tests/test_vm.py): the hooks tests (~90 s) are
# in the nfs part so that the two take about as long.
# Usage: run_in_vm.sh REPO OUT PART
set -u
REPO=$1
OUT=$2
PART=$3
log() { echo "vm: $*" >> "$OUT/setup.log"; }
# The read-only shares after the first (tests/test_vm.py: the Python library,
# the virtualenv, iotrace's code) again, with the guest's page cache on: each
# process would otherwise read every module and library through QEMU again.
for i in 1 2 3 4 5 6 7 8; do
    d=$(awk -v t=virtme.initmount$i '$1 == t {print $2}' /proc/mounts)
    [ -n "$d" ] || continue
    umount "$d" && mount -t 9p -o ro,trans=virtio,version=9p2000.L,access=any,msize=512000,cache=loose \
        virtme.initmount$i "$d" || log "cannot share $d with a page cache"
done
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
ip link set lo up
W=/run/iotrace-vm
mkdir -p $W && mount -t tmpfs tmpfs $W
# A watchdog that needs nothing from the shared (9p) root: a static busybox on
# tmpfs prints the uptime and any task blocked in D state to the console every
# 20 s, so a log of a guest that stops shows where (tests/test_vm.py keeps it).
if [ -x /bin/busybox ]; then
    cp /bin/busybox $W/busybox
    $W/busybox sh -c '
      while $0 sleep 20; do
        d=""
        for s in /proc/[0-9]*/stat; do
          read -r pid comm st rest < $s 2>/dev/null
          [ "$st" = D ] && d="$d $pid$comm:$($0 cat ${s%stat}wchan)"
        done
        echo "vm-watchdog up=$($0 cut -d" " -f1 /proc/uptime) load=$($0 cut -d" " -f1-3 /proc/loadavg) D:$d" > /dev/console
      done' $W/busybox &
fi
cd "$REPO"
if [ "$PART" = nfs ]; then
    mkdir -p $W/export $W/nfs3 $W/nfs4 $W/rdma $W/varlibnfs/v4recovery $W/varlibnfs/rpc_pipefs
    mount --bind $W/varlibnfs /var/lib/nfs
    touch /var/lib/nfs/etab /var/lib/nfs/rmtab
    for m in nfsd nfs nfsv3 nfsv4 rdma_rxe rpcrdma; do modprobe $m || log "modprobe $m failed"; done
    # Soft-RoCE: an RDMA device on a dummy interface, reached through its address
    ip link add dummy0 type dummy && ip addr add 10.99.0.1/24 dev dummy0 && ip link set dummy0 up
    rdma link add rxe0 type rxe netdev dummy0 2>>"$OUT/setup.log" || log "rdma link add failed"
    mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs 2>/dev/null || true
    mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
    rpcbind -w 2>>"$OUT/setup.log" || rpcbind 2>>"$OUT/setup.log"
    # async: the server answers WRITE unstable, so the client COMMITs
    for client in 127.0.0.1 10.99.0.1; do
        exportfs -o rw,async,no_root_squash,insecure,no_subtree_check,fsid=0 "$client:$W/export" 2>>"$OUT/setup.log"
    done
    rpc.mountd 2>>"$OUT/setup.log"
    rpc.nfsd 4 2>>"$OUT/setup.log"
    echo rdma 20049 > /proc/fs/nfsd/portlist 2>>"$OUT/setup.log" || log "nfsd: no rdma listener"
    mount -t nfs -o vers=3,proto=tcp,nolock "127.0.0.1:$W/export" $W/nfs3 2>>"$OUT/setup.log" || log "v3 mount failed"
    # fsid=0: the export is the NFSv4 pseudo-root, mounted as "/"
    mount -t nfs -o vers=4.2,proto=tcp "127.0.0.1:/" $W/nfs4 2>>"$OUT/setup.log" || log "v4.2 mount failed"
    timeout 120 mount -t nfs -o vers=3,proto=rdma,port=20049,nolock "10.99.0.1:$W/export" $W/rdma \
        2>>"$OUT/setup.log" || log "NFS over RDMA mount failed"
    grep nfs /proc/mounts >> "$OUT/setup.log"
    rdma link >> "$OUT/setup.log" 2>&1
    set -- tests/test_hooks.py tests/vm/test_nfs_vm.py tests/vm/test_rdma_vm.py \
        tests/test_verbs.py::test_control_path_with_a_device \
        tests/test_verbs.py::test_memory_registrations_and_the_refused_one \
        tests/test_verbs.py::test_report_names_the_refused_registration \
        --deselect tests/test_hooks.py::test_bad_setting_is_one_line
else
    # A block device for the page-cache, mmap, block, libaio and io_uring tests
    # (the guest's /tmp is an overlay, its root the host's): an ext4 on a loop
    # device, mounted under the guest's own /tmp (the report counts files
    # under /run as runtime files, not data).
    B=/tmp/iotrace-blk
    modprobe loop 2>>"$OUT/setup.log"
    truncate -s 256M $W/disk.img && mkfs.ext4 -q -F $W/disk.img 2>>"$OUT/setup.log" &&
        mkdir -p $B && mount -o loop $W/disk.img $B 2>>"$OUT/setup.log" || log "loop ext4 failed"
    grep " $B " /proc/mounts >> "$OUT/setup.log"
    export IOTRACE_BLOCK_DIR=$B
    set -- tests/test_calls.py::test_relative_open_after_chdir_and_writes \
        tests/test_calls.py::test_openat_with_dirfd_and_dup2_alias \
        tests/test_calls.py::test_shared_memory_freed_after_its_munmap \
        tests/test_wakers.py tests/test_fio.py::test_random_4k_reads_exact \
        tests/test_storage.py::test_cold_read_comes_from_storage_warm_from_memory \
        tests/test_storage.py::test_numpy_mmap_faults_bring_the_file_in \
        "tests/test_async_io.py::test_libaio_direct_reads_and_writes_exact[auto]" \
        "tests/test_async_io.py::test_io_uring_random_reads_exact[8]" \
        tests/test_go_tls.py::test_go_tls_calls_exact
    # Left to the host (the suite's 35-minute budget; the same probes as above on
    # 6.1): SQPOLL, the memmap read-around finding, plain-HTTP request parsing,
    # and three of test_calls' five (failed opens, metadata calls, pipes and
    # terminals: the same open and path programs as the two kept, ~25 s each
    # under emulation).
fi
# Under emulation the 141 fentry programs make each traced command ~40 s
# slower (loading and attaching them; an RCU-tasks grace period per link when
# they go): the tests run on the tracepoints, except tests/test_hooks.py (nfs
# part, run first), which picks the hooks itself: auto, which is fentry on
# 6.1, and both side by side on the same calls.
export IOTRACE_HOOKS=tracepoint
# The in-VM limit stays under the host's (tests/test_vm.py) so that a stuck
# test still leaves its name and the others' results in pytest.log.
IOTRACE_VM_NFS=$W timeout 1200 .venv/bin/python -u -m pytest -v --durations=15 -p no:cacheprovider \
    -o addopts="" "$@" > "$OUT/pytest.log" 2>&1
echo $? > "$OUT/rc"
