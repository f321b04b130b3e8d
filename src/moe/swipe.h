#ifndef BG_MOE_SWIPE_H
#define BG_MOE_SWIPE_H
// SWIPE balancing (BaGuaLu; FastMoE's fmoe/gates/swipe_gate.py and cuda/balancing.cu):
// W workers, each with its B tokens and El = E/W experts, worker w owning experts
// [w·El, (w+1)·El). Slot by slot, every worker can take at most B·k rows in all (its
// capacity, carried from slot to slot); a receiver accepts senders in worker order up to
// what it has left, and the rejected tokens go to the spare capacity by one greedy walk
// that every worker repeats on the same counts. Result: no token dropped and exactly
// B·k rows received by every worker (when all workers hold B tokens).
//
// The integer core is a pure function of a (sender × receiver) count matrix, so one
// process reproduces a W-rank run exactly (virtual workers) and every rank of a real
// run computes the same outcome from the all-gathered counts.

// One slot. counts (W,W): counts[w·W+v] = worker w's tokens whose expert of this slot
// is on worker v. caps (W) READ-WRITE: rows each worker can still take (B_v·k before
// slot 0), decreased by what it takes now. sends (W,W) WRITES: rows w sends to v after
// balancing (accepted + reassigned; row w sums to row w of counts). Receiver v accepts
// senders in order 0..W-1 until caps[v] is spent; then, senders in order, each sender's
// rejected tokens fill the spare capacity of workers 0, 1, ... (one pointer over the
// workers, never moving back: FastMoE's two-pointer greedy). Asserts that the spare
// capacity covers the rejections (Σ caps >= Σ counts).
void moe_swipe_balance(int *sends, int *caps, const int *counts, int W);

// One worker's ids for one slot: ids[t·stride] (t < B) are global expert ids, experts
// on worker v = id / El. row (W): what the worker counts per receiver (WRITES).
void moe_swipe_count(int *row, const int *ids, int stride, int B, int W, int El);

// Applies a worker's row of `sends` to its ids of slot `slot` (READ-WRITE, as above):
// in token order, a token keeps its expert while its receiver's send count lasts; the
// others, in token order, go to the lowest worker v with sends left, expert
// v·El + slot mod El (FastMoE's choice). send (W) is read only.
void moe_swipe_assign(int *ids, int stride, int B, const int *send, int W, int El, int slot);

// --- the gate's steps (router_swipe.c), public so tests can run them alone ---

// topk_w (N,k) WRITES: softmax over the k slots of logits (N,E) at topk_idx (N,k).
void moe_swipe_weights(float *topk_w, const float *logits, const int *topk_idx, int N, int E,
                       int k);
// dlogits (N,E) WRITES: the gradient of the gate weights (dtopk_w (N,k), ids fixed)
// plus z_coef · z, z = Σ_t lse[t]² / n_tokens over the global batch (probs, lse of
// all E experts). No aux loss: SWIPE balances by construction.
void moe_swipe_logits_backward(float *dlogits, const float *dtopk_w, const float *topk_w,
                               const int *topk_idx, const float *probs, const float *lse,
                               double n_tokens, float z_coef, int N, int E, int k);
#endif
