//===- SessionPlanCheck.cpp - a plan through the C API vs `hetplan run` ---===//
//
//   hetplan-session-plan-check PLAN EXPECTED_DIR [--threads N] [--ranks auto|inprocess|mpi]
//                              [--profile PREFIX] [--runs N] NAME=INPUT.npy...
//
// Creates a session from PLAN with the C API (hetplan.h) and the given
// options, runs it on the inputs (NumPy files, read with the runtime's
// readNpy), and compares every output with EXPECTED_DIR/<output>.npy that
// `hetplan run` wrote for the same plan and inputs: same shape and dtype,
// values within 1e-5 * (1 + |expected|). With --profile it also ends the
// profiling and checks the trace file. Under mpirun every process checks.
// Exit 0 when all match, 1 otherwise (one line per problem).
//
//===----------------------------------------------------------------------===//
#include "hetplan/hetplan.h"
#include "hetplan/runtime/Npy.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using hetplan::runtime::DType;
using hetplan::runtime::Tensor;

namespace {
int failures = 0;
void problem(int rank, const std::string &what) {
  std::fprintf(stderr, "FAIL%s: %s\n", rank >= 0 ? (" (rank " + std::to_string(rank) + ")").c_str() : "",
               what.c_str());
  ++failures;
}

double valueAt(const hetplan_tensor &t, size_t i) {
  switch (t.dtype) {
  case HETPLAN_FLOAT32: return static_cast<const float *>(t.data)[i];
  case HETPLAN_FLOAT64: return static_cast<const double *>(t.data)[i];
  case HETPLAN_INT64: return double(static_cast<const int64_t *>(t.data)[i]);
  case HETPLAN_INT32: return static_cast<const int32_t *>(t.data)[i];
  case HETPLAN_BOOL: case HETPLAN_UINT8: return static_cast<const uint8_t *>(t.data)[i];
  default: return NAN;
  }
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PLAN EXPECTED_DIR [--threads N] [--ranks auto|inprocess|mpi] "
                         "[--profile PREFIX] [--runs N] NAME=INPUT.npy...\n", argv[0]);
    return 2;
  }
  std::string plan = argv[1], expectedDir = argv[2];
  hetplan_session_options *options = nullptr;
  if (hetplan_session_options_create(&options) != HETPLAN_OK) return 1;
  std::vector<std::string> names;
  std::vector<Tensor> tensors;
  std::string profile;
  int runs = 1;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      if (hetplan_session_options_set_threads(options, std::atoi(argv[++i])) != HETPLAN_OK) return 2;
    } else if (a == "--ranks" && i + 1 < argc) {
      std::string r = argv[++i];
      hetplan_plan_ranks mode = r == "mpi" ? HETPLAN_RANKS_MPI : r == "inprocess" ? HETPLAN_RANKS_IN_PROCESS
                                                                                  : HETPLAN_RANKS_AUTO;
      hetplan_session_options_set_plan_ranks(options, mode);
    } else if (a == "--profile" && i + 1 < argc) {
      profile = argv[++i];
      hetplan_session_options_set_profiling(options, 1, profile.c_str());
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a.find('=') != std::string::npos) {
      names.push_back(a.substr(0, a.find('=')));
      tensors.push_back(hetplan::runtime::readNpy(a.substr(a.find('=') + 1)));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }

  hetplan_session *s = nullptr;
  hetplan_error *err = nullptr;
  hetplan_status st = hetplan_session_create_from_plan_with_options(plan.c_str(), options, &s, &err);
  hetplan_session_options_free(options);
  if (st != HETPLAN_OK) {
    problem(-1, std::string(hetplan_status_name(st)) + ": " + hetplan_error_message(err));
    hetplan_error_free(err);
    return 1;
  }
  const int rank = hetplan_session_process_rank(s);
  if (!hetplan_session_is_plan(s)) problem(rank, "hetplan_session_is_plan is 0 for a plan");

  std::vector<hetplan_tensor> in;
  for (size_t i = 0; i < names.size(); ++i)
    in.push_back({names[i].c_str(), static_cast<hetplan_dtype>(tensors[i].dtype()), tensors[i].shape().size(),
                  tensors[i].shape().data(), tensors[i].raw(), tensors[i].nbytes()});
  size_t compared = 0;
  double worst = 0;
  for (int run = 0; run < runs; ++run) {
    hetplan_result *r = nullptr;
    st = hetplan_session_run(s, in.data(), in.size(), &r, &err);
    if (st != HETPLAN_OK) {
      problem(rank, std::string("run: ") + hetplan_status_name(st) + ": " + hetplan_error_message(err));
      hetplan_error_free(err);
      break;
    }
    if (hetplan_result_count(r) != hetplan_session_output_count(s))
      problem(rank, "the result has " + std::to_string(hetplan_result_count(r)) + " outputs, the session " +
                        std::to_string(hetplan_session_output_count(s)));
    for (size_t o = 0; o < hetplan_result_count(r); ++o) {
      hetplan_tensor got;
      hetplan_result_get(r, o, &got);
      Tensor want = hetplan::runtime::readNpy(expectedDir + "/" + got.name + ".npy");
      std::vector<int64_t> shape(got.shape, got.shape + got.rank);
      if (shape != want.shape() || int(got.dtype) != int(want.dtype())) {
        problem(rank, std::string(got.name) + ": " + hetplan::runtime::shapeString(shape) + " " +
                          hetplan::runtime::dtypeName(DType(got.dtype)) + " vs hetplan run's " +
                          want.describe());
        continue;
      }
      hetplan_tensor w = {got.name, got.dtype, want.shape().size(), want.shape().data(), want.raw(), want.nbytes()};
      size_t n = got.nbytes / hetplan_dtype_size(got.dtype);
      for (size_t i = 0; i < n; ++i) {
        double a = valueAt(got, i), b = valueAt(w, i), d = std::fabs(a - b);
        worst = std::max(worst, d / (1 + std::fabs(b)));
        if (!(d <= 1e-5 * (1 + std::fabs(b)))) {
          problem(rank, std::string(got.name) + "[" + std::to_string(i) + "] = " + std::to_string(a) +
                            ", hetplan run wrote " + std::to_string(b));
          break;
        }
      }
      ++compared;
    }
    hetplan_result_free(r);
  }

  if (!profile.empty()) {
    const char *path = nullptr;
    st = hetplan_session_end_profiling(s, &path, &err);
    if (st != HETPLAN_OK) {
      problem(rank, std::string("end_profiling: ") + hetplan_error_message(err));
      hetplan_error_free(err);
    } else {
      std::ifstream f(path);
      std::stringstream text;
      text << f.rdbuf();
      const std::string t = text.str();
      for (const char *want : {"\"traceEvents\"", "\"cat\":\"rank\"", "\"op_type\"", "\"runs\":"})
        if (t.find(want) == std::string::npos) problem(rank, std::string(path) + " lacks " + want);
      if (t.find("\"runs\":" + std::to_string(runs)) == std::string::npos)
        problem(rank, std::string(path) + ": runs is not " + std::to_string(runs));
      std::remove(path);
    }
  }
  if (compared == 0 && failures == 0) problem(rank, "no output was compared");
  if (failures == 0)
    std::printf("ok%s: %s on %d ranks through the C API: %zu outputs equal hetplan run's (max rel diff %.3g)\n",
                rank >= 0 ? (" (rank " + std::to_string(rank) + ")").c_str() : "", plan.c_str(),
                hetplan_session_rank_count(s), compared, worst);
  hetplan_session_destroy(s);
  return failures ? 1 : 0;
}
