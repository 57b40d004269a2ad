#!/usr/bin/env bash
# A release binary: static (musl), the `dist` profile, for one target, named
# tokbench-VERSION-TARGET and copied into OUT_DIR (default dist/).
#
#   deploy/release/build.sh x86_64-unknown-linux-musl
#   deploy/release/build.sh aarch64-unknown-linux-musl [OUT_DIR]
#
# Installs what is missing when it can (root with apt-get): the Rust target
# (rustup), and the C compiler that ring (rustls's crypto: C and assembly)
# is built with: musl-gcc for x86-64 (Debian musl-tools), the aarch64 GNU
# cross compiler for ARM (Debian gcc-aarch64-linux-gnu), which also links:
# Rust brings musl's own C library and start files for its musl targets, so
# the GNU cross toolchain makes a static musl binary. Prints the file's path
# last.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?usage: deploy/release/build.sh TARGET [OUT_DIR]}
out_dir=${2:-dist}

need_deb() { # COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "build.sh: installing $2"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  else
    echo "build.sh: needs $1 (apt-get install $2)" >&2
    exit 1
  fi
}

case "$target" in
  x86_64-unknown-linux-musl)
    need_deb musl-gcc musl-tools
    ;;
  aarch64-unknown-linux-musl)
    need_deb aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
    export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
    export AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
    ;;
  *)
    echo "build.sh: no recipe for $target (x86_64-unknown-linux-musl, aarch64-unknown-linux-musl)" >&2
    exit 2
    ;;
esac
if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
cargo build --locked --profile dist --target "$target"
mkdir -p "$out_dir"
name="tokbench-$version-$target"
cp "${CARGO_TARGET_DIR:-target}/$target/dist/tokbench" "$out_dir/$name"
echo "$out_dir/$name"
