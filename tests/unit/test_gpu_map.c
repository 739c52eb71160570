/*
 * test_gpu_map.c - GPU maps: parsing "FROM=TO" against a machine's GPUs,
 * coverage of the GPUs a process used, type checks, and completion to every
 * GPU of the machine (what the driver asks for).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/gpus.h"
#include "test.h"

static void machine(struct gs_gpu *g, int n, const char *other_name_at_2)
{
	memset(g, 0, sizeof(*g) * (size_t)n);
	for (int i = 0; i < n; i++) {
		g[i].index = i;
		memset(g[i].uuid.bytes, 0x10 + i, 16);
		gs_cuda_uuid_format(&g[i].uuid, g[i].uuid_str, sizeof(g[i].uuid_str));
		strcpy(g[i].name, i == 2 && other_name_at_2 ? other_name_at_2 : "NVIDIA H100");
		g[i].cc_major = 9;
	}
}

static int target_of(const CUcheckpointGpuPair *p, unsigned n, const struct gs_gpu *g, int ngpus, int from)
{
	for (unsigned i = 0; i < n; i++)
		if (!memcmp(p[i].oldUuid.bytes, g[from].uuid.bytes, 16))
			for (int t = 0; t < ngpus; t++)
				if (!memcmp(p[i].newUuid.bytes, g[t].uuid.bytes, 16))
					return t;
	return -1;
}

static void test_parse_and_complete(void)
{
	struct gs_gpu g[4];
	machine(g, 2, NULL);
	const char *specs[] = { "0=1" };
	CUcheckpointGpuPair *p = NULL;
	unsigned n = 0;
	struct gs_err err = { 0 };
	CHECK_INT(gs_gpu_map_parse(specs, 1, g, 2, NULL, 0, &p, &n, &err), 0);
	CHECK_INT(n, 1);
	CHECK_INT(gs_gpu_pairs_complete(&p, &n, g, 2, &err), 0);
	CHECK_INT(n, 2);
	CHECK_INT(target_of(p, n, g, 2, 0), 1);
	CHECK_INT(target_of(p, n, g, 2, 1), 0);
	free(p);

	/* four GPUs, 0=3: 1 and 2 stay, 3 takes the free 0 */
	machine(g, 4, NULL);
	p = NULL;
	CHECK_INT(gs_gpu_map_parse(specs + 0, 0, g, 4, NULL, 0, &p, &n, &err), 0);
	free(p);
	const char *m03[] = { "0=3" };
	p = NULL;
	CHECK_INT(gs_gpu_map_parse(m03, 1, g, 4, NULL, 0, &p, &n, &err), 0);
	CHECK_INT(gs_gpu_pairs_complete(&p, &n, g, 4, &err), 0);
	CHECK_INT(n, 4);
	CHECK_INT(target_of(p, n, g, 4, 1), 1);
	CHECK_INT(target_of(p, n, g, 4, 2), 2);
	CHECK_INT(target_of(p, n, g, 4, 3), 0);
	free(p);
}

static void test_refusals(void)
{
	struct gs_gpu g[3];
	machine(g, 3, "Other GPU");
	CUcheckpointGpuPair *p = NULL;
	unsigned n = 0;
	struct gs_err err = { 0 };
	const char *bad[] = { "0=7" };
	CHECK_INT(gs_gpu_map_parse(bad, 1, g, 3, NULL, 0, &p, &n, &err), GS_E_GPU_MAP);
	CHECK_CONTAINS(err.msg, "GPU index 7 does not exist");
	const char *cross[] = { "0=2" };
	CHECK_INT(gs_gpu_map_parse(cross, 1, g, 3, NULL, 0, &p, &n, &err), GS_E_GPU_MISMATCH);
	const char *twice[] = { "0=1", "0=0" };
	CHECK_INT(gs_gpu_map_parse(twice, 2, g, 3, NULL, 0, &p, &n, &err), GS_E_GPU_MAP);
	CHECK_CONTAINS(err.msg, "mapped twice");
	/* the process used GPUs 0 and 1: a map naming only 0 is refused before the driver is asked */
	CUuuid used[2] = { g[0].uuid, g[1].uuid };
	const char *partial[] = { "0=1" };
	CHECK_INT(gs_gpu_map_parse(partial, 1, g, 3, used, 2, &p, &n, &err), GS_E_GPU_MAP);
	CHECK_CONTAINS(err.msg, "does not cover GPU 1");
	/* completion cannot place GPU 2 (the only one of its type) once 2's place is taken */
	const char *uuid_form[] = { "GPU-10101010-1010-1010-1010-101010101010=1", "1=0" };
	p = NULL;
	CHECK_INT(gs_gpu_map_parse(uuid_form, 2, g, 3, NULL, 0, &p, &n, &err), 0);
	CHECK_INT(gs_gpu_pairs_complete(&p, &n, g, 3, &err), 0);
	CHECK_INT(target_of(p, n, g, 3, 2), 2);
	free(p);
}

int main(void)
{
	RUN(test_parse_and_complete);
	RUN(test_refusals);
	return TEST_SUMMARY();
}
