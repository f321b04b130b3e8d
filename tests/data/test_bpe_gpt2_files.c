// GPT-2's file pair (encoder.json + vocab.bpe) on a small made-up vocabulary in
// GPT-2's byte alphabet: it loads and encodes as its merges say; a vocab.bpe that does
// not match encoder.json, a missing <|endoftext|>, ids given twice, characters outside
// the byte alphabet, a missing "#version" line are refused with one message; and
// mangled copies of both files never crash the loader.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "data/bpe_internal.h"
#include "test_util.h"

// GPT-2's bytes_to_unicode(): the character (as UTF-8) that spells byte b.
static int spell(uint8_t b, char *out) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    unsigned cp = b;
    if (!printable) {
        int n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) n++;
        cp = 256 + (unsigned)n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

// A JSON string literal of the spelling of bytes s.
static void spelled(const char *s, char *out) {
    int n = 0;
    for (; *s; s++) {
        char c[2];
        int k = spell((uint8_t)*s, c);
        for (int i = 0; i < k; i++) {
            if (c[i] == '"' || c[i] == '\\') out[n++] = '\\';
            out[n++] = c[i];
        }
    }
    out[n] = 0;
}

static char dir[] = "/tmp/bagualu_gpt2_XXXXXX";
static char enc_path[256], voc_path[256];

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    BG_ASSERT(f);
    fwrite(text, 1, n, f);
    fclose(f);
}

// encoder.json: the 256 bytes (ids 0..255), the given extra tokens, then eot.
static size_t make_encoder(char *out, size_t cap, const char *const *extra, int nextra, int with_eot) {
    size_t n = (size_t)snprintf(out, cap, "{");
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        spell((uint8_t)b, c);
        n += (size_t)snprintf(out + n, cap - n, "%s\"%s%s\": %d", b ? ", " : "", c[0] == '"' || c[0] == '\\' ? "\\" : "",
                              c, b);
    }
    for (int i = 0; i < nextra; i++) {
        char s[64];
        spelled(extra[i], s);
        n += (size_t)snprintf(out + n, cap - n, ", \"%s\": %d", s, 256 + i);
    }
    if (with_eot) n += (size_t)snprintf(out + n, cap - n, ", \"<|endoftext|>\": %d", 256 + nextra);
    n += (size_t)snprintf(out + n, cap - n, "}");
    return n;
}

static const char *const tokens[] = {" t", " th", " the", "he", " a", "an", " an", " and"};
// Ranks: " t", " th", "he", " the", "an", " an", " and", " a" (the last comes too late
// to stop " and").
static const char *const merges_text =
    "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0t h\nh e\n\xc4\xa0th e\na n\n\xc4\xa0 an\n\xc4\xa0" "an d\n\xc4\xa0 a\n";

static void expect_error(const char *enc, size_t enc_len, const char *voc, const char *needle) {
    write_file(enc_path, enc, enc_len);
    write_file(voc_path, voc, strlen(voc));
    bpe_tokenizer *t = NULL;
    int rc = bpe_load_gpt2(&t, enc_path, voc_path);
    TU_CHECK(rc == BG_ERR && !t && strstr(bg_last_error(), needle), "want an error with \"%s\", got \"%s\"", needle,
             rc == BG_OK ? "success" : bg_last_error());
    bpe_free(t);
}

