// libFuzzer target: the model config JSON reader (model/config.c).
// Invariants on configs the reader accepts: they validate, and writing one out and
// parsing that gives the same config (model_config_to_json's promise).
#include "fuzz_util.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    model_config cfg, back;
    bg_clear_error();
    if (model_config_parse(&cfg, text, "fuzz") != BG_OK) {
        fuzz_check_error("fuzz: ");
    } else {
        FUZZ_CHECK(model_config_validate(&cfg, "fuzz") == BG_OK);
        char *json = model_config_to_json(&cfg);
        FUZZ_CHECK(json);
        FUZZ_CHECK(model_config_parse(&back, json, "written-back") == BG_OK);
        FUZZ_CHECK(memcmp(&cfg, &back, sizeof cfg) == 0);
        free(json);
    }
    free(text);
    return 0;
}
