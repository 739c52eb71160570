/*
 * crc32c.h - CRC-32C (Castagnoli) checksums of chunk payloads, manifests and
 * data file headers.
 *
 * The value is the standard CRC-32C (iSCSI, ext4, Btrfs): reflected
 * polynomial 0x82F63B78, initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF, so
 * CRC-32C("123456789") == 0xE3069283. Calls chain: passing a previous result
 * as `crc` continues it over more bytes (start with 0).
 */
#ifndef GPUSNAP_IMAGE_CRC32C_H
#define GPUSNAP_IMAGE_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The fastest implementation this CPU has (SSE4.2 instruction or tables). Thread-safe. */
uint32_t gs_crc32c(uint32_t crc, const void *buf, size_t len);
/* Table-driven implementation (slicing by 8), available everywhere. */
uint32_t gs_crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* SSE4.2 crc32 instruction over three interleaved streams; uses the tables where the CPU lacks it. */
uint32_t gs_crc32c_hw(uint32_t crc, const void *buf, size_t len);
/* True if this CPU has the crc32 instruction (checked at run time). */
bool gs_crc32c_hw_available(void);
/* "sse4.2" or "table": what gs_crc32c uses on this CPU. */
const char *gs_crc32c_impl_name(void);

#endif
