// `ember quantize -m IN.gguf -o OUT.gguf --type TYPE`: converts a GGUF model's weight matrices
// to TYPE with the reference quantizers of quant/, rows split over a thread pool; metadata is
// copied with its stored GGUF types (general.file_type updated), tensors keep their order.
//
// Policy (as llama-quantize's, simplified):
//  - 2-D+ tensors named *weight get TYPE; other tensors are copied, except 1-D float tensors
//    (norms, biases), which are written as F32.
//  - the output matrix (output.weight, or token_embd.weight when the embeddings are tied) gets
//    Q6_K for every quantized TYPE except Q8_0 (llama.cpp's rule), unless --pure;
//    --keep-output leaves it as it is in the input.
//  - a row length that is not a multiple of TYPE's block size falls back: q4_k -> q5_0,
//    q5_k -> q5_1, q6_k -> q8_0 (llama.cpp's fallbacks), else f16; each fallback is logged.
//  - a tensor already of the target type is copied bytes-for-bytes; a tensor of another
//    quantized type is dequantized and requantized only with --allow-requantize.
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/mmap_file.h"
#include "core/thread_pool.h"
#include "loader/gguf_parser.h"
#include "loader/gguf_writer.h"
#include "quant/quant.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ember {

namespace {

using loader::GgufFile;
using loader::GgufTensorInfo;
using loader::GgufType;

struct TargetType {
  std::string_view name;
  DType dtype;
  uint32_t ftype;  // llama.cpp's llama_ftype (general.file_type)
};

// k-types are recorded as llama.cpp's "_S" file types: mostly one type, no per-layer mix.
constexpr TargetType kTargets[] = {
    {"f32", DType::F32, 0},    {"f16", DType::F16, 1},    {"bf16", DType::BF16, 32},
    {"q4_0", DType::Q4_0, 2},  {"q4_1", DType::Q4_1, 3},  {"q8_0", DType::Q8_0, 7},
    {"q5_0", DType::Q5_0, 8},  {"q5_1", DType::Q5_1, 9},  {"q4_k", DType::Q4_K, 14},
    {"q5_k", DType::Q5_K, 16}, {"q6_k", DType::Q6_K, 18},
};

struct Options {
  std::string in, out, type;
  int threads = 0;
  bool keep_output = false, pure = false, allow_requantize = false;
};

struct Plan {
  const GgufTensorInfo* in;
  DType out;
};

int64_t numel(const GgufTensorInfo& t) {
  int64_t n = 1;
  for (int d = 0; d < t.n_dims; ++d) n *= t.ne[static_cast<size_t>(d)];
  return n;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

DType fallback_for(DType target, int64_t row) {
  DType f = DType::F16;
  if (target == DType::Q4_K) f = DType::Q5_0;
  if (target == DType::Q5_K) f = DType::Q5_1;
  if (target == DType::Q6_K) f = DType::Q8_0;
  return row % dtype_block_size(f) == 0 ? f : DType::F16;
}

Result<std::vector<Plan>> make_plan(const GgufFile& g, const TargetType& target,
                                    const Options& o) {
  bool has_output = false;
  for (const auto& t : g.tensors) has_output |= t.name == "output.weight";
  std::vector<Plan> plan;
  for (const auto& t : g.tensors) {
    DType out = t.dtype;
    const bool matrix = t.n_dims >= 2 && t.name.size() >= 6 &&
                        t.name.compare(t.name.size() - 6, 6, "weight") == 0;
    const bool is_output =
        t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
    if (!matrix) {
      if (t.n_dims == 1 && is_float(t.dtype)) out = DType::F32;
    } else if (is_output && o.keep_output) {
      out = t.dtype;
    } else {
      out = target.dtype;
      if (is_output && !o.pure && dtype_is_quantized(out) && out != DType::Q8_0) out = DType::Q6_K;
      if (t.ne[0] % dtype_block_size(out) != 0) {
        const DType f = fallback_for(out, t.ne[0]);
        fmt::print(stderr, "{}: row of {} is not a multiple of {}'s block of {}: using {}\n", t.name,
                   t.ne[0], dtype_name(out), dtype_block_size(out), dtype_name(f));
        out = f;
      }
    }
    if (out != t.dtype) {
      if (!quant::can_dequantize(t.dtype)) {
        return Status::errorf("tensor '{}': cannot convert from {}", t.name, dtype_name(t.dtype));
      }
      if (!is_float(t.dtype) && !o.allow_requantize) {
        return Status::errorf(
            "tensor '{}' is already quantized ({}); requantizing to {} compounds the rounding "
            "errors of both formats: pass --allow-requantize to do it anyway",
            t.name, dtype_name(t.dtype), dtype_name(out));
      }
    }
    plan.push_back({&t, out});
  }
  return plan;
}

// Converts one tensor into dst (its output byte size), rows split over the pool.
void convert_tensor(ThreadPool& pool, const uint8_t* base, const Plan& p, uint8_t* dst) {
  const GgufTensorInfo& t = *p.in;
  const int64_t n_cols = t.ne[0];
  const int64_t n_rows = numel(t) / n_cols;
  const size_t in_row = dtype_row_bytes(t.dtype, n_cols), out_row = dtype_row_bytes(p.out, n_cols);
  const uint8_t* src = base + t.file_offset;
  pool.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n_cols));
    for (int64_t r = begin; r < end; ++r) {
      quant::dequantize_row(t.dtype, src + static_cast<size_t>(r) * in_row, row.data(), n_cols);
      quant::quantize_row(p.out, row.data(), dst + static_cast<size_t>(r) * out_row, n_cols);
    }
  });
}

