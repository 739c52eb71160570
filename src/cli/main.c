/*
 * main.c - the gpusnap command: finds the subcommand in a table and runs it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/interrupt.h"
#include "common/log.h"

static const struct cli_command commands[] = {
	{ "suspend", cmd_suspend, "take a CUDA process's GPU state off the GPU (VRAM to zero)" },
	{ "resume", cmd_resume, "put a suspended process's GPU state back, on the same or another GPU" },
	{ "state", cmd_state, "show whether a CUDA process is running, locked, suspended or failed; without PID, list them all" },
	{ "run", cmd_run, "start a command with the gpusnap agent, for the fast path" },
	{ "dump", cmd_dump, "write a CUDA process's GPU and CPU state into an image directory (CRIU)" },
	{ "restore", cmd_restore, "bring a dumped process back from an image, on the same or another GPU" },
	{ "inspect", cmd_inspect, "show what an image holds; --verify checks every checksum" },
	{ "container-spec", cmd_container_spec, "print a CDI spec (or engine flags) that puts the agent into containers" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: gpusnap <command> [<options>] [<args>]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "    %-15s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\n'gpusnap <command> -h' shows a command's options; exit codes are listed in README.md.\n");
}

int main(int argc, char **argv)
{
	gs_log_init_from_env();
	if (argc < 2) {
		/* nothing asked: the list of commands is the most useful answer */
		usage(stderr);
		return GS_E_USAGE;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("gpusnap %s\n", GPUSNAP_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return cli_exit(cli_json_end_command(commands[i].run(argc - 1, argv + 1)));
	fprintf(stderr, "gpusnap: '%s' is not a gpusnap command (see gpusnap --help)\n", argv[1]);
	return GS_E_USAGE;
}
