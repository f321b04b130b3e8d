#ifndef BG_MOE_ROUTER_H
#define BG_MOE_ROUTER_H
// Top-k softmax router ("softmax, then top-k", as in Mixtral / DeepSeek-MoE / Qwen-MoE)
// and its balance losses. A different gate is a different router file with the same
// outputs: topk_idx / topk_w for the dispatcher, probs / lse for the losses.
#include "kernels/kernels.h"

// inp (N,C), gate (E,C) → logits (N,E) = inp · gateᵀ in fp32, probs (N,E) = softmax,
// lse (N) = logsumexp(logits), topk_idx (N,k) the k largest in descending order with
// ties going to the LOWER expert index, topk_w (N,k) their probabilities, renormalized
// to sum to 1 when norm_topk_prob. All WRITE.
void moe_router_forward(kernel_ctx *kc, float *logits, float *probs, float *lse, int *topk_idx,
                        float *topk_w, const float *inp, const float *gate, int N, int C, int E,
                        int k, int norm_topk_prob);
// The part after the GEMM (softmax, top-k, weights); separate so it can be run on
// crafted logits, e.g. exact ties.
void moe_router_softmax_topk(float *probs, float *lse, int *topk_idx, float *topk_w,
                             const float *logits, int N, int E, int k, int norm_topk_prob);

// Balance losses, unscaled, in double (they are tiny sums reported to the user):
//   aux = E · Σ_i f_i · P_i, f_i = counts[i] / (N·k) (all k slots), P_i = mean_t probs[t,i];
//   z   = mean_t lse[t]².
// counts (E) are the dispatch plan's tokens per expert. N == 0 gives 0 for both.
void moe_router_balance_losses(double *aux_loss, double *z_loss, const float *probs,
                               const float *lse, const int *counts, int N, int E, int k);
// The same losses split in two so ranks can add their statistics first:
// prob_sum (E) = Σ_t probs[t,i], lse2_sum = Σ_t lse[t]² over this rank's N tokens;
// then the losses from the (world-)summed statistics, counts and token count.
void moe_router_stat_sums(double *prob_sum, double *lse2_sum, const float *probs,
                          const float *lse, int N, int E);
void moe_router_losses_from_sums(double *aux_loss, double *z_loss, const double *prob_sum,
                                 double lse2_sum, const int *counts, double n_tokens, int E,
                                 int k);

// Backward of the gate weights plus aux_coef·aux + z_coef·z, with the chosen experts
// (and so counts / f_i) held fixed: top-k is piecewise constant.
// dtopk_w (N,k) is the loss gradient of topk_w; dinp (N,C) += (NULL skips),
// dgate (E,C) +=; dlogits, dprobs (N,E) are workspace (written).
void moe_router_backward(kernel_ctx *kc, float *dinp, float *dgate, float *dlogits, float *dprobs,
                         const float *dtopk_w, const float *inp, const float *gate,
                         const float *probs, const float *lse, const int *topk_idx,
                         const float *topk_w, const int *counts, int N, int C, int E, int k,
                         int norm_topk_prob, float aux_coef, float z_coef);
// The same for a rank holding N of the n_tokens tokens of a global batch: counts (E)
// are the global counts, and the balance losses average over n_tokens.
void moe_router_backward_global(kernel_ctx *kc, float *dinp, float *dgate, float *dlogits,
                                float *dprobs, const float *dtopk_w, const float *inp,
                                const float *gate, const float *probs, const float *lse,
                                const int *topk_idx, const float *topk_w, const int *counts,
                                double n_tokens, int N, int C, int E, int k, int norm_topk_prob,
                                float aux_coef, float z_coef);
#endif
