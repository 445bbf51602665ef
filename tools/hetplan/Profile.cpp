//===- Profile.cpp - hetplan profile: measure this host -------------------===//
//
//   hetplan profile [--ranks R] [--threads N] [--out FILE] [--name NAME] [--quick]
//
// Runs the CPU runtime's micro-benchmarks (hetplan/runtime/Microbench.h) on
// R ranks of this host (threads of this process; under mpirun, one process
// per rank) and writes a cluster file (docs/cluster-format.md) with one
// device type, NAME, whose peak, bandwidth, links and `achieved` block are
// the measured figures, and one node of R such devices; `hetplan compile
// --cluster FILE` then prices plans for this machine. Comments at the top
// of the file say what was measured, when, on which host, under which load
// and with which command. Progress goes to stderr. docs/cost-model.md,
// "Profiling your cluster", gives the fits.
//
//===----------------------------------------------------------------------===//

#include "tools/hetplan/Commands.h"

#include "hetplan/runtime/Files.h"
#include "hetplan/runtime/Microbench.h"
#include "hetplan/runtime/MpiCommunicator.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace cl = llvm::cl;

namespace hetplan::tools {

std::string commandLine;

cl::SubCommand profileCmd("profile",
                          "Measure this host with the runtime's own kernels and communicators and write "
                          "a cluster file for `hetplan compile --cluster`");

namespace {
cl::opt<int> profRanks("ranks", cl::desc("Ranks on this host, all measured at once (threads; under mpirun the job's "
                                         "processes). Default 1"),
                       cl::init(1), cl::sub(profileCmd));
cl::opt<int> profThreads("threads", cl::desc("Kernel threads per rank (default: OMP_NUM_THREADS, else every core, "
                                             "as `hetplan run` uses)"),
                         cl::init(0), cl::sub(profileCmd));
cl::opt<std::string> profOut("out", cl::desc("Write the cluster file here (default: stdout)"),
                             cl::value_desc("FILE"), cl::sub(profileCmd));
cl::opt<std::string> profName("name", cl::desc("Device type name in the file (default: host-<hostname>)"),
                              cl::value_desc("NAME"), cl::sub(profileCmd));
cl::opt<bool> profQuick("quick", cl::desc("Fewer shapes, shorter timing (a few seconds; for tests)"),
                        cl::sub(profileCmd));

/// What the host says about itself (Linux /proc; empty or 0 when unknown).
struct HostInfo {
  std::string hostname, cpuModel, simd, date;
  int cores = 0;
  double mhz = 0;
  double memoryGiB = 0;
  double load[3] = {0, 0, 0};
  int lanes = 4;  // fp32 SIMD lanes per FMA
};

std::string cpuinfoField(const std::string &text, const std::string &key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, key.size(), key) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  return "";
}

void readLoad(double load[3]) {
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = 0;
}

HostInfo hostInfo() {
  HostInfo h;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) h.hostname = name;
  if (h.hostname.empty()) h.hostname = "localhost";
  std::ifstream f("/proc/cpuinfo");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string cpu = ss.str();
  h.cpuModel = cpuinfoField(cpu, "model name");
  h.mhz = std::atof(cpuinfoField(cpu, "cpu MHz").c_str());
  std::string flags = " " + cpuinfoField(cpu, "flags") + " ";
  if (flags.find(" avx512f ") != std::string::npos) h.simd = "avx512f", h.lanes = 16;
  else if (flags.find(" avx2 ") != std::string::npos) h.simd = "avx2", h.lanes = 8;
  else h.simd = "sse/neon (assumed 4 lanes)";
  h.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  std::ifstream mem("/proc/meminfo");
  for (std::string line; std::getline(mem, line);)
    if (line.compare(0, 9, "MemTotal:") == 0) h.memoryGiB = std::atof(line.c_str() + 9) / (1024.0 * 1024.0);
  readLoad(h.load);
  std::time_t now = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  h.date = buf;
  return h;
}

