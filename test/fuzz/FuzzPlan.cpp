//===- FuzzPlan.cpp - plan loader and validator ---------------------------===//
//
// The bytes go to decodePlan as a whole plan file (header, CRC, body). Most
// mutations break the CRC, so the same bytes are also read as a plan body
// and re-framed with encodePlan, which makes them reach the validator.
// Every plan decoded is then validated and described as `hetplan explain`
// does (report and SVG timeline), which the CLI does for invalid plans too.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"

#include "hetplan/runtime/Explain.h"
#include "hetplan/runtime/PlanFile.h"

#include <google/protobuf/stubs/logging.h>

#include <sstream>
#include <stdexcept>

using namespace hetplan::runtime;

namespace {
void exercise(const hetplan::plan::Plan &plan) {
  std::string error;
  (void)validatePlan(plan, error);
  std::ostringstream os;
  explainPlan(plan, os);
  (void)timelineSvg(plan);
  (void)explainHtml(plan);
}
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  google::protobuf::SetLogHandler(nullptr); // invalid UTF-8 in strings is logged per parse
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  hetplan::plan::Plan plan;
  std::string error;
  if (decodePlan(bytes, plan, error)) exercise(plan);
  hetplan::plan::Plan body;
  if (body.ParseFromString(bytes) && body.schema_version() == kPlanSchemaVersion &&
      decodePlan(encodePlan(body), plan, error))
    exercise(plan);
  return 0;
}
