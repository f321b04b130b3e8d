# safetensors checksums: XXH64 from Debian's libxxhash-dev (scripts/packages/safetensors.txt).
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIB xxhash REQUIRED)
target_include_directories(bagualu PUBLIC ${XXHASH_INCLUDE_DIR})
target_link_libraries(bagualu PUBLIC ${XXHASH_LIB})
