// libFuzzer target: a checkpoint's trainer.json reader (train/checkpoint_meta.c) and
// the config check a resume makes with it. Each input is tried as it is, and with its
// "trainer_json_xxh64" checksum recomputed (when it has those 16 hex digits), so that
// mutations get past the checksum to the fields behind it. Invariants on accepted
// files: the fields hold what the reader promises; comparing the saved config with a
// default one succeeds or names the mismatch.
#include "fuzz_util.h"
#include "model/config.h"
#include "train/checkpoint_meta.h"

#include <ctype.h>
#include <xxhash.h>

static void try_text(const char *text, size_t len) {
    ckpt_meta m;
    bg_clear_error();
    const char *path = fuzz_file(0, text, len);
    if (ckpt_meta_read(&m, path) != BG_OK) {
        fuzz_check_error(path);
        FUZZ_CHECK(m.root == NULL);
        return;
    }
    FUZZ_CHECK(m.step >= 0 && m.total_steps >= 0 && m.seed && m.model_config);
    FUZZ_CHECK(m.loss_scale == 0 || m.loss_scale > 0);
    model_config cfg;
    model_config_defaults(&cfg);
    bg_clear_error();
    if (ckpt_meta_check_config(m.model_config, &cfg, path) != BG_OK) fuzz_check_error(path);
    ckpt_meta_free(&m);
}

// The last "trainer_json_xxh64": "<16 hex digits>" of text, as the reader finds it.
static char *sum_digits(char *text) {
    char *p = NULL;
    for (char *q = text; (q = strstr(q, "\"trainer_json_xxh64\"")); q++) p = q;
    if (!p) return NULL;
    p += strlen("\"trainer_json_xxh64\"");
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') return NULL;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != '"') return NULL;
    for (int i = 0; i < 16; i++)
        if (!isxdigit((unsigned char)p[i])) return NULL;
    return p[16] == '"' ? p : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 20)) return 0;
    char *text = malloc(size + 1);
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    try_text(text, size);
    char *digits = sum_digits(text);
    if (digits) {
        memset(digits, '0', 16);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64(text, size, 0));
        memcpy(digits, hex, 16);
        try_text(text, size);
    }
    free(text);
    return 0;
}
