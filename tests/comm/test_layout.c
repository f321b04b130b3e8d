// The BaGuaLu layout: validation errors, the default expert-parallel degree, and the
// membership of the world, expert-parallel, expert-data-parallel and node groups.
#include "core/error.h"
#include "dist_fixture.h"

static int largest_ep(int P, int E) {
    int best = 1;
    for (int d = 1; d <= P && d <= E; d++)
        if (P % d == 0 && E % d == 0) best = d;
    return best;
}

static void expect_error(int E, int ep, int rpn, const char *want) {
    dist_layout L;
    bg_clear_error();
    int rc = dist_layout_init(&L, E, ep, rpn);
    TU_CHECK(rc == BG_ERR, "E=%d EP=%d R=%d: accepted, expected an error", E, ep, rpn);
    if (rc == BG_ERR)
        TU_CHECK(strstr(bg_last_error(), want) != NULL, "E=%d EP=%d: message '%s' lacks '%s'", E,
                 ep, bg_last_error(), want);
    else
        dist_layout_free(&L);
}

// Sum of the world ranks in a group, over that group's communicator: names the group.
static int64_t member_sum(dist_comm *c, int world_rank) {
    int64_t v = world_rank;
    dist_allreduce_sum_i64(c, &v, 1);
    return v;
}

static void check_layout(int E, int ep, int rpn) {
    dist_layout L;
    if (dist_layout_init(&L, E, ep, rpn) != BG_OK) {
        TU_CHECK(0, "E=%d EP=%d R=%d rejected: %s", E, ep, rpn, bg_last_error());
        return;
    }
    int P = L.world_size, r = L.world_rank;
    int want_ep = ep ? ep : largest_ep(P, E);
    TU_CHECK(L.ep == want_ep, "E=%d: EP %d, want %d", E, L.ep, want_ep);
    TU_CHECK(L.experts_per_rank * L.ep == E, "experts per rank %d", L.experts_per_rank);
    TU_CHECK(L.ep_rank == r % L.ep && L.ep_group == r / L.ep, "ep rank/group");
    TU_CHECK(dist_size(L.ep_comm) == L.ep && dist_rank(L.ep_comm) == r % L.ep, "ep comm");
    TU_CHECK(dist_size(L.edp_comm) == P / L.ep && dist_rank(L.edp_comm) == r / L.ep, "edp comm");
    TU_CHECK(dist_size(L.world) == P, "world comm");
    // EP group g = ranks g*EP .. g*EP+EP-1; EDP group e = ranks e, e+EP, e+2EP, ...
    int g = r / L.ep, e = r % L.ep, D = P / L.ep;
    int64_t ep_sum = (int64_t)L.ep * g * L.ep + (int64_t)L.ep * (L.ep - 1) / 2;
    int64_t edp_sum = (int64_t)D * e + (int64_t)L.ep * D * (D - 1) / 2;
    TU_CHECK(member_sum(L.ep_comm, r) == ep_sum, "ep group members");
    TU_CHECK(member_sum(L.edp_comm, r) == edp_sum, "edp group members");
    // Every expert has exactly one owner in each EP group.
    int first = dist_layout_first_expert(&L);
    TU_CHECK(first == e * L.experts_per_rank, "first expert %d", first);
    for (int x = 0; x < E; x++) {
        int owner = dist_layout_expert_owner(&L, x);
        TU_CHECK(owner >= 0 && owner < L.ep, "owner of %d", x);
        TU_CHECK((owner == e) == (x >= first && x < first + L.experts_per_rank), "owner of %d", x);
    }
    if (rpn > 0) {  // emulated nodes: ranks r / R
        int nodes = (P + rpn - 1) / rpn, node = r / rpn;
        int size = node == nodes - 1 ? P - node * rpn : rpn;
        TU_CHECK(L.n_nodes == nodes && L.node == node, "node %d of %d", L.node, L.n_nodes);
        TU_CHECK(L.node_size == size && L.node_rank == r % rpn, "node rank %d/%d", L.node_rank,
                 L.node_size);
        TU_CHECK(member_sum(L.node_comm, r) ==
                     (int64_t)size * node * rpn + (int64_t)size * (size - 1) / 2,
                 "node members");
        for (int q = 0; q < P; q++) TU_CHECK(dist_node_of(L.world, q) == q / rpn, "node of %d", q);
        // Sub-communicators see the same nodes, numbered by their lowest member.
        for (int q = 0; q < L.ep; q++) {
            int wq = g * L.ep + q;
            TU_CHECK(dist_node_of(L.ep_comm, q) == wq / rpn - (g * L.ep) / rpn, "ep node of %d", q);
        }
    } else {  // real nodes: one machine here
        TU_CHECK(L.n_nodes >= 1 && L.node_size >= 1 && L.node_rank < L.node_size, "real node");
    }
    dist_traffic t;
    dist_layout_traffic(&L, &t);
    TU_CHECK(t.calls > 0, "traffic counts the calls");
    dist_layout_traffic_reset(&L);
    dist_layout_traffic(&L, &t);
    TU_CHECK(t.calls == 0 && t.bytes_sent_intra == 0 && t.msgs_sent_inter == 0, "reset");
    dist_layout_free(&L);
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    int P = dist_size(world);

    // Valid layouts: every divisor of P as EP with E = 2P (EP | E), and the default.
    for (int ep = 1; ep <= P; ep++)
        if (P % ep == 0) check_layout(2 * P, ep, a.ranks_per_node);
    int Es[] = {1, 2, 3, 4, 6, 8, 12};
    for (int i = 0; i < 7; i++) check_layout(Es[i], 0, a.ranks_per_node);
    check_layout(6, 1, 2);  // emulated nodes of 2 whatever the command line says
    check_layout(2 * P, P, 1);

    // Invalid layouts: each names the broken rule and its numbers.
    char want[128];
    snprintf(want, sizeof want, "exceeds the number of ranks %d", P);
    expect_error(64 * (P + 1), P + 1, 0, want);
    if (P >= 3) {  // an EP <= P that does not divide P
        int ep = P - 1 >= 2 ? P - 1 : 2;
        snprintf(want, sizeof want, "degree %d must divide the number of ranks %d", ep, P);
        if (P % ep) expect_error(ep * 4, ep, 0, want);
    }
    if (P >= 2) {  // EP divides P but not E
        snprintf(want, sizeof want, "degree %d must divide the number of experts %d", P, 2 * P + 1);
        expect_error(2 * P + 1, P, 0, want);
    }
    expect_error(4, -1, 0, "expert-parallel degree must be >= 0");
    expect_error(0, 1, 0, "number of experts must be >= 1");
    expect_error(4, 1, -2, "ranks per node must be >= 0");
    bg_clear_error();
    TU_CHECK(dist_comm_world(-1) == NULL && strstr(bg_last_error(), "ranks per node"), "world R<0");

    int rc = comm_test_finish(world, "comm/test_layout");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
