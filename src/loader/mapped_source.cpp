#include "loader/mapped_source.h"

namespace ember::loader {

std::vector<std::string> MappedWeightSource::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);  // std::map: already sorted
  return names;
}

Result<Tensor> MappedWeightSource::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Status::errorf("{}: no tensor '{}'", path_, name);
  return it->second;
}

Status MappedWeightSource::add_tensor(const std::string& name, const Tensor& t) {
  if (!tensors_.emplace(name, t).second) {
    return Status::errorf("{}: duplicate tensor '{}'", path_, name);
  }
  total_bytes_ += t.nbytes();
  return Status::ok();
}

}  // namespace ember::loader
