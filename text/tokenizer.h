/* Tokenizers: the byte-level tokenizer of the builtin models and Hugging Face
 * tokenizer.json byte-level BPE (GPT-2, Qwen, Llama-3 families).  Chat
 * rendering (ChatML included) is text/chat_template.h.
 *
 * CONTRACT (shared by learner/, rollout/ and the CLI; extend, do not break). */
#ifndef LT_TEXT_TOKENIZER_H
#define LT_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct lt_tokenizer lt_tokenizer_t;

/* The byte tokenizer: ids 0..255 are bytes, then the special tokens
 * <|endoftext|>, <|im_start|>, <|im_end|> (vocab ≥ 259; ids up to the model's
 * vocab_size are valid and decode to nothing). */
int lt_tokenizer_byte(int vocab_size, lt_tokenizer_t **out);
/* The builtin models' vocabulary (configs/models/tiny-*.json): 256 bytes and 3 specials, padded to a multiple
 * of 8. */
#define LT_TOKENIZER_BYTE_VOCAB 264
/* PATH: a tokenizer.json file or a model directory containing one. */
int lt_tokenizer_load(const char *path, lt_tokenizer_t **out);
void lt_tokenizer_free(lt_tokenizer_t *t);

int lt_tokenizer_vocab(const lt_tokenizer_t *t);
/* Encodes UTF-8 text without adding special tokens, exactly as Hugging Face's
 * tokenizer(text, add_special_tokens=False) does: for tokenizer.json models,
 * added tokens that appear in the text are matched first.  The byte
 * tokenizer never interprets special-token text (it stays bytes).
 * *ids is malloc'd. */
int lt_tokenizer_encode(const lt_tokenizer_t *t, const char *text, size_t len, int32_t **ids, int *n);
/* Decodes ids to bytes (malloc'd, NUL-terminated; may be invalid UTF-8 when a
 * multi-byte character is split across a boundary). Special tokens render as
 * their text unless skip_special. */
int lt_tokenizer_decode(const lt_tokenizer_t *t, const int32_t *ids, int n, int skip_special, char **text, size_t *len);
/* Id of a special token by its text ("<|im_end|>"), or -1. */
int32_t lt_tokenizer_special(const lt_tokenizer_t *t, const char *text);
/* Ids that end an assistant turn (<|im_end|>, <|endoftext|>, the model's eos). */
int lt_tokenizer_is_stop(const lt_tokenizer_t *t, int32_t id);

/* The tokenizer of a model directory: its tokenizer.json, else the byte
 * tokenizer sized to the model's vocabulary. */
int lt_tokenizer_for_model(const char *dir, int vocab_size, lt_tokenizer_t **out);

/* Writes the byte tokenizer of vocab_size ids as Hugging Face files into dir
 * (tokenizer.json, a byte-level BPE without merges that encodes to the same
 * ids, and tokenizer_config.json with a ChatML chat_template).  Loaded back
 * it is a tokenizer.json tokenizer: special-token text in a prompt is then
 * matched as the special token, as Hugging Face does. */
int lt_tokenizer_byte_write(int vocab_size, const char *dir);

/* Copies the tokenizer files a model directory may hold (tokenizer.json,
 * tokenizer_config.json, ...) into another checkpoint directory. */
int lt_tokenizer_copy_files(const char *src_dir, const char *dst_dir);

/* Appends one id to a growable array (*ids, *n, *cap: malloc'd). */
int lt_ids_push(int32_t **ids, int *n, int *cap, int32_t id);
/* Appends the encoding of text. */
int lt_ids_text(const lt_tokenizer_t *t, const char *text, int32_t **ids, int *n, int *cap);

#endif
