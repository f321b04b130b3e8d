// GPT-2's pre-tokenization pattern, case by case: contractions (case-sensitive, as
// in GPT-2), the optional leading space, white-space runs that leave their last
// character to the next word, JavaScript's \s (U+FEFF is space, U+0085 is not),
// Unicode letters and numbers, invalid UTF-8 and NUL bytes as "other". And on random
// bytes: the pre-tokens tile the input exactly. Whole-text agreement with
// gpt-3-encoder is test_bpe_gpt2_parity.sh.
#include <stdio.h>
#include <string.h>

#include "data/bpe_internal.h"
#include "test_util.h"

// Checks that text splits into the '|'-separated pieces of want.
static void expect_split(const char *text, size_t len, const char *want, size_t want_len) {
    char got[1024];
    size_t g = 0;
    for (size_t pos = 0; pos < len;) {
        size_t end = bpe_pretoken_end((const uint8_t *)text, len, pos);
        if (end <= pos || end > len) {
            TU_CHECK(0, "pre-token at %zu of \"%s\" ends at %zu", pos, text, end);
            return;
        }
        if (pos) got[g++] = '|';
        memcpy(got + g, text + pos, end - pos);
        g += end - pos;
        pos = end;
    }
    got[g] = 0;
    TU_CHECK(g == want_len && memcmp(got, want, g) == 0, "split of \"%s\": got \"%s\", want \"%s\"", text, got,
             want);
}
#define SPLIT(text, want) expect_split(text, sizeof text - 1, want, sizeof want - 1)

int main(void) {
    SPLIT("Hello world", "Hello| world");
    SPLIT("it's we'll I'm they're you've he'd don't", "it|'s| we|'ll| I|'m| they|'re| you|'ve| he|'d| don|'t");
    SPLIT("IT'S", "IT|'|S");            // contractions are lower-case only
    SPLIT("'lll ''s", "'ll|l| ''|s");   // a run of others swallows the quote
    SPLIT("a  b", "a| | b");            // two spaces: the second leads the word
    SPLIT("a   \n b", "a|   \n| b");
    SPLIT("x\n\ny", "x|\n|\n|y");
    SPLIT("end  ", "end|  ");          // trailing white space stays whole
    SPLIT("x\t\ty", "x|\t|\t|y");          // only U+0020 glues to a word
    SPLIT("123abc 45 6.7", "123|abc| 45| 6|.|7");
    SPLIT(" !!! ?", " !!!| ?");
    SPLIT("\xc2\xbd\xe2\x85\xa7x", "\xc2\xbd\xe2\x85\xa7|x");               // ½ Ⅷ are numbers
    SPLIT("\xe6\x97\xa5\xe6\x9c\xac text", "\xe6\x97\xa5\xe6\x9c\xac| text");  // 日本 are letters
    SPLIT("caf\xc3\xa9 na\xc3\xafve", "caf\xc3\xa9| na\xc3\xafve");
    SPLIT("a\xc2\xa0" "b", "a|\xc2\xa0|b");                  // U+00A0 is white space
    SPLIT("a \xc2\xa0" "b", "a| |\xc2\xa0|b");               // only U+0020 glues to a word
    SPLIT("a\xef\xbb\xbf\xef\xbb\xbf" "b", "a|\xef\xbb\xbf|\xef\xbb\xbf|b");  // U+FEFF: JavaScript's \s
    SPLIT("a\xc2\x85" "b", "a|\xc2\x85|b");                  // U+0085: not \s, an "other"
    SPLIT("a\xe3\x80\x80\xe3\x80\x80" "b", "a|\xe3\x80\x80|\xe3\x80\x80|b");  // ideographic space
    SPLIT("a \xe3\x80\x80 b", "a| \xe3\x80\x80| b");          // space run of 2 then " b"
    SPLIT("a\xff\xfe" "b \xff", "a|\xff\xfe|b| \xff");         // invalid UTF-8: others
    SPLIT("\xe6\x97", "\xe6\x97");                           // truncated sequence
    SPLIT("\xed\xa0\x80x", "\xed\xa0\x80|x");                // a surrogate is not UTF-8
    SPLIT("\xc0\xafx", "\xc0\xaf|x");                        // nor an overlong form

    // NUL inside (sizeof-based lengths keep it).
    SPLIT("a\0b", "a|\0|b");

    // Tiling on random bytes, weighted towards the interesting ones.
    static const uint8_t alphabet[] = {' ', ' ', '\n', '\t', '\'', 's', 'l', 'a', '1', '.', 0, 0xC3, 0xA9,
                                       0xE3, 0x80, 0x80, 0xEF, 0xBB, 0xBF, 0xFF, 0xC2, 0xA0, 0x85};
    tu_seed(7);
    uint8_t buf[512];
    for (int round = 0; round < 2000; round++) {
        size_t len = 1 + (size_t)(tu_uniform() * sizeof buf);
        for (size_t i = 0; i < len; i++)
            buf[i] = tu_uniform() < 0.8 ? alphabet[(size_t)(tu_uniform() * sizeof alphabet)]
                                        : (uint8_t)(tu_uniform() * 256);
        size_t pos = 0, pieces = 0;
        while (pos < len) {
            size_t end = bpe_pretoken_end(buf, len, pos);
            if (end <= pos || end > len) break;
            pos = end;
            pieces++;
        }
        TU_CHECK(pos == len, "round %d: pre-tokens stop at %zu of %zu", round, pos, len);
    }
    return tu_finish("test_bpe_pretokenize");
}
