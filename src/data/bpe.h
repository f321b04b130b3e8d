#ifndef BG_DATA_BPE_H
#define BG_DATA_BPE_H
// Byte-level BPE tokenizer: GPT-2's (encoder.json + vocab.bpe) or our own (tok.json,
// format in bpe_tokjson.c), GPT-2's pre-tokenization pattern, training.
//
// Every byte string encodes and decodes back to itself (NUL bytes and invalid UTF-8
// included): pre-tokens cover the input, and each byte has a token of its own.
// Text is text: "<|endoftext|>" inside the input encodes as ordinary characters,
// exactly as GPT-2's encoder does; callers that separate documents insert
// bpe_eot_token() themselves.
#include <stddef.h>
#include <stdint.h>

typedef struct bpe_tokenizer bpe_tokenizer;  // immutable once loaded: share across threads
typedef struct bpe_encoder bpe_encoder;      // per-thread cache and scratch space

// A growable list of token ids.
typedef struct {
    uint32_t *ids;
    size_t count, capacity;
} bpe_ids;
// BG_ERR (out of memory, v unchanged) when the list cannot grow.
int bpe_ids_push(bpe_ids *v, uint32_t id);
void bpe_ids_free(bpe_ids *v);

// spec: "gpt2" (GPT-2's files from $BAGUALU_GPT2_DIR, ./data/gpt2, data/gpt2 beside the
// build directory of the executable, or the cache directory below), a directory holding
// encoder.json and vocab.bpe, a path to an encoder.json (vocab.bpe beside it), or a
// tok.json written by bpe_save.
int bpe_load(bpe_tokenizer **out, const char *spec);
// Where "gpt2" looks last and where its files are fetched to (cli/gpt2_fetch.c):
// $BAGUALU_GPT2_DIR, else $XDG_CACHE_HOME/bagualu/gpt2, else ~/.cache/bagualu/gpt2.
// BG_ERR (no message) when none is set or the path does not fit.
int bpe_gpt2_cache_dir(char *buf, size_t cap);
// Whether "gpt2" finds an encoder.json (bpe_load may still refuse damaged files).
int bpe_gpt2_present(void);
int bpe_load_gpt2(bpe_tokenizer **out, const char *encoder_json, const char *vocab_bpe);
int bpe_load_tokjson(bpe_tokenizer **out, const char *path);
int bpe_save(const bpe_tokenizer *tok, const char *path);  // tok.json
void bpe_free(bpe_tokenizer *tok);

int bpe_vocab_size(const bpe_tokenizer *tok);
uint32_t bpe_eot_token(const bpe_tokenizer *tok);  // "<|endoftext|>"
int bpe_merge_count(const bpe_tokenizer *tok);
// Merge `rank` (0 first): the ids it joins and the id it makes.
void bpe_merge_at(const bpe_tokenizer *tok, int rank, uint32_t *left, uint32_t *right, uint32_t *result);
// The bytes of one token (not NUL-terminated).
const uint8_t *bpe_token_bytes(const bpe_tokenizer *tok, uint32_t id, size_t *len);

bpe_encoder *bpe_encoder_new(const bpe_tokenizer *tok);
void bpe_encoder_free(bpe_encoder *enc);
// Appends the ids of text[0..len) to out. Fails only for want of memory (BG_ERR,
// bg_error_out_of_memory); out then holds some of the ids, and the encoder stays usable.
int bpe_encode(bpe_encoder *enc, const uint8_t *text, size_t len, bpe_ids *out);

// The same in steps, for progress reports: encodes whole pre-tokens of text[0..len)
// from *pos on until at least `budget` bytes are done or the text ends, and moves
// *pos to where it stopped. Calling it until *pos is len gives exactly bpe_encode's ids.
int bpe_encode_part(bpe_encoder *enc, const uint8_t *text, size_t len, size_t *pos, size_t budget,
                    bpe_ids *out);

// Texts encoded in parallel over the thread pool (core/threads.h), job i's ids replacing
// the contents of jobs[i].out; encs holds at least bg_threads_get() encoders of one
// tokenizer. Each job's ids are bpe_encode's.
typedef struct {
    const uint8_t *text;
    size_t len;
    bpe_ids *out;
} bpe_job;
int bpe_encode_jobs(bpe_encoder **encs, int nenc, bpe_job *jobs, size_t n);

// Writes the bytes of ids to out (capacity out_cap); returns the number of bytes the
// whole decoding needs, or BG_ERR-style -1 with bg_error set for an id out of range.
long long bpe_decode(const bpe_tokenizer *tok, const uint32_t *ids, size_t count, uint8_t *out,
                     size_t out_cap);

// Training: feed texts (documents), then learn merges up to vocab_size tokens
// (256 bytes + merges + "<|endoftext|>"). Pre-tokens never cross document edges.
typedef struct bpe_trainer bpe_trainer;
bpe_trainer *bpe_trainer_new(void);
// BG_ERR (out of memory) when the word counts cannot grow.
int bpe_trainer_add_text(bpe_trainer *tr, const uint8_t *text, size_t len);
size_t bpe_trainer_unique_words(const bpe_trainer *tr);
// Adds src's word counts to dst (texts counted on several threads, then joined: the
// counts, and so the merges, are those of one trainer fed every text).
int bpe_trainer_merge(bpe_trainer *dst, const bpe_trainer *src);
// progress (may be NULL) is called now and then with merges done and merges wanted.
// Fails for a vocabulary under 257 and for want of memory.
int bpe_train(bpe_trainer *tr, int vocab_size, bpe_tokenizer **out,
              void (*progress)(void *ctx, int done, int total), void *ctx);
void bpe_trainer_free(bpe_trainer *tr);

// Input text files for training and preparing: the whole file, refused with one
// error line when missing, empty, or binary (NUL bytes, or mostly not UTF-8).
int bpe_read_text_file(const char *path, uint8_t **data, size_t *len);
// Splits text into documents at the literal marker "<|endoftext|>" (the marker itself
// is dropped): returns the end of the document starting at `pos` and sets *next to
// where the following one starts (len when none).
size_t bpe_next_document(const uint8_t *text, size_t len, size_t pos, size_t *next);
#endif
