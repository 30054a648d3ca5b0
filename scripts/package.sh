#!/usr/bin/env bash
# Packages a built terra binary. `make deb` and `make dist` run it after
# `make build`.
#
#   scripts/package.sh deb    OUT_DIR/terra_<version>_<arch>.deb
#   scripts/package.sh dist   OUT_DIR/terra-<version>-<target>.tar.gz and OUT_DIR/SHA256SUMS
#
# Environment:
#   TERRA_BIN          the binary to package (default dist/terra, the static build);
#                      the tests pass their debug build
#   OUT_DIR            where the package goes (default dist)
#   TARGET             the target triple the binary is for (default x86_64-unknown-linux-musl)
#   SOURCE_DATE_EPOCH  every timestamp in the package (default: the last commit's time)
#   DEB_MAINTAINER     the .deb's Maintainer (default: the last commit's author)
#   DEB_REVISION       the Debian revision after the version (default 1: 0.1.0-1)
#
# Reproducible: fixed mtimes, root:root owners, sorted entries, gzip -n. The
# package is written to a temporary name and renamed: a failure leaves no
# partial package behind.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

die() {
  echo "package.sh: $*" >&2
  exit 1
}

kind=${1:-}
case "$kind" in
  deb | dist) ;;
  *) die "usage: scripts/package.sh deb|dist" ;;
esac

TERRA_BIN=${TERRA_BIN:-dist/terra}
OUT_DIR=${OUT_DIR:-dist}
TARGET=${TARGET:-x86_64-unknown-linux-musl}
[ -x "$TERRA_BIN" ] || die "no executable at $TERRA_BIN (run make build, or set TERRA_BIN)"
TERRA_BIN=$(cd "$(dirname "$TERRA_BIN")" && pwd)/$(basename "$TERRA_BIN")

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) || die "set SOURCE_DATE_EPOCH (no git history)"
fi
export SOURCE_DATE_EPOCH
# gzip, tar and sort must not depend on the caller's locale or zone.
export LC_ALL=C TZ=UTC

# The workspace version: the `version = "..."` line of [workspace.package].
version=$(awk '/^\[/{s=($0=="[workspace.package]")} s&&/^version *=/{gsub(/.*= *"|".*/,"");print;exit}' Cargo.toml)
[ -n "$version" ] || die "no [workspace.package] version in Cargo.toml"

work=$(mktemp -d)
tmp_out=
cleanup() {
  rm -rf "$work"
  if [ -n "$tmp_out" ]; then rm -f "$tmp_out"; fi
}
trap cleanup EXIT

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

# The ELF machine of $1 as `uname -m` names it (x86_64, aarch64), or
# nothing for a file that is not a little-endian 64-bit ELF (a Mach-O one).
elf_machine() {
  local head
  head=$(head -c20 "$1" | od -An -tx1 | tr -d ' \n')
  case "$head" in
    7f454c460201*3e00) echo x86_64 ;;
    7f454c460201*b700) echo aarch64 ;;
    7f454c46*) echo other ;;
  esac
}

# How to run the binary here: itself on its own architecture; an aarch64
# one on an x86_64 machine through qemu-user (qemu-aarch64, from Debian's
# qemu-user package), which the man page and completions need.
runner=()
bin_machine=$(elf_machine "$TERRA_BIN")
# The package is named after TARGET: the binary must be built for it.
if [ -n "$bin_machine" ] && [ "${TARGET%%-*}" != "$bin_machine" ]; then
  die "$TERRA_BIN is a $bin_machine binary, but TARGET is $TARGET"
fi
if [ -n "$bin_machine" ] && [ "$bin_machine" != "$(uname -m)" ]; then
  [ "$bin_machine" = aarch64 ] || die "$TERRA_BIN is built for another architecture than $(uname -m), and only an aarch64 one can run here (through qemu-aarch64)"
  command -v qemu-aarch64 >/dev/null 2>&1 ||
    die "$TERRA_BIN is an aarch64 binary: running it here (for its man page and completions) needs qemu-aarch64 (apt-get install qemu-user, or scripts/bootstrap.sh)"
  runner=(qemu-aarch64)
fi

# The strip that reads the binary's architecture: binutils' own for the
# host's, the cross binutils or llvm-strip for an aarch64 one on x86_64.
strip_tool() {
  if [ "$bin_machine" = "$(uname -m)" ]; then
    command -v strip || true
  else
    command -v aarch64-linux-gnu-strip || command -v llvm-strip || true
  fi
}

# Copies the binary (an ELF one stripped: the debug build the tests pass
# carries hundreds of MB of debug info) and generates the man page and completions
# from its own command line, as `make install` does.
# $1: root, $2: zsh completion directory under it.
stage_common() {
  local root=$1 zsh_dir=$2 strip
  install -d "$root/bin" "$root/share/man/man1" "$root/share/bash-completion/completions" \
    "$root/$zsh_dir" "$root/share/fish/vendor_completions.d"
  install -m 0755 "$TERRA_BIN" "$root/bin/terra"
  # Only an ELF binary: a signed Mach-O one would lose its signature.
  if [ -n "$bin_machine" ]; then
    strip=$(strip_tool)
    if [ -n "$strip" ]; then
      "$strip" --strip-unneeded --remove-section=.comment --remove-section=.note "$root/bin/terra"
    fi
  fi
  "${runner[@]}" "$TERRA_BIN" man >"$root/share/man/man1/terra.1"
  "${runner[@]}" "$TERRA_BIN" completions bash >"$root/share/bash-completion/completions/terra"
  "${runner[@]}" "$TERRA_BIN" completions zsh >"$root/$zsh_dir/_terra"
  "${runner[@]}" "$TERRA_BIN" completions fish >"$root/share/fish/vendor_completions.d/terra.fish"
  chmod 0644 "$root/share/man/man1/terra.1" "$root/share/bash-completion/completions/terra" \
    "$root/$zsh_dir/_terra" "$root/share/fish/vendor_completions.d/terra.fish"
}

