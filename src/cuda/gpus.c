/*
 * gpus.c - listing GPUs through the driver and parsing GPU maps (see gpus.h).
 */
#include "cuda/gpus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/options.h"

int gs_gpus_list(struct gs_cuda *cu, struct gs_gpu **gpus_out, int *count_out, struct gs_err *err)
{
	int count = 0;
	char b[128];
	CUresult r = cu->cuDeviceGetCount(&count);
	if (r != CUDA_SUCCESS)
		return gs_fail(err, GS_E_NO_DRIVER, "cannot count GPUs: %s", gs_cuda_strerror(cu, r, b, sizeof(b)));
	struct gs_gpu *gpus = calloc((size_t)(count > 0 ? count : 1), sizeof(*gpus));
	if (!gpus)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	for (int i = 0; i < count; i++) {
		struct gs_gpu *g = &gpus[i];
		CUdevice dev;
		g->index = i;
		if ((r = cu->cuDeviceGet(&dev, i)) != CUDA_SUCCESS || (r = cu->cuDeviceGetUuid(&g->uuid, dev)) != CUDA_SUCCESS) {
			free(gpus);
			return gs_fail(err, GS_E_FAILURE, "cannot query GPU %d: %s", i, gs_cuda_strerror(cu, r, b, sizeof(b)));
		}
		gs_cuda_uuid_format(&g->uuid, g->uuid_str, sizeof(g->uuid_str));
		cu->cuDeviceGetName(g->name, (int)sizeof(g->name), dev);
		cu->cuDeviceGetAttribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
		cu->cuDeviceGetAttribute(&g->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
		size_t total = 0;
		cu->cuDeviceTotalMem(&total, dev);
		g->total_bytes = total;
	}
	*gpus_out = gpus;
	*count_out = count;
	return 0;
}

int gs_gpus_find_uuid(const struct gs_gpu *gpus, int ngpus, const void *uuid16)
{
	for (int i = 0; i < ngpus; i++)
		if (!memcmp(gpus[i].uuid.bytes, uuid16, 16))
			return i;
	return -1;
}

int gs_gpus_find(const struct gs_gpu *gpus, int ngpus, const char *word)
{
	int idx;
	if (gs_parse_int(word, &idx) == 0)
		return idx >= 0 && idx < ngpus ? idx : -1;
	CUuuid u;
	return gs_cuda_uuid_parse(word, &u) ? -1 : gs_gpus_find_uuid(gpus, ngpus, u.bytes);
}

/* Resolves one side of a map: an index of this machine or a UUID (maybe of a GPU not here). */
static int resolve_side(const char *s, const struct gs_gpu *gpus, int ngpus, CUuuid *uuid, const struct gs_gpu **gpu,
			struct gs_err *err)
{
	int idx;
	*gpu = NULL;
	if (gs_parse_int(s, &idx) == 0) {
		if (idx < 0 || idx >= ngpus)
			return gs_fail(err, GS_E_GPU_MAP, "GPU index %d does not exist (this machine has %d GPU%s)", idx,
				       ngpus, ngpus == 1 ? "" : "s");
		*uuid = gpus[idx].uuid;
		*gpu = &gpus[idx];
		return 0;
	}
	if (gs_cuda_uuid_parse(s, uuid))
		return gs_fail(err, GS_E_GPU_MAP, "'%s' is neither a GPU index nor a GPU UUID", s);
	int i = gs_gpus_find_uuid(gpus, ngpus, uuid->bytes);
	if (i >= 0)
		*gpu = &gpus[i];
	return 0;
}

int gs_gpu_map_parse(const char *const *specs, int nspecs, const struct gs_gpu *gpus, int ngpus, const CUuuid *used,
		     int nused, CUcheckpointGpuPair **pairs_out, unsigned *npairs_out, struct gs_err *err)
{
	CUcheckpointGpuPair *pairs = calloc((size_t)(nspecs > 0 ? nspecs : 1), sizeof(*pairs));
	if (!pairs)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	int rc = 0;
	for (int i = 0; i < nspecs && !rc; i++) {
		char from[128], to[128];
		const char *eq = strchr(specs[i], '=');
		if (!eq || eq == specs[i] || !eq[1] || (size_t)(eq - specs[i]) >= sizeof(from) || strlen(eq + 1) >= sizeof(to)) {
			rc = gs_fail(err, GS_E_GPU_MAP, "bad GPU map '%s' (expected FROM=TO, e.g. 0=1)", specs[i]);
			break;
		}
		memcpy(from, specs[i], (size_t)(eq - specs[i]));
		from[eq - specs[i]] = '\0';
		strcpy(to, eq + 1);
		const struct gs_gpu *gfrom, *gto;
		if ((rc = resolve_side(from, gpus, ngpus, &pairs[i].oldUuid, &gfrom, err)))
			break;
		if ((rc = resolve_side(to, gpus, ngpus, &pairs[i].newUuid, &gto, err)))
			break;
		if (!gto) {
			rc = gs_fail(err, GS_E_GPU_MAP, "target GPU '%s' is not on this machine", to);
			break;
		}
		if (gfrom && (strcmp(gfrom->name, gto->name) || gfrom->cc_major != gto->cc_major ||
			      gfrom->cc_minor != gto->cc_minor)) {
			rc = gs_fail(err, GS_E_GPU_MISMATCH, "cannot map GPU %d (%s) onto GPU %d (%s): different GPU types",
				     gfrom->index, gfrom->name, gto->index, gto->name);
			break;
		}
		for (int j = 0; j < i && !rc; j++) {
			if (!memcmp(pairs[j].oldUuid.bytes, pairs[i].oldUuid.bytes, 16))
				rc = gs_fail(err, GS_E_GPU_MAP, "GPU '%s' is mapped twice", from);
			else if (!memcmp(pairs[j].newUuid.bytes, pairs[i].newUuid.bytes, 16))
				rc = gs_fail(err, GS_E_GPU_MAP, "two GPUs are mapped onto '%s'", to);
		}
	}
	for (int u = 0; u < nused && !rc; u++) {
		bool covered = false;
		for (int i = 0; i < nspecs; i++)
			covered |= !memcmp(pairs[i].oldUuid.bytes, used[u].bytes, 16);
		if (!covered) {
			char ub[48];
			gs_cuda_uuid_format(&used[u], ub, sizeof(ub));
			int idx = gs_gpus_find_uuid(gpus, ngpus, used[u].bytes);
			if (idx >= 0)
				rc = gs_fail(err, GS_E_GPU_MAP,
					     "the map does not cover GPU %d (%s), which the process uses: map every GPU it uses", idx, ub);
			else
				rc = gs_fail(err, GS_E_GPU_MAP, "the map does not cover GPU %s, which the process uses", ub);
		}
	}
	if (rc) {
		free(pairs);
		return rc;
	}
	*pairs_out = pairs;
	*npairs_out = (unsigned)nspecs;
	return 0;
}

static bool pair_has(const CUcheckpointGpuPair *pairs, unsigned n, const CUuuid *u, bool as_target)
{
	for (unsigned i = 0; i < n; i++)
		if (!memcmp(as_target ? pairs[i].newUuid.bytes : pairs[i].oldUuid.bytes, u->bytes, 16))
			return true;
	return false;
}

int gs_gpu_pairs_complete(CUcheckpointGpuPair **pairs_io, unsigned *npairs, const struct gs_gpu *gpus, int ngpus,
			  struct gs_err *err)
{
	unsigned n = *npairs;
	CUcheckpointGpuPair *pairs = realloc(*pairs_io, sizeof(*pairs) * (n + (unsigned)ngpus + 1));
	if (!pairs)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	*pairs_io = pairs;
	/* first every unnamed GPU whose own place is free, then the rest onto free GPUs of their type */
	for (int pass = 0; pass < 2; pass++)
		for (int g = 0; g < ngpus; g++) {
			if (pair_has(pairs, n, &gpus[g].uuid, false))
				continue;
			int target = -1;
			if (!pair_has(pairs, n, &gpus[g].uuid, true))
				target = g;
			for (int t = 0; pass == 1 && target < 0 && t < ngpus; t++)
				if (!pair_has(pairs, n, &gpus[t].uuid, true) && !strcmp(gpus[t].name, gpus[g].name) &&
				    gpus[t].cc_major == gpus[g].cc_major && gpus[t].cc_minor == gpus[g].cc_minor)
					target = t;
			if (target < 0) {
				if (pass == 1)
					return gs_fail(err, GS_E_GPU_MAP,
						       "GPU %d has nowhere to go once the map is applied: map it too", g);
				continue;
			}
			pairs[n].oldUuid = gpus[g].uuid;
			pairs[n].newUuid = gpus[target].uuid;
			n++;
		}
	*npairs = n;
	return 0;
}
