//===- PlanFile.cpp - read and write plan files ---------------------------===//
//
// Layout (docs/plan-format.md):
//   offset 0   8 bytes  "HETPLAN\n"
//   offset 8   8 bytes  body length, uint64 little-endian
//   offset 16  4 bytes  CRC-32 of the body, uint32 little-endian
//   offset 20           body: a serialized hetplan.plan.Plan
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/Files.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hetplan::runtime {
namespace {

// CRC-32 (IEEE 802.3 / zlib / PNG: reflected polynomial 0xEDB88320).
uint32_t crc32(const char *data, size_t size) {
  static const auto table = [] {
    struct T {
      uint32_t v[256];
    } t;
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t.v[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    c = table.v[(c ^ uint8_t(data[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void putLE(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(char((value >> (8 * i)) & 0xFF));
}

uint64_t getLE(const char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

std::string versionError(uint64_t version) {
  return "plan schema version " + std::to_string(version) +
         " is not supported by this runtime (it reads version " +
         std::to_string(kPlanSchemaVersion) +
         "); recompile the plan with this hetplan";
}

std::string errnoText(int err) { return std::strerror(err); }

} // namespace

std::string encodePlan(const plan::Plan &plan) {
  std::string body;
  {
    google::protobuf::io::StringOutputStream stream(&body);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    plan.SerializeToCodedStream(&coded);
  } // the CodedOutputStream flushes into `body` here
  std::string out;
  out.reserve(kPlanHeaderBytes + body.size());
  out.append(kPlanMagic, sizeof(kPlanMagic));
  putLE(out, body.size(), 8);
  putLE(out, crc32(body.data(), body.size()), 4);
  out += body;
  return out;
}

bool decodePlan(const std::string &bytes, plan::Plan &out, std::string &error) {
  const size_t size = bytes.size();
  const size_t magic = sizeof(kPlanMagic);
  if (size == 0) {
    error = "not a hetplan plan (the file is empty)";
    return false;
  }
  if (std::memcmp(bytes.data(), kPlanMagic, std::min(size, magic)) != 0) {
    error = "not a hetplan plan (it does not start with the HETPLAN header)";
    return false;
  }
  if (size < kPlanHeaderBytes) {
    error = "truncated plan (" + std::to_string(size) +
            " bytes, less than the " + std::to_string(kPlanHeaderBytes) +
            "-byte header)";
    return false;
  }
  const uint64_t length = getLE(bytes.data() + magic, 8);
  const uint32_t checksum = uint32_t(getLE(bytes.data() + magic + 8, 4));
  const uint64_t have = size - kPlanHeaderBytes;
  if (have < length) {
    error = "truncated plan (the header announces " + std::to_string(length) +
            " bytes of plan, the file holds " + std::to_string(have) + ")";
    return false;
  }
  if (have > length) {
    error = "corrupt plan (" + std::to_string(have - length) +
            " unexpected bytes after the plan)";
    return false;
  }
  if (length > uint64_t(INT_MAX)) {
    error = "plan too large (" + std::to_string(length) + " bytes)";
    return false;
  }
  const char *body = bytes.data() + kPlanHeaderBytes;
  if (crc32(body, size_t(length)) != checksum) {
    error = "corrupt plan (the checksum of its " + std::to_string(length) +
            " bytes does not match the header)";
    return false;
  }

  // Look at schema_version before anything else: a plan of another version
  // gets the version message even if its fields do not fit this schema.
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromArray(body, int(length))) {
    error = "corrupt plan (the body is not a protobuf message)";
    return false;
  }
  bool haveVersion = false;
  uint64_t version = 0;
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto &field = fields.field(i);
    if (field.number() == plan::Plan::kSchemaVersionFieldNumber &&
        field.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      haveVersion = true;
      version = field.varint();  // the last one wins, as in protobuf
    }
  }
  if (!haveVersion || version == 0) {
    error = "not a hetplan plan (no schema_version)";
    return false;
  }
  if (version != kPlanSchemaVersion) {
    error = versionError(version);
    return false;
  }
  if (!out.ParseFromArray(body, int(length))) {
    error = "corrupt plan (the body does not parse as a hetplan.plan.Plan)";
    return false;
  }
  return true;
}

bool readPlan(const std::string &path, plan::Plan &out, std::string &error) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = path + ": cannot open: " + errnoText(errno);
    return false;
  }
  struct stat st;
  int statErr = ::fstat(fd, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
  if (statErr != 0) {
    int err = statErr;
    ::close(fd);
    error = path + ": cannot open: " + errnoText(err);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {  // /dev/zero would be read forever
    ::close(fd);
    error = path + ": not a regular file";
    return false;
  }
  std::string bytes;
  if (S_ISREG(st.st_mode))
    bytes.reserve(size_t(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int err = errno;
      ::close(fd);
      error = path + ": cannot read: " + errnoText(err);
      return false;
    }
    if (n == 0)
      break;
    bytes.append(buffer, size_t(n));
  }
  ::close(fd);
  std::string why;
  if (!decodePlan(bytes, out, why)) {
    error = path + ": " + why;
    return false;
  }
  return true;
}

bool writePlan(const std::string &path, const plan::Plan &plan,
               std::string &error) {
  if (plan.schema_version() != kPlanSchemaVersion) {
    error = path + ": refusing to write a plan with schema_version " +
            std::to_string(plan.schema_version()) + " (this hetplan writes version " +
            std::to_string(kPlanSchemaVersion) + ")";
    return false;
  }
  return writeFileAtomically(path, encodePlan(plan), error);
}

std::string planModelPath(const std::string &planPath, const plan::Plan &plan, const std::string &hint,
                          std::string &error) {
  error.clear();
  const std::string &mp = plan.model().path();
  std::string path = mp;
  auto slash = planPath.find_last_of('/');
  if (!mp.empty() && mp[0] != '/' && slash != std::string::npos) path = planPath.substr(0, slash + 1) + mp;
  if (::access(path.c_str(), F_OK) != 0)
    error = planPath + ": the model it was compiled from, " + path +
            (mp.empty() || mp[0] == '/' ? "" : " ('" + mp + "' next to the plan)") +
            ", is missing: put it back, or give its path (" + hint + ")";
  return path;
}

} // namespace hetplan::runtime
