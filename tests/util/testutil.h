/* Helpers shared by kiln's Criterion tests: test data location, crafted GGUF bytes,
 * temporary files, and running the kiln binary. */
#ifndef KILN_TESTS_TESTUTIL_H
#define KILN_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ../shared/testdata (or $KILN_TESTDATA). When the folder is absent the calling test is
 * skipped by name, unless KILN_REQUIRE_TESTDATA=1, when it fails. Returns the folder. */
const char *tu_testdata(void);
/* tu_testdata() + "/" + rel, checked to exist (a missing file fails the test). */
const char *tu_data_file(const char *rel);

/* Calls fn(path, ctx) for every *.gguf file in dir; returns how many. */
int tu_each_gguf(const char *dir, void (*fn)(const char *path, void *ctx), void *ctx);

/* A fresh temporary directory for this test process (removed at exit). */
const char *tu_tmpdir(void);
/* tu_tmpdir() + "/" + name (static buffer rotation: hold at most 8 at once). */
const char *tu_tmp(const char *name);

/* Growable byte buffer to craft GGUF files by hand. */
typedef struct tu_buf { uint8_t *p; size_t n, cap; } tu_buf;
void tu_put(tu_buf *b, const void *p, size_t n);
void tu_u32(tu_buf *b, uint32_t v);
void tu_u64(tu_buf *b, uint64_t v);
void tu_str(tu_buf *b, const char *s);
void tu_pad(tu_buf *b, size_t align);
void tu_free(tu_buf *b);
/* Header: magic, version, n_tensors, n_kv. */
void tu_header(tu_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A u32 metadata entry. */
void tu_kv_u32(tu_buf *b, const char *key, uint32_t v);
void tu_kv_str(tu_buf *b, const char *key, const char *v);
/* A tensor info record (2 dims given in ne0, ne1; ne1 == 0 means 1-D). */
void tu_tensor_info(tu_buf *b, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1, uint64_t offset);
bool tu_write_file(const char *path, const void *p, size_t n);

/* Runs the kiln binary with args (NULL-terminated); captures stdout and stderr (up to
 * cap bytes each, NUL-terminated; pass NULL to discard). Returns the exit status, or
 * -1 if it did not exit normally. */
int tu_run_kiln(const char *const *args, char *out, size_t out_cap, char *errbuf, size_t err_cap);
/* The same with the bytes of input on stdin. */
int tu_run_kiln_input(const char *const *args, const char *input, char *out, size_t out_cap, char *errbuf,
                      size_t err_cap);

/* `kiln synth --preset tiny --arch ARCH --dtype DTYPE` into tu_tmp(name); its path. */
const char *tu_synth_tiny(const char *name, const char *arch, const char *dtype);

#endif
