/*
 * test_printable.c - the one sanitiser for text that others control
 * (common/printable.h) and the places that must use it: gs_fail and
 * gs_err_wrap (every error message), the logger (every log line), and the
 * JSON writer, which keeps the exact text as ASCII escapes instead.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/err.h"
#include "common/json.h"
#include "common/log.h"
#include "common/printable.h"
#include "test.h"

/* A process name as prctl(PR_SET_NAME) allows: a screen clear, a newline, a title change, a CSI in UTF-8. */
#define HOSTILE "x\033[2J\ngpusnap: ok\033]0;t\007\xc2\x9b" "1m"

/* s holds nothing but printable ASCII. */
static int all_printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			return 0;
	return 1;
}

static const char *shown(const char *s)
{
	static char buf[256];
	return gs_printable(buf, sizeof(buf), s);
}

static void test_controls_and_utf8(void)
{
	CHECK_STR(shown("plain text, 100% (ok) \\ ~"), "plain text, 100% (ok) \\ ~");
	CHECK_STR(shown(HOSTILE), "x?[2J?gpusnap: ok?]0;t??1m");
	CHECK_STR(shown("\t\r\n\x7f"), "????");
	/* one '?' for each character of valid UTF-8, one for each byte of anything else */
	CHECK_STR(shown("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80."), "caf? ? ?.");
	CHECK_STR(shown("\xff\xfe"), "??");
	CHECK_STR(shown("\xc0\xaf"), "??");         /* overlong '/' */
	CHECK_STR(shown("\xed\xa0\x80"), "???");    /* a surrogate */
	CHECK_STR(shown("\xf4\x90\x80\x80"), "????"); /* past U+10FFFF */
	CHECK_STR(shown("\xe2\x82"), "??");         /* cut short */
	CHECK_STR(shown("\xe2\x82x"), "??x");
	CHECK_STR(shown(NULL), "");
	CHECK_STR(shown(""), "");
}

static void test_bounded_in_place_idempotent(void)
{
	char small[4];
	CHECK_STR(gs_printable(small, sizeof(small), "abcdef"), "abc");
	CHECK_STR(gs_printable(small, sizeof(small), "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5"), "???");
	char one[1];
	CHECK_STR(gs_printable(one, sizeof(one), "abc"), "");
	char s[64] = HOSTILE;
	gs_printable(s, sizeof(s), s);
	CHECK_STR(s, "x?[2J?gpusnap: ok?]0;t??1m");
	char again[64];
	CHECK_STR(gs_printable(again, sizeof(again), s), s);
}

static void test_utf8_char(void)
{
	uint32_t cp = 0;
	CHECK_INT(gs_utf8_char("A", &cp), 1);
	CHECK_INT(cp, 'A');
	CHECK_INT(gs_utf8_char("\xc3\xa9", &cp), 2);
	CHECK_INT(cp, 0xe9);
	CHECK_INT(gs_utf8_char("\xe2\x82\xac", &cp), 3);
	CHECK_INT(cp, 0x20ac);
	CHECK_INT(gs_utf8_char("\xf4\x8f\xbf\xbf", &cp), 4);
	CHECK_INT(cp, 0x10ffff);
	CHECK_INT(gs_utf8_char("\xe0\x80\xaf", &cp), 0);
	CHECK_INT(gs_utf8_char("\xf0\x80\x80\xaf", &cp), 0);
	CHECK_INT(gs_utf8_char("\x80", &cp), 0);
	CHECK_INT(gs_utf8_char("", &cp), 0);
}

/* Whatever an error message quotes, it is one printable line. */
static void test_error_messages(void)
{
	struct gs_err err = { 0 };
	CHECK_INT(gs_fail(&err, GS_E_NOT_CUDA, "process %d (%s) is not a CUDA process", 7, HOSTILE), GS_E_NOT_CUDA);
	CHECK_STR(err.msg, "process 7 (x?[2J?gpusnap: ok?]0;t??1m) is not a CUDA process");
	gs_fail_errno(&err, GS_E_IMAGE, 2, "cannot open 'cpu/a\nb'");
	CHECK_STR(err.msg, "cannot open 'cpu/a?b': No such file or directory");
	gs_fail(&err, GS_E_AGENT, "fine");
	gs_err_wrap(&err, "agent of %s", "\033[31mred");
	CHECK_STR(err.msg, "agent of ?[31mred: fine");
	/* a message that fills the buffer with escapes stays bounded and printable */
	char big[2 * GS_ERR_MSG_MAX];
	memset(big, '\033', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	gs_fail(&err, GS_E_AGENT, "%s", big);
	CHECK_INT(strlen(err.msg), GS_ERR_MSG_MAX - 1);
	CHECK(all_printable(err.msg));
}

/* A log line that quotes a process's name is one printable line. */
static void test_log_lines(void)
{
	int p[2];
	CHECK_INT(pipe(p), 0);
	gs_log_set_fd(p[1]);
	gs_log(GS_LOG_ERROR, "test: ", "process %d (%s) gone", 9, HOSTILE);
	gs_log_fixed(GS_LOG_ERROR, "test: ", "fixed " HOSTILE);
	gs_log_set_fd(2);
	close(p[1]);
	char out[1024] = "";
	ssize_t n = read(p[0], out, sizeof(out) - 1);
	close(p[0]);
	CHECK(n > 0);
	out[n > 0 ? n : 0] = '\0';
	CHECK_STR(out, "gpusnap: error: test: process 9 (x?[2J?gpusnap: ok?]0;t??1m) gone\n"
		       "gpusnap: error: test: fixed x?[2J?gpusnap: ok?]0;t??1m\n");
}

/* JSON keeps the exact text, as escapes, and is ASCII: valid JSON, harmless on a terminal. */
static void test_json_strings(void)
{
	struct gs_json j;
	gs_json_init(&j);
	gs_json_object_begin(&j);
	gs_json_kv_string(&j, "comm", "a\033\n\x7f\xc2\x9b\xc3\xa9\xf0\x9f\x98\x80\xff\"\\/\b\f");
	gs_json_object_end(&j);
	const char *t = gs_json_finish(&j);
	CHECK_STR(t, "{\"comm\":\"a\\u001b\\n\\u007f\\u009b\\u00e9\\ud83d\\ude00\\ufffd\\\"\\\\/\\u0008\\u000c\"}");
	CHECK(t && all_printable(t));
	gs_json_free(&j);
}

int main(void)
{
	RUN(test_controls_and_utf8);
	RUN(test_bounded_in_place_idempotent);
	RUN(test_utf8_char);
	RUN(test_error_messages);
	RUN(test_log_lines);
	RUN(test_json_strings);
	return TEST_SUMMARY();
}
