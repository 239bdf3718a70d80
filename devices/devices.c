#include "devices/devices.h"

#include "backend-ptx/cuda_device.h"
#include "backend-ptx/cuda_probe.h"
#include "backend-spirv/vk_device.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse_index(const char *s, uint32_t *out) {
    if (*s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > DEV_MAX_INDEX) return false;
    *out = (uint32_t)v;
    return true;
}

bool dev_parse(const char *text, bool allow_auto, dev_label *out) {
    dev_label l = {DEV_CPU, 0};
    if (!text) return false;
    if (!strcmp(text, "cpu")) l.kind = DEV_CPU;
    else if (!strcmp(text, "auto") && allow_auto) l.kind = DEV_AUTO;
    else if (!strncmp(text, "cuda:", 5) && parse_index(text + 5, &l.index)) l.kind = DEV_CUDA;
    else if (!strncmp(text, "vulkan:", 7) && parse_index(text + 7, &l.index)) l.kind = DEV_VULKAN;
    else return false;
    *out = l;
    return true;
}

void dev_format(const dev_label *l, char out[DEV_LABEL_LEN]) {
    switch (l->kind) {
    case DEV_CPU: snprintf(out, DEV_LABEL_LEN, "cpu"); break;
    case DEV_AUTO: snprintf(out, DEV_LABEL_LEN, "auto"); break;
    case DEV_CUDA: snprintf(out, DEV_LABEL_LEN, "cuda:%u", l->index); break;
    case DEV_VULKAN: snprintf(out, DEV_LABEL_LEN, "vulkan:%u", l->index); break;
    }
}

/* Appends "; " and the note of one backend. */
static void add_note(char *note, size_t notelen, const char *what) {
    if (!note || !notelen || !what[0]) return;
    size_t used = strlen(note);
    snprintf(note + used, notelen - used, "%s%s", used ? "; " : "", what);
}

int dev_enumerate(dev_found *out, uint32_t max, uint32_t *n, bool with_cpu, char *note, size_t notelen, kiln_err *err) {
    *n = 0;
    if (note && notelen) note[0] = '\0';
    kiln_err_clear(err);
    if (with_cpu && *n < max) {
        dev_found *d = &out[(*n)++];
        memset(d, 0, sizeof *d);
        d->id = (dev_label){DEV_CPU, 0};
        dev_format(&d->id, d->label);
        rt_caps_default(&d->caps, RT_CPU);
    }
    int rc = 0;
    for (int b = 0; b < 2; b++) {
        rt_caps found[DEV_MAX_PER_BACKEND];
        uint32_t nf = 0;
        kiln_err why = {0};
        int r = b == 0 ? cuda_probe_devices(found, DEV_MAX_PER_BACKEND, &nf, &why)
                       : vk_probe_devices(found, DEV_MAX_PER_BACKEND, &nf, &why);
        if (r) {
            if (!rc) kiln_err_wrap(err, &why, NULL);
            rc = -1;
            continue;
        }
        add_note(note, notelen, why.msg);
        for (uint32_t i = 0; i < nf && *n < max; i++) {
            dev_found *d = &out[(*n)++];
            memset(d, 0, sizeof *d);
            d->id = (dev_label){b == 0 ? DEV_CUDA : DEV_VULKAN, i};
            dev_format(&d->id, d->label);
            d->caps = found[i];
        }
    }
    return rc;
}

dev_label dev_resolve(dev_label l) {
    if (l.kind != DEV_AUTO) return l;
    rt_caps c[1];
    uint32_t n = 0;
    kiln_err note = {0};
    if (!cuda_probe_devices(c, 1, &n, &note) && n) return (dev_label){DEV_CUDA, 0};
    n = 0;
    if (!vk_probe_devices(c, 1, &n, &note) && n) return (dev_label){DEV_VULKAN, 0};
    return (dev_label){DEV_CPU, 0};
}

rt_device *dev_open(dev_label l, const char *caps_override, kiln_err *err) {
    switch (l.kind) {
    case DEV_CUDA: return cuda_device_open(l.index, caps_override, err);
    case DEV_VULKAN: return vk_device_open(l.index, caps_override, err);
    case DEV_CPU:
    case DEV_AUTO: break;
    }
    kiln_fail(err, KILN_ERR_UNAVAILABLE, "%s is not a GPU device", l.kind == DEV_CPU ? "cpu" : "auto");
    return NULL;
}
