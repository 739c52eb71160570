/*
 * fuzz_common.c - what the fuzz harnesses share (fuzz.h): libFuzzer's two
 * entry points, written once, and the input copies and repairs more than
 * one harness makes. LLVMFuzzerInitialize quiets the log of the code under
 * test and runs the harness's fuzz_setup, if it has one;
 * LLVMFuzzerTestOneInput passes every input of at least one byte to the
 * harness's fuzz_one, its first byte split off.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "fuzz.h"
#include "image/crc32c.h"
#include "image/format.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* log lines of the code under test are formatted, not printed millions of times */
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0)
		gs_log_set_fd(fd);
	if (fuzz_setup)
		fuzz_setup();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= 1)
		fuzz_one(data[0], data + 1, size - 1);
	return 0;
}

uint8_t *fuzz_copy(const uint8_t *data, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	FUZZ_ASSERT(copy);
	memcpy(copy, data, len);
	return copy;
}

char *fuzz_text(const uint8_t *data, size_t len)
{
	char *text = malloc(len + 1);
	FUZZ_ASSERT(text);
	memcpy(text, data, len);
	text[len] = '\0';
	return text;
}

void fuzz_fix_manifest_framing(uint8_t *buf, size_t len)
{
	if (len < sizeof(struct gs_fmt_manifest_header) + sizeof(struct gs_fmt_manifest_trailer))
		return;
	uint64_t size = len;
	memcpy(buf + offsetof(struct gs_fmt_manifest_header, manifest_size), &size, sizeof(size));
	memcpy(buf + len - sizeof(struct gs_fmt_manifest_trailer), GS_FMT_TRAILER_MAGIC, GS_FMT_MAGIC_LEN);
	uint32_t crc = gs_crc32c(0, buf, len - 4);
	memcpy(buf + len - 4, &crc, 4);
}