Status quantize_file(const Options& o, const TargetType& target) {
  const auto t0 = std::chrono::steady_clock::now();
  if (std::filesystem::is_directory(o.in)) {
    return Status::errorf("{}: is a directory; quantize reads GGUF files only (convert a Hugging "
                          "Face checkpoint to GGUF first)", o.in);
  }
  EMBER_ASSIGN_OR_RETURN(auto file, MmapFile::open(o.in));
  EMBER_ASSIGN_OR_RETURN(GgufFile g, loader::parse_gguf(file->data(), file->size(), o.in));
  EMBER_ASSIGN_OR_RETURN(std::vector<Plan> plan, make_plan(g, target, o));

  loader::GgufWriter w(o.out, g.alignment);
  for (const auto& key : g.metadata_keys) {
    EMBER_RETURN_IF_ERROR(w.set(key, g.metadata.at(key), g.metadata_types.at(key)));
  }
  bool any_quantized = false;
  for (const auto& p : plan) any_quantized |= dtype_is_quantized(p.out);
  EMBER_RETURN_IF_ERROR(w.set("general.file_type", target.ftype, loader::gguf_type(GgufType::UINT32)));
  if (any_quantized) {
    EMBER_RETURN_IF_ERROR(w.set("general.quantization_version", 2, loader::gguf_type(GgufType::UINT32)));
  }
  for (const auto& p : plan) {
    loader::GgufWriterTensor wt{p.in->name, p.out, p.in->n_dims, p.in->ne};
    EMBER_RETURN_IF_ERROR(w.add_tensor(wt));
  }
  EMBER_RETURN_IF_ERROR(w.begin());

  ThreadPool pool(o.threads);
  ProgressBar bar("quantize", static_cast<int64_t>(plan.size()));
  std::vector<uint8_t> buf;
  std::map<std::string, int> counts;
  size_t in_bytes = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Plan& p = plan[i];
    const size_t n = loader::GgufWriterTensor{p.in->name, p.out, p.in->n_dims, p.in->ne}.nbytes();
    if (p.out == p.in->dtype) {
      EMBER_RETURN_IF_ERROR(w.write_tensor_data(file->data() + p.in->file_offset, n));
    } else {
      buf.resize(n);
      convert_tensor(pool, file->data(), p, buf.data());
      EMBER_RETURN_IF_ERROR(w.write_tensor_data(buf.data(), n));
    }
    in_bytes += p.in->nbytes;
    ++counts[std::string(dtype_name(p.out))];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bar.update(static_cast<int64_t>(i + 1),
               fmt::format("{} {:.0f} MB/s", p.in->name, in_bytes / 1e6 / std::max(s, 1e-9)));
  }
  EMBER_RETURN_IF_ERROR(w.finish());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bar.finish();
  std::string types;
  for (const auto& [name, c] : counts) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", c, name);
  fmt::print(stderr, "quantized {} -> {} ({})\n", o.in, o.out, target.name);
  fmt::print(stderr, "  size:    {:.2f} MiB -> {:.2f} MiB ({:.2f}x)\n", file->size() / 1048576.0,
             w.bytes_written() / 1048576.0, double(file->size()) / std::max<double>(w.bytes_written(), 1));
  fmt::print(stderr, "  time:    {:.2f} s on {} threads ({:.0f} MB/s of input)\n", s, pool.size(),
             in_bytes / 1e6 / std::max(s, 1e-9));
  fmt::print(stderr, "  tensors: {} ({})\n", plan.size(), types);
  return Status::ok();
}

}  // namespace

CommandFn register_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "convert a GGUF model's weights to another format");
  auto o = std::make_shared<Options>();
  cmd->add_option("-m,--model", o->in, "input GGUF file (F32/F16/BF16 or quantized)")->required();
  cmd->add_option("-o,--output", o->out, "output GGUF file")->required();
  std::string names;
  for (const auto& t : kTargets) names += fmt::format("{}{}", names.empty() ? "" : ", ", t.name);
  cmd->add_option("-t,--type", o->type, "target type: " + names)->required();
  cmd->add_option("--threads", o->threads, "worker threads (default: one per core)");
  cmd->add_flag("--keep-output", o->keep_output, "leave the output matrix as it is in the input");
  cmd->add_flag("--pure", o->pure, "every weight matrix gets TYPE (no Q6_K output matrix)");
  cmd->add_flag("--allow-requantize", o->allow_requantize,
                "allow requantizing tensors that are already quantized (loses accuracy)");
  return [o, names]() -> int {
    std::string want = o->type;
    std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::tolower(c); });
    const TargetType* target = nullptr;
    for (const auto& t : kTargets) if (t.name == want) target = &t;
    if (!target) {
      fmt::print(stderr, "error: unknown --type '{}' (supported: {})\n", o->type, names);
      return 2;
    }
    if (Status st = quantize_file(*o, *target); !st) {
      fmt::print(stderr, "error: {}\n", st.message());
      return 1;
    }
    return 0;
  };
}

}  // namespace ember
