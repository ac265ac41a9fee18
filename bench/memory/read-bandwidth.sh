#!/usr/bin/env bash
# Read bandwidth of this machine three ways, the numbers behind "Weights in memory" in
# docs/PERFORMANCE.md: a file's page-cache mapping, anonymous 4 KiB pages and anonymous 2 MiB
# (transparent huge) pages, each summed with AVX-512 loads on THREADS threads, 5 passes.
#
#   bench/memory/read-bandwidth.sh FILE [THREADS]     (FILE: e.g. a GGUF of a few hundred MB)
set -euo pipefail
file=${1:?usage: read-bandwidth.sh FILE [THREADS]}
threads=${2:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/bw.c" <<'C'
#include <fcntl.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
static void run(const char* label, const char* p, size_t n, int threads) {
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = omp_get_wtime();
    long tot = 0;
#pragma omp parallel for reduction(+ : tot) num_threads(threads)
    for (size_t i = 0; i < n; i += 256) {
      __m512i a = _mm512_loadu_si512(p + i), b = _mm512_loadu_si512(p + i + 64);
      __m512i c = _mm512_loadu_si512(p + i + 128), d = _mm512_loadu_si512(p + i + 192);
      tot += _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
    }
    double gbs = n / (omp_get_wtime() - t0) / 1e9;
    if (gbs > best) best = gbs;
    if (tot == 42) puts("");  /* keep the sum alive */
  }
  printf("%-28s %6.1f GB/s (best of 5)\n", label, best);
}
int main(int argc, char** argv) {
  int threads = atoi(argv[2]);
  int fd = open(argv[1], O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) { perror(argv[1]); return 1; }
  size_t n = (size_t)st.st_size & ~(size_t)((2u << 20) - 1);
  const char* map = mmap(0, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  run("file mapping (page cache)", map, n, threads);
  for (int huge = 0; huge < 2; huge++) {
    char* p = aligned_alloc(2u << 20, n);
    if (huge) madvise(p, n, MADV_HUGEPAGE);
    memcpy(p, map, n);
    run(huge ? "anonymous, 2 MiB pages" : "anonymous, 4 KiB pages", p, n, threads);
    free(p);
  }
  return 0;
}
C
gcc -O2 -mavx512f -fopenmp "$work/bw.c" -o "$work/bw"
echo "read bandwidth, $threads threads, $(( $(stat -c %s "$file") >> 20 )) MiB of $file"
"$work/bw" "$file" "$threads"