int main(void) {
    BG_ASSERT(mkdtemp(dir));
    snprintf(enc_path, sizeof enc_path, "%s/encoder.json", dir);
    snprintf(voc_path, sizeof voc_path, "%s/vocab.bpe", dir);
    static char enc[1 << 16];
    size_t enc_len = make_encoder(enc, sizeof enc, tokens, 8, 1);
    write_file(enc_path, enc, enc_len);
    write_file(voc_path, merges_text, strlen(merges_text));

    bpe_tokenizer *t = NULL;
    TU_CHECK(bpe_load(&t, dir) == BG_OK, "load the directory: %s", bg_last_error());
    if (t) {
        TU_CHECK(bpe_vocab_size(t) == 265 && bpe_eot_token(t) == 264 && bpe_merge_count(t) == 8,
                 "265 tokens, eot 264, 8 merges");
        // " the" -> one token; " hand" -> " ", h, an, d; " and" -> one token.
        bpe_encoder *e = bpe_encoder_new(t);
        bpe_ids ids = {0};
        const char *text = " the hand and the";
        bpe_encode(e, (const uint8_t *)text, strlen(text), &ids);
        const uint32_t want[] = {258, ' ', 'h', 261, 'd', 263, 258};
        TU_CHECK(ids.count == 7 && memcmp(ids.ids, want, sizeof want) == 0, "\"%s\" encodes to %zu ids", text,
                 ids.count);
        bpe_ids_free(&ids);
        bpe_encoder_free(e);
        bpe_free(t);
    }
    // Either file named on its own finds the other beside it.
    TU_CHECK(bpe_load(&t, enc_path) == BG_OK, "load via encoder.json: %s", bg_last_error());
    bpe_free(t);
    TU_CHECK(bpe_load(&t, voc_path) == BG_OK, "load via vocab.bpe: %s", bg_last_error());
    bpe_free(t);

    expect_error(enc, enc_len, "#version: 0.2\n\xc4\xa0 q\n", "does not match encoder.json");  // " q" not a token
    expect_error(enc, enc_len, "#version: 0.2\nzz y\n", "does not match encoder.json");
    expect_error(enc, enc_len, "#version: 0.2\n\xc4\xa0 t extra\n", "not a merge");
    expect_error(enc, enc_len, "\xc4\xa0 t\n", "#version");
    expect_error(enc, enc_len, "#version: 0.2\nh e\nh e\n", "repeats");
    {
        static char no_eot[1 << 16];
        size_t n = make_encoder(no_eot, sizeof no_eot, tokens, 8, 0);
        expect_error(no_eot, n, merges_text, "<|endoftext|>");
    }
    {
        static char good[1 << 16], bad[1 << 16];
        make_encoder(good, sizeof good, tokens, 8, 1);
        char *p = strstr(good, "\"!\": 33");  // byte 0x21 spelled with a character outside the alphabet
        BG_ASSERT(p);
        int n = snprintf(bad, sizeof bad, "%.*s\"\\u0400\"%s", (int)(p - good), good, p + 3);
        expect_error(bad, (size_t)n, merges_text, "alphabet");
    }
    expect_error("{\"a\": 0, \"b\": 0}", 16, merges_text, "at least 257");
    expect_error("[]", 2, merges_text, "JSON object");
    expect_error("{\"a\": ", 6, merges_text, "not valid JSON");

    // Mangled copies: flips and cuts in either file. Load or refuse, never crash.
    static char m[1 << 16];
    char vm[512];
    tu_seed(5);
    int loaded = 0;
    for (int round = 0; round < 300; round++) {
        memcpy(m, enc, enc_len);
        size_t n = enc_len, vn = strlen(merges_text);
        memcpy(vm, merges_text, vn);
        char *buf = round % 2 ? vm : m;
        size_t *len = round % 2 ? &vn : &n;
        if (round % 4 < 2) {
            for (int k = 0; k < 2; k++) buf[(size_t)(tu_uniform() * *len)] = (char)(tu_uniform() * 256);
        } else {
            *len = (size_t)(tu_uniform() * *len);
        }
        write_file(enc_path, m, n);
        write_file(voc_path, vm, vn);
        bpe_tokenizer *x = NULL;
        if (bpe_load_gpt2(&x, enc_path, voc_path) == BG_OK) loaded++;
        else TU_CHECK(strlen(bg_last_error()) > 10, "a failed load names its problem");
        bpe_free(x);
    }
    printf("mangled GPT-2 files: %d of 300 still loaded, the rest refused with a message\n", loaded);
    unlink(enc_path);
    unlink(voc_path);
    rmdir(dir);
    return tu_finish("test_bpe_gpt2_files");
}
