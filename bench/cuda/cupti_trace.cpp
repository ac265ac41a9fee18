// A kernel timeline for any CUDA program, through CUPTI's activity API: loaded by the driver
// (CUDA_INJECTION64_PATH=/path/libember_cupti_trace.so), it records the start and end of every
// kernel, graph-launched ones included, and writes them as CSV at exit to EMBER_TRACE_OUT
// (default ember-trace.csv). ncu times kernels one at a time with the GPU otherwise idle; this
// keeps a decode step's programmatic-dependent overlaps, so the gaps and overlaps between
// kernels can be read (bench/cuda/cupti_trace_summary.py).
//
// EMBER_TRACE_SKIP=N drops the first N kernels (warm-up, model load) before buffering, so a
// long run's records stay within memory.
#include <cupti.h>

#include <cxxabi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Kernel {
  uint64_t start, end;
  uint32_t correlation, graph;
  uint64_t graph_node;
  int grid, block, regs, smem;
  std::string name;
};

struct Trace {
  std::mutex mu;
  std::vector<Kernel> kernels;
  uint64_t seen = 0;
  uint64_t skip = 0;
  uint64_t dropped_records = 0;
  std::string out = "ember-trace.csv";
};

Trace& trace() {
  static Trace* t = new Trace;  // never destroyed: CUPTI may call back during exit
  return *t;
}

std::string demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  for (char& c : s)
    if (c == ',') c = ';';  // keep the CSV's columns
  return s;
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Trace& t = trace();
  CUpti_Activity* record = nullptr;
  std::vector<Kernel> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back(Kernel{k->start, k->end, k->correlationId, k->graphId, k->graphNodeId, k->gridX * k->gridY * k->gridZ,
                         k->blockX * k->blockY * k->blockZ, k->registersPerThread,
                         k->staticSharedMemory + k->dynamicSharedMemory, demangle(k->name)});
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(t.mu);
  t.dropped_records += dropped;
  for (Kernel& k : got) {
    if (t.seen++ < t.skip) continue;
    t.kernels.push_back(std::move(k));
  }
}

void write_trace() {
  cuptiActivityFlushAll(1);
  Trace& t = trace();
  std::lock_guard<std::mutex> lock(t.mu);
  FILE* f = std::fopen(t.out.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cupti_trace: cannot write %s\n", t.out.c_str());
    return;
  }
  std::fprintf(f, "start_ns,end_ns,correlation,graph,graph_node,grid,block,regs,smem,name\n");
  for (const Kernel& k : t.kernels)
    std::fprintf(f, "%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%s\n", static_cast<unsigned long long>(k.start),
                 static_cast<unsigned long long>(k.end), k.correlation, k.graph,
                 static_cast<unsigned long long>(k.graph_node), k.grid, k.block, k.regs, k.smem, k.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "cupti_trace: %zu kernels (%llu skipped, %llu records dropped) -> %s\n", t.kernels.size(),
               static_cast<unsigned long long>(t.seen < t.skip ? t.seen : t.skip),
               static_cast<unsigned long long>(t.dropped_records), t.out.c_str());
}

}  // namespace

extern "C" int InitializeInjection() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return 1;
  Trace& t = trace();
  if (const char* o = std::getenv("EMBER_TRACE_OUT")) t.out = o;
  if (const char* s = std::getenv("EMBER_TRACE_SKIP")) t.skip = std::strtoull(s, nullptr, 10);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_trace: CUPTI activity tracing could not be enabled\n");
    return 0;
  }
  std::atexit(write_trace);
  return 1;
}
