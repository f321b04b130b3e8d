# safetensors checksums: XXH64 from Debian's libxxhash-dev (scripts/packages/safetensors.txt).
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIB xxhash REQUIRED)
target_include_directories(bagualu_objects PUBLIC ${XXHASH_INCLUDE_DIR})
list(APPEND BG_LINK_DEPS ${XXHASH_LIB})
