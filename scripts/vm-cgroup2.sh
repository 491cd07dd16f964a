#!/usr/bin/env bash
# Run a command on a pure cgroup v2 kernel: a KVM guest that boots Debian's kernel
# (cgroup_no_v1=all) over this machine's own root filesystem, shared read-only, with tmpfs
# on /tmp, /run and /var/tmp and the unified hierarchy at /sys/fs/cgroup. For the real
# cgroup v2 tests on a machine whose kernel mounts v1 (tests/agent/test_cgroup_real_v2.py
# skips outside such a kernel):
#
#   sudo scripts/vm-cgroup2.sh                     # those tests
#   sudo scripts/vm-cgroup2.sh 'cat /sys/fs/cgroup/cgroup.controllers'
#
# Needs root; uses KVM only when PYKATALYST_VM_ACCEL says so (see below); the command gets
# PYKATALYST_VM_COMMAND_TIMEOUT seconds in the guest (300), and the guest as a whole
# PYKATALYST_VM_BOOT_TIMEOUT seconds more (120) before it is started again, once. Installs
# qemu-system-x86, busybox-static and kmod (apt) and fetches the kernel package once into
# ~/.cache/pykatalyst/vm. The command runs from the repository root; its output is printed
# and its exit status is the script's.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${PYKATALYST_CACHE:-$HOME/.cache/pykatalyst}/vm"
KPKG="${PYKATALYST_VM_KERNEL:-}"  # a Debian kernel package; default: the one built last,
                                  # else the one linux-image-amd64 depends on today
CMD="${1:-.venv/bin/python -m pytest -p no:cacheprovider -q -rs tests/agent/test_cgroup_real_v2.py}"
MODULES=(virtio_pci 9pnet_virtio 9p loop bfq crc32c_generic ext4)

[ "$(id -u)" = 0 ] || { echo "vm-cgroup2: needs root" >&2; exit 2; }
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v depmod >/dev/null || [ -x /usr/sbin/depmod ] || need+=(kmod)
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
DEPMOD=$(command -v depmod || echo /usr/sbin/depmod)

current_kernel() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -1
  true
}
if [ -z "$KPKG" ]; then
  built=$(ls -d "$CACHE"/linux-image-*/initrd.cpio 2>/dev/null | head -1 || true)
  if [ -n "$built" ]; then
    KPKG=$(basename "$(dirname "$built")")
  else
    KPKG=$(current_kernel)
    [ -n "$KPKG" ] || { apt-get update -qq >/dev/null; KPKG=$(current_kernel); }
    [ -n "$KPKG" ] || { echo "vm-cgroup2: apt knows no linux-image-amd64 kernel" >&2; exit 1; }
  fi
fi

