#pragma once
// MappedWeightSource: the WeightSource bookkeeping shared by every format: a name -> view
// table over mapped files, which it keeps alive.
#include "loader/weight_source.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ember::loader {

class MappedWeightSource : public WeightSource {
 public:
  MappedWeightSource(CheckpointFormat format, std::string path)
      : format_(format), path_(std::move(path)) {}

  CheckpointFormat format() const override { return format_; }
  const std::string& path() const override { return path_; }
  std::vector<std::string> tensor_names() const override;
  bool has_tensor(const std::string& name) const override { return tensors_.count(name) > 0; }
  Result<Tensor> tensor(const std::string& name) const override;
  const nlohmann::json& metadata() const override { return metadata_; }
  void release_metadata() override { metadata_ = nlohmann::json::object(); }
  Status make_resident(const std::function<void(size_t, size_t)>& progress = {}) override;
  size_t total_tensor_bytes() const override { return total_bytes_; }

  // Building (by the format-specific openers). add_tensor fails on a duplicate name.
  void keep_alive(std::shared_ptr<MmapFile> file) { files_.push_back(std::move(file)); }
  Status add_tensor(const std::string& name, const Tensor& t);
  nlohmann::json& mutable_metadata() { return metadata_; }

 private:
  CheckpointFormat format_;
  std::string path_;
  std::vector<std::shared_ptr<MmapFile>> files_;
  std::map<std::string, Tensor> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
  size_t total_bytes_ = 0;
};

}  // namespace ember::loader
