//===- FuzzCluster.cpp - cluster files (YAML and JSON) and specs ----------===//
//
// Bytes -> Cluster::fromYaml (cluster files, YAML or JSON) with the shipped
// device catalog, DeviceCatalog::parse (a catalog of device types, as
// `--catalog FILE` reads), and, for short single-line inputs,
// Cluster::fromSpec (the inline `4xA100-80G,12xT4;net=...` form). A parsed
// cluster is described and turned into JSON as `hetplan` prints it.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"

#include "passes/cluster/Cluster.h"
#include "passes/cluster/DeviceCatalog.h"

#include "llvm/Support/Error.h"

#include <cstdlib>

using namespace hetplan::cluster;

namespace {
template <typename T> void check(llvm::Expected<T> &result) {
  if (!result) {
    std::string message = llvm::toString(result.takeError());
    if (message.empty()) std::abort(); // an error must say what is wrong
  }
}
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Million-device clusters cost seconds each under ASan and test nothing a
  // 4,096-device one does not; the limit's error path is still reached.
  Cluster::setMaxDevices(4096);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  const DeviceCatalog &catalog = DeviceCatalog::builtin();
  auto cluster = Cluster::fromYaml(text, "fuzz.yaml", catalog);
  check(cluster);
  if (cluster) {
    (void)cluster->describe();
    (void)cluster->toJSON();
  }
  auto types = DeviceCatalog::parse(text, "fuzz-catalog.yaml");
  check(types);
  if (size < 256 && !text.contains('\n')) {
    auto spec = Cluster::fromSpec(text, catalog);
    check(spec);
    if (spec) (void)spec->describe();
  }
  return 0;
}
