#ifndef BG_DATA_SHARD_SET_H
#define BG_DATA_SHARD_SET_H
// A set of token shards (data/shard.h) named by one string:
//   - a glob pattern ("data/train_*.bin"),
//   - a directory (every "*.bin" file in it),
//   - a comma-separated list of the above,
//   - "@FILE": a text file with one path (or pattern) per line; blank lines and lines
//     starting with '#' are skipped.
// The shards are sorted by path (strcmp), so one string names the same sequence of
// shards everywhere. Each shard is memory-mapped; its tokens are checked against the
// vocabulary once, at open, in parallel.
#include <stddef.h>

#include "data/shard.h"

typedef struct {
    int count;
    char **paths;         // (count), sorted
    token_shard *shards;  // (count)
} shard_set;

// Only the names: the sorted paths the spec resolves to. BG_ERR (one line naming the
// part of spec that failed) for an empty glob, a directory without shards, an
// unreadable list file, or no path at all.
int shard_set_resolve(const char *spec, char ***paths, int *count);
void shard_set_paths_free(char **paths, int count);
// Resolves, maps and validates every shard (header, size, tokens < vocab_size). A
// check of many tokens prints a progress line on stderr when `verbose`.
int shard_set_open(shard_set *set, const char *spec, int vocab_size, int verbose);
void shard_set_free(shard_set *set);
size_t shard_set_tokens(const shard_set *set);
#endif
