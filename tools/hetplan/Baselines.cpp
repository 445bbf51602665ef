//===- Baselines.cpp - baselines in compile's and explain's output --------===//

#include "tools/hetplan/Baselines.h"

#include "hetplan/runtime/Explain.h"

#include <sstream>

namespace hetplan::tools {

llvm::json::Array baselinesJson(const plan::Plan &p) {
  llvm::json::Array out;
  for (const auto &b : p.baselines()) {
    llvm::json::Object o{{"strategy", b.strategy()}, {"fits", b.fits()}, {"note", b.note()}};
    if (b.fits()) {
      if (p.has_serving()) {
        o["capacity_rps"] = b.capacity_rps();
        o["tpot_p90_s"] = b.tpot_p90_s();
      } else {
        o["step_time_s"] = b.step_time_s();
        o["samples_per_s"] = b.samples_per_s();
      }
      o["gain"] = runtime::baselineGain(p, b);
    }
    out.push_back(std::move(o));
  }
  return out;
}

void printBaselines(const plan::Plan &p, llvm::raw_ostream &os) {
  std::ostringstream text;
  runtime::explainBaselines(p, text, "  ");
  os << text.str();
}

} // namespace hetplan::tools
