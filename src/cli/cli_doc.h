/*
 * cli_doc.h - the commands' option tables read without running the commands,
 * and the manual pages written from them (cli_doc.c). `gpusnap help`,
 * `gpusnap completion` and the build's `gpusnap _doc man` are its users.
 */
#ifndef GPUSNAP_CLI_CLI_DOC_H
#define GPUSNAP_CLI_CLI_DOC_H

#include <stdio.h>

#include "cli/cli.h"

/* A command's option table as its parser sees it; the values point nowhere. */
struct cli_table {
	struct gs_option *opts; /* ends with GS_OPT_END, as the command's own */
	const char *const *usage;
	int flags;
};

/* The command called name, or NULL. */
const struct cli_command *cli_find_command(const char *name);
/* Runs c as `c -h` with cli_parse_hook set, copying its table into t. 0, or GS_E_FAILURE with err set. */
int cli_doc_table(const struct cli_command *c, struct cli_table *t, struct gs_err *err);
void cli_table_free(struct cli_table *t);
/* Writes c's manual page in roff (man(7)); c NULL writes gpusnap(1). 0, or GS_E_FAILURE with err set. */
int cli_doc_man(FILE *out, const struct cli_command *c, struct gs_err *err);
/* Writes the completion script of shell ("bash" or "zsh") (cmd_completion.c). 0, or GS_E_USAGE/GS_E_FAILURE with err set. */
int cli_completion_script(FILE *out, const char *shell, struct gs_err *err);

#endif
