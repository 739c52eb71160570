/*
 * err.c - filling gs_err and naming exit codes (see err.h). Every message
 * is made printable here (printable.h): whatever it quotes (a process's name,
 * an agent's words, a file name from an image, CRIU's log), it stays one
 * line that cannot drive a terminal.
 */
#include "common/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/printable.h"

static int vfill(struct gs_err *err, int code, const char *fmt, va_list ap)
{
	if (!err)
		return code;
	err->code = code;
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	gs_printable(err->msg, sizeof(err->msg), err->msg);
	return code;
}

int gs_fail(struct gs_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfill(err, code, fmt, ap);
	va_end(ap);
	return code;
}

int gs_fail_errno(struct gs_err *err, int code, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfill(err, code, fmt, ap);
	va_end(ap);
	if (err) {
		size_t n = strlen(err->msg);
		snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(errnum));
	}
	return code;
}

int gs_err_wrap(struct gs_err *err, const char *fmt, ...)
{
	if (!err)
		return GS_E_FAILURE;
	char prefix[GS_ERR_MSG_MAX];
	char old[GS_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
	gs_printable(err->msg, sizeof(err->msg), err->msg);
	return err->code;
}

void gs_err_clear(struct gs_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

const char *gs_exit_name(int code)
{
	switch (code) {
	case GS_OK: return "ok";
	case GS_E_FAILURE: return "failure";
	case GS_E_USAGE: return "usage";
	case GS_E_NO_PROCESS: return "no-process";
	case GS_E_NOT_CUDA: return "not-cuda";
	case GS_E_PERMISSION: return "permission";
	case GS_E_STATE: return "state";
	case GS_E_NO_DRIVER: return "no-driver";
	case GS_E_DRIVER_OLD: return "driver-too-old";
	case GS_E_TIMEOUT: return "timeout";
	case GS_E_GPU_MAP: return "gpu-map";
	case GS_E_IMAGE: return "image";
	case GS_E_GPU_MISMATCH: return "gpu-mismatch";
	case GS_E_NO_SPACE: return "no-space";
	case GS_E_NO_VRAM: return "no-vram";
	case GS_E_CRIU: return "criu";
	case GS_E_AGENT: return "agent";
	case GS_E_PARTIAL: return "partial";
	default: return code > GS_E_INTERRUPTED_BASE && code < GS_E_INTERRUPTED_BASE + 65 ? "interrupted" : "unknown";
	}
}

int gs_exit_from_errno(int errnum)
{
	switch (errnum) {
	case ESRCH:
	case ENOENT: return GS_E_NO_PROCESS;
	case EPERM:
	case EACCES: return GS_E_PERMISSION;
	case ENOSPC:
	case EDQUOT: return GS_E_NO_SPACE;
	case ETIMEDOUT: return GS_E_TIMEOUT;
	default: return GS_E_FAILURE;
	}
}
