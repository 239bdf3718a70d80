/* The matrix units' rate through kiln's fragments (`kiln probe --measure`): products of
 * fragments held in registers, nothing read or written in the loop, so what the probe
 * times is the fragment MMA itself as this backend's emitter and driver give it (mma.sync
 * on CUDA, the driver's lowering of KHR cooperative matrices on Vulkan). A product kernel
 * can approach it, not pass it: the gap between the two is what feeding the units costs,
 * the gap to the chip's published peak what the API leaves out (wgmma on Hopper).
 *
 * Each subgroup loads FR_A A and FR_B B fragments once (from a buffer of ones: real
 * numbers, no NaN or subnormal path), runs iters rounds of FR_A x FR_B independent
 * products, and stores its accumulators, so no product is dead. */
#include "base/error.h"
#include "kernels/kn_common.h"

#define FR_A 2
#define FR_B 4
#define SGS 4 /* subgroups a workgroup */
_Static_assert(SGS * FR_A * FR_B == KN_FRAG_RATE_FRAGS, "kernels.h's count of stored fragments");

const rt_mma_shape *kn_frag_rate_shape(const rt_caps *c, ir_scalar dt) {
    const rt_mma_shape *best = NULL;
    for (uint32_t i = 0; c && i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->ab_type != (uint32_t)dt || s->acc_type != IR_F32 || s->m > 16 || s->n > 16 || s->k > 32) continue;
        if (!best || s->m * s->n * s->k > best->m * best->n * best->k) best = s;
    }
    return best;
}

ir_kernel *kn_frag_rate(const rt_caps *c, ir_scalar dt, uint32_t iters, uint32_t groups, double *flops,
                        kiln_err *err) {
    const rt_mma_shape *s = kn_frag_rate_shape(c, dt);
    if (!s || !c->subgroup_size || !iters || !groups) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "kn_frag_rate: the device has no %s fragments into f32",
                  ir_scalar_name(dt));
        return NULL;
    }
    uint32_t m = s->m, n = s->n, kk = s->k, per = m * n;
    kx k = {kn_create("kn_frag_rate", err), c};
    if (!k.ir) return NULL;
    uint32_t ones = m * kk > kk * n ? m * kk : kk * n;
    ir_buf src = kx_buffer(k, "ones", dt, IR_READ, ones);
    ir_buf out = kx_buffer(k, "out", IR_F32, IR_WRITE, (uint64_t)groups * KN_FRAG_RATE_FRAGS * per);
    kx_workgroup(k, SGS * c->subgroup_size);
    ir_type ta = ir_t_frag(k.ir, IR_FRAG_A, dt, m, n, kk), tb = ir_t_frag(k.ir, IR_FRAG_B, dt, m, n, kk),
            tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, m, n, kk);
    ir_val u0 = kx_u32(k, 0), a[FR_A], b[FR_B], acc[FR_A * FR_B];
    for (uint32_t i = 0; i < FR_A; i++) a[i] = ir_frag_load(k.ir, ta, false, src, u0, kx_u32(k, kk), true);
    for (uint32_t j = 0; j < FR_B; j++) b[j] = ir_frag_load(k.ir, tb, false, src, u0, kx_u32(k, n), true);
    ir_val zero = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    for (uint32_t f = 0; f < FR_A * FR_B; f++) acc[f] = zero;
    ir_for *lp = ir_for_begin(k.ir, u0, kx_u32(k, iters), kx_u32(k, 1), FR_A * FR_B, acc);
    ir_val y[FR_A * FR_B];
    for (uint32_t i = 0; i < FR_A; i++)
        for (uint32_t j = 0; j < FR_B; j++)
            y[i * FR_B + j] = ir_frag_mma(k.ir, a[i], b[j], ir_for_arg(lp, i * FR_B + j));
    ir_for_end(k.ir, lp, y);
    ir_val slot = kx_add(k, kx_mul_c(k, kx_group(k, 0), SGS), kx_sg_id(k));
    for (uint32_t f = 0; f < FR_A * FR_B; f++) {
        ir_val at = kx_mul_c(k, kx_add_c(k, kx_mul_c(k, slot, FR_A * FR_B), f), per);
        ir_frag_store(k.ir, ir_for_result(lp, f), false, out, at, kx_u32(k, n), true);
    }
    if (flops) *flops = 2.0 * m * n * kk * FR_A * FR_B * (double)iters * SGS * groups;
    return kn_finish(k.ir, err);
}
