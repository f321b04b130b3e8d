// Text input in bounded pieces (text_stream.h).
#include "data/text_stream.h"
#include "core/error.h"
#include "data/bpe_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define MARKER BPE_EOT_TEXT
#define MARKER_LEN (sizeof MARKER - 1)

struct text_stream {
    gzFile gz;
    char *path;
    char *field;        // JSON Lines: the text field; NULL for text
    uint8_t *buf;       // read buffer: bytes [pos, len) not yet served
    size_t cap, len, pos, total;
    int eof, checked, in_doc, done;
    long line;          // JSON Lines: number of the line last read
    char *rec;          // JSON Lines: the current record's text
    size_t rec_len, rec_pos;
    int rec_open;
};

int text_stream_open(text_stream **out, const char *path, const char *jsonl_field) {
    *out = NULL;
    gzFile gz = strcmp(path, "-") == 0 ? gzdopen(dup(0), "rb") : gzopen(path, "rb");
    if (!gz) return bg_error("%s: cannot open (%s)", path, errno ? strerror(errno) : "zlib");
    gzbuffer(gz, 1 << 18);
    text_stream *s = bg_calloc(1, sizeof *s);
    s->gz = gz;
    s->path = strdup(strcmp(path, "-") == 0 ? "standard input" : path);
    s->field = jsonl_field ? strdup(jsonl_field) : NULL;
    s->cap = TEXT_STREAM_BUFFER;
    s->buf = bg_malloc(s->cap + 1);
    *out = s;
    return BG_OK;
}

void text_stream_close(text_stream *s) {
    if (!s) return;
    gzclose(s->gz);
    free(s->buf);
    free(s->path);
    free(s->field);
    free(s->rec);
    free(s);
}

size_t text_stream_bytes(const text_stream *s) { return s->total; }

// The first MiB must look like text (as bpe_read_text_file); no NUL byte anywhere.
static int check_text(text_stream *s, const uint8_t *d, size_t n) {
    const uint8_t *nul = memchr(d, 0, n);
    if (nul) return bg_error("%s: binary file (NUL byte at offset %zu), expected text", s->path,
                             s->total - n + (size_t)(nul - d));
    if (s->checked) return BG_OK;
    s->checked = 1;
    size_t invalid = 0, checked = n < ((size_t)1 << 20) ? n : (size_t)1 << 20;
    for (size_t i = 0; i < checked;) {
        uint32_t cp;
        int w = bpe_utf8_decode(d + i, n - i, &cp);
        if (cp == 0xFFFFFFFF) invalid++;
        i += (size_t)w;
    }
    if (invalid * 10 > checked)
        return bg_error("%s: binary file (%zu of its first %zu bytes are not UTF-8), expected text", s->path,
                        invalid, checked);
    return BG_OK;
}

// Moves the unread bytes to the front and reads until the buffer is full or the input
// ends; grows the buffer (to at most TEXT_LINE_MAX) when it is full of unread bytes.
static int refill(text_stream *s) {
    if (s->pos > 0) {
        memmove(s->buf, s->buf + s->pos, s->len - s->pos);
        s->len -= s->pos;
        s->pos = 0;
    }
    if (s->len == s->cap) {
        if (s->cap >= TEXT_LINE_MAX)
            return bg_error("%s: more than %zu bytes without a place to cut (a line or a word that long)", s->path,
                            TEXT_LINE_MAX);
        s->cap *= 2;
        uint8_t *b = realloc(s->buf, s->cap + 1);
        if (!b) return bg_error_out_of_memory("out of memory growing a read buffer to %zu bytes", s->cap);
        s->buf = b;
    }
    while (!s->eof && s->len < s->cap) {
        int want = s->cap - s->len > (1u << 30) ? 1 << 30 : (int)(s->cap - s->len);
        int got = gzread(s->gz, s->buf + s->len, (unsigned)want);
        if (got < 0) {
            int err;
            const char *msg = gzerror(s->gz, &err);
            return bg_error("%s: read error (%s)", s->path, err == Z_ERRNO ? strerror(errno) : msg);
        }
        if (got == 0) {
            s->eof = 1;
            break;
        }
        s->total += (size_t)got;
        if (check_text(s, s->buf + s->len, (size_t)got) != BG_OK) return BG_ERR;
        s->len += (size_t)got;
    }
    if (s->eof && s->total == 0) return bg_error("%s: empty file (no text to read)", s->path);
    return BG_OK;
}

