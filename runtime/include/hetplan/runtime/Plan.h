//===- Plan.h - the plan the compiler writes and the runtime runs -*- C++ -*-===//
//
// The C++ classes protoc generates from runtime/schema/plan.proto (namespace
// hetplan::plan) and the constants of the plan file around them. The file
// layout is described in docs/plan-format.md; PlanFile.h reads, writes and
// checks plans, Explain.h describes them.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_PLAN_H
#define HETPLAN_RUNTIME_PLAN_H

#include "hetplan/runtime/schema/plan.pb.h"

#include <cstddef>
#include <cstdint>

namespace hetplan::runtime {

/// The schema version this build writes and the only one it reads
/// (Plan.schema_version). It goes up whenever a field gets a new meaning.
constexpr uint32_t kPlanSchemaVersion = 1;

/// Every plan file starts with these 8 bytes ...
constexpr char kPlanMagic[8] = {'H', 'E', 'T', 'P', 'L', 'A', 'N', '\n'};
/// ... then the body length (uint64, little-endian), then the CRC-32 of the
/// body (uint32, little-endian, the zlib/PNG polynomial); then the body, a
/// serialized hetplan.plan.Plan.
constexpr size_t kPlanHeaderBytes = 8 + 8 + 4;

} // namespace hetplan::runtime

#endif
