//===- PlanFile.h - read, write and check plan files ------------*- C++ -*-===//
//
// A plan file is a 20-byte header ("HETPLAN\n", body length, CRC-32 of the
// body) followed by a serialized hetplan.plan.Plan (docs/plan-format.md).
// Errors are one line that starts with the file's path.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_PLANFILE_H
#define HETPLAN_RUNTIME_PLANFILE_H

#include "hetplan/runtime/Plan.h"

#include <string>

namespace hetplan::runtime {

/// The bytes of a plan file for `plan`: header and deterministic body (same
/// plan, same bytes). Does not check the plan.
std::string encodePlan(const plan::Plan &plan);

/// Parses the bytes of a plan file. Fails, with a one-line `error` (without
/// a path), on a missing header, a truncated or corrupt body, a body without
/// schema_version, or a schema version other than kPlanSchemaVersion.
bool decodePlan(const std::string &bytes, plan::Plan &out, std::string &error);

/// Reads the plan file at `path`. `error` names the file: "PATH: cannot
/// open: No such file or directory", "PATH: not a hetplan plan (...)",
/// "PATH: truncated plan (...)", "PATH: plan schema version 7 is not
/// supported by this runtime (it reads version 1); recompile the plan with
/// this hetplan". Does not run validatePlan.
bool readPlan(const std::string &path, plan::Plan &out, std::string &error);

/// Writes `plan` to `path` atomically: into a temporary file in the same
/// folder, flushed, then renamed over `path`, so that a failure leaves either
/// the old file or none, never part of one. Refuses a plan whose
/// schema_version is not kPlanSchemaVersion. Same plan, same bytes.
bool writePlan(const std::string &path, const plan::Plan &plan,
               std::string &error);

/// The structural checks the runtime relies on; the first problem found is
/// put in `error` as one line (without a path):
///  - ranks are numbered 0..n-1, one per Cluster.devices entry, in order;
///    devices name existing nodes;
///  - stages are numbered 0..s-1; each has workers of `tensor_parallel`
///    existing ranks; a rank belongs to at most one worker and its
///    Rank.stage / Rank.worker name that worker; a rank no worker lists is
///    idle and has an empty program;
///  - the workers of a stage split the micro-batch without gaps or overlap,
///    and every stage sees the same micro-batch size;
///  - layers are contiguous and cover ModelRef.node_names; stages cover the
///    layers in order and their node ranges match their layers;
///  - instructions: known kind, micro_batch < Settings.micro_batches, node
///    ranges inside the rank's stage, peers exist and are not the rank
///    itself, activations go to the next stage and come from the previous
///    one (gradients the other way), all-reduce peers are in the same stage,
///    predicted_end_s >= predicted_start_s.
bool validatePlan(const plan::Plan &plan, std::string &error);

/// Part of validatePlan: every rank's program is in an order that computes
/// the right thing (receives before the FORWARD/BACKWARD that uses them,
/// sends after, the gradient all-reduce and optimizer step after the last
/// BACKWARD), and all programs run to their end together: a symbolic run
/// with buffered sends and blocking receives and collectives finishes. On
/// failure `error` names the instruction or the stuck ranks and what each
/// waits for (src/plan/PlanPrograms.cpp).
bool checkPlanPrograms(const plan::Plan &plan, std::string &error);

/// The model file `plan` names: plan.model.path, relative to the folder of
/// the plan file at `planPath` unless absolute (compile writes it so). When
/// that file is missing, `error` says where it looked and how to point at
/// the model (`hint`, e.g. "hetplan run --model PATH"); else it is cleared.
std::string planModelPath(const std::string &planPath, const plan::Plan &plan, const std::string &hint,
                          std::string &error);

/// True when no worker lists `rank` (the plan leaves that device unused).
bool isIdleRank(const plan::Plan &plan, uint32_t rank);

} // namespace hetplan::runtime

#endif
