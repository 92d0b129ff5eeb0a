/* SPDX-License-Identifier: MIT */
/*
 * cudnn_sdpa_graph.cpp: cuDNN's fused attention graphs for cudnn_sdpa.cu,
 * built with cudnn-frontend's graph API (header-only, MIT; the library
 * PyTorch builds its SDPA on) when configure found its headers
 * (--with-cudnn-frontend=DIR; build-config.h's PH_WITH_CUDNN_FE).  cudnn-frontend
 * picks, by the cuDNN it runs against, between cuDNN's fused SDPA
 * operation and the composite graph older versions take.
 *
 * Plain C++, no kernels: nvcc hands it to the host compiler, which takes a
 * third of the time nvcc's own front end takes over cudnn-frontend's
 * headers (2 cores: 112 s against 292 s).
 *
 * Tensors as cuDNN sees them, [B, H, T, hd] with strides into our layouts
 * (no transposes):
 *   Q, K, V     a bf16 [B, T, 3d]: strides (3Td, hd, 3d, 1), K and V at
 *               columns d and 2d
 *   O, dO       [B, T, d]: strides (Td, hd, d, 1)
 *   Stats       [B, H, T, 1] fp32, the natural-log LSE of the scaled scores
 *   dQ, dK, dV  as Q, K, V
 * The backward runs cuDNN's deterministic algorithm: a run repeats bit for
 * bit on the same GPU, as the rest of the GPU layers do (PIPEHOST_ATTN_CUDNN=2
 * takes its default one instead, to time what that costs).
 *
 * Graphs are built once per direction, shape and thread (a rank is a
 * thread with its own device and stream), with the thread's cuDNN handle,
 * and kept for the thread's life.
 */
#include "build-config.h" /* PH_WITH_CUDNN_FE */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cudnn_sdpa.h"

#ifndef PH_WITH_CUDNN_FE

int ph_sdpa_graph(cudaStream_t, int, int, int, int, int, const void **, size_t *, ph_err *err)
{
	return ph_fail(err, PH_EUNSUPPORTED,
		       "attention: PIPEHOST_ATTN_CUDNN=1 but this build has no cudnn-frontend: "
		       "configure --with-cudnn-frontend=DIR, or unset PIPEHOST_ATTN_CUDNN");
}

int ph_sdpa_execute(const void *, void *const *, void *, ph_err *err)
{
	return ph_fail(err, PH_EINTERNAL, "attention: no cudnn-frontend in this build");
}

#else /* PH_WITH_CUDNN_FE */

#include <exception>
#include <memory>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

