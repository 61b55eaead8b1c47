#!/bin/sh
# Runs inside the Debian 6.1 VM (tests/test_vm.py boots it with virtme-ng):
# an NFS server and client on loopback (v3 and v4.2 over TCP), then the NFS
# tests and core recorder tests against this kernel. Usage: run_in_vm.sh REPO OUT
set -u
REPO=$1
OUT=$2
log() { echo "vm: $*" >> "$OUT/setup.log"; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
ip link set lo up
W=/run/iotrace-vm
mkdir -p $W && mount -t tmpfs tmpfs $W
mkdir -p $W/export $W/nfs3 $W/nfs4 $W/varlibnfs/v4recovery $W/varlibnfs/rpc_pipefs
mount --bind $W/varlibnfs /var/lib/nfs
touch /var/lib/nfs/etab /var/lib/nfs/rmtab
for m in nfsd nfs nfsv3 nfsv4; do modprobe $m || log "modprobe $m failed"; done
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs 2>/dev/null || true
mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
rpcbind -w 2>>"$OUT/setup.log" || rpcbind 2>>"$OUT/setup.log"
# async: the server answers WRITE unstable, so the client COMMITs
exportfs -o rw,async,no_root_squash,insecure,no_subtree_check,fsid=0 "127.0.0.1:$W/export" 2>>"$OUT/setup.log"
rpc.mountd 2>>"$OUT/setup.log"
rpc.nfsd 4 2>>"$OUT/setup.log"
mount -t nfs -o vers=3,proto=tcp,nolock "127.0.0.1:$W/export" $W/nfs3 2>>"$OUT/setup.log" || log "v3 mount failed"
# fsid=0: the export is the NFSv4 pseudo-root, mounted as "/"
mount -t nfs -o vers=4.2,proto=tcp "127.0.0.1:/" $W/nfs4 2>>"$OUT/setup.log" || log "v4.2 mount failed"
grep nfs /proc/mounts >> "$OUT/setup.log"
cd "$REPO"
IOTRACE_VM_NFS=$W .venv/bin/python -m pytest -q -p no:cacheprovider -o addopts="" \
    tests/vm/test_nfs_vm.py tests/test_calls.py tests/test_fio.py::test_random_4k_reads_exact \
    > "$OUT/pytest.log" 2>&1
echo $? > "$OUT/rc"
