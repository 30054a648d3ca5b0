#!/usr/bin/env bash
# Runs terra's aarch64 build inside an aarch64 guest (QEMU's virt machine,
# TCG on an x86_64 machine, KVM on an arm64 one with /dev/kvm) and reports
# pass/fail per check. `make test-aarch64` runs it.
#
# The guest boots Debian's arm64 kernel (linux-image-arm64) with an
# initramfs holding busybox (busybox-static:arm64), the aarch64 terra and
# terra-seccomp's test binaries built for aarch64. Both packages come from
# the Debian mirror through a private apt state under the cache directory:
# the host's dpkg architectures and apt lists stay as they are.
#
# What runs in the guest:
#   - terra-seccomp's tests (unit, arches, merge, role_filters,
#     workload_notify) as root, and those that install filters again as
#     uid 65534: the role allowlists installed for real on
#     aarch64 kill a process on a call off their list and keep the calls
#     they list; the workload's deny lists answer with their errno;
#   - terra doctor;
#   - escape probes in terra's default box (linux backend), each with its
#     twin, as root and as uid 65534, written with busybox: writing outside
#     the workspace, reading outside the box's roots, a user namespace,
#     mount, a setuid bit, chroot, signalling a process outside the box.
#     Each escape is first run as root outside terra, where it must work.
# Not yet: tests/enforcement.rs itself, whose probes need python3,
# coreutils and iproute2 in the guest (an arm64 Debian root rather than
# busybox); see docs/performance.md, aarch64.
#
# Environment:
#   TERRA_AARCH64_CACHE  where the kernel, busybox and apt state are kept
#                        (default ${XDG_CACHE_HOME:-$HOME/.cache}/terra/aarch64)
#   TERRA_BIN            the aarch64 terra (default: built with cargo)
#   GUEST_TIMEOUT        seconds the guest may run (default 1200)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
target=aarch64-unknown-linux-musl
cache=${TERRA_AARCH64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/terra/aarch64}
timeout_s=${GUEST_TIMEOUT:-1200}

die() {
  echo "test-aarch64: $*" >&2
  exit 1
}

command -v qemu-system-aarch64 >/dev/null || die "qemu-system-aarch64 is missing (apt-get install qemu-system-arm, or scripts/bootstrap.sh)"

# Debian's arm64 kernel and busybox, from the mirror the host uses.
fetch_debs() {
  local apt=(-o APT::Architecture=arm64 -o "APT::Architectures::=arm64"
    -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt/cache"
    -o Dir::State::status=/dev/null -q)
  mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/debs"
  apt-get "${apt[@]}" update >/dev/null || die "apt-get update for arm64 failed"
  local kernel
  kernel=$(apt-cache "${apt[@]}" depends linux-image-arm64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$kernel" ] || die "no kernel package behind linux-image-arm64"
  (cd "$cache/debs" && apt-get "${apt[@]}" download "$kernel" busybox-static 2>/dev/null) ||
    die "downloading $kernel and busybox-static (arm64) failed"
}

if ! ls "$cache"/debs/linux-image-*_arm64.deb >/dev/null 2>&1 ||
  ! ls "$cache"/debs/busybox-static_*_arm64.deb >/dev/null 2>&1; then
  fetch_debs
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$(ls "$cache"/debs/linux-image-*_arm64.deb | tail -n1)" "$work/kernel"
dpkg-deb -x "$(ls "$cache"/debs/busybox-static_*_arm64.deb | tail -n1)" "$work/busybox"
kernel=$(ls "$work"/kernel/boot/vmlinuz-* | tail -n1)

# The aarch64 binaries: terra and the seccomp crate's test executables.
if [ -z "${TERRA_BIN:-}" ]; then
  cargo build --release --locked --target "$target" --bin terra
  TERRA_BIN=target/$target/release/terra
fi
mapfile -t tests < <(cargo test -p terra-seccomp --locked --target "$target" --no-run \
  --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])
')
[ "${#tests[@]}" -gt 0 ] || die "no aarch64 test binary of terra-seccomp was built"

# The initramfs: busybox, terra, the tests, and an init that moves the
# root to a tmpfs (pivot_root, which terra's boxes use, refuses rootfs).
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,tests,etc}
cp "$work/busybox/bin/busybox" "$root/bin/busybox"
cp "$TERRA_BIN" "$root/bin/terra"
for t in "${tests[@]}"; do cp "$t" "$root/tests/$(basename "$t" | sed 's/-[0-9a-f]*$//')"; done
echo 'root:x:0:0:root:/:/bin/sh' >"$root/etc/passwd"
echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >>"$root/etc/passwd"
cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
if [ ! -e /.moved ]; then
  mkdir -p /new && mount -t tmpfs -o mode=0755 root /new
  for d in bin etc tests init; do cp -a "/$d" /new/; done
  mkdir -p /new/dev /new/proc /new/sys /new/tmp && touch /new/.moved
  umount /proc /sys /dev
  exec switch_root /new /init