namespace {

struct sdpa_graph {
	int kind, B, T, H, hd; /* kind: ph_sdpa_graph's */
	std::shared_ptr<fe::graph::Graph> g;
	int64_t ws; /* workspace bytes */
};

struct sdpa_cache {
	int device = -1;
	cudnnHandle_t h = nullptr;
	/* unique_ptr: the graphs' addresses are handed out and must not move */
	std::vector<std::unique_ptr<sdpa_graph>> graphs;
	~sdpa_cache()
	{
		graphs.clear();
		if (h)
			cudnnDestroy(h);
	}
};

thread_local sdpa_cache cache;

int handle_for(cudaStream_t st, ph_err *err)
{
	int dev = -1;
	cudaError_t ce = cudaGetDevice(&dev);
	if (ce != cudaSuccess)
		return ph_fail(err, PH_EINTERNAL, "attention: cudaGetDevice: %s", cudaGetErrorString(ce));
	if (cache.h && cache.device != dev) { /* the thread moved to another GPU: start again */
		cache.graphs.clear();
		cudnnDestroy(cache.h);
		cache.h = nullptr;
	}
	if (!cache.h) {
		cudnnStatus_t s = cudnnCreate(&cache.h);
		if (s != CUDNN_STATUS_SUCCESS) {
			cache.h = nullptr;
			return ph_fail(err, PH_EINTERNAL, "attention: cudnnCreate: %s", cudnnGetErrorString(s));
		}
		cache.device = dev;
	}
	cudnnStatus_t s = cudnnSetStream(cache.h, st);
	if (s != CUDNN_STATUS_SUCCESS)
		return ph_fail(err, PH_EINTERNAL, "attention: cudnnSetStream: %s", cudnnGetErrorString(s));
	return PH_OK;
}

/* One step of a graph's build or run; a failure names the step, the shape
 * and cuDNN's words.  A build step that fails is cuDNN declining the graph
 * (PH_EUNSUPPORTED); a failed execute is a fault (PH_EINTERNAL).  The
 * reasons cuDNN gives for each plan it refused run past what ph_err holds
 * (255 characters, "No valid engine configs for ..." and little more), so
 * a long message goes whole to stderr first, on one line:
 * a failure on a GPU, where each run is scarce, then explains itself.
 * (CUDNN_FRONTEND_LOG_INFO=1 would too, but it also logs every execute,
 * inside the timed steps.) */
int fe_step(fe::error_t e, const char *step, int bwd, int B, int T, int H, int hd, ph_err *err)
{
	if (e.is_good())
		return PH_OK;
	std::string whole = e.get_message();
	if (whole.size() > 120) {
		for (char &c : whole)
			if (c == '\n' || c == '\r')
				c = ' ';
		fprintf(stderr, "note: cuDNN SDPA %s, %s, cuDNN's whole message: %s\n", bwd ? "bwd" : "fwd", step,
			whole.c_str());
	}
	/* short: ph_err holds 255 characters, and cuDNN's words are the
	 * part that tells what went wrong */
	return ph_fail(err, strcmp(step, "execute") ? PH_EUNSUPPORTED : PH_EINTERNAL,
		       "cuDNN SDPA %s B=%d T=%d H=%d hd=%d, %s (unset PIPEHOST_ATTN_CUDNN): %s", bwd ? "bwd" : "fwd", B,
		       T, H, hd, step, e.get_message().c_str());
}

std::shared_ptr<fe::graph::Tensor_attributes> qkv_tensor(fe::graph::Graph &g, const char *name, int64_t uid, int B,
							 int T, int H, int hd, int64_t ld)
{
	return g.tensor(fe::graph::Tensor_attributes()
				.set_name(name)
				.set_uid(uid)
				.set_dim({ B, H, T, hd })
				.set_stride({ (int64_t)T * ld, hd, ld, 1 }));
}

/* The graph of one kind (ph_sdpa_graph) and shape, not yet built. */
std::shared_ptr<fe::graph::Graph> describe(int kind, int B, int T, int H, int hd)
{
	const int64_t d = (int64_t)H * hd, ld = 3 * d;
	/* the scale flash_attention.cuh uses, to the same float */
	const float sm = (float)(1.0 / sqrt((double)hd));
	auto g = std::make_shared<fe::graph::Graph>();
	g->set_io_data_type(fe::DataType_t::BFLOAT16)
		.set_intermediate_data_type(fe::DataType_t::FLOAT)
		.set_compute_data_type(fe::DataType_t::FLOAT);
	auto Q = qkv_tensor(*g, "Q", PH_SDPA_Q, B, T, H, hd, ld);
	auto K = qkv_tensor(*g, "K", PH_SDPA_K, B, T, H, hd, ld);
	auto V = qkv_tensor(*g, "V", PH_SDPA_V, B, T, H, hd, ld);
	const std::vector<int64_t> odim = { B, H, T, hd }, ostride = { (int64_t)T * d, hd, d, 1 };
	const std::vector<int64_t> sdim = { B, H, T, 1 }, sstride = { (int64_t)H * T, T, 1, 1 };
	if (kind == 0) {
		auto opt = fe::graph::SDPA_attributes()
				   .set_name("ph_sdpa_fwd")
				   .set_generate_stats(true)
				   .set_causal_mask(true)
				   .set_attn_scale(sm);
		auto [O, S] = g->sdpa(Q, K, V, opt);
		O->set_output(true).set_dim(odim).set_stride(ostride).set_uid(PH_SDPA_O);
		S->set_output(true)
			.set_data_type(fe::DataType_t::FLOAT)
			.set_dim(sdim)
			.set_stride(sstride)
			.set_uid(PH_SDPA_STATS);
		return g;
	}
	auto O = g->tensor(
		fe::graph::Tensor_attributes().set_name("O").set_uid(PH_SDPA_O).set_dim(odim).set_stride(ostride));
	auto dO = g->tensor(
		fe::graph::Tensor_attributes().set_name("dO").set_uid(PH_SDPA_DO).set_dim(odim).set_stride(ostride));
	auto S = g->tensor(fe::graph::Tensor_attributes()
				   .set_name("Stats")
				   .set_uid(PH_SDPA_STATS)
				   .set_dim(sdim)
				   .set_stride(sstride)
				   .set_data_type(fe::DataType_t::FLOAT));
	auto opt = fe::graph::SDPA_backward_attributes()
			   .set_name("ph_sdpa_bwd")
			   .set_causal_mask(true)
			   .set_attn_scale(sm)
			   .set_deterministic_algorithm(kind == 1);
	auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, S, opt);
	const std::vector<int64_t> qdim = { B, H, T, hd }, qstride = { (int64_t)T * ld, hd, ld, 1 };
	dQ->set_output(true).set_dim(qdim).set_stride(qstride).set_uid(PH_SDPA_DQ);
	dK->set_output(true).set_dim(qdim).set_stride(qstride).set_uid(PH_SDPA_DK);
	dV->set_output(true).set_dim(qdim).set_stride(qstride).set_uid(PH_SDPA_DV);
	return g;
}

} // namespace

