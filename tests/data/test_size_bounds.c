// Sizes read from files are checked against the file before anything is allocated: a
// safetensors header claiming 2^40 bytes, a tok.json claiming a 10^9-token vocabulary
// or <|endoftext|> id, GPT-2 files claiming more tokens than they hold, a shard header
// claiming 2^31-1 tokens. The address space is capped at 2 GiB first, so an attempt to
// allocate what the file claims would show as an out-of-memory error, not the one-line
// size error each case expects.
#include "core/error.h"
#include "data/bpe.h"
#include "data/shard.h"
#include "io/safetensors.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static char dir[] = "/tmp/bg_size_bounds_XXXXXX";

static const char *put(const char *name, const void *bytes, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) exit(1);
    return path;
}

static void expect(const char *what, int rc, const char *pattern) {
    const char *e = bg_last_error();
    TU_CHECK(rc == BG_ERR, "%s: accepted", what);
    TU_CHECK(!bg_last_error_is_out_of_memory(), "%s: out of memory, so an allocation was tried: %s", what, e);
    TU_CHECK(strstr(e, pattern) != NULL, "%s: error \"%s\" lacks \"%s\"", what, e, pattern);
    TU_CHECK(strchr(e, '\n') == NULL, "%s: error is not one line: %s", what, e);
    printf("%-28s %s\n", what, e);
    bg_clear_error();
}

static const char *tokjson(const char *name, long long vocab, const char *merges, long long eot) {
    static char text[512];
    int n = snprintf(text, sizeof text,
                     "{\"format\": \"bagualu-bpe\", \"version\": 1, \"pretokenizer\": \"gpt2\", \"vocab_size\": %lld, "
                     "\"merges\": %s, \"special_tokens\": {\"<|endoftext|>\": %lld}}",
                     vocab, merges, eot);
    return put(name, text, (size_t)n);
}

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
    // ASan reserves terabytes of shadow memory: it cannot run under the address-space cap.
    printf("skipped: the address-space cap does not work under AddressSanitizer\n");
    return 77;
#endif
    if (!mkdtemp(dir)) return 1;
    struct rlimit cap = {(rlim_t)2 << 30, (rlim_t)2 << 30};
    setrlimit(RLIMIT_AS, &cap);
    bpe_tokenizer *tok = NULL;

    // safetensors: the 8-byte header length is checked against the limit and the file.
    unsigned char st[16] = {0};
    for (int i = 0; i < 8; i++) st[i] = (unsigned char)(((uint64_t)1 << 40) >> (8 * i));
    memcpy(st + 8, "{}      ", 8);
    st_file f;
    expect("safetensors header 2^40", st_open_memory(&f, st, sizeof st, "big.safetensors"), "exceeds the");
    memset(st, 0, 8);
    st[2] = 0x10;  // 2^20: under the limit, past the end of the file
    expect("safetensors header 2^20", st_open(&f, put("h.safetensors", st, sizeof st)), "runs past the end");

    // tok.json: the vocabulary must be 257 + the merges the file holds.
    expect("tok.json vocab 10^9", bpe_load(&tok, tokjson("v.json", 1000000000, "[[97, 98]]", 257)),
           "does not match");
    expect("tok.json eot 10^9", bpe_load(&tok, tokjson("e.json", 258, "[[97, 98]]", 999999999)),
           "special_tokens");
    expect("tok.json merge id 10^9", bpe_load(&tok, tokjson("m.json", 258, "[[97, 1000000000]]", 257)),
           "earlier tokens");

    // GPT-2 files: a merge list far longer than encoder.json's tokens cannot name them.
    char enc[8192] = "{";
    for (int b = 0; b < 256; b++)
        snprintf(enc + strlen(enc), sizeof enc - strlen(enc), "\"\\u%04x\": %d, ", b < 33 ? 0x100 + b : b, b);
    strcat(enc, "\"<|endoftext|>\": 1000000000}");
    const char *e = put("encoder.json", enc, strlen(enc));
    put("vocab.bpe", "#version: 0.2\n", 14);
    expect("encoder.json id 10^9", bpe_load(&tok, e), "out of range");

    // Shards: the count must match the file's size.
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION_U32, 0x7FFFFFFF};
    token_shard s;
    expect("shard count 2^31-1", shard_load(&s, put("s.bin", header, sizeof header), 50257), "header says");

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tu_finish("size_bounds");
}
