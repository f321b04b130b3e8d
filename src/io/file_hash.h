#ifndef BG_IO_FILE_HASH_H
#define BG_IO_FILE_HASH_H
#include <stdint.h>
// XXH64 (seed 0) of a whole file read in chunks: for files that do not even parse.
int io_file_xxh64(const char *path, uint64_t *sum);
#endif
