# Sourced by the bench/cuda/*-check.sh scripts on the lent GPU machine: with SETUP set, unpacks
# the carried Debian packages in $debs (PCRE2, ICU, spdlog, fmt, cpp-httplib; brotli and libssl
# only where missing) so binaries built on the helper machine run; then points the loader at
# CUDA's libraries.
if [[ -n ${SETUP:-} ]]; then
  for f in "$debs"/*.deb; do case $f in *icu-dev*|*brotli*|*libssl*) ;; *) dpkg -x "$f" / ;; esac; done
  ldconfig -p | grep -q libbrotlienc.so.1 || dpkg -x "$debs"/libbrotli1_*.deb /
  ldconfig -p | grep -q libssl.so.3 || dpkg -x "$debs"/libssl3_*.deb /
  ldconfig
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
