/*
 * printable.h - text that others control, made safe for a terminal and a log.
 *
 * A process names itself (prctl(PR_SET_NAME) sets /proc/PID/comm), an agent
 * runs inside someone else's process, an image may come from anywhere and
 * CRIU's log quotes all of them: printed raw, an escape sequence in such text
 * drives the terminal of whoever runs gpusnap, often root (moves the cursor,
 * rewrites lines, sets the title), and a newline forges a line of gpusnap's
 * own. Every such string passes gs_printable before it reaches a terminal or
 * a log line; gs_fail and the loggers pass every message through it, so an
 * error message is always one printable line whatever it quotes. JSON output
 * carries the exact string instead, escaped by the JSON writer (json.h).
 *
 * Printable ASCII stays; everything else becomes '?': a control character
 * (ESC, newline, tab, DEL), a C1 control, each byte of invalid UTF-8, and
 * each whole character of valid UTF-8 (one '?' for it). Only ASCII, because
 * gpusnap does not know how the terminal decodes bytes: a terminal that
 * reads Latin-1 takes a UTF-8 continuation byte 0x9b for CSI.
 *
 * Written here rather than taken from libbsd's strvis: the agent is preloaded
 * into applications and the CRIU plugin loaded into criu, which should not
 * pull in another library, and the logger needs an async-signal-safe copy.
 */
#ifndef GPUSNAP_COMMON_PRINTABLE_H
#define GPUSNAP_COMMON_PRINTABLE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Copies src (NULL reads as "") into dst, n bytes with its NUL (n > 0), made
 * printable as said above; cut at n - 1 bytes. dst may be src: the text
 * never grows. Idempotent; async-signal-safe. Returns dst.
 */
char *gs_printable(char *dst, size_t n, const char *src);

/*
 * The length (1-4) of the valid UTF-8 character at s, its code point in *cp;
 * 0 for a byte that does not start one (an overlong form, a surrogate, past
 * U+10FFFF, a missing continuation byte). s is NUL-terminated.
 */
int gs_utf8_char(const char *s, uint32_t *cp);

#endif