# Every file and directory under $1 gets the same mtime.
fix_mtimes() {
  find "$1" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +
}

# Debian's architecture for the target triple.
deb_arch() {
  case "$TARGET" in
    x86_64-*) echo amd64 ;;
    aarch64-*) echo arm64 ;;
    *) dpkg --print-architecture ;;
  esac
}

# The Depends line: none for the static binary; what dpkg-shlibdeps finds
# for a dynamically linked one (the tests' debug build).
deb_depends() {
  local bin=$1
  if ! readelf -d "$bin" 2>/dev/null | grep -q '(NEEDED)'; then
    return 0
  fi
  local d="$work/shlibdeps" deps
  mkdir -p "$d/debian"
  printf 'Source: terra\n\nPackage: terra\nArchitecture: any\n' >"$d/debian/control"
  deps=$(cd "$d" && dpkg-shlibdeps -O "$bin" 2>/dev/null | sed -n 's/^shlibs:Depends=//p') || deps=
  echo "Depends: ${deps:-libc6}"
}

build_deb() {
  local arch root maintainer date file deps size debver
  arch=$(deb_arch)
  debver="$version-${DEB_REVISION:-1}"
  root="$work/deb"
  maintainer=${DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>' 2>/dev/null || echo 'terra maintainers <root@localhost>')}
  date=$(date -R -u -d "@$SOURCE_DATE_EPOCH")

  # The changelog's top entry must be this version: bump both together.
  head -n1 packaging/deb/changelog | grep -qF "terra ($debver) " ||
    die "packaging/deb/changelog's first entry is not version $debver"

  stage_common "$root/usr" share/zsh/vendor-completions
  gzip -9n "$root/usr/share/man/man1/terra.1"
  install -d "$root/usr/share/doc/terra" "$root/etc/apparmor.d" "$root/DEBIAN"
  install -m 0644 packaging/apparmor/terra "$root/etc/apparmor.d/terra"
  install -m 0644 packaging/deb/copyright "$root/usr/share/doc/terra/copyright"
  install -d "$root/usr/share/lintian/overrides"
  install -m 0644 packaging/deb/lintian-overrides "$root/usr/share/lintian/overrides/terra"
  sed "s|@MAINTAINER@|$maintainer|; s|@DATE@|$date|" packaging/deb/changelog |
    gzip -9n >"$root/usr/share/doc/terra/changelog.Debian.gz"
  chmod 0644 "$root/usr/share/doc/terra/changelog.Debian.gz"

  install -m 0755 packaging/deb/postinst packaging/deb/postrm "$root/DEBIAN/"
  install -m 0644 packaging/deb/conffiles "$root/DEBIAN/conffiles"
  # md5sums of every file outside DEBIAN and the conffiles (dpkg keeps those).
  (cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print |
    sed 's|^\./||' | sort | xargs md5sum) >"$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/md5sums"

  deps=$(deb_depends "$root/usr/bin/terra")
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  sed -e "s|@VERSION@|$debver|; s|@ARCH@|$arch|; s|@MAINTAINER@|$maintainer|" \
    -e "s|@INSTALLED_SIZE@|$size|" \
    -e "s#^@DEPENDS@#${deps:+$deps\\n}#" packaging/deb/control.in >"$root/DEBIAN/control"
  chmod 0644 "$root/DEBIAN/control"
  fix_mtimes "$root"

  file="$OUT_DIR/terra_${debver}_${arch}.deb"
  tmp_out="$file.tmp.$$"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$tmp_out" >/dev/null
  mv -f "$tmp_out" "$file"
  tmp_out=
  echo "$file"
}

build_dist() {
  local name root file sums
  name="terra-$version-$TARGET"
  root="$work/$name"
  stage_common "$root" share/zsh/site-functions
  install -m 0644 README.md LICENSE "$root/"
  (cd "$root" && find . -type f ! -name SHA256SUMS -print | sed 's|^\./||' | sort |
    xargs sha256sum) >"$work/SHA256SUMS"
  install -m 0644 "$work/SHA256SUMS" "$root/SHA256SUMS"
  fix_mtimes "$root"

  file="$OUT_DIR/$name.tar.gz"
  tmp_out="$file.tmp.$$"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    --format=gnu -C "$work" -cf - "$name" | gzip -9n >"$tmp_out"
  mv -f "$tmp_out" "$file"
  tmp_out=

  # OUT_DIR/SHA256SUMS: this tarball's line replaces an older one; the other
  # targets' lines (the macOS tarball, built on a Mac) stay.
  sums="$OUT_DIR/SHA256SUMS"
  tmp_out="$sums.tmp.$$"
  {
    if [ -f "$sums" ]; then grep -v "  $name.tar.gz\$" "$sums" || true; fi
    (cd "$OUT_DIR" && sha256sum "$name.tar.gz")
  } | sort -k2 >"$tmp_out"
  mv -f "$tmp_out" "$sums"
  tmp_out=
  echo "$file"
}

case "$kind" in
  deb) build_deb ;;
  dist) build_dist ;;
esac
