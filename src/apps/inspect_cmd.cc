// `tandem inspect FILE`: what a GGUF file holds, for people (text) and machines (--json).
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/commands.h"
#include "gguf/reader.h"
#include "gguf/summary.h"
#include "model/params.h"

namespace tandem::apps {
namespace {

using gguf::Array;
using gguf::GgufFile;
using gguf::ModelSummary;
using gguf::TensorInfo;
using gguf::Value;
using gguf::ValueType;
using json = nlohmann::json;

constexpr uint64_t kArrayPreview = 8;      // elements shown without --all
constexpr size_t kStringPreview = 120;     // characters shown without --all

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

// A string shown on one line: control characters escaped, long strings cut unless `all`.
std::string Printable(std::string_view s, bool all, bool quote = true) {
  std::string out = quote ? "\"" : "";
  size_t shown = 0;
  for (char c : s) {
    if (!all && shown >= kStringPreview) {
      out += quote ? "\"" : "";
      out += "... (" + std::to_string(s.size()) + " bytes)";
      return out;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
    ++shown;
  }
  return quote ? out + "\"" : out;
}

std::string FormatNumber(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

std::string ScalarText(const Value& v, bool all) {
  if (const std::string* s = v.get_if<std::string>()) return Printable(*s, all);
  if (const bool* b = v.get_if<bool>()) return *b ? "true" : "false";
  if (v.type() == ValueType::kUint64) return std::to_string(*v.get_if<uint64_t>());
  if (v.is_integer()) return std::to_string(*v.AsInt64());
  if (std::optional<double> d = v.AsDouble()) return FormatNumber(*d);
  return "?";
}

std::string ArrayElementText(const Array& a, uint64_t i, bool all) {
  switch (a.elem_type()) {
    case ValueType::kString: return Printable(a.strings()[i], all);
    case ValueType::kFloat32:
    case ValueType::kFloat64: return FormatNumber(a.AsDouble(i));
    case ValueType::kBool: return a.AsInt64(i) != 0 ? "true" : "false";
    case ValueType::kUint64: return std::to_string(static_cast<uint64_t>(a.AsInt64(i)));
    default: return std::to_string(a.AsInt64(i));
  }
}

std::string ValueText(const Value& v, bool all) {
  const Array* a = v.get_if<Array>();
  if (a == nullptr) return ScalarText(v, all);
  std::string out = "[";
  const uint64_t n = all ? a->size() : std::min<uint64_t>(a->size(), kArrayPreview);
  for (uint64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    out += ArrayElementText(*a, i, all);
  }
  if (n < a->size()) out += ", ... " + std::to_string(a->size() - n) + " more";
  return out + "]";
}

std::string TypeText(const Value& v) {
  if (const Array* a = v.get_if<Array>()) {
    return "[" + std::string(gguf::ValueTypeName(a->elem_type())) + " x " +
           std::to_string(a->size()) + "]";
  }
  return std::string(gguf::ValueTypeName(v.type()));
}

json ScalarJson(const Value& v) {
  if (const std::string* s = v.get_if<std::string>()) return *s;
  if (const bool* b = v.get_if<bool>()) return *b;
  if (v.type() == ValueType::kUint64) return *v.get_if<uint64_t>();
  if (v.is_integer()) return *v.AsInt64();
  if (std::optional<double> d = v.AsDouble()) return *d;
  return nullptr;
}

json ArrayElementJson(const Array& a, uint64_t i) {
  switch (a.elem_type()) {
    case ValueType::kString: return a.strings()[i];
    case ValueType::kFloat32:
    case ValueType::kFloat64: return a.AsDouble(i);
    case ValueType::kBool: return a.AsInt64(i) != 0;
    case ValueType::kUint64: return static_cast<uint64_t>(a.AsInt64(i));
    default: return a.AsInt64(i);
  }
}

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

template <typename T>
std::string OptText(const std::optional<T>& v) {
  if (!v) return "?";
  if constexpr (std::is_floating_point_v<T>) return FormatNumber(*v);
  else return std::to_string(*v);
}

std::string TensorTypeList(const ModelSummary& s) {
  std::string out;
  for (const gguf::TypeTotal& t : s.by_type) {
    if (!out.empty()) out += ", ";
    out += std::to_string(t.tensors) + " " + std::string(gguf::TensorTypeName(t.type));
  }
  return out;
}

void PrintText(const std::string& path, const GgufFile& f, const ModelSummary& s, bool all) {
  std::printf("file: %s (%s, GGUF v%u, alignment %" PRIu64 ", data at byte %" PRIu64 ")\n",
              path.c_str(), HumanBytes(f.file_size()).c_str(), f.version(), f.alignment(),
              f.data_offset());
  std::printf("\nsummary\n");
  std::printf("  architecture     %s\n", s.architecture.empty() ? "?" : s.architecture.c_str());
  if (!s.name.empty()) std::printf("  name             %s\n", s.name.c_str());
  std::printf("  layers           %s\n", OptText(s.n_layer).c_str());
  std::printf("  embedding size   %s\n", OptText(s.n_embd).c_str());
  std::printf("  feed-forward     %s\n", OptText(s.n_ff).c_str());
  std::printf("  heads            %s\n", OptText(s.n_head).c_str());
  std::printf("  KV heads         %s\n", OptText(s.n_head_kv).c_str());
  std::printf("  head size        %s\n", OptText(s.head_dim).c_str());
  std::printf("  context length   %s\n", OptText(s.n_ctx).c_str());
  std::printf("  vocabulary size  %s\n", OptText(s.n_vocab).c_str());
  std::printf("  RoPE base        %s\n", OptText(s.rope_freq_base).c_str());
  // What the engine will use, defaults included (converted Gemma 3 files do not carry them).
  if (Result<model::ModelParams> p = model::ReadParams(f); p.ok()) {
    if (p->n_swa > 0) {
      std::printf("  sliding window   %lld tokens on local layers; every %lld%s layer global; local RoPE base %g\n",
                  static_cast<long long>(p->n_swa), static_cast<long long>(p->swa_period),
                  p->swa_period == 1 ? "st" : p->swa_period == 2 ? "nd" : p->swa_period == 3 ? "rd" : "th",
                  static_cast<double>(p->rope_base_swa));
    }
    if (p->is_moe()) {
      std::printf("  experts          %lld, %lld used per token, feed-forward %lld each\n", static_cast<long long>(p->n_expert),
                  static_cast<long long>(p->n_expert_used), static_cast<long long>(p->n_ff_exp));
      if (p->n_ff_shexp > 0) {
        std::printf("  shared expert    feed-forward %lld, for every token\n", static_cast<long long>(p->n_ff_shexp));
      }
    }
    if (p->logit_softcap > 0) std::printf("  logit soft-cap   %g\n", static_cast<double>(p->logit_softcap));
  }
  std::printf("  parameters       %" PRIu64 "\n", s.n_params);
  std::printf("  tensors          %zu (%s)\n", f.tensors().size(), TensorTypeList(s).c_str());
  std::printf("  tensor bytes     %" PRIu64 " (%s)\n", s.tensor_bytes,
              HumanBytes(s.tensor_bytes).c_str());

  std::printf("\nmetadata (%zu entries)\n", f.metadata().size());
  for (const auto& [key, value] : f.metadata()) {
    std::printf("  %-44s %-16s %s\n", Printable(key, true, false).c_str(), TypeText(value).c_str(),
                ValueText(value, all).c_str());
  }

  std::printf("\ntensors (%zu)\n", f.tensors().size());
  std::printf("  %-36s %-8s %-22s %14s\n", "name", "type", "shape", "bytes");
  for (const TensorInfo& t : f.tensors()) {
    std::printf("  %-36s %-8s %-22s %14" PRIu64 "\n", Printable(t.name, false, false).c_str(),
                std::string(gguf::TensorTypeName(t.type)).c_str(), t.ShapeString().c_str(),
                t.n_bytes);
  }

  std::printf("\nbytes by tensor type\n");
  for (const gguf::TypeTotal& t : s.by_type) {
    std::printf("  %-8s %6" PRIu64 " tensors %14" PRIu64 " bytes (%s)\n",
                std::string(gguf::TensorTypeName(t.type)).c_str(), t.tensors, t.bytes,
                HumanBytes(t.bytes).c_str());
  }

  std::printf("\nbytes per layer\n");
  for (const auto& [layer, bytes] : s.layer_bytes) {
    std::printf("  layer %-6" PRIu64 " %14" PRIu64 " bytes (%s)\n", layer, bytes,
                HumanBytes(bytes).c_str());
  }
  std::printf("  non-layer    %14" PRIu64 " bytes (%s):", s.non_layer_bytes,
              HumanBytes(s.non_layer_bytes).c_str());
  for (const std::string& n : s.non_layer_tensors) std::printf(" %s", Printable(n, false, false).c_str());
  std::printf("\n");
}

void PrintJson(const std::string& path, const GgufFile& f, const ModelSummary& s, bool all) {
  json j;
  j["file"] = path;
  j["file_size"] = f.file_size();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["summary"] = {
      {"architecture", s.architecture}, {"name", s.name},
      {"n_layer", Opt(s.n_layer)},      {"n_embd", Opt(s.n_embd)},
      {"n_ff", Opt(s.n_ff)},            {"n_head", Opt(s.n_head)},
      {"n_head_kv", Opt(s.n_head_kv)},  {"head_dim", Opt(s.head_dim)},
      {"n_ctx", Opt(s.n_ctx)},          {"n_vocab", Opt(s.n_vocab)},
      {"rope_freq_base", Opt(s.rope_freq_base)},
      {"n_params", s.n_params},         {"tensor_bytes", s.tensor_bytes},
  };
  if (Result<model::ModelParams> p = model::ReadParams(f); p.ok()) {
    if (p->n_swa > 0) {
      j["summary"]["sliding_window"] = p->n_swa;
      j["summary"]["sliding_window_pattern"] = p->swa_period;
      j["summary"]["rope_freq_base_swa"] = p->rope_base_swa;
    }
    if (p->is_moe()) {
      j["summary"]["n_expert"] = p->n_expert;
      j["summary"]["n_expert_used"] = p->n_expert_used;
      j["summary"]["n_ff_exp"] = p->n_ff_exp;
      if (p->n_ff_shexp > 0) j["summary"]["n_ff_shexp"] = p->n_ff_shexp;
    }
  }
  json md = json::array();
  for (const auto& [key, value] : f.metadata()) {
    json e = {{"key", key}, {"type", std::string(gguf::ValueTypeName(value.type()))}};
    if (const Array* a = value.get_if<Array>()) {
      e["elem_type"] = std::string(gguf::ValueTypeName(a->elem_type()));
      e["length"] = a->size();
      const uint64_t n = all ? a->size() : std::min<uint64_t>(a->size(), kArrayPreview);
      json items = json::array();
      for (uint64_t i = 0; i < n; ++i) items.push_back(ArrayElementJson(*a, i));
      e["value"] = std::move(items);
      e["truncated"] = n < a->size();
    } else {
      e["value"] = ScalarJson(value);
    }
    md.push_back(std::move(e));
  }
  j["metadata"] = std::move(md);
  json tensors = json::array();
  for (const TensorInfo& t : f.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"type", std::string(gguf::TensorTypeName(t.type))},
                       {"shape", std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                       {"bytes", t.n_bytes},
                       {"offset", t.file_offset}});
  }
  j["tensors"] = std::move(tensors);
  json by_type = json::array();
  for (const gguf::TypeTotal& t : s.by_type) {
    by_type.push_back({{"type", std::string(gguf::TensorTypeName(t.type))},
                       {"tensors", t.tensors},
                       {"bytes", t.bytes}});
  }
  j["bytes_by_type"] = std::move(by_type);
  json layers = json::array();
  for (const auto& [layer, bytes] : s.layer_bytes) {
    layers.push_back({{"layer", layer}, {"bytes", bytes}});
  }
  j["layers"] = std::move(layers);
  j["non_layer"] = {{"bytes", s.non_layer_bytes}, {"tensors", s.non_layer_tensors}};
  // Strings in a GGUF file need not be valid UTF-8: replace bad bytes rather than fail.
  std::puts(j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

}  // namespace


void RegisterInspect(CLI::App& app, int* exit_code) {
  struct Args {
    std::string path;
    bool all = false;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a GGUF file's summary, metadata, tensors and bytes per layer");
  cmd->add_option("file", args->path, "GGUF model file")->required();
  cmd->add_flag("--all", args->all, "Print long arrays and strings in full");
  cmd->add_flag("--json", args->json, "Print JSON instead of text");
  cmd->callback([args, exit_code] {
    Result<GgufFile> f = GgufFile::Open(args->path);
    if (!f.ok()) {
      *exit_code = ReportError(f.status().ToString());
      return;
    }
    ModelSummary s = gguf::Summarize(*f);
    if (args->json) {
      PrintJson(args->path, *f, s, args->all);
    } else {
      PrintText(args->path, *f, s, args->all);
    }
  });
}

}  // namespace tandem::apps
