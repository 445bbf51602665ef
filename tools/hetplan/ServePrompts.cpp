//===- ServePrompts.cpp - the JSON-lines prompts hetplan serve reads ------===//
#include "tools/hetplan/ServePrompts.h"

#include "hetplan/runtime/JsonDepth.h"

using namespace llvm;

namespace hetplan::tools {

namespace {
/// A request nests two levels; 64 is plenty.
constexpr int kMaxDepth = 64;
} // namespace

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
    out.push_back(std::move(l));
  }
  return out;
}

} // namespace hetplan::tools
