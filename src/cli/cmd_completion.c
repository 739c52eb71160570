/*
 * cmd_completion.c - `gpusnap completion bash|zsh`: the shell completion
 * script, written from the commands' option tables (cli_doc.h) as the
 * manual pages are, so a new option completes without a second list.
 *
 * What completes: the commands; each command's options; an option's value
 * where its placeholder says what it is (DIR: directories, PATH: files); the
 * positional argument a command's doc names (PID: the CUDA processes `gpusnap
 * state --json` lists, asked with a short timeout and quiet on error; DIR:
 * directories; PROGRAM: commands; COMMAND: gpusnap's commands; a|b: those words).
 */
#include <string.h>

#include "cli/cli_doc.h"

static const char *const completion_usage[] = {
	"gpusnap completion bash|zsh",
	NULL,
};

const struct cli_doc completion_doc = {
	.args = "bash|zsh",
	.description =
		"Prints the completion script for bash or zsh on stdout. It completes gpusnap's commands, their "
		"options, image directories, and the PIDs of the CUDA processes gpusnap state lists.\n\n"
		"The Debian package installs both (bash: /usr/share/bash-completion/completions/gpusnap; zsh: "
		"/usr/share/zsh/vendor-completions/_gpusnap); elsewhere load it from the shell's start-up file.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_USAGE, "no shell, or one other than bash and zsh" },
						{ GS_E_FAILURE, "" },
						{ 0, NULL } },
	.examples = (const struct cli_doc_example[]){ { "source <(gpusnap completion bash)",
							"Complete gpusnap in this bash (add the line to ~/.bashrc to keep it)." },
						      { "gpusnap completion zsh > ~/.zfunc/_gpusnap",
							"Install it for zsh, with ~/.zfunc in fpath before compinit." },
						      { NULL, NULL } },
};

/* What an option's value is, from its placeholder: 'd' a directory, 'f' a file, 'v' something else. */
static char value_kind(const struct gs_option *o)
{
	if (!o->argh)
		return 0;
	if (!strcmp(o->argh, "DIR"))
		return 'd';
	if (!strcmp(o->argh, "PATH") || !strcmp(o->argh, "FILE"))
		return 'f';
	return 'v';
}

static void bash_words(FILE *out, const struct gs_option *opts, char kind)
{
	const char *sep = "";
	for (const struct gs_option *o = opts; o->type != GS_OPT_END; o++) {
		if (kind && value_kind(o) != kind)
			continue;
		if (o->short_name) {
			fprintf(out, "%s-%c", sep, o->short_name);
			sep = " ";
		}
		if (o->long_name) {
			fprintf(out, "%s--%s", sep, o->long_name);
			sep = " ";
		}
	}
}

/*
 * Calls write for each command with its option table (cli_doc_table), in
 * the commands' order: both shells' case statements are built this way.
 */
static int each_command(FILE *out, void (*write)(FILE *, const struct cli_command *, const struct cli_table *),
			struct gs_err *err)
{
	for (int i = 0; i < cli_ncommands; i++) {
		struct cli_table t;
		int rc = cli_doc_table(&cli_commands[i], &t, err);
		if (rc)
			return rc;
		write(out, &cli_commands[i], &t);
		cli_table_free(&t);
	}
	return 0;
}

/* A command's branch of the bash case: its options, by the kind of their value, and its argument. */
static void bash_case(FILE *out, const struct cli_command *c, const struct cli_table *t)
{
	fprintf(out, "  %s)\n    opts='", c->name);
	bash_words(out, t->opts, 0);
	fputs(" --help'\n    dirs='", out);
	bash_words(out, t->opts, 'd');
	fputs("'\n    files='", out);
	bash_words(out, t->opts, 'f');
	fputs("'\n    values='", out);
	bash_words(out, t->opts, 'v');
	fprintf(out, "'\n    args='%s'\n    ;;\n", c->doc->args ? c->doc->args : "");
}

