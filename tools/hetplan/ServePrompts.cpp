//===- ServePrompts.cpp - the JSON-lines prompts hetplan serve reads ------===//
#include "tools/hetplan/ServePrompts.h"

#include "hetplan/runtime/JsonDepth.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace llvm;

namespace hetplan::tools {

namespace {
/// A request nests two levels, an encoder input a few more; 64 is plenty.
constexpr int kMaxDepth = 64;
/// Dims of one encoder input at most (ONNX tensors rarely pass 8).
constexpr size_t kMaxRank = 16;

/// `v`'s nested arrays as a shape and row-major numbers; a message when
/// ragged, empty-nested or not numbers.
std::string flatten(const json::Value &v, size_t depth, PromptArray &out) {
  const json::Array *a = v.getAsArray();
  if (!a) {
    if (depth == 0) return "must be an array (nested arrays of numbers)";
    auto n = v.getAsNumber();
    if (!n) return "holds something that is not a number";
    if (depth != out.shape.size()) return "is ragged (a number where an array was expected)";
    out.values.push_back(*n);
    return "";
  }
  if (depth >= kMaxRank) return "nests more than " + std::to_string(kMaxRank) + " dims";
  if (depth == out.shape.size()) {
    if (!out.values.empty()) return "is ragged (an array where a number was expected)";
    out.shape.push_back(int64_t(a->size()));
  } else if (depth > out.shape.size() || out.shape[depth] != int64_t(a->size())) {
    return "is ragged (rows of different lengths)";
  }
  if (a->empty()) return "has an empty array";
  for (const json::Value &e : *a) {
    std::string why = flatten(e, depth + 1, out);
    if (!why.empty()) return why;
  }
  return "";
}
} // namespace

/// A name from the file on one line: control bytes as \xNN.
std::string printableName(StringRef text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) out += formatv("\\x{0:x-2}", unsigned(c)).str();
    else out += char(c);
  }
  return out;
}

Expected<std::vector<PromptLine>> parsePrompts(StringRef text, StringRef name, int defaultMaxNew) {
  std::vector<PromptLine> out;
  int number = 0;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    ++number;
    if (line.trim().empty()) continue;
    auto where = [&] { return (name + ":" + Twine(number) + ": ").str(); };
    if (runtime::jsonNestsDeeperThan(std::string_view(line.data(), line.size()), kMaxDepth))
      return createStringError(where() + "nested more than " + Twine(kMaxDepth) + " levels deep");
    auto value = json::parse(line);
    if (!value) return createStringError(where() + toString(value.takeError()));
    const json::Object *obj = value->getAsObject();
    const json::Array *prompt = obj ? obj->getArray("prompt") : nullptr;
    if (!prompt || prompt->empty())
      return createStringError(where() + "needs \"prompt\": a non-empty array of token ids");
    PromptLine l;
    for (const json::Value &v : *prompt) {
      auto id = v.getAsInteger();
      if (!id || *id < 0) return createStringError(where() + "token ids must be integers >= 0");
      l.request.prompt.push_back(*id);
    }
    l.request.maxNewTokens = defaultMaxNew;
    if (const json::Value *n = obj->get("max_new_tokens")) {
      auto v = n->getAsInteger();
      if (!v || *v < 1 || *v > (1 << 20))
        return createStringError(where() + "max_new_tokens must be an integer from 1 to 1048576");
      l.request.maxNewTokens = int(*v);
    }
    if (const json::Value *id = obj->get("id")) l.id = *id;
    l.line = number;
    if (const json::Value *enc = obj->get("encoder")) {
      const json::Object *inputs = enc->getAsObject();
      if (!inputs || inputs->empty())
        return createStringError(where() + "\"encoder\" must be an object of encoder inputs "
                                           "({\"input_ids\": [ids]}, {\"input_features\": [[...]]})");
      for (const auto &[key, value] : *inputs) {
        PromptArray a;
        std::string why = flatten(value, 0, a);
        if (!why.empty())
          return createStringError(where() + "encoder input '" + printableName(key.str()) + "' " + why);
        l.encoder[key.str()] = std::move(a);
      }
    }
    out.push_back(std::move(l));
  }
  return out;
}

} // namespace hetplan::tools
