# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed_file.cmake: the file's bytes as
# `const char NAME[]`, NUL-terminated, so the library carries it (the run report's page).
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "(..)" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "// Generated from ${IN}; do not edit.\nconst char ${NAME}[] = {${bytes}0x00};\n")
