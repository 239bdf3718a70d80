/* modelgen/tok_import — Hugging Face tokenizers into GGUF's tokenizer.* keys.
 *
 * The keys are named, typed and filled as llama.cpp's converter does it
 * (convert_hf_to_gguf.py get_vocab_base/_set_vocab_gpt2 and gguf-py's SpecialVocab),
 * so a file kiln writes loads in llama.cpp with the same vocabulary, types and
 * special tokens as a converted one. Only byte-level BPE (tokenizer.ggml.model "gpt2")
 * is imported for now. */
#ifndef KILN_MODELGEN_TOK_IMPORT_H
#define KILN_MODELGEN_TOK_IMPORT_H

#include "base/error.h"
#include "modelgen/vocab.h"

#include <stddef.h>

/* tokenizer.json (+ optional tokenizer_config.json); pre_override NULL = infer.
 * A chat template missing from tokenizer_config.json is taken from chat_template.jinja
 * or chat_template.json beside it, as SpecialVocab does. 0 on success; -1 with err. */
int tok_import_hf(const char *tokenizer_json, const char *tokenizer_config, const char *pre_override,
                  tok_vocab *out, kiln_err *err);
/* Optional: a model's config.json fills special ids still absent ({bos,eos,unk,sep,pad,
 * cls,mask}_token_id, also under text_config), as SpecialVocab does after the tokenizer
 * files (Qwen3's bos_token_id comes only from there). */
int tok_import_hf_model_config(const char *config_json, tok_vocab *v, kiln_err *err);

#endif
