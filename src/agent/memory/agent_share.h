/*
 * agent_share.h - the app's GPU memory shared with other processes as POSIX
 * file descriptors (cuMemExportToShareableHandle /
 * cuMemImportFromShareableHandle: NCCL with cuMem, PyTorch's expandable
 * segments over IPC), moved by suspend and resume together with the other
 * processes' agents, coordinated by gpusnap (docs/DESIGN.md, "Memory shared
 * between processes").
 *
 * The agent keeps a duplicate of every descriptor the app exported or
 * imported, so gpusnap can tell which import is which export (kcmp). A
 * suspend then:
 *   exporter  saves and releases the allocation like any of its own;
 * and once every process is suspended (SHARE_RELEASE, two rounds):
 *   importer  unmaps and releases its import (the data is the exporter's);
 *   both      close the duplicates (they would keep the memory alive).
 * Before the second round each process can still resume on its own: the
 * duplicates give it back the very memory the others map.
 * Resume: gpusnap asks each exporter to create its exported allocations again
 * and export them (SHARE_EXPORT), hands the new descriptors to the importers
 * (SHARE_IMPORT), then resumes them all: exporters fill and map their
 * memory as usual, importers import the new descriptor and map it where
 * it was, with the access it had.
 *
 * An export whose descriptor the app itself still holds is demoted to
 * unreleasable memory (the driver path's) when gpusnap asks (SHARES): that
 * descriptor would keep the old memory. A suspend or dump of a process that
 * shares memory needs gpusnap's go-ahead (SHARE_LINK), which only a command
 * that saw every process sharing it gives.
 *
 * Records live under agent_app_vmm.c's lock (the *_locked calls come from
 * its hooks with it held; the others take it). The requests are called with
 * the agent's operation serialized (agent_main.c).
 */
#ifndef GPUSNAP_AGENT_AGENT_SHARE_H
#define GPUSNAP_AGENT_AGENT_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/base/agent.h"
#include "agent/memory/memkind.h"
#include "core/protocol.h"

#define GS_SHARE_POSIX_FD 1 /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */

/* Hooks (vmm lock held): the app exported vh as fd / imported fd as vh. 0, or -1 when no duplicate could be kept. */
int gs_share_note_export_locked(uint64_t vh, int fd);
int gs_share_note_import_locked(uint64_t vh, int fd);
/* The record of vh is gone: its duplicates are closed. */
void gs_share_forget_locked(uint64_t vh);
/* Whether vh's memory was created early for its importers (SHARE_EXPORT): recreate uses it. */
bool gs_share_created_early_locked(uint64_t vh);
/* vh's memory was released (by the mover): no longer created early. */
void gs_share_released_locked(uint64_t vh);
/*
 * An open duplicate of a descriptor vh was exported as (suspended, before
 * SHARE_RELEASE closed them), or -1: a resume before that imports the very
 * memory its importers still map, instead of creating new memory.
 */
int gs_share_export_fd_locked(uint64_t vh);

/*
 * The lifecycle (a->lock held). Before a suspend or dump plans: refuses
 * without gpusnap's go-ahead when the process shares memory. On resume,
 * once its own memory is back: imports again what SHARE_RELEASE let go, from
 * the descriptor gpusnap gave or else the duplicate still open (on failure
 * none is left mapped). After a resume: the links of this round are
 * forgotten. Letting go of the imports and closing the duplicates is
 * SHARE_RELEASE's, sent by gpusnap once every process of the operation is
 * suspended: until then each can roll back on its own.
 */
int gs_share_before_suspend(struct gs_agent *a, struct gs_err *err);
int gs_share_bring_back(struct gs_agent *a, struct gs_err *err);
void gs_share_after_resume(void);

/*
 * Before the agent reports what it can release (HELLO, STATUS): exports whose
 * descriptor the app still holds are demoted to unreleasable for good (that
 * descriptor refers to the memory as it is; a process importing from it
 * later must get the same memory).
 */
void gs_share_refresh(void);

/*
 * For the image a dump writes (docs/FORMAT.md, "Images of a process tree"):
 * one metadata entry per exported allocation (GS_SHARE_META_EXPORT<n>:
 * "handle=0x..") and per linked import (GS_SHARE_META_IMPORT<n>:
 * "exporter=PID export_handle=0x.. handle=0x.. maps=VA+SIZE,..."), so a
 * restore can tell before it starts anything that every exporter is there.
 */
struct gs_image_writer;
int gs_share_describe(struct gs_image_writer *w, struct gs_err *err);

/* SHARES, SHARE_LINK, SHARE_EXPORT, SHARE_IMPORT, SHARE_RELEASE: answers req into reply; false for other types. */
bool gs_share_handle(struct gs_agent *a, const struct gs_msg *req, struct gs_msg *reply);

/* Legacy CUDA IPC: cuIpcGetMemHandle on the agent's memory fails with a log line saying why (agent_share.c). */
int gs_share_install_hooks(struct gs_err *err);

/* In a fork child: the parent's duplicates are closed, its records forgotten. */
void gs_share_forget_after_fork(void);

/* The memory kind of memory shared with other processes (memory/memkind.h). */
extern const struct gs_memkind gs_share_kind;

#endif
