#ifndef BG_DATA_TEXT_STREAM_H
#define BG_DATA_TEXT_STREAM_H
// Input text read in bounded pieces, for `prepare` and `tokenizer train`: a path or "-"
// (standard input), plain or gzip-compressed (zlib detects which), as text (documents
// split at literal "<|endoftext|>" markers, as bpe_next_document) or JSON Lines (one
// document per line: the string in field `jsonl_field`).
//
// A document comes as segments of at most about TEXT_SEGMENT_BYTES, each cut where a
// pre-token boundary is certain (after a '\n' followed by a printable ASCII character,
// else at the end of a pre-token that ends well before the bytes read so far), so
// encoding the segments one by one gives exactly the ids of encoding the whole document.
// Memory: the read buffer (TEXT_STREAM_BUFFER, growing only for a pre-token longer than
// it), and for JSON Lines the longest line (at most TEXT_LINE_MAX).
#include <stddef.h>
#include <stdint.h>

#define TEXT_SEGMENT_BYTES ((size_t)1 << 20)
#define TEXT_STREAM_BUFFER ((size_t)4 << 20)
#define TEXT_LINE_MAX ((size_t)256 << 20)

typedef struct {
    const uint8_t *text;
    size_t len;
    int doc_start, doc_end;  // the segment opens / closes a document
} text_segment;

typedef struct text_stream text_stream;

int text_stream_open(text_stream **out, const char *path, const char *jsonl_field);
// 1: *seg is the next segment (valid until the next call); 0: the input is done;
// BG_ERR: a read error, a binary file, a bad JSON line (bg_error names the input).
int text_stream_next(text_stream *s, text_segment *seg);
// Bytes read so far (uncompressed).
size_t text_stream_bytes(const text_stream *s);
void text_stream_close(text_stream *s);
#endif
