/*
 * fuzz_plugin_config.c - libFuzzer harness for the CRIU plugin's settings
 * file (src/core/plugin_config.c): gs_plugin_config_parse over any bytes.
 *
 * Input: one byte (unused: kept for the layout every harness shares), then
 * the file's text.
 *
 * Properties: parsing returns 0 or GS_E_USAGE with one line that names the
 * file and a line; a result of 0 leaves values of their types' ranges (a
 * timeout finite and >= 0, leave_running -1, 0 or 1, a map shorter than its
 * buffer and made of FROM=TO words), and each key set from the file records
 * a line within the input.
 */
#include <math.h>
#include <string.h>

#include "core/plugin_config.h"
#include "fuzz.h"

void fuzz_one(uint8_t first, const uint8_t *rest, size_t len)
{
	(void)first;
	char *text = fuzz_text(rest, len);
	struct gs_plugin_config c;
	struct gs_err err = { 0 };
	gs_plugin_config_defaults(&c);
	int rc = gs_plugin_config_parse(&c, text, len, "f.conf", &err);
	if (rc) {
		FUZZ_ASSERT(rc == GS_E_USAGE && err.code == GS_E_USAGE);
		FUZZ_ASSERT(!strncmp(err.msg, "'f.conf' line ", 14) && !strchr(err.msg, '\n'));
	} else {
		FUZZ_ASSERT(isfinite(c.timeout_s) && c.timeout_s >= 0);
		FUZZ_ASSERT(c.leave_running >= -1 && c.leave_running <= 1);
		size_t n = strlen(c.map);
		FUZZ_ASSERT(n < sizeof(c.map));
		FUZZ_ASSERT(n == 0 || strchr(c.map, '='));
		size_t lines = 1;
		for (size_t i = 0; i < len; i++)
			lines += text[i] == '\n';
		for (int k = 0; k < GS_PK_COUNT; k++)
			FUZZ_ASSERT(c.line[k] >= 0 && (size_t)c.line[k] <= lines);
	}
	free(text);
}
