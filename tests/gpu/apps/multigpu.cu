/*
 * multigpu.cu - the pattern app on every visible GPU at once (--size per GPU),
 * verified on all of them: for suspend/resume of a process that uses several
 * GPUs and for --map that must cover each of them.
 */
#include "pattern_core.cuh"

int main(int argc, char **argv)
{
	g_app_name = "multigpu";
	return pattern_main(argc, argv, true);
}
