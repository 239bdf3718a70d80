#include "tests/util/testutil_ptx.h"

#include "backend-ptx/cuda_probe.h"
#include "backend-ptx/ptx_emit.h"
#include "base/error.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

rt_caps tu_cuda_caps(unsigned cc) {
    rt_caps c;
    rt_caps_default(&c, RT_CUDA);
    c.compute_capability = cc;
    cuda_caps_of_arch(&c);
    return c;
}

const char *tu_ptxas_path(void) {
    static char path[512];
    static int found = -1;
    if (found >= 0) return found ? path : NULL;
    found = 0;
    if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) {
        snprintf(path, sizeof path, "/usr/local/cuda/bin/ptxas");
        return found = 1, path;
    }
    const char *env = getenv("PATH");
    if (!env) return NULL;
    char *dup = strdup(env), *save = NULL;
    for (char *d = strtok_r(dup, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(path, sizeof path, "%s/ptxas", d);
        if (access(path, X_OK) == 0) {
            found = 1;
            break;
        }
    }
    free(dup);
    return found ? path : NULL;
}

void tu_ptxas_assemble(const char *ptx, const char *arch, const char *what) {
    const char *pa = tu_ptxas_path();
    if (!pa) return;
    /* a module with wgmma targets sm_90a, which plain sm_90 does not take */
    if (!strcmp(arch, "sm_90") && strstr(ptx, ".target sm_90a")) arch = "sm_90a";
    static int serial;
    char name[64];
    snprintf(name, sizeof name, "k%d_%d.ptx", (int)getpid(), serial++);
    const char *file = tu_tmp(name);
    cr_assert(tu_write_file(file, ptx, strlen(ptx)), "cannot write %s", file);
    char cmd[1024], out[4096] = "";
    snprintf(cmd, sizeof cmd, "'%s' -arch=%s '%s' -o /dev/null 2>&1", pa, arch, file);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run ptxas");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    unlink(file);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ptxas -arch=%s rejects %s:\n%s", arch, what, out);
    /* C7510/C7511/C7515: ptxas serialized the warpgroup products (the loader refuses it) */
    cr_assert(!strstr(out, "C751"), "ptxas -arch=%s serialized the wgmma of %s:\n%s", arch, what, out);
}

void tu_ptx_assembles(const ir_kernel *k, const rt_caps *c, const char *what) {
    kiln_err err = {0};
    char *ptx = NULL, *ll = NULL;
    cr_assert_eq(ptx_emit(k, c, &ptx, &ll, &err), 0, "%s: %s", what, err.msg);
    /* a module with wgmma targets the architecture-specific sm_90a */
    tu_ptxas_assemble(ptx, strstr(ptx, ".target sm_90a") ? "sm_90a" : ptx_target_arch(c), what);
    free(ptx);
    free(ll);
}

char *tu_ptx_emit_ok(const ir_kernel *k, const rt_caps *c) {
    kiln_err err = {0};
    cr_assert(!ir_verify(k, &err), "%s", err.msg);
    char *ptx = NULL;
    cr_assert_eq(ptx_emit(k, c, &ptx, NULL, &err), 0, "%s", err.msg);
    return ptx;
}
