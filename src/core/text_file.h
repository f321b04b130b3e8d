#ifndef BG_CORE_TEXT_FILE_H
#define BG_CORE_TEXT_FILE_H
#include <stddef.h>
// The whole file, NUL-terminated, its length in *len (len may be NULL); NULL with
// bg_error set if it cannot be read or holds more than max bytes. Caller frees.
char *bg_read_text_file(const char *path, size_t max, size_t *len);
#endif
