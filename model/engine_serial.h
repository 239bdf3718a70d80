/* Engines that must not evaluate at the same time, made safe to drive from one thread
 * each: several plans on one device (a Vulkan queue needs external synchronization; CUDA
 * plans share the device's context and stream), or several oracles (each pool already
 * uses every core, so running two at once would only make both slower). Each wrapped
 * engine takes a turn per eval call under one fair lock: a ticket lock, first come first
 * served, so engines driven in parallel alternate call by call (token by token when
 * decoding) where a plain mutex could hand the lock back to the same thread repeatedly. */
#ifndef KILN_MODEL_ENGINE_SERIAL_H
#define KILN_MODEL_ENGINE_SERIAL_H

#include "base/error.h"
#include "model/engine.h"

/* Replaces e[0..n) with wrappers sharing one fair lock; each wrapper owns its engine
 * (destroying it destroys the engine) and has its name, sizes and cache state. 0, or -1
 * with err (out of memory) and e[] unchanged. */
int engine_serialize(engine **e, uint32_t n, kiln_err *err);

#endif