/// A YAML-safe device name: letters, digits, '-', '_', '.'.
std::string safeName(const std::string &s) {
  std::string out;
  for (char c : s) out += (std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.') ? c : '-';
  return out;
}

/// A double-quoted YAML string (backslashes and quotes escaped, control
/// characters dropped).
std::string quoted(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

/// `s` on one line (a comment must not end early): control characters become spaces.
std::string oneLine(std::string s) {
  for (char &c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return s;
}

std::string num(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

/// The per-op host terms of the runtime (dispatch per node, per run). The
/// software-stack section of issue 21 will take these; until then they are
/// the device's `achieved` fields. One place writes them.
void writeHostOverheads(std::ostream &os, const runtime::FittedHost &f, double threadStart,
                        const std::string &indent) {
  os << indent << "kernel_us: " << num(f.kernelSeconds * 1e6) << "        # per node run: executor dispatch + kernel entry\n";
  os << indent << "micro_batch_us: " << num((f.runSeconds + threadStart) * 1e6)
     << "   # per executor run (a stage's micro-batch) + starting the step's rank threads\n";
}

/// The share of a memory-bound op's bytes that it writes as a fresh output
/// (one of the three operands of a binary elementwise op), priced at the
/// first-touch rate: the CPU runtime allocates every output anew, and the
/// allocator returns large freed blocks to the kernel (page faults and
/// zeroing were a third of the CPU time of a bert-tiny step, `perf`).
constexpr double kFreshOutputShare = 1.0 / 3.0;

/// The cluster file: comments (what, when, where, how), one device type, one node.
std::string clusterYaml(const HostInfo &h, double loadEnd[3], const runtime::MicrobenchResult &r,
                        const runtime::FittedHost &f, const std::string &name) {
  int ranks = r.ranks;
  // Nominal fp32 peak of the cores, shared by the ranks: 2 FMA units x lanes x 2 FLOP per cycle.
  double ghz = h.mhz > 0 ? h.mhz / 1000 : 2.0;
  double hostPeak = double(h.cores) * h.lanes * 2 * 2 * ghz * 1e9;
  double peak = hostPeak / ranks;
  double matrix = std::min(1.0, f.gemm32.rate / peak);
  double bandwidth = std::max(f.copyBandwidth, f.streamBandwidth);
  // What a memory-bound op of a model reaches: the streaming ops' rate, with
  // its output (a third of a binary op's bytes) written to fresh pages.
  double effective = f.streamBandwidth;
  if (f.freshBandwidth > 0 && effective > 0)
    effective = 1.0 / (1.0 / f.streamBandwidth + kFreshOutputShare / f.freshBandwidth);
  double memoryShare = bandwidth > 0 ? std::min(1.0, effective / bandwidth) : 1.0;
  double fp16Peak = f.gemm16Rate > 0 ? f.gemm16Rate / matrix : 0;
  std::string link = r.mpi ? "mpi" : "threads";
  double linkGBs = f.linkBandwidth > 0 ? f.linkBandwidth / 1e9 : bandwidth / 1e9;
  std::ostringstream os;
  os << "# hetplan profile: this host measured with the CPU runtime's own kernels (docs/cost-model.md,\n"
     << "# \"Profiling your cluster\").\n"
     << "# host: " << oneLine(h.hostname) << "; cpu: " << oneLine(h.cpuModel.empty() ? "unknown" : h.cpuModel) << ", " << h.cores
     << " logical cores, " << num(h.mhz, 5) << " MHz, " << h.simd << "; " << num(h.memoryGiB, 4) << " GiB\n"
     << "# date: " << h.date << "\n"
     << "# command: " << oneLine(commandLine) << "\n"
     << "# load average (1, 5, 15 min): " << num(h.load[0], 3) << " " << num(h.load[1], 3) << " "
     << num(h.load[2], 3) << " at start, " << num(loadEnd[0], 3) << " " << num(loadEnd[1], 3) << " "
     << num(loadEnd[2], 3) << " at end (above " << h.cores << ": other work shared the cores)\n"
     << "# ranks: " << ranks << (r.mpi ? " MPI processes" : " threads of one process") << ", " << r.threads
     << " kernel thread(s) each; every rank ran the compute benchmarks at once; rank 0's times\n"
     << "# cpu share: " << num(r.cpuShare, 3) << " of a core per kernel thread (process CPU time / (wall x ranks x threads)\n"
     << "#   while every rank ran MatMuls for " << (profQuick ? "0.2" : "1") << " s); the fits divide the call times below by it\n"
     << "# measured: time of a call not preempted (" << (r.threads == 1 ? "median thread CPU time per call" : "lower quartile of the wall times") << "):\n";
  for (const auto &g : r.gemm)
    os << "#   MatMul " << g.dtype << " " << (g.batch > 1 ? std::to_string(g.batch) + " x " : "") << g.m << "x" << g.k << "x" << g.n << ": " << num(g.seconds * 1e3)
       << " ms, " << num(g.flops() / g.seconds / 1e9) << " GFLOP/s\n";
  for (const auto &p : r.stream)
    os << "#   " << p.what << ": " << num(p.seconds * 1e3) << " ms, " << num(p.x / p.seconds / 1e9)
       << " GB/s (bytes read + written)\n";
  for (const auto &p : r.copy)
    os << "#   " << p.what << ": " << num(p.seconds * 1e3) << " ms, " << num(p.x / p.seconds / 1e9)
       << " GB/s (read + write)\n";
  for (const auto &p : r.fresh)
    os << "#   " << p.what << " (map, write, unmap): " << num(p.seconds * 1e3) << " ms, "
       << num(p.x / p.seconds / 1e9) << " GB/s\n";
  for (const auto &p : r.dispatch)
    os << "#   Relu chain of " << num(p.x, 6) << " tiny nodes: " << num(p.seconds * 1e6) << " us per run\n";
  for (const auto &p : r.send)
    os << "#   send " << num(p.x, 8) << " bytes rank 0 -> 1 (" << link << "): " << num(p.seconds * 1e6) << " us\n";
  for (const auto &p : r.allReduce)
    os << "#   all-reduce " << num(p.x, 8) << " bytes over " << ranks << " ranks: " << num(p.seconds * 1e6) << " us\n";
  if (r.threadStartSeconds > 0)
    os << "#   start and join " << ranks << " rank thread(s) with a comm group: " << num(r.threadStartSeconds * 1e6)
       << " us\n";
  os << "# fits (least squares on relative error) of the compute times above divided by the cpu share:\n"
     << "#   MatMul fp32: time = fixed + (FLOPs + products x " << num(f.gemm32.halfFlops / 1e9) << " GFLOP) / "
     << num(f.gemm32.rate / 1e9) << " GFLOP/s; median |error| " << num(100 * f.gemm32.medianRelError, 3)
     << "%, worst " << num(100 * f.gemm32.maxRelError, 3) << "%\n"
     << "#   nominal fp32 peak per rank: " << h.cores << " cores x " << h.lanes << " lanes x 2 FMA units x 2 FLOP x "
     << num(ghz, 4) << " GHz / " << ranks << " rank(s) = " << num(peak / 1e9) << " GFLOP/s; matrix = "
     << num(f.gemm32.rate / 1e9) << " / " << num(peak / 1e9) << "\n";
  if (f.gemm16Rate > 0)
    os << "#   MatMul fp16 (the runtime converts to fp32): " << num(f.gemm16Rate / 1e9)
       << " GFLOP/s; peak_tflops.fp16 = that / matrix\n";
  os << "#   memory-bound ops: " << num(f.streamBandwidth / 1e9) << " GB/s; memcpy " << num(f.copyBandwidth / 1e9)
     << " GB/s; fresh pages " << num(f.freshBandwidth / 1e9) << " GB/s; effective = 1 / (1 / ops + "
     << num(kFreshOutputShare, 3) << " / fresh) = " << num(effective / 1e9)
     << " GB/s; memory = effective / the faster of ops and memcpy\n"
     << "#   dispatch: " << num(f.kernelSeconds * 1e6) << " us per node (slope), " << num(f.runSeconds * 1e6)
     << " us per run (intercept); median |error| " << num(100 * f.dispatch.medianRelError, 3) << "%\n";
  if (f.linkBandwidth > 0)
    os << "#   send: " << num(f.linkLatency * 1e6) << " us + bytes / " << num(f.linkBandwidth / 1e9) << " GB/s\n";
  std::string source = "hetplan profile, " + h.hostname + ", " + h.date + ", " + std::to_string(ranks) +
                       " rank(s) x " + std::to_string(r.threads) + " thread(s)" + (r.mpi ? " (MPI)" : "");
  os << "name: profiled-" << safeName(h.hostname) << "\n"
     << "devices:\n"
     << "  - name: " << name << "\n"
     << "    vendor: " << quoted(h.cpuModel.empty() ? "unknown" : h.cpuModel) << "\n"
     << "    kind: cpu\n"
     << "    memory_gib: " << num(std::max(0.001, h.memoryGiB / ranks)) << "      # this host's memory / ranks\n"
     << "    memory_bandwidth_gbs: " << num(bandwidth / 1e9) << "      # measured: memcpy or the memory-bound ops, the faster; per rank\n"
     << "    peak_tflops: {fp32: " << num(peak / 1e12);
  if (fp16Peak > 0) os << ", fp16: " << num(fp16Peak / 1e12);
  os << "}\n"
     << "    intra_node_link: {kind: " << link << ", bandwidth_gbs: " << num(linkGBs) << "}\n"
     << "    pcie: {generation: 5, bandwidth_gbs: " << num(bandwidth / 1e9)
     << "}   # no PCIe link of its own: the format needs one; host copy rate\n"
     << "    sources: [" << quoted(source) << "]\n"
     << "    achieved:\n"
     << "      matrix: " << num(matrix) << "\n"
     << "      matrix_half_gflop: " << num(f.gemm32.halfFlops / 1e9) << "\n"
     << "      memory: " << num(memoryShare) << "\n";
  writeHostOverheads(os, f, r.threadStartSeconds, "      ");
  os << "      source: " << quoted(source) << "\n"
     << "nodes:\n"
     << "  - name: " << safeName(h.hostname) << "\n"
     << "    devices: [{type: " << name << ", count: " << ranks << "}]\n";
  if (f.linkBandwidth > 0)
    os << "    intra_node_link: {kind: " << link << ", bandwidth_gbs: " << num(linkGBs)
       << ", latency_us: " << num(std::max(0.0, f.linkLatency * 1e6)) << "}\n";
  return os.str();
}

int checkFlags() {
  if (profRanks < 1 || profRanks > 256)
    return fail("--ranks must be between 1 and 256, not " + std::to_string(profRanks));
  if (profThreads < 0 || profThreads > 4096)
    return fail("--threads must be between 0 (the default) and 4096, not " + std::to_string(profThreads));
  if (profName.getNumOccurrences()) {
    if (profName.empty()) return fail("--name must not be empty");
    if (safeName(profName) != profName)
      return fail("--name '" + profName + "': use letters, digits, '-', '_' and '.' only");
  }
  if (profOut.getNumOccurrences() && profOut.empty()) return fail("--out must name a file");
  return 0;
}
} // namespace

int runProfileCommand() {
  if (int rc = checkFlags()) return rc;
  HostInfo host = hostInfo();
  std::string name = profName.getNumOccurrences() ? std::string(profName) : "host-" + safeName(host.hostname);
  runtime::MicrobenchOptions options;
  options.ranks = profRanks;
  options.threads = profThreads;
  options.quick = profQuick;
  try {
    std::unique_ptr<runtime::Communicator> mpi;
    if (runtime::launchedByMpi()) {
#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
      mpi = std::make_unique<runtime::MpiCommunicator>();
      if (profRanks.getNumOccurrences() && profRanks != mpi->size())
        return mpi->rank() == 0 ? fail("--ranks is " + std::to_string(profRanks) + ", the MPI job has " +
                                       std::to_string(mpi->size()) + " processes")
                                : 1;
#else
      return fail("started by an MPI launcher, but this hetplan was built without MPI");
#endif
    }
    bool writer = !mpi || mpi->rank() == 0;
    if (writer)
      options.progress = [](const std::string &line) { llvm::errs() << "profile: " << line << "\n"; };
    runtime::MicrobenchResult result = runtime::runMicrobench(options, mpi.get());
    if (mpi) mpi->barrier();
    if (!writer) return 0;
    runtime::FittedHost fitted = runtime::fitMicrobench(result);
    double loadEnd[3];
    readLoad(loadEnd);
    std::string yaml = clusterYaml(host, loadEnd, result, fitted, name);
    if (profOut.empty()) {
      llvm::outs() << yaml;
    } else {
      std::string error;
      if (!runtime::writeFileAtomically(profOut, yaml, error)) return fail(error);
      llvm::errs() << "profile: wrote " << profOut << " (device type " << name << ", " << result.ranks
                   << " rank(s))\n";
    }
    return 0;
  } catch (const std::exception &e) {
    return fail(std::string("profile: ") + e.what());
  }
}

} // namespace hetplan::tools
