/*
 * share_tree.h - the command line's side of GPU memory shared between the
 * processes of one operation as file descriptors (core/share_plan.h,
 * agent/agent_share.h): before a suspend or dump it links every import to
 * its export and gives each agent that shares the go-ahead; before a resume
 * it has the exporters create their exported memory again and hands the new
 * descriptors to the importers, which then resume gated until every agent
 * is back (cli_share_resume does all of it).
 */
#ifndef GPUSNAP_CLI_SHARE_TREE_H
#define GPUSNAP_CLI_SHARE_TREE_H

#include <stdbool.h>
#include <sys/types.h>

#include "cli/agent_client.h"
#include "common/err.h"

/*
 * Before a suspend or dump of pids (agents from cli_agent_probe): nothing
 * when no agent shares memory (*shared false). Else every import is linked
 * or the operation is refused (GS_E_STATE or GS_E_AGENT, naming the process):
 * a process without the agent, an importer whose exporter is not among
 * pids or that keeps its descriptor, exports of a process operated on alone
 * (!together). Nothing is changed by a refusal.
 */
int cli_share_before_suspend(const pid_t *pids, const struct cli_agent *agents, int n, bool together, bool *shared,
			     struct gs_err *err);
/*
 * After every agent of the operation suspended (or dumped), before the
 * driver: first each lets go of its imports, then each closes its duplicates
 * (SHARE_RELEASE), so the shared memory is freed. A failure in the first
 * round leaves every agent able to resume on its own (undo as usual).
 */
int cli_share_release(const pid_t *pids, const struct cli_agent *agents, int n, struct gs_err *err);
/*
 * Before the agents' RESUME: exporters that are suspended create their
 * exported memory again (SHARE_EXPORT), importers get the descriptors to
 * import from (SHARE_IMPORT). *shared false when no agent shares memory (the
 * resume goes as ever); else the RESUMEs must keep the gates closed
 * (GS_RESUME_STAY_GATED) until cli_share_open.
 */
int cli_share_before_resume(const pid_t *pids, const struct cli_agent *agents, int n, bool *shared,
			    struct gs_err *err);
/*
 * The agents' part of a resume of pids (each suspended agent: RESUME, its
 * data from images[i] when images and images[i] are not NULL, else from its
 * own memory). Without shared memory each resumes on its own (the first
 * error returned, the others resumed all the same). With it: as one job,
 * cli_share_before_resume first, then every RESUME with the gates held, and
 * OPEN to all once all are back. If one RESUME fails (that agent rolls
 * itself back), no gate is opened: the agents resumed before it are
 * suspended again and the shared memory let go, so the whole job stays
 * suspended ("the processes stay suspended" appended to err, whose code is
 * the failed RESUME's) and a later resume --tree retries. verify_gpu: each
 * agent checks what it loaded from its image against the image's
 * fingerprints on the GPU before it runs (restore --verify-gpu).
 */
int cli_share_resume(const pid_t *pids, struct cli_agent *agents, int n, const char *const *images, bool verify_gpu,
		     struct gs_err *err);

#endif