fi
chmod 1777 /tmp
echo "guest: $(uname -m) $(uname -r)"
result() { echo "RESULT $1 $2"; }
for t in /tests/*; do
  name=$(basename "$t")
  if "$t" --test-threads=1 >/tmp/out 2>&1; then
    result pass "seccomp:$name $(grep '^test result' /tmp/out | tail -n1)"
  else
    cat /tmp/out
    result fail "seccomp:$name"
  fi
done
# The tests that install filters, again as uid 65534 (no_new_privs, no
# capability).
for name in role_filters workload_notify; do
  if su -s /bin/sh nobody -c "/tests/$name --test-threads=1" >/tmp/out 2>&1; then
    result pass "seccomp:$name:uid65534 $(grep '^test result' /tmp/out | tail -n1)"
  else
    cat /tmp/out
    result fail "seccomp:$name:uid65534"
  fi
done
if terra doctor >/tmp/out 2>&1; then result pass "terra doctor"; else cat /tmp/out; result fail "terra doctor"; fi
# The linux backend's escape probes with their twins, in terra's default
# box: each escape must fail and its twin (the legitimate use) must work,
# as root and as uid 65534.
echo secret >/secret && chmod 0644 /secret
as_user() { if [ "$1" = 0 ]; then sh -c "$2"; else su -s /bin/sh nobody -c "$2"; fi; }
probe() { # uid name escape twin
  uid=$1 name=$2 ws=/tmp/ws-$1
  # The control: as root outside terra the escape works, so the probe can
  # tell an escape from a command that fails anyway.
  if [ "$uid" = 0 ] && ! (mkdir -p /tmp/ctl && cd /tmp/ctl && sh -c "$3") >/tmp/out 2>&1; then
    cat /tmp/out; result fail "probe:$name:control (the escape fails even outside terra)"; return
  fi
  if as_user "$uid" "cd $ws && terra run -- sh -c '$3'" >/tmp/out 2>&1; then
    cat /tmp/out; result fail "probe:$name:uid$uid (the escape worked)"; return
  fi
  if as_user "$uid" "cd $ws && terra run -- sh -c '$4'" >/tmp/out 2>&1; then
    result pass "probe:$name:uid$uid"
  else
    cat /tmp/out; result fail "probe:$name:uid$uid (the twin failed)"
  fi
}
for uid in 0 65534; do
  mkdir -p /tmp/ws-$uid && chown $uid:$uid /tmp/ws-$uid
  probe $uid write-outside-workspace 'echo x >/etc/escape-$uid' 'echo x >./inside && test -s ./inside'
  probe $uid read-outside-roots 'cat /secret' 'echo data >./mine && cat ./mine'
  probe $uid unshare-user-namespace 'unshare -U true' 'true'
  probe $uid mount 'mkdir -p ./m && mount -t tmpfs none ./m' 'mkdir -p ./n && test -d ./n'
  probe $uid setuid-bit 'touch ./f && chmod u+s ./f && test -u ./f' 'touch ./g && chmod u+x ./g'
  probe $uid chroot 'chroot / true' 'cd / && true'
  probe $uid kill-outside-box 'kill -0 1 && test "$(cat /proc/1/comm)" != terra' 'kill -0 $$'
done
echo "GUEST DONE"
poweroff -f
INIT
chmod 0755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

accel=(-accel tcg -cpu max)
if [ "$(uname -m)" = aarch64 ] && [ -w /dev/kvm ]; then accel=(-accel kvm -cpu host); fi

echo "test-aarch64: booting $(basename "$kernel") (${accel[1]}) with ${#tests[@]} test binaries"
start=$(date +%s)
log=$cache/console.log
timeout "$timeout_s" qemu-system-aarch64 -machine virt "${accel[@]}" -smp 2 -m 1024 \
  -nographic -no-reboot -kernel "$kernel" -initrd "$work/initrd.gz" \
  -append "console=ttyAMA0 rdinit=/init panic=-1 quiet" </dev/null | tee "$log" |
  grep --line-buffered -E '^(RESULT|guest:|GUEST DONE)' || true
end=$(date +%s)
echo "test-aarch64: the guest ran $((end - start)) s"
grep -q '^GUEST DONE' "$log" || die "the guest did not finish (timeout ${timeout_s}s or a crash); console in $log"
pass=$(grep -c '^RESULT pass' "$log" || true)
fail=$(grep -c '^RESULT fail' "$log" || true)
echo "test-aarch64: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
