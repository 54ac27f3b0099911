#include "comm/types.hpp"

namespace meshbench::comm {

std::string_view name(DType t) {
  switch (t) {
    case DType::kFloat: return "float";
    case DType::kDouble: return "double";
    case DType::kInt32: return "int32";
    case DType::kInt8: return "int8";
    case DType::kBf16: return "bf16";
    case DType::kHalf: return "half";
  }
  return "?";
}

std::string_view name(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMin: return "min";
    case RedOp::kMax: return "max";
    case RedOp::kAvg: return "avg";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : kAllDTypes)
    if (name(t) == s) return t;
  if (s == "fp32" || s == "float32") return DType::kFloat;
  if (s == "fp64" || s == "float64") return DType::kDouble;
  if (s == "fp16" || s == "float16") return DType::kHalf;
  if (s == "bfloat16") return DType::kBf16;
  return std::nullopt;
}

std::optional<RedOp> parse_redop(std::string_view s) {
  for (RedOp op : kAllRedOps)
    if (name(op) == s) return op;
  return std::nullopt;
}

std::size_t size_of(DType t) {
  switch (t) {
    case DType::kFloat: return 4;
    case DType::kDouble: return 8;
    case DType::kInt32: return 4;
    case DType::kInt8: return 1;
    case DType::kBf16: return 2;
    case DType::kHalf: return 2;
  }
  return 0;
}

bool is_integer(DType t) { return t == DType::kInt32 || t == DType::kInt8; }

}  // namespace meshbench::comm
