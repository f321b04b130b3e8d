#ifndef BG_IO_FILE_SYNC_H
#define BG_IO_FILE_SYNC_H
// Durable file-system steps: a file is "written" only once fsynced, a directory entry
// only once its directory is fsynced, and a finished directory replaces an old one by
// rename, so a crash never leaves a half-written file under its final name.
#include <stddef.h>

// dir/name into out; a path too long for the buffer is an error, never truncated.
int io_path_join(char *out, size_t n, const char *dir, const char *name);
// fsync of a file or directory by path.
int io_fsync_path(const char *path);
// Creates (or truncates) path, writes len bytes, fsyncs and closes; on any failure the
// file is removed and BG_ERR returned (bg_error names path and cause).
int io_write_file_synced(const char *path, const void *data, size_t len);
// io_write_file_synced for a large image in memory, bypassing the page cache where the
// file system allows (O_DIRECT: no copy into the cache, no write-back later, little CPU):
// data must start at an IO_DIRECT_ALIGN boundary; the last partial block, and the whole
// file where O_DIRECT is refused (tmpfs), go through ordinary writes.
#define IO_DIRECT_ALIGN 4096
int io_write_file_direct(const char *path, const void *data, size_t len);
// Removes a directory that holds plain files only; best effort, errors ignored.
void io_remove_flat_dir(const char *dir);
// Puts the complete directory tmp under the name final. When final exists the two are
// swapped in one atomic rename (RENAME_EXCHANGE), so at no instant is there no final,
// and the old one (now under tmp's name) is deleted. Where exchange is unsupported the
// old one is renamed to old_tmp first and deleted: a crash in between leaves final
// absent, never partial.
int io_replace_dir(const char *tmp, const char *final, const char *old_tmp);
#endif
