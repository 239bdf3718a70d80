/* SPIRV-Tools glue: validation for Vulkan 1.3 and disassembly (spv_emit.h). Kept apart
 * from the emitter so that only these two functions pull in SPIRV-Tools. */
#include "backend-spirv/spv_emit.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spirv-tools/libspirv.h>

int spv_validate(const spv_module *m, kiln_err *err) {
    kiln_err_clear(err);
    if (!m || !m->words || !m->n) {
        if (err) kiln_fail(err, KILN_ERR_INVALID, "spirv: empty module");
        return -1;
    }
    spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_3);
    if (!ctx) {
        if (err) kiln_fail(err, KILN_ERR_UNAVAILABLE, "spirv: cannot create a SPIRV-Tools context");
        return -1;
    }
    spv_const_binary_t bin = {m->words, m->n};
    spv_diagnostic diag = NULL;
    spv_result_t r = spvValidate(ctx, &bin, &diag);
    if (r != SPV_SUCCESS && err) {
        if (diag && diag->error)
            kiln_fail(err, KILN_ERR_INTERNAL, "spirv-val: %s", diag->error);
        else
            kiln_fail(err, KILN_ERR_INTERNAL, "spirv-val: error %d", (int)r);
    }
    spvDiagnosticDestroy(diag);
    spvContextDestroy(ctx);
    return r == SPV_SUCCESS ? 0 : -1;
}

char *spv_disassemble(const spv_module *m) {
    if (!m || !m->words || !m->n) return NULL;
    spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_3);
    if (!ctx) return NULL;
    spv_text text = NULL;
    spv_diagnostic diag = NULL;
    char *out = NULL;
    uint32_t opts = SPV_BINARY_TO_TEXT_OPTION_FRIENDLY_NAMES | SPV_BINARY_TO_TEXT_OPTION_INDENT;
    if (spvBinaryToText(ctx, m->words, m->n, opts, &text, &diag) == SPV_SUCCESS && text) {
        out = malloc(text->length + 1);
        if (out) {
            memcpy(out, text->str, text->length);
            out[text->length] = 0;
        }
    }
    spvTextDestroy(text);
    spvDiagnosticDestroy(diag);
    spvContextDestroy(ctx);
    return out;
}

bool spv_needs_newer_tools(const spv_module *m) {
    /* OpCapability (17) CooperativeMatrixKHR (6022) or BFloat16TypeKHR (5116) */
    for (size_t i = 5; m && m->words && i < m->n;) {
        uint32_t wc = m->words[i] >> 16, op = m->words[i] & 0xffff;
        if (!wc || i + wc > m->n) break;
        if (op == 17 && wc == 2 && (m->words[i + 1] == 6022 || m->words[i + 1] == 5116)) return true;
        i += wc;
    }
    return false;
}
