/*
 * agent_probe.c - the agent's self-measurement exports (see agent_probe.h).
 */
#include "agent/intercept/agent_probe.h"

#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "common/util.h"

uint64_t gpusnap_driver_calls(void)
{
	return gs_gate_call_count();
}

/* The probe's target: as cheap as a call gets, kept out of line so both loops make a real call. */
static int __attribute__((noinline)) probe_nop(int x)
{
	__asm__ volatile("" ::: "memory");
	return x + 1;
}

static double loop_ns(int (*volatile fn)(int), unsigned long calls)
{
	int acc = 0;
	double t0 = gs_now();
	for (unsigned long i = 0; i < calls; i++)
		acc = fn(acc);
	double t = gs_now() - t0;
	__asm__ volatile("" ::"r"(acc));
	return t * 1e9 / (double)(calls ? calls : 1);
}

double gpusnap_gate_cost_ns(unsigned long calls)
{
	int (*gated)(int) = (int (*)(int))gs_tramp_for((void *)probe_nop);
	if (!gated)
		return -1;
	double best_gated = 1e30, best_direct = 1e30;
	for (int round = 0; round < 5; round++) {
		double d = loop_ns(probe_nop, calls);
		double g = loop_ns(gated, calls);
		if (d < best_direct)
			best_direct = d;
		if (g < best_gated)
			best_gated = g;
	}
	return best_gated - best_direct;
}
