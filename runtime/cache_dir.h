/* Where kiln keeps what it compiled (the Vulkan pipeline cache, emitted PTX). */
#ifndef KILN_RUNTIME_CACHE_DIR_H
#define KILN_RUNTIME_CACHE_DIR_H

#include <stddef.h>

/* $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln, created if missing
 * (with its parent). 0 with the path in buf, or -1 when there is nowhere to keep it. */
int rt_cache_dir(char *buf, size_t cap);

/* Writes n bytes to path through path.<pid>.tmp and a rename, so a concurrent kiln never
 * reads half a file. 0, or -1 (nothing left behind). */
int rt_cache_write(const char *path, const void *data, size_t n);

#endif
