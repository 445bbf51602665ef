//===- FuzzProfile.cpp - measured profiles ---------------------------------===//
//
// Bytes -> cost::Profile::parse (passes/cost/CostModel.h), what `hetplan
// compile --profile FILE` reads: a profile whose op times are finite and
// non-negative and whose rank speeds are positive, that writes back to
// JSON the parser reads the same; or one error line.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"

#include "passes/cost/CostModel.h"

#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto profile = hetplan::cost::Profile::parse(text, "fuzz.json");
  if (!profile) {
    std::string message = llvm::toString(profile.takeError());
    if (message.empty() || message.find('\n') != std::string::npos)
      std::abort();
    return 0;
  }
  for (const auto &[name, e] : profile->ops)
    if (!(e.fixedSeconds >= 0) || !(e.perSampleSeconds >= 0) || !std::isfinite(e.fixedSeconds) ||
        !std::isfinite(e.perSampleSeconds))
      std::abort();
  for (auto [rank, speed] : profile->rankSpeeds)
    if (rank < 0 || !(speed > 0) || !std::isfinite(speed))
      std::abort();
  std::string again;
  llvm::raw_string_ostream os(again);
  os << profile->toJSON();
  auto back = hetplan::cost::Profile::parse(again, "again.json");
  if (!back || back->ops.size() != profile->ops.size() || back->rankSpeeds != profile->rankSpeeds)
    std::abort();
  return 0;
}
