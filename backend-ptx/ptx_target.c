/* LLVM's NVPTX target for the PTX emitter: one-time initialization, the architecture
 * and PTX ISA chosen from the caps, the O2 pipeline and the PTX text. */
#include "backend-ptx/ptx_emit.h"
#include "backend-ptx/ptx_internal.h"
#include "base/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#define TRIPLE "nvptx64-nvidia-cuda"
/* PTX ISA 8.0: covers sm_50..sm_90 in LLVM 19, and driver 580 loads it */
#define PTX_FEATURES "+ptx80"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_nvptx(void) {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}

/* The architectures LLVM 19's NVPTX target knows (sm_50 and up). */
static const unsigned known_sm[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};

unsigned ptx_pick_sm(const rt_caps *c, kiln_err *why) {
    unsigned cc = c->compute_capability ? c->compute_capability : 80;
    if (cc < known_sm[0]) {
        if (why)
            kiln_fail(why, KILN_ERR_UNSUPPORTED, "compute capability %u.%u is below sm_50, which kiln's PTX needs",
                      cc / 10, cc % 10);
        return 0;
    }
    /* the newest known architecture not above the device's: PTX runs forward */
    unsigned sm = known_sm[0];
    for (size_t i = 0; i < sizeof known_sm / sizeof known_sm[0]; i++)
        if (known_sm[i] <= cc) sm = known_sm[i];
    return sm;
}

bool ptx_uses_grid_dep(const rt_caps *c) { return c && c->grid_dep && ptx_pick_sm(c, NULL) >= 90; }

const char *ptx_target_arch(const rt_caps *c) {
    static const char *const names[] = {"sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70",
                                        "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90"};
    if (!c) return NULL;
    unsigned sm = ptx_pick_sm(c, NULL);
    for (size_t i = 0; i < sizeof known_sm / sizeof known_sm[0]; i++)
        if (known_sm[i] == sm) return names[i];
    return NULL;
}

/* sm_XX, or sm_XXa (the architecture-specific features: wgmma, setmaxnreg) */
static LLVMTargetMachineRef make_tm(unsigned sm, bool arch_a, kiln_err *err) {
    pthread_once(&init_once, init_nvptx);
    LLVMTargetRef t;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(TRIPLE, &t, &msg)) {
        kiln_fail(err, KILN_ERR_UNAVAILABLE, "LLVM has no NVPTX target: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    char cpu[16];
    snprintf(cpu, sizeof cpu, "sm_%u%s", sm, arch_a ? "a" : "");
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(t, TRIPLE, cpu, PTX_FEATURES, LLVMCodeGenLevelDefault,
                                                      LLVMRelocDefault, LLVMCodeModelDefault);
    if (!tm) kiln_fail(err, KILN_ERR_UNAVAILABLE, "LLVM could not create a target machine for %s", cpu);
    return tm;
}

int ptx_prepare_module(LLVMModuleRef m, unsigned sm, bool arch_a, kiln_err *err) {
    LLVMTargetMachineRef tm = make_tm(sm, arch_a, err);
    if (!tm) return -1;
    LLVMSetTarget(m, TRIPLE);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(m, dl);
    LLVMDisposeTargetData(dl);
    LLVMDisposeTargetMachine(tm);
    return 0;
}

char *ptx_compile(LLVMModuleRef m, unsigned sm, bool arch_a, kiln_err *err) {
    char *msg = NULL;
    /* catches a lowering bug here as a message, before codegen could abort on it */
    if (LLVMVerifyModule(m, LLVMReturnStatusAction, &msg)) {
        char *nl = msg ? strchr(msg, '\n') : NULL;
        if (nl) *nl = 0;
        kiln_fail(err, KILN_ERR_INTERNAL, "internal: LLVM rejects the module: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    LLVMDisposeMessage(msg);
    msg = NULL;
    LLVMTargetMachineRef tm = make_tm(sm, arch_a, err);
    if (!tm) return NULL;
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(m, "default<O2>", tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (e) {
        char *em = LLVMGetErrorMessage(e);
        kiln_fail(err, KILN_ERR_INTERNAL, "LLVM's O2 pipeline failed: %s", em ? em : "?");
        LLVMDisposeErrorMessage(em);
        LLVMDisposeTargetMachine(tm);
        return NULL;
    }
    LLVMMemoryBufferRef mb = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMAssemblyFile, &msg, &mb)) {
        kiln_fail(err, KILN_ERR_INTERNAL, "LLVM's NVPTX code generation failed: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        LLVMDisposeTargetMachine(tm);
        return NULL;
    }
    LLVMDisposeTargetMachine(tm);
    size_t n = LLVMGetBufferSize(mb);
    char *out = malloc(n + 1);
    if (!out) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    } else {
        memcpy(out, LLVMGetBufferStart(mb), n);
        out[n] = 0;
    }
    LLVMDisposeMemoryBuffer(mb);
    return out;
}