/* The frontend can still throw (Graph::sdpa() when no implementation
 * takes the attributes, std::bad_alloc, .at()): an exception must not
 * unwind into the C host's frames, where it would end the process without
 * a word, so both entry points turn one into an error. */
static int fe_threw(const char *what, const char *where, ph_err *err)
{
	return ph_fail(err, PH_EINTERNAL, "attention: cuDNN frontend threw in %s: %s; unset PIPEHOST_ATTN_CUDNN", where,
		       what);
}

static int graph_for(cudaStream_t st, int kind, int B, int T, int H, int hd, const void **graph, size_t *ws_bytes,
		     ph_err *err)
{
	const int bwd = kind != 0;
	int rc = handle_for(st, err);
	if (rc)
		return rc;
	for (const auto &c : cache.graphs)
		if (c->kind == kind && c->B == B && c->T == T && c->H == H && c->hd == hd) {
			*graph = c.get();
			*ws_bytes = (size_t)c->ws;
			return PH_OK;
		}
	auto g = describe(kind, B, T, H, hd);
	if ((rc = fe_step(g->validate(), "validate", bwd, B, T, H, hd, err)) ||
	    (rc = fe_step(g->build_operation_graph(cache.h), "build_operation_graph", bwd, B, T, H, hd, err)) ||
	    (rc = fe_step(g->create_execution_plans({ fe::HeurMode_t::A }), "create_execution_plans", bwd, B, T, H,
			  hd, err)) ||
	    (rc = fe_step(g->check_support(cache.h), "check_support", bwd, B, T, H, hd, err)) ||
	    (rc = fe_step(g->build_plans(cache.h), "build_plans", bwd, B, T, H, hd, err)))
		return rc;
	int64_t ws = 0;
	if ((rc = fe_step(g->get_workspace_size(ws), "get_workspace_size", bwd, B, T, H, hd, err)))
		return rc;
	cache.graphs.push_back(std::unique_ptr<sdpa_graph>(new sdpa_graph{ kind, B, T, H, hd, g, ws }));
	*graph = cache.graphs.back().get();
	*ws_bytes = (size_t)ws;
	return PH_OK;
}

int ph_sdpa_graph(cudaStream_t st, int kind, int B, int T, int H, int hd, const void **graph, size_t *ws_bytes,
		  ph_err *err)
{
	try {
		return graph_for(st, kind, B, T, H, hd, graph, ws_bytes, err);
	} catch (const std::exception &e) {
		return fe_threw(e.what(), "building a graph", err);
	} catch (...) {
		return fe_threw("an exception of unknown type", "building a graph", err);
	}
}

int ph_sdpa_execute(const void *graph, void *const *ptrs, void *ws, ph_err *err)
{
	try {
		const sdpa_graph *sg = (const sdpa_graph *)graph;
		std::unordered_map<int64_t, void *> pack;
		const int bwd = sg->kind != 0, last = bwd ? PH_SDPA_DV : PH_SDPA_STATS; /* the forward's uids first */
		for (int u = PH_SDPA_Q; u <= last; u++)
			pack.emplace(u, ptrs[u]);
		return fe_step(sg->g->execute(cache.h, pack, ws), "execute", bwd, sg->B, sg->T, sg->H, sg->hd, err);
	} catch (const std::exception &e) {
		return fe_threw(e.what(), "execute", err);
	} catch (...) {
		return fe_threw("an exception of unknown type", "execute", err);
	}
}

#endif /* PH_WITH_CUDNN_FE */
