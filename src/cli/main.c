/*
 * main.c - the gpusnap command: finds the subcommand in a table and runs it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/interrupt.h"
#include "cli/spill.h"
#include "common/log.h"
#include "common/settings.h"

const struct cli_command cli_commands[] = {
	{ "suspend", cmd_suspend, "take a CUDA process's GPU state off the GPU (VRAM to zero)", &suspend_doc },
	{ "resume", cmd_resume, "put a suspended process's GPU state back, on the same or another GPU", &resume_doc },
	{ "switch", cmd_switch, "suspend one process and resume another on the same GPUs, as one step", &switch_doc },
	{ "state", cmd_state, "show whether a CUDA process is running, locked, suspended or failed; without PID, list them all",
	  &state_doc },
	{ "run", cmd_run, "start a command with the gpusnap agent, for the fast path", &run_doc },
	{ "dump", cmd_dump, "write a CUDA process's GPU and CPU state into an image directory (CRIU)", &dump_doc },
	{ "restore", cmd_restore, "bring a dumped process back from an image, on the same or another GPU", &restore_doc },
	{ "inspect", cmd_inspect, "show what an image holds; --verify checks every checksum", &inspect_doc },
	{ "export", cmd_export, "write an image into one self-contained directory (its chain of parents read in)",
	  &export_doc },
	{ "gc", cmd_gc, "remove a chunk store's objects that no image refers to", &gc_doc },
	{ "container-spec", cmd_container_spec, "print a CDI spec (or engine flags) that puts the agent into containers",
	  &container_spec_doc },
	{ "help", cmd_help, "show a command's manual page (its usage where man or the page is missing)", &help_doc },
	{ "completion", cmd_completion, "print the bash or zsh completion script", &completion_doc },
};
const int cli_ncommands = sizeof(cli_commands) / sizeof(cli_commands[0]);

static void usage(FILE *out)
{
	fprintf(out, "usage: gpusnap <command> [<options>] [<args>]\n\ncommands:\n");
	for (int i = 0; i < cli_ncommands; i++)
		fprintf(out, "    %-15s %s\n", cli_commands[i].name, cli_commands[i].summary);
	fprintf(out, "\n'gpusnap <command> -h' shows a command's options, 'gpusnap help <command>' its manual page.\n");
}

int main(int argc, char **argv)
{
	/* the environment, once; a bad value stops a command once its options are parsed (cli_parse) */
	gs_settings_load(GS_SETTINGS_COMMAND, &cli_settings_err);
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
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || (!strcmp(argv[1], "help") && argc == 2)) {
		usage(stdout);
		return 0;
	}
	/* hidden: what the build makes the manual pages from (cli_doc.c) */
	if (!strcmp(argv[1], "_doc"))
		return cmd_doc(argc - 1, argv + 1);
	/* hidden: the detached removal of a spill folder no process needs (spill.c) */
	if (!strcmp(argv[1], "_remove-spill") && argc == 3)
		return cli_spill_remove_trash(argv[2]);
	for (int i = 0; i < cli_ncommands; i++)
		if (!strcmp(argv[1], cli_commands[i].name))
			return cli_exit(cli_json_end_command(cli_commands[i].run(argc - 1, argv + 1)));
	fprintf(stderr, "gpusnap: '%s' is not a gpusnap command (see gpusnap --help)\n", argv[1]);
	return GS_E_USAGE;
}
