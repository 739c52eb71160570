/*
 * report.c - printing suspend/resume outcomes (see report.h).
 */
#include "cli/report.h"

#include <stdio.h>
#include <string.h>

#include "common/proc.h"
#include "core/protocol.h"
#include "common/util.h"

const char *cli_process_state_name(CUprocessState st, bool agent_present, uint64_t agent_state)
{
	if (!agent_present || st != CU_PROCESS_STATE_RUNNING || agent_state == GS_AGENT_RUNNING)
		return gs_cuda_state_name(st);
	return agent_state == GS_AGENT_GATED ? "gated" : "suspended";
}

/* after a successful suspend by the agent the data is off the GPU whatever the driver says */
static const char *state_after_name(const struct cli_outcome *o, int i)
{
	const struct gs_ckpt_proc *p = &o->procs[i];
	const struct cli_agent *ag = &o->agents[i];
	if (!p->state_known)
		return "unknown";
	if (!o->rc && ag->present && !strcmp(o->action, "suspend"))
		return cli_process_state_name(p->state_after, true, GS_AGENT_DATA_RELEASED);
	if (!o->rc && !strcmp(o->action, "resume"))
		return gs_cuda_state_name(p->state_after);
	return cli_process_state_name(p->state_after, ag->present, ag->state);
}

static void print_json(struct cli_session *s, const struct cli_outcome *o)
{
	struct gs_json j;
	cli_json_begin_outcome(&j, o->action, o->rc, o->err);
	gs_json_kv_double(&j, "total_s", o->total_s);
	gs_json_key(&j, "processes");
	gs_json_array_begin(&j);
	for (int i = 0; i < o->nprocs; i++) {
		const struct gs_ckpt_proc *p = &o->procs[i];
		char comm[64];
		gs_proc_comm(p->pid, comm, sizeof(comm));
		gs_json_object_begin(&j);
		gs_json_kv_int(&j, "pid", p->pid);
		gs_json_kv_string(&j, "comm", comm);
		const struct cli_agent *ag = &o->agents[i];
		gs_json_kv_string(&j, "path", ag->present ? "agent" : "driver");
		gs_json_kv_string(&j, "state_before", cli_process_state_name(p->state_before, ag->present, ag->state));
		gs_json_kv_string(&j, "state_after", state_after_name(o, i));
		gs_json_key(&j, "times");
		gs_json_object_begin(&j);
		if (!strcmp(o->action, "suspend")) {
			gs_json_kv_double(&j, "lock_s", p->lock_s);
			gs_json_kv_double(&j, "checkpoint_s", p->checkpoint_s);
		} else {
			gs_json_kv_double(&j, "restore_s", p->restore_s);
			gs_json_kv_double(&j, "unlock_s", p->unlock_s);
		}
		gs_json_object_end(&j);
		if (ag->present) {
			gs_json_key(&j, "agent");
			gs_json_object_begin(&j);
			for (int k = 0; k < ag->last.ntimings; k++) {
				char key[80];
				snprintf(key, sizeof(key), "%s_s", ag->last.timing_name[k]);
				gs_json_kv_double(&j, key, ag->last.timing_s[k]);
			}
			for (int k = 0; k < ag->last.ncounters; k++)
				gs_json_kv_uint(&j, ag->last.counter_name[k], ag->last.counter[k]);
			gs_json_kv_uint(&j, "unmanaged_bytes", ag->unmanaged_bytes);
			gs_json_object_end(&j);
		}
		if (ag->present && !o->rc && !strcmp(o->action, "suspend")) {
			/* where the agent put the data: host memory or the spill directory, all but the zero chunks */
			gs_json_key(&j, "data");
			gs_json_object_begin(&j);
			uint64_t held = cli_agent_counter(ag, "held_bytes");
			uint64_t mem = ag->spill_dir[0] ? cli_agent_counter(ag, "memory_bytes") : held;
			gs_json_kv_string(&j, "where", !ag->spill_dir[0] ? "host-memory" : mem ? "split" : "spill");
			if (ag->spill_dir[0])
				gs_json_kv_string(&j, "dir", ag->spill_dir);
			gs_json_kv_uint(&j, "held_bytes", held);
			gs_json_kv_uint(&j, "memory_bytes", mem);
			gs_json_kv_uint(&j, "spilled_bytes", held - mem);
			gs_json_kv_uint(&j, "zero_bytes", cli_agent_counter(ag, "zero_bytes"));
			gs_json_object_end(&j);
		}
		if (o->gpus_before.known) {
			gs_json_kv_uint(&j, "vram_before_bytes", o->vram_before[i]);
			gs_json_kv_uint(&j, "vram_after_bytes", o->vram_after[i]);
		}
		gs_json_object_end(&j);
	}
	gs_json_array_end(&j);
	gs_json_key(&j, "gpus");
	gs_json_array_begin(&j);
	for (int g = 0; g < s->ngpus; g++) {
		gs_json_object_begin(&j);
		gs_json_kv_int(&j, "index", g);
		gs_json_kv_string(&j, "uuid", s->gpus[g].uuid_str);
		gs_json_kv_string(&j, "name", s->gpus[g].name);
		if (o->gpus_before.known && g < o->gpus_before.ngpus && g < o->gpus_after.ngpus) {
			gs_json_kv_uint(&j, "used_before_bytes", o->gpus_before.gpu_used[g]);
			gs_json_kv_uint(&j, "used_after_bytes", o->gpus_after.gpu_used[g]);
		}
		gs_json_object_end(&j);
	}
	gs_json_array_end(&j);
	gs_json_object_end(&j);
	cli_json_print(&j);
}

