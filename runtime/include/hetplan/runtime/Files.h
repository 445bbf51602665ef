//===- Files.h - reading and writing the files users hand us ---*- C++ -*-===//
//
// One rule for every file hetplan reads or writes on a user's behalf:
// models, plans, inputs and outputs are regular files. A device node, FIFO
// or directory is refused by name: /dev/zero would be read forever, a FIFO
// blocks open, and writing "over" /dev/null as root would replace the device
// node with a regular file. Writes go to a temporary file in the same folder
// and are renamed into place, so a failure leaves no partial output.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_FILES_H
#define HETPLAN_RUNTIME_FILES_H

#include <string>

namespace hetplan::runtime {

/// Empty when `path` may be written: it does not exist or is a regular
/// file. Otherwise the one-line reason ("PATH: is a character device, not a
/// regular file; refusing to replace it").
std::string replaceableError(const std::string &path);

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename) after
/// replaceableError. False with `error` set ("PATH: cannot write: ...").
bool writeFileAtomically(const std::string &path, const std::string &bytes,
                         std::string &error);

} // namespace hetplan::runtime

#endif