static int bash(FILE *out, struct gs_err *err)
{
	fputs("# bash completion for gpusnap, written by `gpusnap completion bash` from its option tables\n"
	      "\n"
	      "# the PIDs of the CUDA processes gpusnap state lists; nothing (and quietly) when it cannot say\n"
	      "_gpusnap_pids() {\n"
	      "  timeout 3 \"$1\" state --json 2>/dev/null | grep -o '\"pid\": *[0-9]*' | grep -o '[0-9]*$'\n"
	      "}\n"
	      "\n"
	      "_gpusnap() {\n"
	      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}\n"
	      "  COMPREPLY=()\n"
	      "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
	      "    COMPREPLY=($(compgen -W '",
	      out);
	for (int i = 0; i < cli_ncommands; i++)
		fprintf(out, "%s ", cli_commands[i].name);
	fputs("--help --version' -- \"$cur\"))\n"
	      "    return 0\n"
	      "  fi\n"
	      "  # the options; those whose value is a directory, a file, or something else; the argument\n"
	      "  local opts= dirs= files= values= args=\n"
	      "  case ${COMP_WORDS[1]} in\n",
	      out);
	int rc = each_command(out, bash_case, err);
	if (rc)
		return rc;
	fputs("  *) return 0 ;;\n"
	      "  esac\n"
	      "  case \" $dirs \" in *\" $prev \"*)\n"
	      "    compopt -o filenames 2>/dev/null\n"
	      "    COMPREPLY=($(compgen -d -- \"$cur\"))\n"
	      "    return 0 ;;\n"
	      "  esac\n"
	      "  case \" $files \" in *\" $prev \"*)\n"
	      "    compopt -o filenames 2>/dev/null\n"
	      "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
	      "    return 0 ;;\n"
	      "  esac\n"
	      "  # a number, a size, a mapping: nothing to offer\n"
	      "  case \" $values \" in *\" $prev \"*) return 0 ;; esac\n"
	      "  if [[ $cur == -* ]]; then\n"
	      "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
	      "    return 0\n"
	      "  fi\n"
	      "  # past a program's name (gpusnap run CMD ...), its own arguments: files\n"
	      "  # (switch takes two PIDs: the second is completed like the first)\n"
	      "  local i n=0\n"
	      "  for ((i = 2; i < COMP_CWORD; i++)); do\n"
	      "    case ${COMP_WORDS[i]} in -*) continue ;; esac\n"
	      "    case \" $dirs $files $values \" in *\" ${COMP_WORDS[i - 1]} \"*) continue ;; esac\n"
	      "    n=$((n + 1))\n"
	      "    [ \"$args\" = 'PID PID' ] && [ $n -lt 2 ] && continue\n"
	      "    [ \"$args\" = PROGRAM ] && { compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")); }\n"
	      "    return 0\n"
	      "  done\n"
	      "  case $args in\n"
	      "  PID | 'PID PID') COMPREPLY=($(compgen -W \"$(_gpusnap_pids \"${COMP_WORDS[0]}\")\" -- \"$cur\")) ;;\n"
	      "  DIR) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\")) ;;\n"
	      "  PROGRAM) COMPREPLY=($(compgen -c -- \"$cur\")) ;;\n"
	      "  COMMAND) COMPREPLY=($(compgen -W '",
	      out);
	for (int i = 0; i < cli_ncommands; i++)
		fprintf(out, "%s%s", i ? " " : "", cli_commands[i].name);
	fputs("' -- \"$cur\")) ;;\n"
	      "  *'|'*) COMPREPLY=($(compgen -W \"${args//|/ }\" -- \"$cur\")) ;;\n"
	      "  esac\n"
	      "  return 0\n"
	      "}\n"
	      "complete -F _gpusnap gpusnap\n",
	      out);
	return 0;
}

/* Text inside a zsh _arguments spec in single quotes: ' ends it, [ ] : are the spec's own. */
static void zsh_text(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", out);
		else if (*s == '[' || *s == ']' || *s == ':' || *s == '\\')
			fprintf(out, "\\%c", *s);
		else
			fputc(*s, out);
	}
}

static void zsh_option(FILE *out, const struct gs_option *o, const char *name, bool is_long)
{
	fputs("    '", out);
	if (o->type == GS_OPT_STRING_LIST)
		fputc('*', out);
	fprintf(out, "%s%s%s[", is_long ? "--" : "-", name, !o->argh ? "" : is_long ? "=" : "+");
	zsh_text(out, o->help ? o->help : "");
	fputc(']', out);
	if (o->argh) {
		fputc(':', out);
		zsh_text(out, o->argh);
		fputs(value_kind(o) == 'd' ? ":_files -/" : value_kind(o) == 'f' ? ":_files" : ": ", out);
	}
	fputs("' \\\n", out);
}

