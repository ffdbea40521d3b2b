# Writes OUTPUT, a C header that holds the bytes of INPUT as `static const unsigned char
# NAME[]` (NUL-terminated, not counted) and their count as `static const size_t NAME_len`.
# usage: cmake -DINPUT=file -DOUTPUT=header.h -DNAME=identifier -P embed.cmake
file(READ "${INPUT}" _hex HEX)
string(LENGTH "${_hex}" _digits)
math(EXPR _bytes "${_digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _array "${_hex}")
# About 16 bytes a line, so that the header stays readable in a diff tool.
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " _array "${_array}")
file(WRITE "${OUTPUT}.tmp"
  "/* Generated from ${INPUT} by cmake/embed.cmake; do not edit. */\n"
  "static const unsigned char ${NAME}[] = {\n    ${_array}0x00};\n"
  "static const size_t ${NAME}_len = ${_bytes};\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