static void print_human(struct cli_session *s, const struct cli_outcome *o)
{
	bool suspend = !strcmp(o->action, "suspend");
	for (int i = 0; i < o->nprocs; i++) {
		const struct gs_ckpt_proc *p = &o->procs[i];
		char comm[64], b1[32], b2[32];
		gs_proc_comm(p->pid, comm, sizeof(comm));
		gs_printable(comm, sizeof(comm), comm);
		if (o->rc && p->state_known)
			printf("%d (%s): %s\n", (int)p->pid, comm, state_after_name(o, i));
		else if (o->rc)
			continue;
		else {
			printf("%s %d (%s)", suspend ? "suspended" : "resumed", (int)p->pid, comm);
			const struct cli_agent *ag = &o->agents[i];
			if (ag->present) {
				char b[32];
				uint64_t bytes = cli_agent_counter(ag, "bytes");
				double data = cli_agent_timing(ag, suspend ? "copy_out" : "copy_in");
				printf(" [agent]: data %s in %.2f s", gs_format_bytes(bytes, b, sizeof(b)), data);
				if (data > 0 && bytes)
					printf(" (%.1f GB/s)", (double)bytes / data / 1e9);
				printf(suspend ? ", release %.2f s" : ", map %.2f s",
				       cli_agent_timing(ag, suspend ? "release" : "map"));
				if (suspend) {
					char h[32], z[32], m[32];
					uint64_t mem = cli_agent_counter(ag, "memory_bytes");
					if (ag->spill_dir[0] && mem)
						printf(", %s in host memory", gs_format_bytes(mem, m, sizeof(m)));
					printf(ag->spill_dir[0] ? ", %s spilled to %s (%s zero left out)" : ", %s%s in host memory "
					       "(%s zero left out)",
					       gs_format_bytes(cli_agent_counter(ag, "held_bytes") - (ag->spill_dir[0] ? mem : 0), h,
							       sizeof(h)),
					       ag->spill_dir[0] ? ag->spill_dir : "",
					       gs_format_bytes(cli_agent_counter(ag, "zero_bytes"), z, sizeof(z)));
				}
			} else {
				printf(":");
			}
			if (suspend && p->checkpoint_s > 0)
				printf(" lock %.2f s, checkpoint %.2f s", p->lock_s, p->checkpoint_s);
			else if (!suspend && p->restore_s > 0)
				printf(" restore %.2f s, unlock %.2f s", p->restore_s, p->unlock_s);
		}
		if (!o->rc && o->gpus_before.known)
			printf("; VRAM %s -> %s", gs_format_bytes(o->vram_before[i], b1, sizeof(b1)),
			       gs_format_bytes(o->vram_after[i], b2, sizeof(b2)));
		if (!o->rc)
			printf("\n");
	}
	if (!o->rc && o->gpus_before.known)
		for (int g = 0; g < o->gpus_before.ngpus && g < s->ngpus; g++) {
			char b1[32], b2[32];
			if (o->gpus_before.gpu_used[g] == o->gpus_after.gpu_used[g])
				continue;
			printf("GPU %d (%s): used %s -> %s\n", g, s->gpus[g].name,
			       gs_format_bytes(o->gpus_before.gpu_used[g], b1, sizeof(b1)),
			       gs_format_bytes(o->gpus_after.gpu_used[g], b2, sizeof(b2)));
		}
	if (!o->rc)
		printf("total %.2f s\n", o->total_s);
}

void cli_print_outcome(struct cli_session *s, const struct cli_outcome *o, bool json)
{
	if (json)
		print_json(s, o);
	else
		print_human(s, o);
	fflush(stdout);
}
