#pragma once
// Internal: the filter tables (filters.cpp: text and scalars; filters_seq.cpp: sequences).
#include <string_view>

#include "chat/interpreter.h"

namespace ember::chat {

using FilterFn = Result<Value> (*)(Interpreter& interp, const Value& subject, CallArgs& args);

FilterFn find_text_filter(std::string_view name);
FilterFn find_seq_filter(std::string_view name);

// jinja2's soft_str: str() of the value, with Undefined as "".
Result<std::string> soft_str(const Value& v);
// Item of `v` along a dotted path "a.b.0", as jinja2's attribute getters resolve it.
Result<Value> get_attribute_path(Interpreter& interp, const Value& v, const std::string& path);

}  // namespace ember::chat
