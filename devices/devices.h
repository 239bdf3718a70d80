/* devices/ — the device labels every command takes: "cpu" (the oracle), "cuda:N",
 * "vulkan:N" and "auto" (cuda:0, else vulkan:0, else cpu): parsed, enumerated and opened
 * one way, so probe, run, chat, serve, bench, diverge and dump agree on what a label
 * means. */
#ifndef KILN_DEVICES_DEVICES_H
#define KILN_DEVICES_DEVICES_H

#include "base/error.h"
#include "runtime/device.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEV_MAX_INDEX 63   /* the N of cuda:N / vulkan:N */
#define DEV_MAX_PER_BACKEND 16
#define DEV_LABEL_LEN 24

typedef enum dev_kind { DEV_CPU, DEV_CUDA, DEV_VULKAN, DEV_AUTO } dev_kind;

typedef struct dev_label {
    dev_kind kind;
    uint32_t index; /* cuda:N / vulkan:N */
} dev_label;

/* Parses a label: "cpu", "cuda:N", "vulkan:N" (N decimal, 0..DEV_MAX_INDEX) or, where
 * allow_auto, "auto". false on anything else. */
bool dev_parse(const char *text, bool allow_auto, dev_label *out);
/* The label's text ("cuda:0"); "auto" stays "auto". */
void dev_format(const dev_label *l, char out[DEV_LABEL_LEN]);

/* One device found by dev_enumerate. */
typedef struct dev_found {
    char label[DEV_LABEL_LEN];
    dev_label id;
    rt_caps caps; /* as probed (the CPU: rt_caps_default) */
} dev_found;

/* Every device on this machine into out[0..max): the CPU oracle first when with_cpu, then
 * each CUDA device, then each Vulkan device (at most DEV_MAX_PER_BACKEND of each). A
 * missing driver or GPU is no device, with a note (why; "" when none) for each backend
 * that found none or left devices out. 0, or -1 with err when a backend's probe failed
 * outright (out[0..*n) then holds what the other backends found). */
int dev_enumerate(dev_found *out, uint32_t max, uint32_t *n, bool with_cpu, char *note, size_t notelen, kiln_err *err);

/* "auto" resolved: cuda:0 where a CUDA device exists, else vulkan:0, else cpu; any other
 * label is returned as it is. */
dev_label dev_resolve(dev_label l);

/* Opens a GPU label with the --caps overrides (NULL: none). NULL with err for cpu (no
 * device to open: the oracle runs on the host), a missing device, or overrides it
 * refuses. */
rt_device *dev_open(dev_label l, const char *caps_override, kiln_err *err);

#endif
