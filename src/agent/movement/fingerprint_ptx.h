/*
 * fingerprint_ptx.h - the agent's chunk fingerprint kernel (PTX text) and its
 * launch shape, shared by agent_fingerprint.c and the GPU test that compares
 * it with the CPU's (tests/gpu/apps/fp_check.c, t22), so both run the same
 * kernel the same way. Include it in one file of each program: it defines
 * the text.
 */
#ifndef GPUSNAP_AGENT_FINGERPRINT_PTX_H
#define GPUSNAP_AGENT_FINGERPRINT_PTX_H

#include <stddef.h>

#define GS_FP_THREADS 256        /* per block */
#define GS_FP_BLOCKS_WANTED 2048 /* blocks of a pass, over all chunks: enough to fill a GPU's SMs several times */
#define GS_FP_SLICES_MAX 64      /* blocks per chunk */

/* gridDim.y of a pass over n chunks (gridDim.x = n): each chunk split over this many blocks. */
static inline unsigned gs_fingerprint_slices(size_t n)
{
	size_t s = n ? (GS_FP_BLOCKS_WANTED + n - 1) / n : 1;
	return (unsigned)(s > GS_FP_SLICES_MAX ? GS_FP_SLICES_MAX : s < 1 ? 1 : s);
}

/*
 * gs_fingerprint(chunks, sums): block (x, y) takes chunk x's {va, bytes}
 * from chunks (two u64 each; va 16-aligned, bytes > 0, the exact length);
 * thread t of it walks words w = y * ntid + t, stepping by nctaid.y * ntid,
 * over the chunk's ceil(bytes / 16) words, the last one masked to its
 * length; per word, with x, y its two little-endian u64 halves and
 * k = (w + 1) * G: p = mixA(x ^ k), q = mixB(y ^ rotl(k, 32)), A += p + q,
 * B += p ^ rotl(q, 23); then it adds A and B atomically into sums[2x] and
 * sums[2x + 1] (u64). The constants are FORMAT.md 4.8.2's, as signed
 * decimals: G -7046029254386353131, M1 -4658895280553007687,
 * M2 -7723592293110705685, M3 -49064778989728563, M4 -4265267296055464877.
 */
