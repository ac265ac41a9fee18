#!/usr/bin/env bash
# Packs what a call on the lent GPU machine needs from this one: that machine has no package
# registry and no cpp-httplib, so the binaries of this tree's CUDA build travel stripped in one
# .tar.xz, beside the Debian runtime packages that device-setup.sh unpacks there (SETUP=1).
#
#   bench/cuda/pack-device.sh DIR [BINARY ...]
#
# Writes DIR/bins.tar.xz (default binaries: ember test_cuda_backend test_cuda_model
# libember_cupti_trace.so, from BUILD, default build-cuda) and DIR/debs/*.deb. DIR should be an
# ignored path of the repository (e.g. .devdeps), named in the run's carry; tracked files plus
# carried paths must stay under 64 MiB. Then, on the device:
#   BIN_TAR=DIR/bins.tar.xz SETUP=1 DEB_DIR=DIR/debs ... bench/cuda/ab-speed.sh
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [BINARY ...]" >&2; exit 2; }
dir=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD:-$root/build-cuda}" && pwd)
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(ember test_cuda_backend test_cuda_model libember_cupti_trace.so)
mkdir -p "$dir/debs"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for b in "${bins[@]}"; do
  path=$(find "$build" -name "$b" -type f -perm -u+x -not -path '*/CMakeFiles/*' | head -1)
  [ -n "$path" ] || { echo "pack-device: $b not built in $build" >&2; exit 1; }
  cp "$path" "$stage/$b"
  strip "$stage/$b"
done
tar -C "$stage" -cf - "${bins[@]}" | xz -9 -T2 >"$dir/bins.tar.xz"
# The runtime libraries ember links that the device image (Ubuntu 24.04) lacks or has in other
# versions; libssl / brotli only where missing there (device-setup.sh decides).
(cd "$dir/debs" && apt-get download -qq libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libicu72 \
  libspdlog1.10 libfmt9 libcpp-httplib0.11 libssl3 libbrotli1 2>&1) | { grep -v "Download is performed unsandboxed" || true; }
echo "pack-device: $(du -sh "$dir/bins.tar.xz" | cut -f1) of binaries (${bins[*]}), $(find "$dir/debs" -name '*.deb' | wc -l) packages in $dir/debs"