/* A command's branch of the zsh case: its options for _arguments, then its argument. */
static void zsh_case(FILE *out, const struct cli_command *c, const struct cli_table *t)
{
	fprintf(out, "  %s)\n    _arguments -s \\\n", c->name);
	for (const struct gs_option *o = t->opts; o->type != GS_OPT_END; o++) {
		if (o->short_name)
			zsh_option(out, o, (char[]){ o->short_name, 0 }, false);
		if (o->long_name)
			zsh_option(out, o, o->long_name, true);
	}
	const char *a = c->doc->args ? c->doc->args : "";
	fputs("    '(- *)'{-h,--help}'[show the usage and the options]'", out);
	if (!strcmp(a, "PID"))
		fputs(" \\\n    ':process ID:_gpusnap_pids'", out);
	else if (!strcmp(a, "PID PID"))
		fputs(" \\\n    ':process ID:_gpusnap_pids' \\\n    ':process ID:_gpusnap_pids'", out);
	else if (!strcmp(a, "DIR"))
		fputs(" \\\n    ':image directory:_files -/'", out);
	else if (!strcmp(a, "PROGRAM"))
		fputs(" \\\n    ':command:_command_names -e' \\\n    '*::arguments:_normal'", out);
	else if (!strcmp(a, "COMMAND"))
		fputs(" \\\n    ':command:{_describe -t commands command commands}'", out);
	else if (strchr(a, '|')) {
		fputs(" \\\n    ':shell:(", out);
		for (; *a; a++)
			fputc(*a == '|' ? ' ' : *a, out);
		fputs(")'", out);
	}
	fputs("\n    ;;\n", out);
}

static int zsh(FILE *out, struct gs_err *err)
{
	fputs("#compdef gpusnap\n"
	      "# zsh completion for gpusnap, written by `gpusnap completion zsh` from its option tables\n"
	      "\n"
	      "_gpusnap_pids() {\n"
	      "  local -a pids\n"
	      "  pids=(${(f)\"$(timeout 3 ${_gpusnap_bin:-gpusnap} state --json 2>/dev/null | grep -o '\"pid\": *[0-9]*' | grep -o '[0-9]*$')\"})\n"
	      "  compadd -a pids\n"
	      "}\n"
	      "\n"
	      "_gpusnap() {\n"
	      "  local _gpusnap_bin=$words[1]\n"
	      "  local -a commands\n"
	      "  commands=(\n",
	      out);
	for (int i = 0; i < cli_ncommands; i++) {
		fprintf(out, "    '%s:", cli_commands[i].name);
		zsh_text(out, cli_commands[i].summary);
		fputs("'\n", out);
	}
	fputs("  )\n"
	      "  if (( CURRENT == 2 )); then\n"
	      "    _describe -t commands 'gpusnap command' commands\n"
	      "    return\n"
	      "  fi\n"
	      "  local cmd=$words[2]\n"
	      "  shift words\n"
	      "  (( CURRENT-- ))\n"
	      "  case $cmd in\n",
	      out);
	int rc = each_command(out, zsh_case, err);
	if (rc)
		return rc;
	fputs("  esac\n"
	      "}\n"
	      "\n"
	      "_gpusnap \"$@\"\n",
	      out);
	return 0;
}

int cli_completion_script(FILE *out, const char *shell, struct gs_err *err)
{
	if (!strcmp(shell, "bash"))
		return bash(out, err);
	if (!strcmp(shell, "zsh"))
		return zsh(out, err);
	return gs_fail(err, GS_E_USAGE, "'%s' is not a shell gpusnap completes (bash or zsh)", shell);
}

int cmd_completion(int argc, char **argv)
{
	const struct gs_option opts[] = { GS_OPT_END_() };
	int nargs;
	int rc = cli_parse(argc, argv, opts, completion_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if ((rc = cli_want_args("completion", argv, nargs, 1, "the shell (bash or zsh)")))
		return rc;
	struct gs_err err = { 0 };
	rc = cli_completion_script(stdout, argv[0], &err);
	if (rc == GS_E_USAGE)
		return cli_usage_error("completion", "%s", err.msg);
	if (!rc && (fflush(stdout) || ferror(stdout)))
		rc = gs_fail(&err, GS_E_FAILURE, "cannot write the script to stdout");
	return rc ? cli_report_error(&err) : 0;
}
