/*
 * agent_image.c - placeholder until the image save/load of issue 5 lands:
 * both requests are refused with a clear error, nothing else is touched.
 */
#include "agent/agent_image.h"

int gs_agent_image_save(struct gs_agent *a, const char *gpu_dir, bool drop_staging, struct gs_msg *reply,
			struct gs_err *err)
{
	(void)a, (void)gpu_dir, (void)drop_staging, (void)reply;
	return gs_fail(err, GS_E_AGENT, "this agent cannot write images yet");
}

int gs_agent_image_load(struct gs_agent *a, const char *gpu_dir, struct gs_msg *reply, struct gs_err *err)
{
	(void)a, (void)gpu_dir, (void)reply;
	return gs_fail(err, GS_E_AGENT, "this agent cannot read images yet");
}
