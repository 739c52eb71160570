/*
 * printable.c - text that others control, made safe to print (see printable.h).
 */
#include "common/printable.h"

/* A UTF-8 continuation byte within [lo, hi] (the first one after some lead bytes has a narrower range). */
static int cont(unsigned char c, unsigned char lo, unsigned char hi)
{
	return c >= lo && c <= hi;
}

int gs_utf8_char(const char *s, uint32_t *cp)
{
	const unsigned char *p = (const unsigned char *)s;
	unsigned char c = p[0];
	if (c < 0x80) {
		*cp = c;
		return c ? 1 : 0;
	}
	/* RFC 3629's table: the second byte's range rules out overlong forms, surrogates and > U+10FFFF */
	unsigned char lo = 0x80, hi = 0xbf;
	int len;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else {
		return 0;
	}
	if (!cont(p[1], lo, hi))
		return 0;
	for (int i = 2; i < len; i++)
		if (!cont(p[i], 0x80, 0xbf))
			return 0;
	uint32_t v = c & (0x7f >> len);
	for (int i = 1; i < len; i++)
		v = v << 6 | (p[i] & 0x3f);
	*cp = v;
	return len;
}

char *gs_printable(char *dst, size_t n, const char *src)
{
	size_t out = 0;
	const char *s = src ? src : "";
	while (*s && out + 1 < n) {
		unsigned char c = (unsigned char)*s;
		if (c >= 0x20 && c < 0x7f) {
			dst[out++] = *s++;
			continue;
		}
		uint32_t cp;
		int len = c >= 0x80 ? gs_utf8_char(s, &cp) : 0;
		s += len ? len : 1;
		dst[out++] = '?';
	}
	dst[out] = '\0';
	return dst;
}
