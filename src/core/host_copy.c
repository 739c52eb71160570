/*
 * host_copy.c - non-temporal bulk copy for bounce transfers (see host_copy.h).
 */
#include "core/host_copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

void gs_host_copy_stream(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	/* streaming stores need a 16-byte aligned destination: the head goes the ordinary way */
	size_t head = (16 - (uintptr_t)d % 16) % 16;
	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	/* streaming stores are weakly ordered: make them visible before whoever waits on this copy reads */
	_mm_sfence();
	memcpy(d, s, n);
}
#else
void gs_host_copy_stream(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}
#endif
