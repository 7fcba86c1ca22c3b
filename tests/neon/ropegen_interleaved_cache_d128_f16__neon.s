// A vector hot loop that spills (and stores without st2).
// Cut from Halide 21's aarch64 output for a ropegen kernel; bench/neon_asm.py audit must reject it.
	.text
	.globl	ropegen_interleaved_cache_d128_f16__neon_par_for_q_rotated_s0_seq_token_tile_task
	.type	ropegen_interleaved_cache_d128_f16__neon_par_for_q_rotated_s0_seq_token_tile_task,@function
ropegen_interleaved_cache_d128_f16__neon_par_for_q_rotated_s0_seq_token_tile_task:
// %bb.0:
	mov	x9, x0
.LBB0_1:                                // =>This Inner Loop Header: Depth=1
	add	x26, x22, x23, lsl #5
	lsl	x25, x23, #4
	ldr	q1, [sp, #64]
	movi	v23.4s, #4, lsl #8
	movi	v5.4s, #56, lsl #24
	movi	v22.8h, #128, lsl #8
	ld2	{ v24.8h, v25.8h }, [x26]
	ldr	q29, [x20, x25]
	add	x23, x23, #1
	ldr	q30, [x19, x25]
	cmp	x23, #8
	str	q29, [sp, #48]
	bic	v29.8h, #128, lsl #8
	mov	v14.16b, v30.16b
	ushll2	v26.4s, v29.8h, #0
	ushll	v28.4s, v29.4h, #0
	ushll2	v9.4s, v29.8h, #13
	and	v27.16b, v24.16b, v7.16b
	bic	v24.8h, #128, lsl #8
	ushll	v29.4s, v29.4h, #13
	bic	v14.8h, #128, lsl #8
	cmhi	v10.4s, v15.4s, v26.4s
	ucvtf	v13.4s, v28.4s
	cmhi	v15.4s, v28.4s, v21.4s
	ushll	v12.4s, v24.4h, #13
	ushll	v31.4s, v24.4h, #0
	ushll2	v8.4s, v24.8h, #0
	ushll2	v11.4s, v24.8h, #13
	orr	v19.16b, v29.16b, v0.16b
	cmhi	v18.4s, v26.4s, v21.4s
	add	v3.4s, v29.4s, v5.4s
	and	v29.16b, v25.16b, v22.16b
	bic	v25.8h, #128, lsl #8
	orr	v16.16b, v12.16b, v1.16b
	ldr	q1, [sp, #64]
	ucvtf	v20.4s, v31.4s
	ucvtf	v0.4s, v8.4s
	cmhi	v17.4s, v8.4s, v21.4s
	cmhi	v7.4s, v31.4s, v21.4s
	orr	v1.16b, v11.16b, v1.16b
	add	v11.4s, v11.4s, v2.4s
	add	v12.4s, v12.4s, v2.4s
	ldr	q2, [sp, #64]
	add	v4.4s, v9.4s, v5.4s
	bit	v3.16b, v19.16b, v15.16b
	cmhi	v19.4s, v23.4s, v28.4s
	ucvtf	v15.4s, v26.4s
	movi	v22.4s, #244, lsl #24
	bif	v1.16b, v11.16b, v17.16b
	add	v17.4s, v20.4s, v6.4s
	cmhi	v20.4s, v23.4s, v8.4s
	add	v0.4s, v0.4s, v6.4s
	orr	v2.16b, v9.16b, v2.16b
	bsl	v7.16b, v16.16b, v12.16b
	cmhi	v16.4s, v23.4s, v31.4s
	add	v12.4s, v13.4s, v6.4s
	ushll2	v9.4s, v25.8h, #0
	ushll2	v6.4s, v25.8h, #13
	ushll	v13.4s, v25.4h, #0
	add	v15.4s, v15.4s, v22.4s
	bif	v0.16b, v1.16b, v20.16b
	mov	v1.16b, v18.16b
	ushll	v18.4s, v14.4h, #13
	mov	v11.16b, v16.16b
	bif	v12.16b, v3.16b, v19.16b
	ldr	q19, [sp, #64]
	cmhi	v3.4s, v9.4s, v21.4s
	ushll2	v20.4s, v14.8h, #0
	ucvtf	v16.4s, v13.4s
	bsl	v1.16b, v2.16b, v4.16b
	ldr	q4, [sp, #64]
	ushll	v2.4s, v25.4h, #13
	ldr	q25, [sp, #64]
	bsl	v11.16b, v17.16b, v7.16b
	ushll	v7.4s, v14.4h, #0
	orr	v4.16b, v6.16b, v4.16b
	add	v6.4s, v6.4s, v5.4s
	cmhi	v17.4s, v13.4s, v21.4s
	orr	v19.16b, v2.16b, v19.16b
	add	v2.4s, v2.4s, v5.4s
	orr	v25.16b, v18.16b, v25.16b
	cmhi	v24.4s, v7.4s, v21.4s
	add	v18.4s, v18.4s, v5.4s
	bit	v1.16b, v15.16b, v10.16b
	bsl	v3.16b, v4.16b, v6.16b
	ushll2	v4.4s, v14.8h, #13
	ucvtf	v6.4s, v7.4s
	bit	v2.16b, v19.16b, v17.16b
	cmhi	v19.4s, v20.4s, v21.4s
	ldr	q21, [sp, #64]
	ucvtf	v17.4s, v20.4s
	movi	v15.4s, #4, lsl #8
	bit	v18.16b, v25.16b, v24.16b
	orr	v21.16b, v4.16b, v21.16b
	add	v4.4s, v4.4s, v5.4s
	cmhi	v25.4s, v23.4s, v7.4s
	add	v6.4s, v6.4s, v22.4s
	movi	v5.8h, #128, lsl #8
	ucvtf	v14.4s, v9.4s
	cmhi	v24.4s, v23.4s, v13.4s
	add	v16.4s, v16.4s, v22.4s
	cmeq	v7.4s, v7.4s, #0
	bit	v4.16b, v21.16b, v19.16b
	cmhi	v10.4s, v15.4s, v20.4s
	add	v17.4s, v17.4s, v22.4s
	bif	v6.16b, v18.16b, v25.16b
	cmhi	v19.4s, v23.4s, v9.4s
	cmeq	v20.4s, v20.4s, #0
	and	v18.16b, v30.16b, v5.16b
	add	v21.4s, v14.4s, v22.4s
	bit	v2.16b, v16.16b, v24.16b
	cmeq	v24.4s, v13.4s, #0
	cmeq	v16.4s, v8.4s, #0
	shll	v23.4s, v27.4h, #16
	bit	v4.16b, v17.16b, v10.16b
	ldp	q22, q17, [sp, #32]
	bic	v6.16b, v6.16b, v7.16b
	shll	v7.4s, v18.4h, #16
	bit	v3.16b, v21.16b, v19.16b
	cmeq	v19.4s, v31.4s, #0
	cmeq	v21.4s, v28.4s, #0
	shll2	v18.4s, v18.8h, #16
	and	v17.16b, v17.16b, v5.16b
	cmeq	v26.4s, v26.4s, #0
	bic	v2.16b, v2.16b, v24.16b
	bic	v4.16b, v4.16b, v20.16b
	orr	v6.16b, v6.16b, v7.16b
	shll	v7.4s, v29.4h, #16
	bic	v19.16b, v11.16b, v19.16b
	bic	v21.16b, v12.16b, v21.16b
	cmeq	v20.4s, v9.4s, #0
	shll	v25.4s, v17.4h, #16
	bic	v0.16b, v0.16b, v16.16b
	shll2	v16.4s, v27.8h, #16
	orr	v4.16b, v4.16b, v18.16b
	fmul	v6.4s, v6.4s, v22.s[0]
	shll2	v17.4s, v17.8h, #16
	orr	v19.16b, v19.16b, v23.16b
	bic	v1.16b, v1.16b, v26.16b
	shll2	v18.4s, v29.8h, #16
	orr	v21.16b, v21.16b, v25.16b
	bic	v3.16b, v3.16b, v20.16b
	orr	v2.16b, v2.16b, v7.16b
	fmul	v4.4s, v4.4s, v22.s[0]
	orr	v0.16b, v0.16b, v16.16b
	movi	v8.4s, #15, msl #8
	orr	v1.16b, v1.16b, v17.16b
	fmul	v16.4s, v6.4s, v19.4s
	movi	v31.4s, #1
	orr	v3.16b, v3.16b, v18.16b
	fmul	v7.4s, v21.4s, v2.4s
	fmul	v26.4s, v6.4s, v2.4s
	fmul	v25.4s, v21.4s, v19.4s
	movi	v5.4s, #12, lsl #24
	fmul	v6.4s, v4.4s, v0.4s
	fmul	v28.4s, v1.4s, v0.4s
	fmul	v2.4s, v1.4s, v3.4s
	fmul	v29.4s, v4.4s, v3.4s
	fadd	v23.4s, v7.4s, v16.4s
	fabd	v27.4s, v25.4s, v26.4s
	fsub	v21.4s, v25.4s, v26.4s
	ldr	q26, [sp, #16]
	fadd	v24.4s, v2.4s, v6.4s
	fabd	v0.4s, v28.4s, v29.4s
	fsub	v25.4s, v28.4s, v29.4s
	fabs	v30.4s, v23.4s
	ushr	v1.4s, v27.4s, #13
	add	v6.4s, v27.4s, v8.4s
	add	v17.4s, v27.4s, v5.4s
	fabs	v2.4s, v24.4s
	ushr	v4.4s, v0.4s, #13
	add	v18.4s, v0.4s, v8.4s
	ushr	v3.4s, v30.4s, #13
	and	v1.16b, v1.16b, v31.16b
	add	v16.4s, v30.4s, v8.4s
	frintn	v17.4s, v17.4s
	and	v4.16b, v4.16b, v31.16b
	ushr	v7.4s, v2.4s, #13
	and	v3.16b, v3.16b, v31.16b
	add	v1.4s, v6.4s, v1.4s
	add	v4.4s, v18.4s, v4.4s
	add	v18.4s, v30.4s, v5.4s
	fcvtzu	v17.4s, v17.4s
	and	v6.16b, v7.16b, v31.16b
	ldr	q31, [sp]
	add	v7.4s, v2.4s, v8.4s
	add	v3.4s, v16.4s, v3.4s
	shrn	v1.4h, v1.4s, #13
	add	v16.4s, v0.4s, v5.4s
	cmhi	v19.4s, v0.4s, v31.4s
	cmhi	v20.4s, v27.4s, v31.4s
	frintn	v18.4s, v18.4s
	add	v6.4s, v7.4s, v6.4s
	cmhi	v0.4s, v26.4s, v0.4s
	shrn	v3.4h, v3.4s, #13
	shrn2	v1.8h, v4.4s, #13
	frintn	v7.4s, v16.4s
	add	v16.4s, v2.4s, v5.4s
	movi	v5.8h, #64, lsl #8
	cmhi	v4.4s, v2.4s, v31.4s
	uzp1	v19.8h, v20.8h, v19.8h
	cmhi	v2.4s, v26.4s, v2.4s
	cmhi	v20.4s, v26.4s, v30.4s
	shrn2	v3.8h, v6.4s, #13
	bic	v1.8h, #128, lsl #8
	cmhi	v6.4s, v30.4s, v31.4s
	frintn	v16.4s, v16.4s
	fcvtzu	v7.4s, v7.4s
	fcvtzu	v18.4s, v18.4s
	uzp1	v2.8h, v20.8h, v2.8h
	fcmeq	v20.4s, v23.4s, v23.4s
	bic	v3.8h, #128, lsl #8
	eor	v1.16b, v1.16b, v5.16b
	uzp1	v4.8h, v6.8h, v4.8h
	cmhi	v6.4s, v26.4s, v27.4s
	fcvtzu	v16.4s, v16.4s
	eor	v3.16b, v3.16b, v5.16b
	movi	v5.8h, #124, lsl #8
	uzp1	v0.8h, v6.8h, v0.8h
	uzp1	v6.8h, v17.8h, v7.8h
	fcmeq	v17.4s, v25.4s, v25.4s
	uzp1	v7.8h, v18.8h, v16.8h
	uzp2	v16.8h, v23.8h, v24.8h
	fcmeq	v18.4s, v21.4s, v21.4s
	bit	v1.16b, v5.16b, v19.16b
	bit	v3.16b, v5.16b, v4.16b
	uzp2	v4.8h, v21.8h, v25.8h
	fcmeq	v19.4s, v24.4s, v24.4s
	movi	v21.4s, #123, msl #8
	bsl	v0.16b, v6.16b, v1.16b
	mov	v1.16b, v2.16b
	uzp1	v6.8h, v20.8h, v19.8h
	bsl	v1.16b, v7.16b, v3.16b
	movi	v7.8h, #128, lsl #8
	and	v2.16b, v4.16b, v7.16b
	and	v3.16b, v16.16b, v7.16b
	uzp1	v4.8h, v18.8h, v17.8h
	orr	v0.16b, v0.16b, v2.16b
	movi	v2.8h, #126, lsl #8
	orr	v1.16b, v1.16b, v3.16b
	bif	v0.16b, v2.16b, v4.16b
	bif	v1.16b, v2.16b, v6.16b
	movi	v6.4s, #244, lsl #24
	zip1	v2.8h, v0.8h, v1.8h
	zip2	v0.8h, v0.8h, v1.8h
	stp	q2, q0, [x24, #-16]
	movi	v2.4s, #56, lsl #24
	ldr	q0, [sp, #64]
	add	x24, x24, #32
	b.ne	.LBB258_5
// %bb.2:
	ret
.Lfunc_end0:
