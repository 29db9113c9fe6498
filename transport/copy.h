/* copy.h - a copy whose stores go around the cache.
 *
 * A view's gather of short rows (fs/view.c) stores each row with
 * streaming stores: an ordinary store of a short row first reads its
 * target lines into the cache, only to evict them again.  On the VM this
 * was measured on, 112 MB of 512-byte rows took 20 ms with memcpy and
 * 10 ms streamed.  (A fetch's bytes once took the same way, received
 * into a small buffer and stored on around the cache; received straight
 * into the pool they cost one copy less, and the reader right behind
 * finds them in cache: transport/xport.c, land().) */
#ifndef OMNI_COPY_H
#define OMNI_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Stores n bytes at dst around the cache, weakly ordered: copy_fence()
 * before another thread is told they are there.  A gather of many short
 * rows (a token-major view) streams each row and fences once. */
static inline void copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__SSE2__) && !defined(__SANITIZE_ADDRESS__)    /* ASan checks memcpy only */
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head = (64 - ((uintptr_t)d & 63)) & 63;

	if (n < 256) {
		memcpy(d, s, n);
		return;
	}
	/* Streamed lines must be whole: a line streamed in part (a row that
	 * starts inside one, as a view's rows behind its header do) is
	 * written back in part, and a line cached by an ordinary store and
	 * then streamed into is evicted first.  Aligned to 16 bytes only,
	 * the gather of a T=1 view (117 MB of 512-byte rows at 38 mod 64)
	 * took 16-22 ms; aligned to the line, 6-9 ms. */
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; d += 64, s += 64, n -= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
#else
	memcpy(dst, src, n);
#endif
}

/* Streaming stores are weakly ordered: this makes them visible before the
 * caller tells another thread the bytes are there. */
static inline void copy_fence(void)
{
#if defined(__SSE2__) && !defined(__SANITIZE_ADDRESS__)
	_mm_sfence();
#endif
}

#endif
