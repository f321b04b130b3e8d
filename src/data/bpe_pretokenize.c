// GPT-2's pre-tokenization pattern, matched by hand:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// The alternatives are tried in order at each position, as a backtracking regex
// engine does; every character falls in exactly one of the classes letter, number,
// space, other, so some alternative always matches and the pre-tokens tile the input.
#include "data/bpe_internal.h"

int bpe_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int need;
    uint32_t c, min;
    if (b >= 0xC2 && b <= 0xDF) need = 1, c = b & 0x1F, min = 0x80;
    else if (b >= 0xE0 && b <= 0xEF) need = 2, c = b & 0x0F, min = 0x800;
    else if (b >= 0xF0 && b <= 0xF4) need = 3, c = b & 0x07, min = 0x10000;
    else goto invalid;
    if ((size_t)need >= n) goto invalid;
    for (int i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) goto invalid;
        c = c << 6 | (s[i] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if (c < min || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) goto invalid;
    *cp = c;
    return need + 1;
invalid:
    *cp = 0xFFFFFFFF;
    return 1;
}

// ASCII classes, so that English text never reaches the UTF-8 decoder.
static const uint8_t ascii_class[128] = {
    ['\t'] = BPE_SPACE, ['\n'] = BPE_SPACE, ['\v'] = BPE_SPACE, ['\f'] = BPE_SPACE,
    ['\r'] = BPE_SPACE, [' '] = BPE_SPACE,
    ['0'] = BPE_NUMBER, ['1'] = BPE_NUMBER, ['2'] = BPE_NUMBER, ['3'] = BPE_NUMBER,
    ['4'] = BPE_NUMBER, ['5'] = BPE_NUMBER, ['6'] = BPE_NUMBER, ['7'] = BPE_NUMBER,
    ['8'] = BPE_NUMBER, ['9'] = BPE_NUMBER,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

// Class and length of the character at s[pos] (pos < len).
static inline int char_class(const uint8_t *s, size_t len, size_t pos, int *width) {
    uint8_t b = s[pos];
    if (b < 0x80) {
        *width = 1;
        return ascii_class[b];
    }
    uint32_t cp;
    *width = bpe_utf8_decode(s + pos, len - pos, &cp);
    return cp == 0xFFFFFFFF ? BPE_OTHER : bpe_uclass(cp);
}

// End of the run of characters of class cls starting at pos.
static size_t run_end(const uint8_t *s, size_t len, size_t pos, int cls) {
    while (pos < len) {
        int w;
        if (char_class(s, len, pos, &w) != cls) break;
        pos += (size_t)w;
    }
    return pos;
}

static size_t contraction(const uint8_t *s, size_t len, size_t pos) {
    size_t left = len - pos;
    if (left < 2) return 0;
    uint8_t c = s[pos + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
    if (left >= 3) {
        uint8_t d = s[pos + 2];
        if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return 3;
    }
    return 0;
}

size_t bpe_pretoken_end(const uint8_t *s, size_t len, size_t pos) {
    if (s[pos] == '\'') {
        size_t n = contraction(s, len, pos);
        if (n) return pos + n;
    }
    int w;
    int cls = char_class(s, len, pos, &w);
    if (cls != BPE_SPACE) return run_end(s, len, pos + (size_t)w, cls);
    // " ?X+": a single ASCII space glues to a following letter, number or other run.
    if (s[pos] == ' ' && pos + 1 < len) {
        int w2;
        int next = char_class(s, len, pos + 1, &w2);
        if (next != BPE_SPACE) return run_end(s, len, pos + 1 + (size_t)w2, next);
    }
    // \s+(?!\S): the whole space run at the end of the text, else all of it but the
    // last character (which then leads the next pre-token); \s+ for a single one.
    size_t end = run_end(s, len, pos + (size_t)w, BPE_SPACE);
    if (end == len) return end;
    if (end - pos == (size_t)w) return end;  // one space character before a non-space
    // Step back one character: UTF-8 continuation bytes are 10xxxxxx.
    size_t last = end - 1;
    while (last > pos && (s[last] & 0xC0) == 0x80) last--;
    return last;
}