K="$CACHE/$KPKG"
if [ ! -f "$K/initrd.cpio" ]; then
  rm -rf "$K" && mkdir -p "$K/pkg" "$K/initrd/bin" "$K/initrd/mods"
  (cd "$K" && apt-get download "$KPKG" >/dev/null 2>&1) ||
    { echo "vm-cgroup2: apt-get download $KPKG failed" >&2; exit 1; }
  dpkg-deb -x "$K"/"$KPKG"_*.deb "$K/pkg"
  ver="${KPKG#linux-image-}"
  "$DEPMOD" -b "$K/pkg" "$ver"
  mdir="$K/pkg/lib/modules/$ver"
  # each module after what it depends on, as modules.dep lists them
  order=()
  for m in "${MODULES[@]}"; do
    line=$(grep -E "/$m\.ko:" "$mdir/modules.dep")
    deps=(${line#*:})
    for d in $(printf '%s\n' "${deps[@]}" | tac) "${line%%:*}"; do
      [[ " ${order[*]-} " == *" $d "* ]] || order+=("$d")
    done
  done
  for d in "${order[@]}"; do cp "$mdir/$d" "$K/initrd/mods/"; basename "$d"; done \
    > "$K/initrd/modules.order"
  cp /bin/busybox "$K/initrd/bin/busybox"
  cat > "$K/initrd/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc && mount -t sysfs sys /sys && mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod "/mods/$m"; done
R=/newroot
mkdir -p $R && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 hostroot $R
for d in tmp run var/tmp; do mount -t tmpfs tmpfs $R/$d; done
mount -t proc proc $R/proc && mount -t sysfs sys $R/sys && mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/shm && mount -t tmpfs tmpfs $R/dev/shm
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup
mkdir -p $R/tmp/out && mount -t 9p -o trans=virtio,version=9p2000.L out $R/tmp/out
cd $R && chroot $R /bin/sh /tmp/out/cmd.sh > $R/tmp/out/log 2>&1
echo $? > $R/tmp/out/rc
sync
poweroff -f
INIT
  chmod +x "$K/initrd/init"
  (cd "$K/initrd" && find . | /bin/busybox cpio -o -H newc 2>/dev/null > "../initrd.cpio.tmp") && mv "$K/initrd.cpio.tmp" "$K/initrd.cpio"
  cp "$K"/pkg/boot/vmlinuz-* "$K/vmlinuz"
  rm -rf "$K/pkg" "$K"/*.deb
fi

# KVM where it works; under a hypervisor that does not nest it (Firecracker guests hang in
# the kernel's decompressor), software emulation: slower, the same kernel.
ACCEL="${PYKATALYST_VM_ACCEL:--accel tcg,thread=multi -cpu max}"
# The command gets GUEST_S in the guest: one that runs past it is killed there and fails
# with what it printed. A guest that does not finish at all within BOOT_S more is shown
# (console and output) and started again, once: software emulation has stalled so, once in
# a few dozen runs, both cpus spinning and nothing on the console after the init.
GUEST_S="${PYKATALYST_VM_COMMAND_TIMEOUT:-300}"
BOOT_S="${PYKATALYST_VM_BOOT_TIMEOUT:-120}"
OUT=$(mktemp -d /tmp/pykatalyst-vm-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
printf '%s\n' "$CMD" > "$OUT/user.sh"
cat > "$OUT/cmd.sh" <<SCRIPT
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp
export PYTHONDONTWRITEBYTECODE=1 PYKATALYST_IN_VM=1
# The checkout is shared on its own: a clone under /tmp, /run or /var/tmp would otherwise
# lie hidden under the guest's fresh tmpfs there.
mkdir -p "$ROOT" && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 repo "$ROOT"
cd "$ROOT" || exit 1
timeout -k 10 $GUEST_S /bin/sh /tmp/out/user.sh
rc=\$?
[ \$rc = 124 ] && echo "vm-cgroup2: the command ran past $GUEST_S s in the guest: killed"
exit \$rc
SCRIPT
boot() {
  rm -f "$OUT/rc" "$OUT/log" "$OUT/console"
  timeout $((GUEST_S + BOOT_S)) qemu-system-x86_64 $ACCEL -smp 2 -m 2048 -nographic -no-reboot \
    -kernel "$K/vmlinuz" -initrd "$K/initrd.cpio" \
    -append "console=ttyS0 quiet panic=-1 cgroup_no_v1=all" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$OUT",mount_tag=out,security_model=none \
    -virtfs local,path="$ROOT",mount_tag=repo,security_model=none,readonly=on,multidevs=remap \
    > "$OUT/console" 2>&1 || true
  [ -f "$OUT/rc" ] && return 0
  echo "vm-cgroup2: the guest did not finish within $((GUEST_S + BOOT_S)) s; its console:" >&2
  tail -40 "$OUT/console" >&2
  if [ -s "$OUT/log" ]; then
    echo "vm-cgroup2: what the command printed in the guest:" >&2
    tail -60 "$OUT/log" >&2
  else
    echo "vm-cgroup2: the command printed nothing in the guest" >&2
  fi
  return 1
}
if ! boot; then
  echo "vm-cgroup2: starting the guest again (once)" >&2
  boot || exit 1
fi
cat "$OUT/log"
exit "$(cat "$OUT/rc")"
