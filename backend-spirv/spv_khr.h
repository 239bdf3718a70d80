/* SPIR-V values newer than Debian 12's spirv-headers (1.3.239): SPV_KHR_cooperative_matrix
 * and SPV_KHR_bfloat16. Values from the SPIR-V registry (KhronosGroup/SPIRV-Headers,
 * include/spirv/unified1/spirv.core.grammar.json and spirv.h, 2026-08); the extension
 * specs are SPV_KHR_cooperative_matrix.asciidoc and SPV_KHR_bfloat16.asciidoc. */
#ifndef KILN_BACKEND_SPIRV_SPV_KHR_H
#define KILN_BACKEND_SPIRV_SPV_KHR_H

enum {
    /* SPV_KHR_cooperative_matrix */
    spv_op_type_coopmat_khr = 4456,   /* OpTypeCooperativeMatrixKHR: component, scope, rows, cols, use (ids) */
    spv_op_coopmat_load_khr = 4457,   /* result type, result, pointer, layout, [stride], [memory operands] */
    spv_op_coopmat_store_khr = 4458,  /* pointer, object, layout, [stride], [memory operands] */
    spv_op_coopmat_muladd_khr = 4459, /* result type, result, A, B, C, [cooperative matrix operands] */
    spv_cap_coopmat_khr = 6022,       /* CooperativeMatrixKHR */
    spv_coopmat_use_a = 0,            /* CooperativeMatrixUse MatrixAKHR */
    spv_coopmat_use_b = 1,            /* MatrixBKHR */
    spv_coopmat_use_acc = 2,          /* MatrixAccumulatorKHR */
    spv_coopmat_row_major = 0,        /* CooperativeMatrixLayout RowMajorKHR */
    spv_coopmat_col_major = 1,        /* ColumnMajorKHR */

    /* SPV_KHR_bfloat16: OpTypeFloat 16 takes an FPEncoding operand */
    spv_fp_encoding_bfloat16 = 0,        /* FPEncoding BFloat16KHR */
    spv_cap_bfloat16_type = 5116,        /* BFloat16TypeKHR */
    spv_cap_bfloat16_coopmat = 5118,     /* BFloat16CooperativeMatrixKHR */
};

#endif
