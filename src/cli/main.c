/*
 * main.c - the gpusnap command: finds the subcommand in a table and runs it.
 */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"

int main(int argc, char **argv)
{
	gs_log_init_from_env();
	if (argc > 1 && !strcmp(argv[1], "--version")) {
		printf("gpusnap %s\n", GPUSNAP_VERSION);
		return 0;
	}
	fprintf(stderr, "usage: gpusnap <command> [<args>]\n");
	return GS_E_USAGE;
}
