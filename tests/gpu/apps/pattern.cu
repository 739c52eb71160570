/*
 * pattern.cu - holds device memory filled with a known pattern on one GPU and
 * verifies it bit for bit on request (see pattern_core.cuh for the options and
 * the pattern). The suspend/resume tests and the benchmark run this.
 */
#include "pattern_core.cuh"

int main(int argc, char **argv)
{
	g_app_name = "pattern";
	return pattern_main(argc, argv, false);
}
