#!/usr/bin/env bash
# Installs what building and testing terra needs on a fresh Debian/Ubuntu
# machine: build tools, the clients the network tests drive (curl, openssl,
# dig from dnsutils for the DNS stub),
# python3 and util-linux's setpriv for the probes, strace for the seccomp
# tables' trace (scripts/trace-roles.sh), lintian and apparmor's parser for the
# package test (tests/packaging.rs), the real programs the
# default box must keep running (git, tar/xz/zip, sqlite3, node), and the Rust toolchain with
# the static musl target and the Apple and Windows targets `make lint-cross` checks; QEMU and
# Debian's generic kernel (with its modules) for the vm backend's tests (tests/vm_backend.rs,
# docs/vm.md); the container runtimes tests/containers.rs runs terra in (Debian's
# docker.io, podman rootless as the ordinary user terra-podman with subordinate
# id ranges, bubblewrap); for the aarch64 build: the aarch64 musl target, qemu-user (the policy
# tests under `make test-aarch64-unit`, the man page of an aarch64 binary when packaging it),
# qemu-system-arm (the aarch64 guest of `make test-aarch64`) and the aarch64 binutils
# (stripping it). Safe to run again.
set -euo pipefail

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

packages=(netcat-openbsd build-essential pkg-config curl ca-certificates openssl python3 util-linux iproute2 procps file
  git tar xz-utils zip unzip sqlite3 nodejs strace dnsutils redis-server lintian apparmor
  docker.io podman uidmap bubblewrap)
case "$(dpkg --print-architecture 2>/dev/null || echo amd64)" in
  amd64) packages+=(qemu-system-x86 linux-image-amd64 qemu-user qemu-user-static qemu-system-arm
    binutils-aarch64-linux-gnu) ;;
  arm64) packages+=(qemu-system-arm linux-image-arm64) ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

# Rootless podman's user: useradd gives it /etc/subuid and /etc/subgid ranges
# (login.defs SUB_UID_COUNT); older systems get one added here.
if ! id terra-podman >/dev/null 2>&1; then
  "${sudo_cmd[@]}" useradd --create-home --shell /bin/sh terra-podman
fi
for f in /etc/subuid /etc/subgid; do
  if ! grep -q '^terra-podman:' "$f" 2>/dev/null; then
    echo "terra-podman:200000:65536" | "${sudo_cmd[@]}" tee -a "$f" >/dev/null
  fi
done

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
# The static builds' targets, and the ones `make lint-cross` checks against
# (type-checking only: no SDK or linker for them is needed).
for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl aarch64-apple-darwin x86_64-apple-darwin \
  x86_64-pc-windows-gnu x86_64-pc-windows-msvc; do
  rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done
echo "bootstrap: ready ($(cargo --version))"