static const char gs_fingerprint_ptx[] =
	".version 7.0\n"
	".target sm_50\n"
	".address_size 64\n"
	".visible .entry gs_fingerprint(.param .u64 p_chunks, .param .u64 p_sums)\n"
	"{\n"
	"	.reg .pred %p<4>;\n"
	"	.reg .b32 %r<8>;\n"
	"	.reg .b64 %rd<40>;\n"
	"	ld.param.u64 %rd1, [p_chunks];\n"
	"	ld.param.u64 %rd2, [p_sums];\n"
	"	cvta.to.global.u64 %rd1, %rd1;\n"
	"	cvta.to.global.u64 %rd2, %rd2;\n"
	/* this block's chunk: va %rd5, bytes %rd6, words %rd7, bytes in the last word %rd8 (0: whole) */
	"	mov.u32 %r1, %ctaid.x;\n"
	"	mul.wide.u32 %rd3, %r1, 16;\n"
	"	add.u64 %rd4, %rd1, %rd3;\n"
	"	ld.global.u64 %rd5, [%rd4];\n"
	"	ld.global.u64 %rd6, [%rd4+8];\n"
	"	cvta.to.global.u64 %rd5, %rd5;\n"
	"	add.u64 %rd7, %rd6, 15;\n"
	"	shr.u64 %rd7, %rd7, 4;\n"
	"	and.b64 %rd8, %rd6, 15;\n"
	/* first word w = ctaid.y * ntid + tid (%rd9), step nctaid.y * ntid (%rd10) */
	"	mov.u32 %r2, %tid.x;\n"
	"	mov.u32 %r3, %ntid.x;\n"
	"	mov.u32 %r4, %ctaid.y;\n"
	"	mov.u32 %r5, %nctaid.y;\n"
	"	mad.lo.u32 %r6, %r4, %r3, %r2;\n"
	"	cvt.u64.u32 %rd9, %r6;\n"
	"	mul.wide.u32 %rd10, %r5, %r3;\n"
	"	mov.u64 %rd11, 0;\n" /* A */
	"	mov.u64 %rd12, 0;\n" /* B */
	"WORD:\n"
	"	setp.ge.u64 %p1, %rd9, %rd7;\n"
	"	@%p1 bra SUM;\n"
	"	shl.b64 %rd13, %rd9, 4;\n"
	"	add.u64 %rd13, %rd5, %rd13;\n"
	"	ld.global.nc.v2.u64 {%rd14, %rd15}, [%rd13];\n"
	/* the last word of a chunk whose length is not a multiple of 16: only its length's bytes count */
	"	add.u64 %rd16, %rd9, 1;\n"
	"	setp.ne.u64 %p2, %rd16, %rd7;\n"
	"	setp.eq.u64 %p3, %rd8, 0;\n"
	"	or.pred %p2, %p2, %p3;\n"
	"	@%p2 bra MIX;\n"
	"	setp.gt.u64 %p3, %rd8, 8;\n"
	"	@%p3 bra HIGH;\n"
	/* 1..8 bytes: x keeps the low 8 * n bits (n = 8: all), y is 0 */
	"	mov.u64 %rd15, 0;\n"
	"	setp.eq.u64 %p3, %rd8, 8;\n"
	"	@%p3 bra MIX;\n"
	"	cvt.u32.u64 %r7, %rd8;\n"
	"	shl.b32 %r7, %r7, 3;\n"
	"	mov.u64 %rd17, 1;\n"
	"	shl.b64 %rd17, %rd17, %r7;\n"
	"	sub.u64 %rd17, %rd17, 1;\n"
	"	and.b64 %rd14, %rd14, %rd17;\n"
	"	bra MIX;\n"
	"HIGH:\n" /* 9..15 bytes: y keeps the low 8 * (n - 8) bits */
	"	cvt.u32.u64 %r7, %rd8;\n"
	"	sub.u32 %r7, %r7, 8;\n"
	"	shl.b32 %r7, %r7, 3;\n"
	"	mov.u64 %rd17, 1;\n"
	"	shl.b64 %rd17, %rd17, %r7;\n"
	"	sub.u64 %rd17, %rd17, 1;\n"
	"	and.b64 %rd15, %rd15, %rd17;\n"
	"MIX:\n"
	/* k = (w + 1) * G; kr = rotl(k, 32) */
	"	mul.lo.s64 %rd18, %rd16, -7046029254386353131;\n"
	"	shl.b64 %rd19, %rd18, 32;\n"
	"	shr.u64 %rd20, %rd18, 32;\n"
	"	or.b64 %rd19, %rd19, %rd20;\n"
	/* p = mixA(x ^ k) */
	"	xor.b64 %rd21, %rd14, %rd18;\n"
	"	shr.u64 %rd22, %rd21, 30;\n"
	"	xor.b64 %rd21, %rd21, %rd22;\n"
	"	mul.lo.s64 %rd21, %rd21, -4658895280553007687;\n"
	"	shr.u64 %rd22, %rd21, 27;\n"
	"	xor.b64 %rd21, %rd21, %rd22;\n"
	"	mul.lo.s64 %rd21, %rd21, -7723592293110705685;\n"
	"	shr.u64 %rd22, %rd21, 31;\n"
	"	xor.b64 %rd21, %rd21, %rd22;\n"
	/* q = mixB(y ^ kr) */
	"	xor.b64 %rd23, %rd15, %rd19;\n"
	"	shr.u64 %rd24, %rd23, 33;\n"
	"	xor.b64 %rd23, %rd23, %rd24;\n"
	"	mul.lo.s64 %rd23, %rd23, -49064778989728563;\n"
	"	shr.u64 %rd24, %rd23, 33;\n"
	"	xor.b64 %rd23, %rd23, %rd24;\n"
	"	mul.lo.s64 %rd23, %rd23, -4265267296055464877;\n"
	"	shr.u64 %rd24, %rd23, 33;\n"
	"	xor.b64 %rd23, %rd23, %rd24;\n"
	/* A += p + q; B += p ^ rotl(q, 23) */
	"	add.u64 %rd11, %rd11, %rd21;\n"
	"	add.u64 %rd11, %rd11, %rd23;\n"
	"	shl.b64 %rd25, %rd23, 23;\n"
	"	shr.u64 %rd26, %rd23, 41;\n"
	"	or.b64 %rd25, %rd25, %rd26;\n"
	"	xor.b64 %rd25, %rd25, %rd21;\n"
	"	add.u64 %rd12, %rd12, %rd25;\n"
	"	add.u64 %rd9, %rd9, %rd10;\n"
	"	bra WORD;\n"
	"SUM:\n"
	"	add.u64 %rd28, %rd2, %rd3;\n"
	"	atom.global.add.u64 %rd29, [%rd28], %rd11;\n"
	"	atom.global.add.u64 %rd30, [%rd28+8], %rd12;\n"
	"	ret;\n"
	"}\n";


#endif
