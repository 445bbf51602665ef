// embed_session.cpp - the C++ embedding API (hetplan/runtime/Session.h, C++17).
//
// Loads an ONNX model or a compiled plan with session options, runs it on
// deterministic input_ids, prints the first logits and, with --profile,
// writes a Chrome/Perfetto trace of the runs.
//
//   embed_session [--threads K] [--runs N] [--profile PREFIX] MODEL.onnx|PLAN
#include "hetplan/runtime/Session.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>

int main(int argc, char **argv) {
  hetplan::SessionOptions options;
  int runs = 2;
  const char *path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) options.threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--profile") && i + 1 < argc) {
      options.profiling = true;
      options.profilePrefix = argv[++i];
    } else if (argv[i][0] != '-' && !path) path = argv[i];
    else {
      std::cerr << "usage: " << argv[0] << " [--threads K] [--runs N] [--profile PREFIX] MODEL.onnx|PLAN\n";
      return 2;
    }
  }
  if (!path || runs < 1) {
    std::cerr << "usage: " << argv[0] << " [--threads K] [--runs N] [--profile PREFIX] MODEL.onnx|PLAN\n";
    return 2;
  }

  std::unique_ptr<hetplan::Session> session;
  hetplan::Status st = hetplan::Session::create(path, &session, options);
  if (!st.ok()) {
    std::cerr << st.toString() << "\n";
    return 1;
  }
  const hetplan::TensorInfo &in = session->inputs().at(0);
  if (session->inputs().size() != 1 || in.dtype != hetplan::runtime::DType::Int64) {
    std::cerr << path << ": this example feeds one int64 input (input_ids)\n";
    return 1;
  }
  // The plan's shape when it fixes one, else 2 x 8.
  int64_t batch = in.hasShape && in.shape.size() == 2 && in.shape[0] > 0 ? in.shape[0] : 2;
  int64_t seq = in.hasShape && in.shape.size() == 2 && in.shape[1] > 0 ? in.shape[1] : 8;
  hetplan::runtime::Tensor ids(hetplan::runtime::DType::Int64, {batch, seq});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 37 + 11) % 512;

  std::map<std::string, hetplan::runtime::Tensor> out;
  for (int r = 0; r < runs; ++r) {
    st = session->run({{in.name, ids}}, &out);
    if (!st.ok()) {
      std::cerr << st.toString() << "\n";
      return 1;
    }
  }
  const hetplan::runtime::Tensor &first = out.begin()->second;
  std::printf("%s %s on %d rank(s): %d runs of %s [%lldx%lld] -> %s %s, first value %.6f\n",
              session->isPlan() ? "plan" : "model", path, session->ranks(), runs, in.name.c_str(),
              (long long)batch, (long long)seq, out.begin()->first.c_str(), first.describe().c_str(),
              first.dtype() == hetplan::runtime::DType::Float32 ? double(first.data<float>()[0]) : 0.0);
  if (options.profiling) {
    std::string trace;
    st = session->endProfiling(&trace);
    if (!st.ok()) {
      std::cerr << st.toString() << "\n";
      return 1;
    }
    std::printf("profile: %s\n", trace.c_str());
  }
  return 0;
}
