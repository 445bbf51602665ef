# Writes INPUT as a C++ byte array into OUTPUT, so the binary carries the file
# and never reads the source tree at run time.
#   cmake -DINPUT=in.yaml -DOUTPUT=out.inc -DSYMBOL=kName -P EmbedFile.cmake
# A byte array, not a string literal: no length limits, no escaping, no
# source-charset surprises.
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# 16 bytes a line (CMake regexes have no {n}).
string(REPEAT "0x[0-9a-f][0-9a-f]," 16 line)
string(REGEX REPLACE "(${line})" "\\1\n" bytes "${bytes}")
get_filename_component(name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${name} by EmbedFile.cmake. Do not edit.\n"
  "static const unsigned char ${SYMBOL}[] = {\n${bytes}\n};\n")
configure_file("${OUTPUT}.tmp" "${OUTPUT}" COPYONLY)
file(REMOVE "${OUTPUT}.tmp")