static int is_space_cp(uint32_t c) {  // Unicode White_Space: the pattern's \s
    return c == ' ' || (c >= 9 && c <= 13) || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Whether the last character of t[b, e) is white space (a byte outside valid UTF-8 is not).
static int ends_in_space(const uint8_t *t, size_t b, size_t e) {
    size_t s = e - 1;
    while (s > b && e - s < 4 && (t[s] & 0xC0) == 0x80) s--;
    uint32_t cp;
    int n = bpe_utf8_decode(t + s, e - s, &cp);
    return s + (size_t)n == e && cp != 0xFFFFFFFF && is_space_cp(cp);
}

static int ascii_graphic(uint8_t c) { return c > 0x20 && c < 0x7F; }

// Where to end a segment of text[pos, len) that continues past len: the last certain
// pre-token boundary in (pos, limit]; 0 when there is none. A segment encoded alone
// sees its end where the whole text had more, which changes nothing at a pre-token's
// end (every alternative of the pattern then ends there too) except for a run of
// white space: with a non-space after it, the whole text leaves its last character
// to a pre-token of its own (\s+(?!\S)), alone it stays one. So the cut may not
// follow two white-space characters.
static size_t cut_point(const uint8_t *t, size_t pos, size_t len, size_t limit) {
    for (size_t c = limit; c > pos + 2; c--)  // "x\ny": "\n" is a pre-token of its own
        if (t[c - 1] == '\n' && ascii_graphic(t[c]) && ascii_graphic(t[c - 2])) return c;
    // A pre-token's extent depends on at most the next character (4 bytes) after it:
    // one ending 8 bytes before the data does is the one the whole text has.
    size_t best = 0;
    int prev_space = 0;
    for (size_t at = pos; at < len;) {
        size_t end = bpe_pretoken_end(t, len, at);
        if (end + 8 > len || end > limit) break;
        int space = ends_in_space(t, at, end);
        if (!(space && prev_space)) best = end;
        prev_space = space;
        at = end;
    }
    return best;
}

// Text mode: the next segment of buf, refilling as needed. The window to cut in is
// TEXT_SEGMENT_BYTES, doubled while it holds no certain pre-token boundary.
static int next_text(text_stream *s, text_segment *seg) {
    size_t window = TEXT_SEGMENT_BYTES;
    for (;;) {
        if (s->done) return 0;
        while (!s->eof && s->len - s->pos < window + MARKER_LEN)
            if (refill(s) != BG_OK) return BG_ERR;
        size_t pos = s->pos, limit = s->len - pos > window + MARKER_LEN ? pos + window + MARKER_LEN : s->len;
        size_t next, end = bpe_next_document(s->buf, limit, pos, &next);
        *seg = (text_segment){s->buf + pos, 0, !s->in_doc, 0};
        if (end < limit) {  // a marker ends the document
            seg->len = end - pos, seg->doc_end = 1;
            s->pos = next;
            s->in_doc = 0;
            return 1;
        }
        if (s->eof && limit == s->len) {  // the input's last document
            seg->len = s->len - pos, seg->doc_end = 1;
            s->pos = s->len;
            s->done = 1;
            return 1;
        }
        // Mid-document: a marker may straddle `limit`; cut before its possible start.
        size_t c = cut_point(s->buf, pos, limit, limit - MARKER_LEN);
        if (c > pos) {
            seg->len = c - pos;
            s->pos = c;
            s->in_doc = 1;
            return 1;
        }
        window *= 2;
    }
}

// JSON Lines: the next line's text field as a document.
static int next_record(text_stream *s) {
    for (;;) {
        uint8_t *nl = memchr(s->buf + s->pos, '\n', s->len - s->pos);
        if (!nl && !s->eof) {
            if (refill(s) != BG_OK) return BG_ERR;
            continue;
        }
        if (!nl && s->pos == s->len) return 0;
        size_t end = nl ? (size_t)(nl - s->buf) : s->len;
        const char *line = (const char *)s->buf + s->pos;
        size_t n = end - s->pos;
        s->pos = nl ? end + 1 : end;
        s->line++;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == n) continue;  // a blank line
        cJSON *j = cJSON_ParseWithLength(line, n);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, s->field);
        if (!cJSON_IsString(v)) {
            int parsed = j != NULL;
            cJSON_Delete(j);
            return bg_error("%s:%ld: %s", s->path, s->line,
                            parsed ? "no string field of that name (--jsonl-field)" : "not a JSON object");
        }
        free(s->rec);
        s->rec_len = strlen(v->valuestring);
        s->rec = strdup(v->valuestring);
        cJSON_Delete(j);
        s->rec_pos = 0;
        return 1;
    }
}

static int next_jsonl(text_stream *s, text_segment *seg) {
    if (!s->rec_open) {
        int r = next_record(s);
        if (r != 1) return r;
        s->rec_open = 1;
    }
    const uint8_t *t = (const uint8_t *)s->rec;
    size_t pos = s->rec_pos, left = s->rec_len - pos;
    *seg = (text_segment){t + pos, left, pos == 0, 1};
    if (left > TEXT_SEGMENT_BYTES) {
        size_t c = cut_point(t, pos, s->rec_len, pos + TEXT_SEGMENT_BYTES);
        if (c > pos) seg->len = c - pos, seg->doc_end = 0;
    }
    s->rec_pos += seg->len;
    if (seg->doc_end) s->rec_open = 0;
    return 1;
}

int text_stream_next(text_stream *s, text_segment *seg) {
    return s->field ? next_jsonl(s, seg) : next_text(s, seg);
}
